"""End-to-end: a machine whose Python raises ends the run in ``internal_error`` with a result, exit 1.

The real CLI runs a copy of the shipped machine (``--machine``) whose ``answer_recorded``
edge handler raises: the run still prints a Claude-Code-shaped result line
(``error_during_execution``, the exception's message in ``errors``), and the traceback
goes to stderr, never to stdout. The recorded run is readable by ``queryloop diagram --trace``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.frontends.cli import main
from queryloop.machines import MACHINES_DIR

from .harness import MockApi, run_cli
from .test_request_layer import scenario

HANDLER = "reason: answer_recorded\n    do: .output.record_answer\n"


def _broken_machine(tmp_path: Path) -> Path:
    text = (MACHINES_DIR / "query_loop.yaml").read_text()
    assert text.count(HANDLER) == 1
    path = tmp_path / "query_loop.yaml"
    path.write_text(text.replace(HANDLER, "reason: answer_recorded\n    do: queryloop.fsm.testing.broken_handler\n"))
    return path


@pytest.mark.parametrize("fmt", ["stream-json", "json", "text"])
def test_a_handler_that_raises_ends_in_internal_error_with_a_result_and_the_traceback_on_stderr_only(
    tmp_path: Path, fmt: str
) -> None:
    machine = _broken_machine(tmp_path)
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "the answer"}]}\n')
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--machine", str(machine)], api=api, cwd=tmp_path, fmt=fmt
        )
    assert run.returncode == 1, run.stderr
    message = "edge handler of 'answer_recorded' raised RuntimeError: broken_handler raised on purpose"
    assert "Traceback (most recent call last)" in run.stderr and "RuntimeError: broken_handler" in run.stderr
    assert "Traceback" not in run.stdout
    if fmt == "text":
        assert "Error (internal_error):" in run.stderr and message in run.stderr
        return
    result = run.result
    assert (result["type"], result["subtype"], result["is_error"], result["terminal_reason"]) == (
        "result",
        "error_during_execution",
        True,
        "internal_error",
    )
    assert "result" not in result and len(result["errors"]) == 1 and result["errors"][0].startswith(message)
    if fmt == "stream-json":
        last = run.of("system", "transition")[-1]
        assert (last["from"], last["event"], last["reason"], last["to"]) == (
            "reading_reply",
            "internal_error",
            "internal_error",
            "internal_error",
        )
        log = tmp_path / "run.jsonl"
        log.write_text(run.stdout)
        assert main(["diagram", "--trace", str(log), "--out", str(tmp_path / "out"), "--format", "dot"]) == 0
        assert "internal_error" in (tmp_path / "out" / "run.trace.dot").read_text()
        assert all(json.loads(line) for line in run.stdout.splitlines())
