"""End-to-end harness: the embedded server on a background loop, the real CLI in a subprocess.

The CLI talks to the server through the real ``anthropic`` SDK over loopback HTTP
(``ANTHROPIC_BASE_URL``); the test reads the server's request log afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from queryloop.handlers.messages import ledger_problem
from queryloop.mockapi.background import ServerThread
from queryloop.mockapi.scenario import parse_scenario
from queryloop.mockapi.server import RecordedRequest

ROOT = Path(__file__).resolve().parent.parent.parent


class MockApi(ServerThread):
    """A MockServer running on its own event loop in a thread, for the test process."""

    def __init__(self, scenario_yaml: str) -> None:
        super().__init__(parse_scenario(scenario_yaml, "<test scenario>"))

    @property
    def requests(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if r.path == "/v1/messages"]


class CliRun:
    """One finished ``queryloop run``: exit code, stdout/stderr and stream-json lines."""

    def __init__(self, proc: subprocess.CompletedProcess[str], fmt: str) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.lines: list[dict[str, Any]] = []
        if fmt in ("json", "stream-json"):
            self.lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    @property
    def result(self) -> dict[str, Any]:
        assert self.lines and self.lines[-1]["type"] == "result", self.stdout + self.stderr
        return self.lines[-1]

    @property
    def all_reasons(self) -> list[str]:
        return [line["reason"] for line in self.lines if line.get("subtype") == "transition"]

    ROUTINE = frozenset(
        {
            "session_started",
            "prompt_submitted",
            "tool_catalog_current",
            "context_ok",
            "reply_received",
            "permission_granted",
            "tool_calls_admitted",
            "stop_hooks_passed",
        }
    )

    @property
    def reasons(self) -> list[str]:
        """Every transition but the routine ones a plain run always takes (``ROUTINE``)."""
        return [r for r in self.all_reasons if r not in self.ROUTINE]

    def of(self, type_: str, subtype: str | None = None) -> list[dict[str, Any]]:
        return [
            line for line in self.lines if line["type"] == type_ and (subtype is None or line.get("subtype") == subtype)
        ]


def cli_env(api: MockApi | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["HOME"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "queryloop-test-home")  # no user settings leak in
    env["QUERYLOOP_RETRY_BASE_DELAY_MS"] = "1"
    if api is not None:
        env["ANTHROPIC_BASE_URL"] = api.url
        env["ANTHROPIC_API_KEY"] = "test-key"
    env.update(extra)
    return env


def cli_command(cwd: Path | str, fmt: str = "stream-json") -> list[str]:
    """``queryloop run --output-format FMT --cwd CWD``, with ``--verbose`` for stream-json (it needs it, as in
    Claude Code); a test adds its own flags."""
    loud = ["--verbose"] if fmt == "stream-json" else []
    return [sys.executable, "-m", "queryloop", "run", "--output-format", fmt, *loud, "--cwd", str(cwd)]


HANG_GUARD_S = 300
"""How long a wait for an event (a file, an exit) goes on before the test calls it a hang; never what decides a pass."""


def run_cli(
    args: list[str],
    *,
    api: MockApi | None,
    cwd: Path,
    fmt: str = "stream-json",
    stdin: str | None = None,
    timeout: float = HANG_GUARD_S,
    verbose: bool | None = None,
    **env: str,
) -> CliRun:
    """``queryloop run ARGS --output-format FMT`` against ``api``, tools working in ``cwd``.

    ``verbose`` None: ``--verbose`` with stream-json, which needs it (as in Claude Code).
    """
    mode = (
        [] if "--permission-mode" in args else ["--permission-mode", "bypassPermissions"]
    )  # permissions have their own tests
    wanted = fmt == "stream-json" if verbose is None else verbose
    loud = ["--verbose"] if wanted and "--verbose" not in args else []
    cmd = [sys.executable, "-m", "queryloop", "run", "--output-format", fmt, "--cwd", str(cwd), *mode, *loud, *args]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=cli_env(api, **env),
        input=stdin if stdin is not None else "",
        timeout=timeout,
        cwd=ROOT,
    )
    return CliRun(proc, fmt)


def assert_ledger_closed(requests: list[RecordedRequest]) -> None:
    """Every request has a tool_result for every earlier tool_use, in order (the ledger invariant)."""
    for request in requests:
        problem = ledger_problem(request.messages)
        assert problem is None, problem


def live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are still running (zombies are dead already)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_for(path: Path, seconds: float = HANG_GUARD_S) -> str:
    """The text of ``path`` once it exists (polled, no fixed sleep)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path.name} never appeared")


@attrs.frozen
class Signalled:
    """A CLI run signalled once a process group it started was running: how it ended, and that group."""

    returncode: int
    stdout: str
    stderr: str
    pgid: int


def signal_when_running(
    cmd: list[str], api: MockApi, pgid_file: Path, signum: signal.Signals = signal.SIGINT, **env: str
) -> Signalled:
    """Run ``cmd`` (the CLI) against ``api``; once ``pgid_file`` names a running group, send ``signum``."""
    pipes: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen(cmd, text=True, env=cli_env(api, **env), cwd=ROOT, **pipes)
    try:
        pgid = int(wait_for(pgid_file))
        assert live_members(pgid), f"the group in {pgid_file.name} is running"
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # reaped, and its pipes closed, on every path (an assertion above included)
    return Signalled(returncode=proc.returncode, stdout=stdout, stderr=stderr, pgid=pgid)


def assert_group_gone(pgid: int, what: str) -> None:
    """No process of group ``pgid`` runs once each one's exit is seen (``what``: whose group, for the message).

    Each member is waited for by a pidfd, which becomes readable when it exits: a member that was killed
    is seen gone however busy the machine is. ``HANG_GUARD_S`` only bounds the wait for one that never
    exits; the group's own commands must outlast it (``sleep 3600``), so a survivor fails, never a slow pass.
    """
    deadline = time.monotonic() + HANG_GUARD_S
    while members := live_members(pgid):
        for pid in members:
            if not _exited(pid, pgid, deadline - time.monotonic()):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)  # the test's own commands: not left behind
                raise AssertionError(f"a process of {what} survived")


def _exited(pid: int, pgid: int, seconds: float) -> bool:
    """Whether process ``pid``, while in group ``pgid``, exits within ``seconds`` (already gone: True)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        if pid not in live_members(pgid):  # gone, or its number taken by another process meanwhile
            return True
        ready, _, _ = select.select([fd], [], [], max(seconds, 0))
        return bool(ready)
    finally:
        os.close(fd)
