"""End-to-end: ``--include-partial-messages`` writes each event of the model's stream, as Claude Code 2.1.235 does.

The real CLI against the embedded server, which streams a text block and a tool call in
several deltas. Every event the API sent becomes a ``stream_event`` line, in the order it
came, with the session's id, ``parent_tool_use_id`` and a fresh ``uuid`` (``message_start``'s
also ``ttft_ms``); a block's start
is as the API sent it (the text empty, the input ``{}``), not as it ended. Without the flag,
or without ``--verbose``'s stream-json, no such line is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .harness import CliRun, MockApi, run_cli

SCENARIO = json.dumps(
    {
        "schema_version": 1,
        "scenario": "partial",
        "model": "mock-primary",
        "default": [
            {
                "reply": {
                    "content": [{"text": "hello there"}, {"tool_use": {"name": "Read", "input": {"file_path": "x"}}}]
                }
            },
            {"reply": {"content": [{"text": "done"}]}},
        ],
    }
)


def _run(tmp_path: Path, *flags: str) -> CliRun:
    (tmp_path / "x").write_text("x")
    with MockApi(SCENARIO) as api:
        return run_cli(
            ["--verbose", "--model", "mock-primary", *flags, "--", "go"],
            api=api,
            cwd=tmp_path,
            QUERYLOOP_HOME=str(tmp_path / "home"),
        )


def _events(run: CliRun) -> list[dict[str, Any]]:
    return [line["event"] for line in run.of("stream_event")]


def test_each_event_of_the_stream_is_a_stream_event_line_in_the_order_it_came(tmp_path: Path) -> None:
    run = _run(tmp_path, "--include-partial-messages")
    assert run.returncode == 0, run.stderr
    kinds = [e["type"] for e in _events(run)]
    first = kinds[: kinds.index("message_stop") + 1]
    assert first[0] == "message_start" and first[-2:] == ["message_delta", "message_stop"]
    blocks = first[1:-2]
    assert blocks[0] == "content_block_start" and blocks.count("content_block_start") == 2
    assert blocks.count("content_block_stop") == 2 and set(blocks) == {
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
    assert kinds.count("message_start") == 2  # the answer after the tool's result streams too


def test_a_blocks_start_is_as_the_api_sent_it_and_the_deltas_carry_the_rest(tmp_path: Path) -> None:
    events = _events(_run(tmp_path, "--include-partial-messages"))
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert starts[0] == {"type": "text", "text": ""}
    assert starts[1]["type"] == "tool_use" and starts[1]["input"] == {} and starts[1]["name"] == "Read"
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta" and e["index"] == 1]
    assert json.loads("".join(d["partial_json"] for d in deltas)) == {"file_path": "x"}
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and e["index"] == 0)
    assert text == "hello theredone"


def test_every_stream_event_line_names_the_session_and_has_its_own_uuid(tmp_path: Path) -> None:
    run = _run(tmp_path, "--include-partial-messages")
    lines = run.of("stream_event")
    session = run.of("system", "init")[0]["session_id"]
    assert lines and all(line["session_id"] == session and line["parent_tool_use_id"] is None for line in lines)
    assert len({line["uuid"] for line in lines}) == len(lines)


def test_message_starts_line_carries_the_time_to_it_and_no_other_line_does(tmp_path: Path) -> None:
    lines = _run(tmp_path, "--include-partial-messages").of("stream_event")
    timed = [line["event"]["type"] for line in lines if "ttft_ms" in line]
    assert timed == ["message_start", "message_start"]
    assert all(isinstance(line["ttft_ms"], int) and line["ttft_ms"] >= 0 for line in lines if "ttft_ms" in line)


def test_without_the_flag_no_stream_event_is_written(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.of("stream_event") == []
