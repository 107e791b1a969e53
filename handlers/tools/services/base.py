"""Records and helpers shared by the built-in tools: specs, context, calls, outputs, paths.

Owns :class:`ToolSpec`, :class:`ToolContext`, :class:`ToolCall`, :class:`ToolOutput`, :class:`ToolError` (its
message goes to the model), working-directory confinement, output truncation, and :func:`threaded` /
:func:`in_thread` for blocking work. Owns no tool and no scheduling.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import errno
import functools
import os
import queue
import re
import stat
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import attrs

from ...messages import ResultBlock
from .deadlines import CallDeadlines

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from .sandbox import Sandbox

__all__ = [
    "CREDENTIALS",
    "Background",
    "BackgroundTask",
    "DEADLINE_GRACE_S",
    "ToolContext",
    "ToolError",
    "ToolInputError",
    "ToolOutput",
    "ToolRun",
    "ToolSpec",
    "SearchAnswer",
    "WebAccess",
    "display_path",
    "in_thread",
    "non_regular_kind",
    "raise_if_cancelled",
    "resolve_inside_cwd",
    "split_budget",
    "threaded",
    "truncate_text",
    "truncation_marker",
]

# The Anthropic API accepts tool names matching this pattern and no others.
CREDENTIALS: Final = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"})
"""Variables that never reach a model-proposed command unless a setting passes them on purpose."""

_TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

# Below this the truncation marker and the notes tools add would eat most of the budget.
_MIN_OUTPUT_CHARS = 1000

# Room kept for the truncation marker, so a truncated text stays within its limit.
_MARKER_RESERVE = 120

DEADLINE_GRACE_S: Final = 5.0
"""What the dispatcher allows on top of the timeout a tool enforces itself (to clean up and report)."""

R = TypeVar("R")


class ToolError(Exception):
    """An expected tool failure; its message is shown to the model as the error result."""


class ToolInputError(ToolError):
    """A call refused before it changed anything because its input does not fit what is there (an Edit's
    old_string not found): the model reads the message in ``<tool_use_error>`` tags, as Claude Code's."""


@attrs.frozen(kw_only=True, slots=True)
class BackgroundTask:
    """Work a tool call started that outlives it (a background sub-agent): the call's result only acknowledges it."""

    task_id: str
    tool_use_id: str  # the call that started it
    kind: str  # what it is ("agent")
    description: str = ""


class Background(Protocol):
    """What started background work for a run's calls (``ToolContext.background``)."""

    def started_by(self, tool_use_id: str) -> BackgroundTask | None:
        """The work the call ``tool_use_id`` started and left running, if any."""
        ...


@attrs.frozen(kw_only=True)
class SearchAnswer:
    """What a web search request answered: its content blocks and how many searches the server ran."""

    content: tuple[Mapping[str, Any], ...]
    searches: int


class WebAccess(Protocol):
    """What WebFetch and WebSearch (``web``) need from the run (``queryloop.run.web``): the model requests they
    make besides the loop's, and the hosts the allow rules name one by one."""

    @property
    def named_hosts(self) -> frozenset[str]:
        """The hosts ``WebFetch(domain:HOST)`` allow rules name one by one: only they may be non-public addresses."""
        ...

    async def ask_about_page(self, text: str) -> str:
        """The small model's answer to a page and a question (one request): its text, "" when it gave none."""
        ...

    async def search(self, query: str, allowed: Sequence[str], blocked: Sequence[str]) -> SearchAnswer:
        """One request carrying the web search server tool for ``query``."""
        ...


def _resolve_dir(value: str | Path) -> Path:
    return Path(value).resolve()


def _resolve_dirs(values: Sequence[str | Path]) -> tuple[Path, ...]:
    return tuple(map(_resolve_dir, values))


def _check_cwd(_instance: object, _attribute: attrs.Attribute[Path], value: Path) -> None:
    if not value.is_dir():
        raise ValueError(f"ToolContext.cwd must be an existing directory, got {str(value)!r}")


