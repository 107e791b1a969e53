"""The ``Bash`` tool: one shell command in the working directory, bounded in time and output.

The command runs as ``bash -c`` in its own process group, whose whole group is killed on timeout, on cancellation
and when ``bash`` exits. Output keeps its start and end.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .base import (
    ToolContext,
    ToolOutput,
    ToolSpec,
    split_budget,
    truncation_marker,
)
from .sandbox.protect import SandboxRefusal  # light: the sandbox itself is imported only when one is made

if TYPE_CHECKING:
    from .sandbox import SandboxedCommand

__all__ = ["BASH"]

# How long to keep reading the pipe after bash exited and its group was killed. Only a
# process that moved to its own session (setsid) can still hold the pipe open by then.
_DRAIN_GRACE_S: Final = 1.0

# Room kept below max_output_chars for the status line put before the output
# ("Exit code N", "Command timed out after N s ...").
_STATUS_RESERVE: Final = 120

_LEADING_BLANK_LINES: Final = re.compile(r"\A(?:[ \t]*\r?\n)+")


class _OutputCapture:
    """Keeps the first and last characters of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._head_cap = limit // 2
        self._tail_cap = limit - self._head_cap
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self._total = 0

    def feed(self, text: str) -> None:
        self._total += len(text)
        room = self._head_cap - self._head_len
        if room > 0:
            taken = text[:room]
            self._head.append(taken)
            self._head_len += len(taken)
            text = text[room:]
        if text:
            self._tail.append(text)
            self._tail_len += len(text)
            while self._tail and self._tail_len - len(self._tail[0]) >= self._tail_cap:
                self._tail_len -= len(self._tail.popleft())

    def text(self) -> str:
        """Everything, or start + marker + end if it exceeded the limit (then ≤ limit chars)."""
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self._total <= self._limit:
            return head + tail
        head_keep, tail_keep = split_budget(self._limit)
        kept_head = head[:head_keep]
        kept_tail = tail[len(tail) - tail_keep :] if tail_keep else ""
        dropped = self._total - len(kept_head) - len(kept_tail)
        return kept_head + truncation_marker(dropped, "the start and the end are shown") + kept_tail


class _BashProtocol(asyncio.SubprocessProtocol):
    """Feeds the merged output into a capture and signals process exit and pipe close apart.

    The two differ when a background job still holds the pipe after bash exited, which
    is why this protocol is used rather than ``Process.wait()``: on Python 3.11 that
    only returns once every pipe is closed, so it would wait for the background job.
    """

    def __init__(self, capture: _OutputCapture, loop: asyncio.AbstractEventLoop) -> None:
        self._capture = capture
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._capture.feed(self._decoder.decode(data))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if not self.output_closed.done():
            self._capture.feed(self._decoder.decode(b"", final=True))
            self.output_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _kill_group(pgid: int) -> None:
    # The group is gone if bash exited and left nothing behind: nothing to do then.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _signal_name(number: int) -> str:
    try:
        return f"signal {signal.Signals(number).name}"
    except ValueError:  # real-time signals have no name
        return f"signal {number}"


def _timeout_seconds(tool_input: Mapping[str, Any], ctx: ToolContext) -> float:
    """The model gives milliseconds (like Claude Code); longer than the maximum is clamped."""
    timeout_ms = tool_input.get("timeout")
    if timeout_ms is None:
        return ctx.bash_default_timeout_s
    return min(float(timeout_ms) / 1000.0, ctx.bash_max_timeout_s)


async def _spawn(
    argv: Sequence[str], env: Mapping[str, str], ctx: ToolContext, capture: _OutputCapture
) -> tuple[asyncio.SubprocessTransport, _BashProtocol]:
    """Start ``argv`` (``bash -c command``, or the sandbox's line) in a new session; if cancelled, kill what started.

    The process exists before ``subprocess_exec`` returns (it still connects the pipes),
    and asyncio's own clean-up on cancellation kills bash alone, not the jobs bash has
    already started. So the start is shielded and finished, then the group is killed.
    """
    loop = asyncio.get_running_loop()
    starting = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _BashProtocol(capture, loop),
            *argv,
            cwd=ctx.cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        # If it failed to start there is nothing to kill, and the cancellation still wins.
        with contextlib.suppress(Exception):
            transport, protocol = await starting
            _kill_group(transport.get_pid())
            await protocol.exited
            transport.close()
        raise


def _sandboxed(command: str, tool_input: Mapping[str, object], ctx: ToolContext) -> SandboxedCommand | None:
    """The sandbox's command line for this call; None when it runs unsandboxed (no sandbox, or the policy says so)."""
    sandbox = ctx.sandbox
    if sandbox is None or not sandbox.policy.sandboxes(tool_input):  # the same answer the gate decided on
        return None
    return sandbox.prepare(command, ctx.command_environment())


def _bring_back(prepared: SandboxedCommand | None, ctx: ToolContext) -> str:
    """Apply what a sandboxed command changed (checkpointed first); a note for the model, or ""."""
    if prepared is None:
        return ""
    save = ctx.checkpoint
    call_id = ctx.call_id
    changes = prepared.finish(None if save is None else lambda files: save(call_id, files))
    if changes is None or not (changes.changed or changes.removed or changes.refused):
        return ""
    return changes.summary()


