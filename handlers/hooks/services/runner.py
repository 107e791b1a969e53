"""Hooks: the Claude Code ``hooks`` settings block and running its commands.

Owns :class:`HookConfig`, matching hooks to an event, :func:`run_hooks` (commands under ``/bin/sh -c``, output capped;
Python :class:`HookFunction` callbacks) and folding results into one :class:`HookOutcome`. What the loop does with
it is the machine's.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, get_args

import attrs

from queryloop.fsm import loads_json

__all__ = [
    "CAPTURE_LIMIT_BYTES",
    "HOOK_CALLBACK_TIMEOUT_S",
    "HOOK_EVENTS",
    "HookCallback",
    "HookCommand",
    "HookConfig",
    "HookConfigError",
    "HookError",
    "HookEvent",
    "HookFunction",
    "HookMatcher",
    "HookOutcome",
    "HookResult",
    "parse_hook_config",
    "run_hooks",
]

HookEvent = Literal[
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "SubagentStop",
    "UserPromptSubmit",
    "SessionStart",
    "SessionEnd",
    "PreCompact",
    "Elicitation",
]
"""The hook events this runtime fires: the one list of them (settings, the Python API and the Agent SDK's
session read :data:`HOOK_EVENTS`; an effect fires one with ``hook(ctx, "<Event>", payload)``)."""
HOOK_EVENTS: Final[tuple[HookEvent, ...]] = get_args(HookEvent)
"""The events of :data:`HookEvent`, in its order."""

# The stdin field a matcher is tested against, per event. Events not listed here
# (Stop, UserPromptSubmit, ...) have no matcher: every configured hook runs.
_MATCH_FIELD: Final[Mapping[str, str]] = {
    "PreToolUse": "tool_name",
    "PostToolUse": "tool_name",
    "PreCompact": "trigger",
    "SessionStart": "source",
    "SessionEnd": "reason",
    "Elicitation": "mcp_server_name",
}
# Events where exit code 2 (or `decision: "block"`) blocks something; elsewhere
# exit 2 is reported as a non-blocking error with its stderr.
_BLOCKING_EVENTS: Final[frozenset[HookEvent]] = frozenset(
    {"PreToolUse", "PostToolUse", "Stop", "SubagentStop", "UserPromptSubmit", "PreCompact"}
)
# Events whose plain (non-JSON) stdout on exit 0 is context for the model.
_CONTEXT_EVENTS: Final[frozenset[HookEvent]] = frozenset({"UserPromptSubmit", "SessionStart"})

_EXACT_MATCHER_RE: Final = re.compile(r"[A-Za-z0-9_|, -]+")
_OUTPUT_LIMIT: Final = 10_000
CAPTURE_LIMIT_BYTES: Final = 1 << 20
"""The bytes of a hook's stdout (and of its stderr) that are kept; the rest is discarded unread into memory."""
_READ_CHUNK: Final = 65536
# Claude Code 2.1.235 starts every command hook as `/bin/sh -c COMMAND`, whatever $SHELL is:
# the same shell here, so a hook behaves alike in both, and no PATH search per hook.
_SHELL: Final = "/bin/sh"
_PERMISSION_RANK: Final[Mapping[str, int]] = {"allow": 0, "ask": 1, "deny": 2}


