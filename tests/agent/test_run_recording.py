"""A run records its path — in ``QUERYLOOP_TRACE_DIR`` when it is set, else in its kept session's folder: one
JSON line per step, one file per run.

The runs here use a scripted in-process model; what is checked is the recording itself
(and that closing a run takes, and records, its abort edge at once).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from queryloop.fsm import Step
from queryloop.fsm.verify.coverage import coverage_of, read_runs
from queryloop.run.agent import AgentRun, query_loop_program
from queryloop.run.config import AgentOptions, RequestSettings, SessionSettings
from queryloop.testing import ScriptedBackend, scripted_reply


def _backend() -> ScriptedBackend:
    return ScriptedBackend(lambda call: scripted_reply([{"type": "text", "text": "ok"}]))


def _run(tmp_path: Path, *, close_after: int | None = None) -> AgentRun:
    run = AgentRun(AgentOptions(prompt="hi", cwd=tmp_path, request=RequestSettings(model="m")), _backend())

    async def drive() -> None:
        events = run.events()
        async for item in events:
            if isinstance(item, Step) and close_after is not None and len(run.steps) == close_after:
                await events.aclose()
                break

    asyncio.run(drive())
    return run


def test_every_step_of_a_run_is_appended_to_its_own_trace_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = tmp_path / "traces"
    monkeypatch.setenv("QUERYLOOP_TRACE_DIR", str(traces))
    first, second = _run(tmp_path), _run(tmp_path)
    files = sorted(traces.glob("*.jsonl"))
    assert len(files) == 2, "one file per run"
    for run in (first, second):
        (path,) = (f for f in files if f.name.startswith(run.options.session.session_id))
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(x["from"], x["event"], x["reason"], x["to"]) for x in lines] == [
            (s.source, s.event, s.reason, s.dest) for s in run.steps
        ]
        assert {x["machine"] for x in lines} == {"query_loop"}
        assert [x["step"] for x in lines] == list(range(len(lines)))
        assert lines[0]["type"] == "system" and lines[0]["subtype"] == "transition", "shaped like stream-json"
    spec = query_loop_program().spec
    assert coverage_of(spec, read_runs(traces)).taken[("calling_model", "reply_received")] == 2


def test_without_the_variable_a_kept_session_records_its_runs_in_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QUERYLOOP_TRACE_DIR", raising=False)
    run = _run(tmp_path)
    (path,) = (run.options.session_paths().folder / "steps").glob(f"{run.options.session.session_id}-*.jsonl")
    assert [json.loads(line)["reason"] for line in path.read_text().splitlines()] == [s.reason for s in run.steps]
    kept_nothing = AgentRun(
        AgentOptions(
            prompt="hi", cwd=tmp_path, request=RequestSettings(model="m"), session=SessionSettings(persist=False)
        ),
        _backend(),
    )
    assert kept_nothing._trace_step is None


def test_an_unwritable_trace_directory_is_said_once_and_never_fails_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("QUERYLOOP_TRACE_DIR", str(blocker / "traces"))
    runs = [_run(tmp_path), _run(tmp_path)]
    assert all(r.result()["terminal_reason"] == "completed" for r in runs)
    err = capsys.readouterr().err
    assert err.count("cannot record the run's path") == 1, err
    assert str(blocker / "traces") in err and "the run goes on without it" in err


def test_closing_a_run_takes_its_abort_edge_at_once_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = tmp_path / "traces"
    monkeypatch.setenv("QUERYLOOP_TRACE_DIR", str(traces))
    run = _run(tmp_path, close_after=4)
    assert [s.reason for s in run.steps] == [
        "session_started",
        "prompt_submitted",
        "tool_catalog_current",
        "context_ok",
        "request_aborted",
    ]
    assert run.runner.final.state == "aborted_streaming", "taken when the run was closed, not when collected"
    (path,) = traces.glob("*.jsonl")
    assert json.loads(path.read_text().splitlines()[-1])["reason"] == "request_aborted"
