"""End-to-end: what a transcript keeps of a run's recoveries — tombstones, compact boundaries — and what resume reads.

Through the real CLI, SDK and embedded server: a streamed attempt a model fallback
discards is a ``tombstone`` entry no resumed history includes; a reactive compaction
writes a ``system/compact_boundary`` entry and a resume sends the summary and the kept
rounds, never the messages it summarised.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from queryloop.handlers.session import SessionPaths
from queryloop.handlers.session.services.transcript import load_history

from .harness import MockApi, run_cli


def _entries(cwd: Path, session_id: str) -> list[dict[str, Any]]:
    paths = SessionPaths(home=Path(os.environ["QUERYLOOP_HOME"]), cwd=cwd.resolve(), session_id=session_id)
    return [json.loads(line) for line in paths.transcript.read_text().splitlines()]


FALLBACK_AFTER_TEXT = """schema_version: 1
scenario: tombstone
model: mock-primary
models:
  mock-primary:
    - reply: {content: [{text: "half an answer from the first model"}, {text: "never"}]}
      error_event_after_block: 1
    - reply: {content: [{text: "x"}]}
      error_event_after_block: 0
    - reply: {content: [{text: "x"}]}
      error_event_after_block: 0
  mock-fallback:
    - reply: {content: [{text: "the fallback's whole answer"}]}
    - reply: {content: [{text: "the second run's answer"}]}
"""


def test_a_discarded_streamed_attempt_is_a_tombstone_that_resume_never_sends(tmp_path: Path) -> None:
    session_id = str(uuid.uuid4())
    flags = ["--model", "mock-primary", "--fallback-model", "mock-fallback", "--session-id", session_id]
    with MockApi(FALLBACK_AFTER_TEXT) as api:
        run = run_cli([*flags, "-p", "go"], api=api, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert "model_fallback" in run.all_reasons
        (tombstone,) = [e for e in _entries(tmp_path, session_id) if e["type"] == "tombstone"]
        assert tombstone["message"]["content"][0]["text"] == "half an answer from the first model"
        assert tombstone["reason"] in ("model_fallback", "overloaded_backoff")
        assert all(e.get("parentUuid") != tombstone["uuid"] for e in _entries(tmp_path, session_id))
        resumed = run_cli(["--resume", session_id, "--model", "mock-fallback", "-p", "again"], api=api, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    sent = json.dumps(api.requests[-1].messages)
    assert "the fallback's whole answer" in sent and "half an answer" not in sent, "past the tombstone"


COMPACTED = """schema_version: 1
scenario: boundary
model: mock-primary
rules:
  - when: {last_user_contains: "[queryloop context summary]"}
    times: 1
    reply: {content: [{text: "Summary: three commands printed their numbers."}]}
models:
  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "printf 'round one'"}}}]}
    - reply: {content: [{tool_use: {name: Bash, input: {command: "printf 'round two'"}}}]}
    - error: {status: 400, message: "prompt is too long"}
    - reply: {content: [{text: "first run done"}]}
    - reply: {content: [{text: "second run done"}]}
"""


def test_a_compaction_is_a_boundary_and_resume_sends_the_summary_and_the_kept_rounds_only(tmp_path: Path) -> None:
    session_id = str(uuid.uuid4())
    with MockApi(COMPACTED) as api:
        run = run_cli(["--model", "mock-primary", "--session-id", session_id, "-p", "go"], api=api, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert "reactive_compact_succeeded" in run.all_reasons
        entries = _entries(tmp_path, session_id)
        (boundary,) = [e for e in entries if e.get("subtype") == "compact_boundary"]
        assert boundary["parentUuid"] is None and boundary["logicalParentUuid"] in {e["uuid"] for e in entries}
        assert boundary["compactMetadata"]["trigger"] == "reactive" and boundary["compactMetadata"]["preTokens"] > 0
        paths = SessionPaths(home=Path(os.environ["QUERYLOOP_HOME"]), cwd=tmp_path.resolve(), session_id=session_id)
        history = load_history(paths.transcript)
        assert "Summary: three commands" in json.dumps(history.messages[0])
        resumed = run_cli(["--resume", session_id, "--model", "mock-primary", "-p", "more"], api=api, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    sent = api.requests[-1].messages
    assert "Summary: three commands" in json.dumps(sent[0]) and "round two" in json.dumps(sent)
    commands = [
        b["input"]["command"]
        for m in sent
        if m["role"] == "assistant"
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    assert commands == ["printf 'round two'"], "the summarised round is gone; the kept one is verbatim"
    assert sent[-1] == {"role": "user", "content": "more"}