class HookConfigError(ValueError):
    """The ``hooks`` settings block is not well formed; ``path`` is the JSON path of the problem."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.problem = message


# ------------------------------------------------------------------------ config


@attrs.frozen(kw_only=True)
class HookCommand:
    """One configured hook. Only ``type: "command"`` hooks are run; others are kept and skipped."""

    type: str = "command"
    command: str = ""
    timeout_s: float | None = None


HookCallback = Callable[[dict[str, Any], str | None, dict[str, Any]], Awaitable[Mapping[str, Any] | None]]
"""A Python hook: ``(input_data, tool_use_id, context)`` → the JSON output a command hook would print."""

HOOK_CALLBACK_TIMEOUT_S: Final = 60.0
"""How long a Python hook may take by default (the Claude Agent SDK's default); a command's is 600 s."""


def _check_callable(_instance: object, _attribute: attrs.Attribute[HookCallback], value: HookCallback) -> None:
    if not callable(value):
        raise TypeError(
            f"a Python hook must be an async function (input_data, tool_use_id, context) -> dict, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class HookFunction:
    """One Python hook: an async callable with the Claude Agent SDK's hook signature.

    It gets the fields a command hook reads on stdin as ``input_data``, the call's
    ``tool_use_id`` (None outside tool events) and ``{"signal": None}`` as ``context``,
    and returns what a command hook prints as JSON (``continue_`` may stand for
    ``continue``, as in the SDK); None is an empty answer.
    """

    callback: HookCallback = attrs.field(validator=_check_callable)
    timeout_s: float | None = None

    @property
    def label(self) -> str:
        """How errors name this hook: ``python:<module>.<qualified name>``."""
        name = getattr(self.callback, "__qualname__", None) or type(self.callback).__qualname__
        module = getattr(self.callback, "__module__", None)
        return f"python:{module}.{name}" if module else f"python:{name}"


def _compile_matcher(matcher: str) -> re.Pattern[str] | frozenset[str] | None:
    """``None`` matches everything; a frozenset is exact names; else an unanchored regex."""
    text = matcher.strip()
    if text in {"", "*"}:
        return None
    if _EXACT_MATCHER_RE.fullmatch(text):
        return frozenset(name.strip() for name in re.split(r"[|,]", text) if name.strip())
    return re.compile(text)


@attrs.frozen(kw_only=True)
class HookMatcher:
    """A matcher group of one event: which values it fits and the hooks it runs."""

    event: str
    matcher: str = ""
    hooks: tuple[HookCommand | HookFunction, ...] = ()
    _compiled: re.Pattern[str] | frozenset[str] | None = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(lambda self: _compile_matcher(self.matcher), takes_self=True),
    )

    def matches(self, value: str | None) -> bool:
        """Whether this group applies to ``value`` (a tool name, compaction trigger, ...)."""
        compiled = self._compiled
        if compiled is None or self.event not in _MATCH_FIELD:
            return True
        if value is None:
            return False
        if isinstance(compiled, frozenset):
            return value in compiled
        return compiled.search(value) is not None


@attrs.frozen(kw_only=True)
class HookConfig:
    """Every hook matcher group, in settings order."""

    matchers: tuple[HookMatcher, ...] = ()

    def commands_for(self, event: str, payload: Mapping[str, object]) -> tuple[HookCommand | HookFunction, ...]:
        """The hooks to run for ``event``: commands and Python callbacks; identical ones run once."""
        field = _MATCH_FIELD.get(event)
        value = payload.get(field) if field is not None else None
        seen: set[object] = set()
        out: list[HookCommand | HookFunction] = []
        for group in self.matchers:
            if group.event != event or not group.matches(value if isinstance(value, str) else None):
                continue
            for hook in group.hooks:
                key = hook.command if isinstance(hook, HookCommand) else id(hook.callback)
                if (isinstance(hook, HookFunction) or hook.type == "command") and key not in seen:
                    seen.add(key)
                    out.append(hook)
        return tuple(out)

    def merged(self, other: HookConfig) -> HookConfig:
        """This configuration's matcher groups, then ``other``'s (all of them run)."""
        return HookConfig(matchers=(*self.matchers, *other.matchers))


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return json.dumps(value)


def parse_hook_config(hooks: object, *, path: str = "$.hooks") -> HookConfig:
    """Build a :class:`HookConfig` from the value of the settings key ``hooks``.

    Raises :class:`HookConfigError` naming the JSON path of the first problem. Unknown
    event names are kept (Claude Code has events this runtime never fires).
    """
    if not isinstance(hooks, Mapping):
        raise HookConfigError(path, f"expected an object mapping event names to matcher lists, found {_kind(hooks)}")
    matchers: list[HookMatcher] = []
    for event, groups in hooks.items():
        event_path = f"{path}.{event}"
        if not isinstance(groups, list):
            raise HookConfigError(event_path, f"expected an array of matcher groups, found {_kind(groups)}")
        for i, group in enumerate(groups):
            group_path = f"{event_path}[{i}]"
            if not isinstance(group, Mapping):
                raise HookConfigError(group_path, f"expected an object, found {_kind(group)}")
            matcher = group.get("matcher", "")
            if matcher is None:
                matcher = ""
            if not isinstance(matcher, str):
                raise HookConfigError(f"{group_path}.matcher", f"expected a string, found {_kind(matcher)}")
            commands = group.get("hooks")
            if not isinstance(commands, list):
                raise HookConfigError(
                    f"{group_path}.hooks",
                    f"expected an array of hooks, found {_kind(commands) if 'hooks' in group else 'nothing'}",
                )
            parsed = tuple(_parse_hook_command(h, f"{group_path}.hooks[{j}]") for j, h in enumerate(commands))
            try:
                matchers.append(HookMatcher(event=str(event), matcher=matcher, hooks=parsed))
            except re.error as exc:
                raise HookConfigError(
                    f"{group_path}.matcher",
                    f"{matcher!r} is not a valid regular expression ({exc}); use 'A|B' for exact tool names",
                ) from None
    return HookConfig(matchers=tuple(matchers))


def _parse_hook_command(hook: object, path: str) -> HookCommand:
    if not isinstance(hook, Mapping):
        raise HookConfigError(path, f"expected an object, found {_kind(hook)}")
    kind = hook.get("type", "command")
    if not isinstance(kind, str):
        raise HookConfigError(f"{path}.type", f"expected a string, found {_kind(kind)}")
    command = hook.get("command", "")
    if kind == "command" and (not isinstance(command, str) or not command.strip()):
        found = "nothing" if "command" not in hook else _kind(command)
        raise HookConfigError(f"{path}.command", f"expected a non-empty string, found {found}")
    timeout = hook.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise HookConfigError(f"{path}.timeout", f"expected a positive number of seconds, found {_kind(timeout)}")
    return HookCommand(
        type=kind,
        command=command if isinstance(command, str) else "",
        timeout_s=None if timeout is None else float(timeout),
    )


# ----------------------------------------------------------------------- results


@attrs.frozen(kw_only=True)
class HookError:
    """A non-blocking hook failure: which command and why. The tool/turn carries on."""

    command: str
    message: str


@attrs.frozen(kw_only=True)
class HookResult:
    """What one hook process did. ``exit_code`` is ``None`` if it never exited on its own."""

    command: str
    exit_code: int | None
    duration_ms: int
    stdout: str
    stderr: str
    timed_out: bool = False


@attrs.frozen(kw_only=True)
class HookOutcome:
    """Every matching hook's result for one event, folded together.

    ``blocked`` means an exit code 2 or ``decision: "block"`` on an event that can
    block (PreToolUse: block the tool; PostToolUse: tell the model; Stop/SubagentStop:
    keep going with the reason as feedback; UserPromptSubmit: erase the prompt;
    PreCompact: skip compaction). ``continue_`` is False if any hook said
    ``"continue": false``, which ends the run with ``stop_reason``.
    """

    event: str
    blocked: bool = False
    block_reasons: tuple[str, ...] = ()
    continue_: bool = True
    stop_reason: str | None = None
    permission_decision: Literal["allow", "deny", "ask"] | None = None
    permission_decision_reason: str | None = None
    decision: Literal["block", "approve"] | None = None
    additional_context: tuple[str, ...] = ()  # hookSpecificOutput.additionalContext, each hook's
    output: tuple[str, ...] = ()  # plain stdout on exit 0 of a context event (SessionStart, UserPromptSubmit)
    updated_input: Mapping[str, Any] | None = None
    updated_output: Any = None
    system_messages: tuple[str, ...] = ()
    suppress_output: bool = False
    errors: tuple[HookError, ...] = ()
    results: tuple[HookResult, ...] = ()
    # Elicitation: the answer a hook gave an MCP server's request for input (action, then the form's values)
    elicitation: tuple[Literal["accept", "decline", "cancel"], Mapping[str, Any]] | None = None


def _truncate(text: str) -> str:
    if len(text) <= _OUTPUT_LIMIT:
        return text
    return text[:_OUTPUT_LIMIT] + f"\n… [{len(text) - _OUTPUT_LIMIT} more characters]"


# ------------------------------------------------------------------------ running


@attrs.frozen(kw_only=True)
class _Run:
    """One hook's raw result plus its parsed contribution to the outcome."""

    result: HookResult
    errors: tuple[HookError, ...] = ()
    block_reason: str | None = None
    output: Mapping[str, Any] | None = None
    plain_stdout: str | None = None


@attrs.frozen(kw_only=True)
class _Captured:
    """The first bytes of one output stream and how many more were discarded."""

    kept: bytes
    dropped: int


class _Sink:
    """One output pipe as it is read: the first ``limit`` bytes kept, the rest counted and dropped."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    def take(self, chunk: bytes) -> None:
        room = max(self.limit - len(self.kept), 0)
        self.kept += chunk[:room]
        self.dropped += len(chunk) - min(room, len(chunk))

    def captured(self) -> _Captured:
        return _Captured(kept=bytes(self.kept), dropped=self.dropped)


class _Exchange:
    """One hook's three pipes, driven by the event loop's own selector.

    asyncio's subprocess transports cost this process about 2 ms of CPU per hook (three
    pipe transports, a protocol, and on Python 3.11 a thread per child waiting for it to
    exit); a hook on every tool call paid that on every call. Reading and writing the
    raw pipe fds from reader and writer callbacks does the same exchange without them.
    On Linux the shell's exit is watched the same way, through a pidfd, so one wake-up
    can see the pipes end and the shell exit, and one future says both are done.
    """

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes, limit: int) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all pipes
        self._loop = asyncio.get_running_loop()
        self._proc = proc
        self._pending = memoryview(stdin)
        self.stdout = _Sink(proc.stdout.fileno(), limit)
        self.stderr = _Sink(proc.stderr.fileno(), limit)
        self._watched: list[int] = []  # fds with a reader or writer registered
        self._open = 2  # output pipes not yet at end of file, and the pidfd not yet readable
        self._pidfd: int | None = None
        self.finished: asyncio.Future[None] = self._loop.create_future()

    def start(self) -> None:
        """Write what stdin takes now and watch for the rest; watch stdout and stderr."""
        for sink in (self.stdout, self.stderr):
            os.set_blocking(sink.fd, False)
            self._loop.add_reader(sink.fd, self._read, sink)
            self._watched.append(sink.fd)
        if hasattr(os, "pidfd_open"):  # readable once the shell has exited; elsewhere `_exited` polls
            self._pidfd = os.pidfd_open(self._proc.pid)
            self._loop.add_reader(self._pidfd, self._exit_seen)
            self._open += 1
        assert self._proc.stdin is not None
        os.set_blocking(self._proc.stdin.fileno(), False)
        self._write()

    def close(self) -> None:
        """Stop watching every pipe and close this process's ends of them."""
        for fd in self._watched:
            self._loop.remove_reader(fd)
            self._loop.remove_writer(fd)
        self._watched.clear()
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()

    def _write(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        fd = stdin.fileno()
        try:
            while self._pending:
                self._pending = self._pending[os.write(fd, self._pending) :]
        except BlockingIOError:  # the pipe is full: go on when the hook has read some
            if fd not in self._watched:
                self._loop.add_writer(fd, self._write)
                self._watched.append(fd)
            return
        except OSError:
            pass  # BrokenPipeError: the hook does not read its stdin, which is allowed
        if fd in self._watched:
            self._loop.remove_writer(fd)
            self._watched.remove(fd)
        stdin.close()  # end of file for the hook

    def _read(self, sink: _Sink) -> None:
        try:
            chunk = os.read(sink.fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # a pipe that cannot be read has ended, as for asyncio's transports
        if chunk:
            sink.take(chunk)
            return
        self._loop.remove_reader(sink.fd)
        self._watched.remove(sink.fd)
        self._one_done()

    def _exit_seen(self) -> None:
        assert self._pidfd is not None
        self._loop.remove_reader(self._pidfd)  # level-triggered: it would fire on every wake-up
        self._one_done()

    def _one_done(self) -> None:
        self._open -= 1
        if self._open == 0 and not self.finished.done():
            self.finished.set_result(None)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():  # a level-triggered reader may fire again before the waiter runs
        future.set_result(None)


async def _exited(proc: subprocess.Popen[bytes]) -> int:
    """Wait until the hook's shell has exited, then reap it; no thread waits for it."""
    if (code := proc.poll()) is not None:
        return code
    if not hasattr(os, "pidfd_open"):  # not Linux: look again now and then
        delay = 0.001
        while (code := proc.poll()) is None:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return code
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()
    pidfd = os.pidfd_open(proc.pid)  # readable once the process has exited
    loop.add_reader(pidfd, _settle, exited)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return proc.wait()  # a zombie by now: reaped at once


async def _communicate(exchange: _Exchange, proc: subprocess.Popen[bytes]) -> None:
    """Like ``Popen.communicate`` without blocking the loop; each output stream keeps at most its cap in memory."""
    exchange.start()
    await exchange.finished  # on Linux the shell has exited too: `_exited` reaps it at once
    await _exited(proc)


def _cut_note(out: _Captured, err: _Captured, limit: int) -> str | None:
    notes = [
        f"{name} was cut at {limit} bytes; {captured.dropped} more bytes were discarded"
        for name, captured in (("stdout", out), ("stderr", err))
        if captured.dropped
    ]
    return "; ".join(notes) or None


def _with_note(run: _Run, note: str | None) -> _Run:
    """``run`` whose outcome also says ``note`` (appended to its error, or as an error of its own)."""
    if note is None:
        return run
    if run.errors:
        first = run.errors[0]
        return attrs.evolve(run, errors=(attrs.evolve(first, message=f"{first.message} ({note})"), *run.errors[1:]))
    return attrs.evolve(run, errors=(HookError(command=run.result.command, message=note),))


async def _kill(exchange: _Exchange, proc: subprocess.Popen[bytes]) -> None:
    """Kill the hook's process group and reap its shell, even if this task is cancelled meanwhile."""
    exchange.close()
    # The hook runs in its own session, so its pid is its process-group id; killing
    # the group also takes any children it spawned (`sleep`, pipelines, ...).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    await asyncio.shield(_exited(proc))  # cancelled, the reaping still finishes


async def _run_one(
    hook: HookCommand,
    stdin: bytes,
    *,
    event: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    output_limit_bytes: int = CAPTURE_LIMIT_BYTES,
) -> _Run:
    started = time.monotonic()

    def elapsed_ms() -> int:
        return int((time.monotonic() - started) * 1000)

    command = hook.command
    try:
        # Popen starts the shell with vfork/exec, and `_Exchange` talks to it through
        # the loop's selector: no transports and no waiting thread (see `_Exchange`).
        # The shell is /bin/sh, by its absolute path, as Claude Code 2.1.235 starts it.
        proc = subprocess.Popen(
            [_SHELL, "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        result = HookResult(command=command, exit_code=None, duration_ms=elapsed_ms(), stdout="", stderr="")
        return _Run(result=result, errors=(HookError(command=command, message=f"could not start the hook: {exc}"),))
    exchange = _Exchange(proc, stdin, output_limit_bytes)
    try:
        async with asyncio.timeout(timeout_s):
            await _communicate(exchange, proc)
    except TimeoutError:
        await _kill(exchange, proc)
        result = HookResult(
            command=command, exit_code=None, duration_ms=elapsed_ms(), stdout="", stderr="", timed_out=True
        )
        message = f"timed out after {timeout_s:g} s; its process group was killed"
        return _Run(result=result, errors=(HookError(command=command, message=message),))
    except BaseException:
        # Cancellation (or anything else) must not leave hook processes behind.
        with contextlib.suppress(BaseException):
            await _kill(exchange, proc)
        raise
    exchange.close()
    out, err = exchange.stdout.captured(), exchange.stderr.captured()
    stdout = out.kept.decode("utf-8", errors="replace")
    stderr = err.kept.decode("utf-8", errors="replace")
    code = proc.returncode
    result = HookResult(
        command=command, exit_code=code, duration_ms=elapsed_ms(), stdout=_truncate(stdout), stderr=_truncate(stderr)
    )
    return _with_note(
        _interpret(result, stdout=stdout, stderr=stderr, event=event), _cut_note(out, err, output_limit_bytes)
    )


async def _call_function(hook: HookFunction, input_data: Mapping[str, object], *, event: str, timeout_s: float) -> _Run:
    """Await one Python hook; what it returns is read as a command's JSON output, what it raises is a hook error."""
    started = time.monotonic()
    label = hook.label

    def ended(*, ok: bool, timed_out: bool = False) -> HookResult:
        duration_ms = int((time.monotonic() - started) * 1000)
        code = 0 if ok else None
        return HookResult(
            command=label, exit_code=code, duration_ms=duration_ms, stdout="", stderr="", timed_out=timed_out
        )

    tool_use_id = input_data.get("tool_use_id")
    try:
        async with asyncio.timeout(timeout_s):
            answer: object = hook.callback(
                dict(input_data), tool_use_id if isinstance(tool_use_id, str) else None, {"signal": None}
            )
            if inspect.isawaitable(answer):
                answer = await answer
    except TimeoutError:
        error = HookError(command=label, message=f"timed out after {timeout_s:g} s; it was cancelled")
        return _Run(result=ended(ok=False, timed_out=True), errors=(error,))
    except Exception as exc:
        error = HookError(command=label, message=f"raised {type(exc).__name__}: {exc}")
        return _Run(result=ended(ok=False), errors=(error,))
    output, problem = _python_output(answer, event)
    if problem is not None:
        error = HookError(command=label, message=f"returned output that was ignored: {problem}")
        return _Run(result=ended(ok=False), errors=(error,))
    return _Run(result=ended(ok=True), output=output)


def _python_output(answer: object, event: str) -> tuple[Mapping[str, object], str | None]:
    """A Python hook's answer as a command's JSON output (the SDK's ``continue_`` read as ``continue``), or why not."""
    if answer is None:
        return {}, None
    if not isinstance(answer, Mapping):
        return {}, f"expected a dict, found {type(answer).__name__}"
    if "async_" in answer or "async" in answer:
        return {}, "asynchronous hook output (async_) is not supported; return the answer itself"
    output = {("continue" if key == "continue_" else key): value for key, value in answer.items()}
    return output, _output_problem(output, event)


def _interpret(result: HookResult, *, stdout: str, stderr: str, event: str) -> _Run:
    command, code = result.command, result.exit_code
    if code == 0:
        text = stdout.strip()
        if text.startswith("{"):
            try:
                output = loads_json(text)
            except json.JSONDecodeError as exc:  # not JSON, or past what can be read safely
                error = HookError(command=command, message=f"exited 0 but its stdout is not valid JSON ({exc})")
                return _Run(result=result, errors=(error,))
            problem = _output_problem(output, event)
            if problem is not None:
                error = HookError(command=command, message=f"exited 0 but its JSON output was ignored: {problem}")
                return _Run(result=result, errors=(error,))
            return _Run(result=result, output=output)
        return _Run(result=result, plain_stdout=text or None)
    reason = stderr.strip()
    if code == 2 and event in _BLOCKING_EVENTS:
        return _Run(result=result, block_reason=reason or f"blocked by hook {command!r} (exit code 2, no stderr)")
    if code is not None and code < 0:
        why = (
            f"was killed by signal {signal.Signals(-code).name}"
            if -code in signal.valid_signals()
            else f"was killed by signal {-code}"
        )
    else:
        why = f"exited with code {code}"
    detail = f": {reason}" if reason else ""
    return _Run(result=result, errors=(HookError(command=command, message=f"{why}{detail}"),))


_OUTPUT_FIELD_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "continue": (bool,),
    "stopReason": (str,),
    "suppressOutput": (bool,),
    "decision": (str,),
    "reason": (str,),
    "systemMessage": (str,),
    "hookSpecificOutput": (dict,),
}
_SPECIFIC_FIELD_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "hookEventName": (str,),
    "permissionDecision": (str,),
    "permissionDecisionReason": (str,),
    "additionalContext": (str,),
    "updatedInput": (dict,),
}


def _output_problem(output: object, event: str) -> str | None:
    """Why a hook's JSON output must be ignored, or ``None`` if it is usable."""
    if not isinstance(output, dict):
        return f"expected an object, found {_kind(output)}"
    for key, types in _OUTPUT_FIELD_TYPES.items():
        if key in output and output[key] is not None and not isinstance(output[key], types):
            return f"{key!r} has the wrong type ({_kind(output[key])})"
    if output.get("decision") not in (None, "block", "approve"):
        return f'\'decision\' must be "block" or "approve", found {_kind(output["decision"])}'
    specific = output.get("hookSpecificOutput")
    if isinstance(specific, dict):
        for key, types in _SPECIFIC_FIELD_TYPES.items():
            if key in specific and specific[key] is not None and not isinstance(specific[key], types):
                return f"'hookSpecificOutput.{key}' has the wrong type ({_kind(specific[key])})"
        name = specific.get("hookEventName")
        if name is not None and name != event:
            return f"'hookSpecificOutput.hookEventName' is {name!r} but the event is {event!r}"
        decision = specific.get("permissionDecision")
        if decision is not None and decision not in _PERMISSION_RANK:
            return f"'hookSpecificOutput.permissionDecision' must be allow, deny or ask, found {_kind(decision)}"
    return None


class _Fold:
    """What every hook of one event said, gathered in order: the pieces of its :class:`HookOutcome`."""

    def __init__(self, event: str) -> None:
        self.event = event
        self.block_reasons: list[str] = []
        self.errors: list[HookError] = []
        self.contexts: list[str] = []
        self.outputs: list[str] = []
        self.messages: list[str] = []
        self.continue_ = True
        self.stop_reason: str | None = None
        self.suppress = False
        self.decision: Literal["block", "approve"] | None = None
        self.permission: Literal["allow", "deny", "ask"] | None = None
        self.permission_reason: str | None = None
        self.updated_input: Mapping[str, Any] | None = None
        self.updated_output: Any = None
        self.elicitation: tuple[Literal["accept", "decline", "cancel"], Mapping[str, Any]] | None = None

    def offer_permission(self, value: Literal["allow", "deny", "ask"], reason: str | None) -> None:
        """Several hooks may decide: deny beats ask beats allow; the first hook giving the winning one gives the
        reason."""
        if self.permission is None or _PERMISSION_RANK[value] > _PERMISSION_RANK[self.permission]:
            self.permission, self.permission_reason = value, reason

    def add(self, run: _Run) -> None:
        self.errors.extend(run.errors)
        if run.block_reason is not None:
            self.block_reasons.append(run.block_reason)
            if self.event == "PreToolUse":
                self.offer_permission("deny", run.block_reason)
        if run.plain_stdout is not None and self.event in _CONTEXT_EVENTS:
            self.outputs.append(run.plain_stdout)
        if run.output is not None:
            self._output(run, run.output)

    def _output(self, run: _Run, out: Mapping[str, Any]) -> None:
        if out.get("continue") is False:
            self.continue_ = False
            if self.stop_reason is None and isinstance(out.get("stopReason"), str):
                self.stop_reason = out["stopReason"]
        self.suppress = self.suppress or out.get("suppressOutput") is True
        if isinstance(out.get("systemMessage"), str):
            self.messages.append(out["systemMessage"])
        reason = out.get("reason") if isinstance(out.get("reason"), str) else None
        if out.get("decision") == "block":
            self.decision = "block"
            if self.event in _BLOCKING_EVENTS:
                self.block_reasons.append(reason or f"blocked by hook {run.result.command!r}")
        elif out.get("decision") == "approve" and self.decision is None:
            self.decision = "approve"
        specific = out.get("hookSpecificOutput")
        specific = specific if isinstance(specific, dict) else {}
        if self.event == "PreToolUse":
            self._pre_tool_use(out, specific, reason)
        elif self.event == "PostToolUse":
            self._post_tool_use(specific)
        elif self.event == "Elicitation":
            self._elicitation(specific)
        if isinstance(specific.get("additionalContext"), str):
            self.contexts.append(specific["additionalContext"])

    def _pre_tool_use(self, out: Mapping[str, Any], specific: Mapping[str, Any], reason: str | None) -> None:
        chosen = specific.get("permissionDecision")
        if chosen is None and out.get("decision") is not None:
            chosen = "allow" if out["decision"] == "approve" else "deny"  # the older top-level form
        if chosen is not None:
            self.offer_permission(chosen, specific.get("permissionDecisionReason") or reason)
        if isinstance(specific.get("updatedInput"), dict):
            self.updated_input = specific["updatedInput"]

    def _post_tool_use(self, specific: Mapping[str, object]) -> None:
        for key in ("updatedOutput", "updatedMCPToolOutput"):
            if key in specific:
                self.updated_output = specific[key]

    def _elicitation(self, specific: Mapping[str, Any]) -> None:
        if self.elicitation is None and specific.get("action") in ("accept", "decline", "cancel"):
            values = specific.get("content")
            self.elicitation = (specific["action"], values if isinstance(values, dict) else {})

    def outcome(self, runs: Sequence[_Run]) -> HookOutcome:
        return HookOutcome(
            event=self.event,
            blocked=bool(self.block_reasons),
            block_reasons=tuple(self.block_reasons),
            continue_=self.continue_,
            stop_reason=self.stop_reason,
            permission_decision=self.permission,
            permission_decision_reason=self.permission_reason,
            decision=self.decision,
            additional_context=tuple(self.contexts),
            output=tuple(self.outputs),
            updated_input=self.updated_input,
            updated_output=self.updated_output,
            system_messages=tuple(self.messages),
            suppress_output=self.suppress,
            errors=tuple(self.errors),
            results=tuple(run.result for run in runs),
            elicitation=self.elicitation,
        )


def _fold(event: str, runs: Sequence[_Run]) -> HookOutcome:
    fold = _Fold(event)
    for run in runs:
        fold.add(run)
    return fold.outcome(runs)


async def run_hooks(
    event: str,
    payload: Mapping[str, object],
    config: HookConfig,
    *,
    cwd: Path | str,
    session_id: str,
    transcript_path: Path | str,
    permission_mode: str,
    timeout_default_s: float = 600,
    env: Mapping[str, str] | None = None,
    output_limit_bytes: int = CAPTURE_LIMIT_BYTES,
) -> HookOutcome:
    """Run every hook of ``config`` matching ``event``/``payload`` in parallel and fold the results.

    Each hook gets on stdin ``session_id, transcript_path, cwd, permission_mode,
    hook_event_name`` plus ``payload`` (``tool_name, tool_input, tool_use_id``,
    ``tool_response``, ``stop_hook_active``, ``prompt``, ...). It runs as ``/bin/sh -c``
    in its own process group with ``CLAUDE_PROJECT_DIR=cwd`` added to ``env`` (default:
    this process's environment) and is killed with its group after its ``timeout``
    (default ``timeout_default_s``). Of its stdout and of its stderr the first
    ``output_limit_bytes`` are kept (a cut is reported as a hook error). A Python hook
    gets the same fields as its ``input_data`` and is cancelled after its timeout
    (default :data:`HOOK_CALLBACK_TIMEOUT_S`). Cancelling this coroutine kills every
    running hook and re-raises. Hook failures never raise: they are ``HookOutcome.errors``.
    """
    hooks = config.commands_for(event, payload)
    if not hooks:
        return HookOutcome(event=event)
    cwd_path = Path(cwd)
    stdin_doc = {
        "session_id": session_id,
        "transcript_path": str(transcript_path),
        "cwd": str(cwd_path),
        "permission_mode": permission_mode,
        "hook_event_name": event,
        **payload,
    }
    stdin = json.dumps(stdin_doc, default=str).encode("utf-8")
    hook_env = {**(os.environ if env is None else env), "CLAUDE_PROJECT_DIR": str(cwd_path)}
    runs = [
        _call_function(
            hook,
            stdin_doc,
            event=event,
            timeout_s=hook.timeout_s if hook.timeout_s is not None else HOOK_CALLBACK_TIMEOUT_S,
        )
        if isinstance(hook, HookFunction)
        else _run_one(
            hook,
            stdin,
            event=event,
            cwd=cwd_path,
            env=hook_env,
            timeout_s=hook.timeout_s if hook.timeout_s is not None else timeout_default_s,
            output_limit_bytes=output_limit_bytes,
        )
        for hook in hooks
    ]
    if len(runs) == 1:  # no task of its own: cancelled, the hook still kills and reaps before this re-raises
        return _fold(event, [await runs[0]])
    return _fold(event, await _gather(runs))


async def _gather(runs: Sequence[Awaitable[_Run]]) -> list[_Run]:
    """Every hook's run, in parallel; cancelled, each kills and reaps its hook before this re-raises."""
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        # Let every task run its kill-and-reap cleanup before propagating.
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
