"""Hooks: one command hook's process, started under ``/bin/sh -c`` and talked to through the event loop.

Owns :data:`CAPTURE_LIMIT_BYTES` and the pipes, the timeout and the kill. What its output means is ``results``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from .config import HookCommand
from .results import HookContribution, HookError, HookResult, interpret_command, truncate_output

__all__ = ["CAPTURE_LIMIT_BYTES", "run_command"]

CAPTURE_LIMIT_BYTES: Final = 1 << 20
"""The bytes of a hook's stdout (and of its stderr) that are kept; the rest is discarded unread into memory."""
_READ_CHUNK: Final = 65536
# Claude Code 2.1.235 starts every command hook as `/bin/sh -c COMMAND`, whatever $SHELL is:
# the same shell here, so a hook behaves alike in both, and no PATH search per hook.
_SHELL: Final = "/bin/sh"


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


def _with_note(run: HookContribution, note: str | None) -> HookContribution:
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


async def run_command(
    hook: HookCommand,
    stdin: bytes,
    *,
    event: str,
    cwd: Path,
    env: Mapping[str, str] | Mapping[bytes, bytes],
    timeout_s: float,
    output_limit_bytes: int = CAPTURE_LIMIT_BYTES,
) -> HookContribution:
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
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        result = HookResult(command=command, exit_code=None, duration_ms=elapsed_ms(), stdout="", stderr="")
        return HookContribution(
            result=result, errors=(HookError(command=command, message=f"could not start the hook: {exc}"),)
        )
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
        return HookContribution(result=result, errors=(HookError(command=command, message=message),))
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
        command=command,
        exit_code=code,
        duration_ms=elapsed_ms(),
        stdout=truncate_output(stdout),
        stderr=truncate_output(stderr),
    )
    return _with_note(
        interpret_command(result, stdout=stdout, stderr=stderr, event=event), _cut_note(out, err, output_limit_bytes)
    )
