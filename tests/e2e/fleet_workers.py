"""`queryloop worker` processes for the fleet's end-to-end tests and its soak (tools/soak_fleet.py).

Owns starting a worker on a database with its output in a log file, finding the ones
that exited, and stopping them all (SIGTERM, then SIGKILL). Not the database nor the
sessions: each test, and the soak, brings its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def worker_env(api_key: str, **extra: str) -> dict[str, str]:
    """This process's environment without its ``ANTHROPIC_`` variables: ``api_key``, fast retries, ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(ANTHROPIC_API_KEY=api_key, QUERYLOOP_RETRY_BASE_DELAY_MS="10", **extra)
    return env


class Workers:
    """`queryloop worker` processes on one database, each writing to ``logs/<executor id>.log``; all stopped at
    the end. A worker beats its heartbeat every ``heartbeat_s`` and counts a peer dead after ``dead_after_s``."""

    def __init__(
        self,
        url: str,
        logs: Path,
        *,
        env: Mapping[str, str] | None = None,
        heartbeat_s: float = 0.3,
        dead_after_s: float = 5.0,
        concurrency: int | None = None,
    ) -> None:
        self.url = url
        self.logs = logs
        self.env = dict(env) if env is not None else worker_env("fleet-test-key")
        self.options = ["--heartbeat", f"{heartbeat_s:g}", "--dead-after", f"{dead_after_s:g}"]
        if concurrency is not None:
            self.options += ["--concurrency", str(concurrency)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, executor_id: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "queryloop", "worker", "--database-url", self.url, "--executor-id", executor_id]
        with (self.logs / f"{executor_id}.log").open("wb") as log:  # the worker writes to its own copy of the file
            proc = subprocess.Popen(
                [*argv, *self.options], stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT
            )
        self.procs[executor_id] = proc
        return proc

    def exited(self, names: Iterable[str] | None = None) -> list[str]:
        """Those of ``names`` (every worker started, by default) whose process has exited."""
        return [name for name in (self.procs if names is None else names) if self.procs[name].poll() is not None]

    def running(self) -> bool:
        """True while every worker runs; a worker that exited fails the test at once, with its log."""
        for name in self.exited():
            raise AssertionError(f"worker {name} exited with {self.procs[name].returncode}:\n{self.log(name)}")
        return True

    def log(self, executor_id: str) -> str:
        return (self.logs / f"{executor_id}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
