"""End-to-end: every block the API returns goes back in every later request as it came, in order.

The embedded server replays blocks recorded from real API traffic (``raw:`` blocks of a
scenario), streamed as the API streams them: a compaction, thinking with its signature,
redacted thinking, a web search (``server_tool_use`` and ``web_search_tool_result``) that
pauses the turn (``pause_turn``), a text with citations. The run goes through the real
``anthropic`` SDK: the paused turn is continued, a tool is called, the run ends; then the
session is resumed from its transcript for a second prompt. Each later request must carry
each earlier reply's blocks byte for byte (their compact JSON, keys in their order) and in
their order: the API refuses a continuation whose server-tool blocks or signed thinking
changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .harness import MockApi, run_cli

pytestmark = pytest.mark.slow  # two runs of the program

SEARCH_ID = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE"
PAUSED = [
    {"type": "compaction", "content": "Earlier: the user asked about the weather.", "encrypted_content": "EqQBCkYI"},
    {"type": "thinking", "thinking": "The user wants today's forecast; search first.", "signature": "ErUBCkYIBxgCKkDz"},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
    {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search", "input": {"query": "Lisbon weather today"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": SEARCH_ID,
        "content": [
            {
                "type": "web_search_result",
                "title": "Lisbon, Portugal — Forecast",
                "url": "https://weather.example/lisbon",
                "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5",
                "page_age": None,
            }
        ],
    },
    {
        "type": "text",
        "text": "Lisbon is sunny, 24 °C.",
        "citations": [
            {
                "type": "web_search_result_location",
                "cited_text": "Sunny, high of 24 °C",
                "url": "https://weather.example/lisbon",
                "title": "Lisbon, Portugal — Forecast",
                "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
            }
        ],
    },
]
CONTINUED = [
    {"type": "thinking", "thinking": "Note it down.", "signature": "EqQBCkYIARgCIkB1"},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "Read", "input": {"file_path": "notes.txt"}},
]


def _reply(blocks: list[dict[str, Any]], stop_reason: str) -> str:
    content = ", ".join(json.dumps({"raw": b}, ensure_ascii=False) for b in blocks)
    return f"    - reply: {{stop_reason: {stop_reason}, content: [{content}]}}\n"


SCENARIO = (
    "schema_version: 1\nscenario: replayed-blocks\nmodel: mock-primary\nmodels:\n  mock-primary:\n"
    + _reply(PAUSED, "pause_turn")
    + _reply(CONTINUED, "tool_use")
    + '    - reply: {content: [{text: "Noted."}]}\n'
    + '    - reply: {content: [{text: "Still sunny."}]}\n'
)


def _bytes(block: Any) -> str:
    return json.dumps(block, separators=(",", ":"), ensure_ascii=False)


def _assistant_blocks(request: Any) -> list[str]:
    return [_bytes(b) for m in request.messages if m["role"] == "assistant" for b in m["content"]]


def _holds_in_order(sent: list[str], reply: list[dict[str, Any]]) -> bool:
    expected = [_bytes(b) for b in reply]
    starts = [i for i, block in enumerate(sent) if block == expected[0]]
    return any(sent[i : i + len(expected)] == expected for i in starts)


def test_every_block_goes_back_byte_identical_in_order_after_a_pause_and_after_resume(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("sunny\n")
    with MockApi(SCENARIO) as api:
        first = run_cli(["-p", "weather?", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="json")
        assert first.returncode == 0, first.stderr
        assert first.result["result"] == "Noted."
        session_id = first.result["session_id"]
        resumed = run_cli(
            ["--resume", session_id, "-p", "and now?", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="json"
        )
        assert resumed.returncode == 0, resumed.stderr
        requests = api.requests
    assert [r.response_status for r in requests] == [200, 200, 200, 200]
    after_pause, after_tool, after_resume = requests[1:]
    for request in (after_pause, after_tool, after_resume):
        assert _holds_in_order(_assistant_blocks(request), PAUSED), _assistant_blocks(request)
    for request in (after_tool, after_resume):
        assert _holds_in_order(_assistant_blocks(request), CONTINUED)
    assert after_pause.messages[-1] == {"role": "assistant", "content": PAUSED}  # the turn continues from it