@attrs.frozen(kw_only=True)
class ToolContext:
    """The environment a tool call runs in: working directory and output/time limits.

    ``cwd`` is resolved (symlinks and ``..`` removed) on construction; every file path
    a tool touches must resolve inside it. ``tool_timeout_s`` is the deadline of every
    call (the dispatcher stops a call past it and reports an error) except Bash, whose
    ``bash_default_timeout_s`` applies when the model gives no ``timeout``; a longer
    one is clamped to ``bash_max_timeout_s``. ``max_output_chars`` bounds the
    ``content`` of every result: tools cut their own output sensibly (Bash keeps start
    and end, Read stops at a whole line) and the dispatcher cuts anything still longer.
    """

    cwd: Path = attrs.field(converter=_resolve_dir, validator=_check_cwd)
    tool_timeout_s: float = attrs.field(default=120.0, validator=attrs.validators.gt(0))
    bash_default_timeout_s: float = attrs.field(default=120.0, validator=attrs.validators.gt(0))
    bash_max_timeout_s: float = attrs.field(default=600.0)
    max_output_chars: int = attrs.field(default=30_000, validator=attrs.validators.ge(_MIN_OUTPUT_CHARS))
    env: Mapping[str, str] = attrs.field(factory=dict)  # passed to commands on purpose (settings `env`)
    hidden: Callable[[Path], bool] = attrs.field(default=lambda path: False)  # files Read deny rules cover
    # The run's sandbox (``sandbox.Sandbox``) when one works here and the settings enable it; None: none.
    sandbox: Sandbox | None = None
    # Stores files' bytes before a change (the session's checkpoints): given the call's id and the files.
    checkpoint: Callable[[str, Sequence[Path]], object] | None = None
    call_id: str = ""  # the call running under this context (set per call where a tool needs it)
    background: Background | None = None  # what starts work that outlives a call (the run's sub-agents)
    # Each call's ToolOutput.response by tool_use id, until the call's PostToolUse hooks read it; None (no
    # PostToolUse hook configured): none is made or kept. Shared by the context's copies, as a service is.
    responses: dict[str, Any] | None = attrs.field(default=None, eq=False)
    # The settings' permissions.additionalDirectories (resolved): file tools work there as in ``cwd``.
    additional_dirs: tuple[Path, ...] = attrs.field(default=(), converter=_resolve_dirs)
    # What WebFetch and WebSearch need from the run (its model requests, the hosts rules name); None: no run.
    web: WebAccess | None = attrs.field(default=None, eq=False)
    # The deadlines of the calls running under this context and its copies: one timer for them all.
    deadlines: CallDeadlines = attrs.field(factory=CallDeadlines, eq=False, repr=False)

    def holds(self, path: Path) -> bool:
        """Whether the resolved ``path`` is inside the working directory or an additional one."""
        return path.is_relative_to(self.cwd) or any(path.is_relative_to(d) for d in self.additional_dirs)

    def for_call(self, *, call_id: str) -> ToolContext:
        """This context with the id of the call it runs under.

        Not ``attrs.evolve``: that resolves ``cwd`` again and checks it is a directory, a path
        lookup per level on every tool call; the id is a plain string, everything else stays.
        """
        context = copy.copy(self)
        object.__setattr__(context, "call_id", call_id)
        return context

    def command_environment(self) -> dict[str, str]:
        """The environment a model-proposed command runs with: this process's, minus the
        credentials queryloop itself uses, plus what ``env`` passes on purpose."""
        inherited = {k: v for k, v in os.environ.items() if k not in CREDENTIALS}
        return {**inherited, **self.env}

    @bash_max_timeout_s.validator
    def _check_max_timeout(self, _attribute: attrs.Attribute[float], value: float) -> None:
        if value < self.bash_default_timeout_s:
            raise ValueError(
                f"ToolContext.bash_max_timeout_s ({value:g}) must be >= "
                f"bash_default_timeout_s ({self.bash_default_timeout_s:g})"
            )


