"""A conversation on stdin: one program run with ``--input-format stream-json``, lines written as a script says.

:func:`converse` runs Claude Code 2.1.235 or queryloop on a :class:`~.reference.Probe` as the
Agent SDK does (stream-json in and out) and plays a script: :class:`Say` writes one line to
its stdin, :class:`Await` waits until a stdout line or the server's request count says the
program got there (a tool running, a request sent). Then stdin closes and the run's lines,
requests and result come back as :class:`~.reference.Observed`. Waits are bounded: a
program that never gets there fails the test saying what it waited for, never hangs it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from queryloop.mockapi.background import ServerThread
from queryloop.mockapi.scenario import parse_scenario

from .reference import Observed, Probe, Program, _command, _lay_out, _scenario

WAIT_S = 60.0  # the longest a step may wait for the program: a bound, not a timing assertion


@attrs.frozen
class Say:
    """Write this line (a JSON object) to the program's stdin."""

    line: Mapping[str, Any]


@attrs.frozen
class Await:
    """Wait until a stdout line satisfies ``line`` and the server has had at least ``requests`` Messages requests."""

    what: str  # said when the wait fails
    line: Callable[[Mapping[str, Any]], bool] = lambda _: True
    requests: int = 0


@attrs.frozen
class Answer:
    """Wait for the program's control request of ``subtype`` and answer it with ``response`` (a success)."""

    subtype: str
    response: Mapping[str, Any]


Step = Say | Await | Answer


def prompt(text: str) -> Say:
    """A user message, as the SDK writes one."""
    message = {"role": "user", "content": text}
    return Say({"type": "user", "message": message, "parent_tool_use_id": None, "session_id": ""})


def request(request_id: str, **body: Any) -> Say:
    """A control request from the SDK."""
    return Say({"type": "control_request", "request_id": request_id, "request": body})


def response_to(request_id: str) -> Callable[[Mapping[str, Any]], bool]:
    """The control_response line answering ``request_id``."""
    return lambda line: line.get("type") == "control_response" and line["response"].get("request_id") == request_id


def asks(line: Mapping[str, Any], subtype: str) -> bool:
    """A control request of ``subtype`` from the program."""
    return line.get("type") == "control_request" and line["request"].get("subtype") == subtype


def is_result(line: Mapping[str, Any]) -> bool:
    return line.get("type") == "result"


def _environment(probe: Probe, base: Path, url: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(base / "home"),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "probe",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "QUERYLOOP_HOME": str(base / "queryloop-home"),
        **probe.env,
    }


class _Run:
    """The running program: its stdout lines gathered by a thread, its stdin written by the script."""

    def __init__(self, proc: subprocess.Popen[str], server: ServerThread) -> None:
        self.proc, self.server = proc, server
        self.lines: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []  # the program's control requests answered, taken out of ``lines``
        self.fresh: queue.Queue[None] = queue.Queue()
        self.gatherer = threading.Thread(target=self._gather, daemon=True)
        self.gatherer.start()

    def _gather(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.startswith("{"):
                self.lines.append(json.loads(raw))
                self.fresh.put(None)
        self.fresh.put(None)

    def requests(self) -> int:
        return sum(1 for r in self.server.server.requests if r.path == "/v1/messages")

    def play(self, step: Step) -> None:
        assert self.proc.stdin is not None
        if isinstance(step, Answer):
            self.play(Await(f"a {step.subtype} request", lambda line: asks(line, step.subtype)))
            asked = next(line for line in self.lines if asks(line, step.subtype))
            self.lines.remove(asked)  # answered: a second Answer waits for the next one
            self.asked.append(asked)
            answer = {"subtype": "success", "request_id": asked["request_id"], "response": dict(step.response)}
            step = Say({"type": "control_response", "response": answer})
        if isinstance(step, Say):
            self.proc.stdin.write(json.dumps(step.line) + "\n")
            self.proc.stdin.flush()
            return
        deadline = time.monotonic() + WAIT_S
        while not (self.requests() >= step.requests and any(step.line(line) for line in self.lines)):
            if time.monotonic() > deadline or (self.proc.poll() is not None and self.fresh.empty()):
                kinds = [(line.get("type"), line.get("subtype")) for line in self.lines]
                raise AssertionError(f"waited for {step.what}; the program wrote {kinds}")
            try:
                self.fresh.get(timeout=0.05)
            except queue.Empty:
                pass


def converse(program: Program, probe: Probe, script: Sequence[Step], base: Path) -> Observed:
    """Run ``program`` as the Agent SDK does on ``probe``, play ``script``, close stdin and gather what it did."""
    _, cwd = _lay_out(probe, base)
    model = ["--model", probe.model] if probe.model is not None else []
    args = ["--input-format", "stream-json", "--output-format", "stream-json", *model, *probe.args]
    errors = base / "stderr.txt"
    with ServerThread(parse_scenario(_scenario(probe), "<probe>")) as server, errors.open("w") as stderr:
        proc = subprocess.Popen(
            [*_command(program, probe), *args],
            cwd=cwd,
            env=_environment(probe, base, server.url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        run = _Run(proc, server)
        try:
            for step in script:
                run.play(step)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            run.gatherer.join(WAIT_S)
            assert proc.stdout is not None
            proc.stdout.close()
        requests = tuple(r for r in server.server.requests if r.path == "/v1/messages")
    lines = (*run.asked, *run.lines)  # the program's answered requests first
    result = next((line for line in reversed(lines) if is_result(line)), {})
    init = next((line for line in lines if line.get("subtype") == "init"), {})
    return Observed(
        returncode=proc.returncode,
        denied=tuple(d["tool_name"] for d in result.get("permission_denials") or ()),
        made=frozenset(),
        mode=init.get("permissionMode"),
        stderr=errors.read_text(),
        requests=requests,
        lines=lines,
        result=result,
    )