def _trimmed(text: str) -> str:
    """The output as the model sees it: no blank lines before it, no whitespace after it (Claude Code 2.1.235)."""
    return _LEADING_BLANK_LINES.sub("", text.rstrip())


def _no_implicit_bare_repositories(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with git told to use a bare repository only when named (``safe.bareRepository=explicit``).

    A sandboxed command may write a ``HEAD``, ``config`` and ``objects/`` anywhere it can write;
    git run outside the sandbox in that folder would take it for a repository and run what its
    ``config`` names (``core.fsmonitor``). Added after any ``GIT_CONFIG_COUNT`` entries already set.
    """
    count = env.get("GIT_CONFIG_COUNT", "0")
    index = int(count) if count.isdigit() else 0
    return {
        **env,
        "GIT_CONFIG_COUNT": str(index + 1),
        f"GIT_CONFIG_KEY_{index}": "safe.bareRepository",
        f"GIT_CONFIG_VALUE_{index}": "explicit",
    }


async def _run_bash(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    command: str = tool_input["command"]
    timeout_s = _timeout_seconds(tool_input, ctx)
    capture = _OutputCapture(ctx.max_output_chars - _STATUS_RESERVE)
    # Off the event loop: with Read deny rules, preparing walks the working directory.
    try:
        prepared = await asyncio.to_thread(_sandboxed, command, tool_input, ctx) if ctx.sandbox else None
    except SandboxRefusal as refusal:
        return ToolOutput(content=str(refusal), is_error=True)
    argv, env = (prepared.argv, prepared.env) if prepared else (("bash", "-c", command), ctx.command_environment())
    if prepared is None and ctx.sandbox is not None:  # left the sandbox (excludedCommands, or by request)
        env = _no_implicit_bare_repositories(env)
    transport, protocol = await _spawn(argv, env, ctx, capture)
    pgid = transport.get_pid()  # the session leader's pid is its process group id
    try:
        done, _pending = await asyncio.wait({protocol.exited}, timeout=timeout_s)
        timed_out = not done
        _kill_group(pgid)
        await protocol.exited
        # Output written just before exit may still be in the pipe. Only a process that
        # moved to its own session (setsid) can hold the pipe open after the kill.
        await asyncio.wait({protocol.output_closed}, timeout=_DRAIN_GRACE_S)
    except BaseException:
        # Cancellation (or a bug): never leave the command running behind us; what it wrote, it wrote.
        _kill_group(pgid)
        await protocol.exited
        with contextlib.suppress(Exception):
            _bring_back(prepared, ctx)
        raise
    finally:
        transport.close()  # closes the pipe even if a detached process still holds it
    try:
        note = await asyncio.to_thread(_bring_back, prepared, ctx)
    except SandboxRefusal as refusal:
        note = f"({refusal})"
    except OSError as exc:
        note = f"(the sandbox could not bring all of the command's changes back to the working directory: {exc})"
    code = None if timed_out else transport.get_returncode()
    # Nothing to show: a success says it completed (as Claude Code and MCP results here say), a failure says none.
    text = capture.text()  # joins the kept head and tail: made once
    output = _trimmed(text) or ("(Bash completed with no output)" if code == 0 else "(no output)")
    if note:
        output = f"{output}\n{note}"
    if timed_out:
        return ToolOutput(
            content=f"Command timed out after {timeout_s:g} s; its process group was killed. Output so far:\n{output}",
            is_error=True,
        )
    assert code is not None  # protocol.exited is done
    if code < 0:
        return ToolOutput(content=f"Command was killed by {_signal_name(-code)}\n{output}", is_error=True)
    if code > 0:
        said = f"{_trimmed(text)}\n{note}".strip("\n") if note else _trimmed(text)  # nothing said: the code alone
        return ToolOutput(content=f"Exit code {code}\n{said}" if said else f"Exit code {code}", is_error=True)
    response = None
    if ctx.responses is not None:  # Claude Code 2.1.235's record, as its PostToolUse hooks get it: the output itself
        stdout = f"{_trimmed(text)}\n{note}" if note else _trimmed(text)  # trimmed as the model's (probed)
        response = {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}
    return ToolOutput(content=output, response=response)


BASH: Final = ToolSpec(
    name="Bash",
    description=(
        "Run a bash command in the working directory (`bash -c`, no stdin) and return its "
        "combined stdout and stderr. A non-zero exit status is reported as an error with the "
        "exit code. timeout is in milliseconds (default 120000, at most 600000: larger values "
        "are reduced to the maximum); on timeout the command and everything it started are "
        "killed. Long output keeps its start and end. Background jobs are killed when the "
        "command exits. Prefer Read, Edit, Glob and Grep over cat, sed, find and grep."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The command to run."},
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Timeout in milliseconds (default 120000, maximum 600000).",
            },
            "description": {
                "type": "string",
                "description": "What the command does, in 5-10 words, for the person watching.",
            },
            "dangerouslyDisableSandbox": {
                "type": "boolean",
                "description": "Ask to run outside the sandbox; only where the settings allow it, and through the "
                "permission check. Use only when the sandbox itself made the command fail.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    concurrency_safe=False,
    read_only=False,
    idempotent=False,
    run=_run_bash,
    own_timeout_s=_timeout_seconds,
)