@attrs.frozen(kw_only=True)
class ToolOutput:
    """What a tool implementation returns: the text for the model and whether it is an error.

    ``content`` is a string, or the result's content blocks (``text`` and ``image``, as the
    Messages API takes them in a ``tool_result``) when it carries more than text: an MCP
    server's image.
    """

    content: str | Sequence[ResultBlock]
    is_error: bool = False
    # The record Claude Code's tool of the same name returns for the call, which PostToolUse hooks get as
    # ``tool_response`` (None: the tool has none). Made only when ``ToolContext.responses`` is kept.
    response: Any = None


ToolRun = Callable[[Mapping[str, Any], ToolContext], Awaitable[ToolOutput]]
"""A tool implementation: receives the schema-validated input and the context."""


def _fetch_nothing(uri: str) -> Any:
    """jsonschema-rs's retriever: a tool schema's remote ``$ref`` is someone else's URL, never fetched."""
    raise ValueError(f"{uri}: a tool schema's references are not fetched")


def _check_name(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if not _TOOL_NAME_RE.match(value):
        raise ValueError(f"tool name {value!r} must match {_TOOL_NAME_RE.pattern} (Anthropic API rule)")


def _check_schema(
    _instance: object, _attribute: attrs.Attribute[Mapping[str, Any]], value: Mapping[str, object]
) -> None:
    if value.get("type") != "object":
        raise ValueError(f"a tool input_schema must have type 'object', got {value.get('type')!r}")
    import jsonschema_rs

    with contextlib.suppress(TypeError, ValueError):  # a schema jsonschema-rs cannot read: jsonschema decides
        if jsonschema_rs.meta.is_valid(dict(value)):
            return  # the usual case: jsonschema (and its import) only to word what is wrong
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid tool input_schema: {exc.message}") from exc


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool as the model sees it (name, description, schema) plus how it may be scheduled.

    ``concurrency_safe`` calls may run in parallel with neighbouring safe calls;
    ``read_only`` tools change nothing; ``idempotent`` tools can be re-run after an
    abort without a different effect (every completed call of any other tool goes to
    the session's side-effect ledger); ``changes_file`` names the input field holding
    the file a call changes, whose bytes are checkpointed before it runs; ``attempt_fields``
    are input fields that name one attempt (an idempotency key, a request id), left out
    when the ledger asks whether a call repeats a completed one.
    ``own_timeout_s`` is set by a tool that enforces a timeout itself (and reports what
    it got done by then): it gives that timeout for an input. The schema is compiled
    once, here.
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=attrs.validators.min_len(1))
    input_schema: Mapping[str, Any] = attrs.field(validator=_check_schema)
    concurrency_safe: bool
    read_only: bool
    idempotent: bool
    run: ToolRun = attrs.field(repr=False)
    own_timeout_s: Callable[[Mapping[str, Any], ToolContext], float] | None = attrs.field(default=None, repr=False)
    changes_file: str | None = None  # the input field naming the file a call changes (checkpointed before it runs)
    attempt_fields: tuple[str, ...] = ()  # input fields naming an attempt (an idempotency key): not the call's identity
    # the same schema compiled by jsonschema-rs, which answers "is it valid?" much faster;
    # ``schema_validator`` lists the problems of an input it refuses (None: it could not compile it)
    fast_validator: Any = attrs.field(init=False, eq=False, repr=False)

    @functools.cached_property
    def schema_validator(self) -> Validator:
        """jsonschema's validator of the input schema (compiled, and jsonschema imported, when first asked for).

        Its registry is empty: a ``$ref`` outside the schema does not resolve, and is never fetched."""
        import jsonschema
        import referencing

        return jsonschema.Draft202012Validator(self.input_schema, registry=referencing.Registry())

    @fast_validator.default
    def _compile_fast_validator(self) -> Any:
        import jsonschema_rs

        try:  # formats are annotations in draft 2020-12, as for ``schema_validator``: not asserted
            return jsonschema_rs.Draft202012Validator(
                dict(self.input_schema), validate_formats=False, retriever=_fetch_nothing
            )
        except (ValueError, jsonschema_rs.ValidationError):
            return None  # a reference that does not resolve lands here too: ``schema_validator`` says which

    def is_valid_input(self, tool_input: Any) -> bool:
        """Whether ``tool_input`` satisfies the input schema (both validators implement draft 2020-12); an input
        the schema cannot judge (a ``$ref`` that resolves nowhere on its path) is not valid."""
        fast = self.fast_validator
        if fast is not None:
            return bool(fast.is_valid(tool_input))
        import referencing.exceptions

        try:
            return bool(self.schema_validator.is_valid(tool_input))
        except referencing.exceptions.Unresolvable:
            return False

    def api_definition(self) -> dict[str, object]:
        """The ``{"name", "description", "input_schema"}`` dict sent to the API."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def deadline_s(self, tool_input: Mapping[str, object], ctx: ToolContext) -> float:
        """How long the dispatcher lets a call with ``tool_input`` run before stopping it."""
        if self.own_timeout_s is None:
            return ctx.tool_timeout_s
        return self.own_timeout_s(tool_input, ctx) + DEADLINE_GRACE_S


def resolve_inside_cwd(raw: str, ctx: ToolContext) -> Path:
    """Resolve ``raw`` (absolute, or relative to ``ctx.cwd``) and require it inside ``ctx.cwd``
    or one of ``ctx.additional_dirs`` (the settings' ``permissions.additionalDirectories``).

    ``..`` and symlinks (including a dangling one) are resolved first, so neither can
    be used to escape. Raises :class:`ToolError` naming the path otherwise, and for a
    path that is (or passes through) a symlink loop.
    """
    if not raw:
        raise ToolError("path is empty; give a path inside the working directory")
    if "\x00" in raw:
        raise ToolError(f"path {raw!r} contains a NUL character")
    try:
        resolved = (ctx.cwd / raw).resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError for a loop, later ones OSError(ELOOP)
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise ToolError(f"path {raw!r} cannot be resolved: {exc.strerror or exc}") from exc
        raise ToolError(f"path {raw!r} is a symlink loop (a link that leads back to itself); it names no file") from exc
    if not ctx.holds(resolved):
        if ctx.additional_dirs:
            allowed = ", ".join(repr(str(d)) for d in (ctx.cwd, *ctx.additional_dirs))
            raise ToolError(
                f"path {raw!r} resolves to {str(resolved)!r}, which is outside the working directories "
                f"{allowed}; only paths inside them can be used"
            )
        raise ToolError(
            f"path {raw!r} resolves to {str(resolved)!r}, which is outside the working directory "
            f"{str(ctx.cwd)!r}; only paths inside it can be used"
        )
    return resolved


def display_path(path: Path, ctx: ToolContext) -> str:
    """``path`` relative to the working directory (``.`` for the directory itself), POSIX style."""
    try:
        relative = path.relative_to(ctx.cwd)
    except ValueError:
        return str(path)
    return relative.as_posix() or "."


def truncation_marker(dropped: int, hint: str = "") -> str:
    """The line inserted where text was cut, saying how many characters were dropped."""
    extra = f"; {hint}" if hint else ""
    return f"\n[... output truncated: {dropped} characters omitted{extra} ...]\n"


def truncate_text(text: str, limit: int, *, hint: str = "") -> str:
    """Return ``text`` unchanged if it fits in ``limit`` characters, else its head plus a marker.

    The result, marker included, is at most ``limit`` characters long.
    """
    if len(text) <= limit:
        return text
    keep = max(limit - _MARKER_RESERVE - len(hint), 0)
    return text[:keep] + truncation_marker(len(text) - keep, hint)


def split_budget(limit: int) -> tuple[int, int]:
    """Head and tail sizes for a head+tail truncation that leaves room for the marker."""
    budget = max(limit - _MARKER_RESERVE, 0)
    head = budget // 2
    return head, budget - head


def non_regular_kind(mode: int) -> str | None:
    """What a file of ``mode`` (``st_mode``) is when it is not a regular file or a directory, else None.

    Reading a FIFO blocks until someone writes to it, a device may never end: tools
    refuse those by name instead of opening them.
    """
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


_STOP: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("queryloop_tool_stop", default=None)


def raise_if_cancelled() -> None:
    """In work run by :func:`in_thread`: raise :class:`ToolError` if the caller stopped waiting.

    Long loops (a directory walk, reading a file line by line) call it so a call that
    was cancelled or ran past its deadline stops soon instead of running on unseen.
    """
    stop = _STOP.get()
    if stop is not None and stop.is_set():
        raise ToolError("stopped: the call was cancelled or ran past its deadline")


class _Workers:
    """Daemon threads that run :func:`in_thread`'s work, kept for the next call instead of one thread per call.

    A job goes to an idle worker, and a new worker starts when none is idle: a worker stuck in a
    system call never holds up a later call. Workers are daemons, so a stuck one cannot keep the
    process from exiting. At most ``max_idle`` wait for work; one more, finished, ends.
    """

    def __init__(self, *, max_idle: int) -> None:
        self._max_idle = max_idle
        self.forget()

    def forget(self) -> None:
        """Start again with no worker: a forked child has none of its parent's threads."""
        self._lock = threading.Lock()
        self._idle = 0  # workers committed to take the next job from the queue
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job()`` in a worker thread, one started for it when none is idle."""
        with self._lock:
            idle = self._idle > 0
            if idle:
                self._idle -= 1
        if not idle:  # started before the job is queued: a worker that cannot start leaves no job to run later
            threading.Thread(target=self._serve, name="queryloop-tool", daemon=True).start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            self._jobs.get()()  # a job never raises: ``in_thread``'s catches everything
            with self._lock:
                if self._idle >= self._max_idle:
                    return
                self._idle += 1


# Enough for the file tools a turn runs in parallel; a busier moment starts more, which end once idle.
_WORKERS = _Workers(max_idle=8)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WORKERS.forget)


async def in_thread(fn: Callable[[], R]) -> R:
    """Run blocking ``fn()`` in a daemon worker thread and await its result.

    Cancelled, the caller stops waiting at once and ``fn`` sees :func:`raise_if_cancelled`
    raise at its next check. The workers are daemons so that one stuck in a system call
    cannot keep the process from exiting (``asyncio.to_thread``'s pool threads would:
    the loop joins them at shutdown), and a stuck one never delays another call (see
    :class:`_Workers`). ``fn`` runs in a fresh ``contextvars`` context, as in a new thread.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[R] = loop.create_future()
    stop = threading.Event()

    def deliver(settle: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(settle)

    def finish(result: R | None, error: Exception | None) -> None:
        if done.done():
            return  # cancelled meanwhile
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]  # R when there is no error

    def work() -> None:
        _STOP.set(stop)
        try:
            result = fn()
        except Exception as exc:
            deliver(functools.partial(finish, None, exc))
        except BaseException as exc:  # SystemExit in a thread: still an answer, never a caller left waiting
            deliver(functools.partial(finish, None, RuntimeError(f"{type(exc).__name__} in a tool thread")))
        else:
            deliver(functools.partial(finish, result, None))

    _WORKERS.submit(functools.partial(contextvars.Context().run, work))
    try:
        return await done
    finally:
        stop.set()


def threaded(fn: Callable[[Mapping[str, Any], ToolContext], ToolOutput]) -> ToolRun:
    """Wrap a blocking implementation so it runs in a worker thread (:func:`in_thread`), off the event loop.

    This is what lets concurrency-safe file tools actually overlap.
    """

    async def run(tool_input: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
        return await in_thread(lambda: fn(tool_input, ctx))

    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run
