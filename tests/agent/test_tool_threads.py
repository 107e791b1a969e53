"""The worker threads file tools run in (``in_thread``): reused, never blocking one another, never holding exit."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from queryloop.handlers.tools.services.base import ToolError, _Workers, in_thread, raise_if_cancelled

# Guards against a hang (a test that would otherwise never end), never a measure of speed.
_HANG_GUARD_S = 60.0


def _stuck_until(release: threading.Event, started: threading.Event) -> None:
    started.set()
    release.wait()


def test_a_call_stuck_in_its_thread_does_not_hold_up_the_next_one() -> None:
    release, started = threading.Event(), threading.Event()

    async def main() -> str:
        await in_thread(lambda: "warm")  # leaves a worker idle: the stuck call takes it
        stuck = asyncio.ensure_future(in_thread(lambda: _stuck_until(release, started)))
        await asyncio.to_thread(started.wait, _HANG_GUARD_S)
        try:
            return await asyncio.wait_for(in_thread(lambda: "next"), _HANG_GUARD_S)
        finally:
            release.set()
            await stuck

    assert asyncio.run(main()) == "next"


def test_a_cancelled_call_stops_at_its_next_check_and_the_worker_serves_the_next_call_unstopped() -> None:
    started, ended = threading.Event(), threading.Event()
    outcome: list[str] = []

    def loop_until_stopped() -> None:
        started.set()
        try:
            while True:
                raise_if_cancelled()
                time.sleep(0.001)
        except ToolError as exc:
            outcome.append(str(exc))
        finally:
            ended.set()

    async def main() -> str:
        call = asyncio.ensure_future(in_thread(loop_until_stopped))
        await asyncio.to_thread(started.wait, _HANG_GUARD_S)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        assert await asyncio.to_thread(ended.wait, _HANG_GUARD_S)

        def checks() -> str:
            raise_if_cancelled()  # a new call is not stopped by the cancelled one before it
            return "ran"

        return await in_thread(checks)

    assert asyncio.run(main()) == "ran"
    assert outcome == ["stopped: the call was cancelled or ran past its deadline"]


def test_what_a_call_sets_in_its_context_is_not_seen_by_the_next_call() -> None:
    mark: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")

    async def main() -> list[str]:
        seen = []
        for _ in range(3):  # sequential calls: the same idle worker serves them
            seen.append(await in_thread(mark.get))
            await in_thread(lambda: mark.set("set by an earlier call"))
        return seen

    assert asyncio.run(main()) == ["unset", "unset", "unset"]


def test_a_call_raising_reaches_its_caller_and_the_next_call_still_runs() -> None:
    def fails() -> None:
        raise ToolError("no such file")

    def exits() -> None:
        raise SystemExit(3)

    async def main() -> list[str]:
        seen = []
        for fn in (fails, exits):
            try:
                await in_thread(fn)
            except (ToolError, RuntimeError) as exc:
                seen.append(f"{type(exc).__name__}: {exc}")
        seen.append(await in_thread(lambda: "ran"))
        return seen

    assert asyncio.run(main()) == ["ToolError: no such file", "RuntimeError: SystemExit in a tool thread", "ran"]


_EXIT_SCRIPT = """
import asyncio, os, threading
from queryloop.handlers.tools.services.base import in_thread

async def main():
    await in_thread(lambda: None)  # an idle worker stays behind
    read_end, _write_end = os.pipe()
    started = threading.Event()
    stuck = asyncio.ensure_future(in_thread(lambda: (started.set(), os.read(read_end, 1))))  # read(2) for good
    await asyncio.to_thread(started.wait)
    stuck.cancel()
    print("main done", flush=True)

asyncio.run(main())
"""


def test_the_process_exits_with_a_worker_stuck_in_a_system_call_and_one_idle(tmp_path: Path) -> None:
    script = tmp_path / "stuck.py"
    script.write_text(_EXIT_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=_HANG_GUARD_S)
    assert (done.returncode, done.stdout, done.stderr) == (0, "main done\n", "")


_FORK_SCRIPT = """
import asyncio, os, signal
from queryloop.handlers.tools.services.base import in_thread

asyncio.run(in_thread(lambda: None))  # the parent has an idle worker now
child = os.fork()
if child == 0:
    signal.alarm(30)  # a child that hangs (the failure) does not outlive the test
    os._exit(0 if asyncio.run(in_thread(lambda: "ran in the child")) == "ran in the child" else 1)
print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
"""


def test_a_forked_child_runs_its_calls_on_workers_of_its_own(tmp_path: Path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(_FORK_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=_HANG_GUARD_S)
    assert (done.returncode, done.stdout, done.stderr) == (0, "0\n", "")


def test_a_worker_that_cannot_start_leaves_no_job_behind_to_run_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call whose worker could not start fails at once; its work never runs later on another worker."""
    workers = _Workers(max_idle=1)
    ran: list[str] = []

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            workers.submit(lambda: ran.append("the refused call's work"))
    done = threading.Event()
    workers.submit(done.set)  # a worker starts now and takes the queue in order
    assert done.wait(_HANG_GUARD_S)
    assert ran == []
