"""End-to-end: prompt caching over loopback, the real SDK against the embedded server — breakpoints
placed as Claude Code places them, cache reads from the second request on, their cost in the result,
the cache re-established after a compaction, and ``DISABLE_PROMPT_CACHING=1`` sending none."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.request.services.pricing import model_info
from queryloop.mockapi.server import RecordedRequest

from .harness import MockApi, assert_ledger_closed, run_cli
from .test_context_layer import SMALL, SUMMARY_RULE, main_requests, summaries, turns
from .test_context_layer import scenario as context_scenario

pytestmark = pytest.mark.slow  # ~80 s in all at load 4 (~25 s quiet before 3 tests were added): --fast skips it

TOOL_TURNS = """schema_version: 1
scenario: caching
model: mock-primary
models:
  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo one"}}}]}
    - reply: {content: [{text: "two"}, {tool_use: {name: Bash, input: {command: "echo two"}}}]}
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo three"}}}]}
    - reply: {content: [{text: "done"}]}
"""

CACHING_ON = {"DISABLE_PROMPT_CACHING": ""}  # whatever the test's own environment says


def marked_blocks(request: RecordedRequest) -> list[str]:
    """Where the request's ``cache_control`` markers were: ``system[i]``, ``tools[i]``, ``messages[i][j]``."""
    return list(request.cache_breakpoints)


def expected_cost(model: str, usage: dict[str, Any]) -> float:
    info = model_info(model)
    assert info is not None
    return (
        usage["input_tokens"] * info.input
        + usage["output_tokens"] * info.output
        + usage["cache_creation_input_tokens"] * info.input * 1.25
        + usage["cache_read_input_tokens"] * info.input * 0.1
        + usage.get("hour", 0) * info.input * 2
    ) / 1_000_000


def test_each_request_marks_the_system_prompt_and_the_last_message_s_last_block(tmp_path: Path) -> None:
    with MockApi(TOOL_TURNS) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path, **CACHING_ON)
    assert run.returncode == 0, run.stderr
    first, *later = api.requests
    assert first.messages == ({"role": "user", "content": "go"},), "a prompt is sent as stored"
    assert marked_blocks(first) == ["system[0]"], "a plain-string prompt has no block to mark"
    assert len(later) == 3
    for request in later:
        last = len(request.messages) - 1
        assert marked_blocks(request) == [
            "system[0]",
            f"messages[{last}][{len(request.messages[last]['content']) - 1}]",
        ]
    assert all(r.cache_creation_1h_input_tokens == 0 for r in api.requests), "no pause: the 5-minute cache only"
    assert_ledger_closed(api.requests)


def test_a_multi_turn_run_reads_the_cache_from_the_second_request_and_pays_less(tmp_path: Path) -> None:
    with MockApi(TOOL_TURNS) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path, **CACHING_ON)
        cached = api.requests
    with MockApi(TOOL_TURNS) as api:
        plain = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path, DISABLE_PROMPT_CACHING="1")
    assert run.returncode == plain.returncode == 0

    reads = [r.cache_read_input_tokens for r in cached]
    assert reads[0] == 0 and cached[0].cache_creation_input_tokens > 0
    assert all(later > earlier > 0 for earlier, later in itertools.pairwise(reads[1:])), reads

    result = run.result
    usage = result["usage"]
    assert usage["cache_read_input_tokens"] == sum(reads)
    assert usage["cache_creation_input_tokens"] == sum(r.cache_creation_input_tokens for r in cached)
    entry = result["modelUsage"]["mock-primary"]
    assert entry["cacheReadInputTokens"] == sum(reads)
    assert entry["cacheCreationInputTokens"] == usage["cache_creation_input_tokens"]
    assert entry["costUSD"] == pytest.approx(expected_cost("mock-primary", usage))
    assert result["total_cost_usd"] == pytest.approx(entry["costUSD"])
    assert result["total_cost_usd"] < plain.result["total_cost_usd"], "reading the prefix costs a tenth"


def test_stream_json_assistant_lines_carry_each_reply_s_cache_usage(tmp_path: Path) -> None:
    with MockApi(TOOL_TURNS) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--verbose"], api=api, cwd=tmp_path, **CACHING_ON)
        requests = api.requests
    assistant = run.of("assistant")
    reads = {line["message"]["id"]: line["message"]["usage"]["cache_read_input_tokens"] for line in assistant}
    assert sorted(reads.values()) == sorted(r.cache_read_input_tokens for r in requests)
    logged = [line["usage"] for line in run.of("system", "api_request")]
    assert [u["cache_creation_input_tokens"] for u in logged] == [r.cache_creation_input_tokens for r in requests]


def test_after_a_compaction_the_cache_is_re_established(tmp_path: Path) -> None:
    text = context_scenario(SUMMARY_RULE, turns(4800, 4800, 1000, 1000))
    with MockApi(text) as api:
        run = run_cli(
            [*SMALL, "-p", "print things", "--auto-compact-threshold", "57"], api=api, cwd=tmp_path, **CACHING_ON
        )
        requests = api.requests
    assert run.returncode == 0, run.stderr
    assert "auto_compact_succeeded" in run.reasons
    summary = summaries(requests)[0]
    after = [r for r in main_requests(requests) if requests.index(r) > requests.index(summary)]
    assert len(after) >= 2
    first, second = after[0], after[1]
    last = len(first.messages) - 1
    assert marked_blocks(first)[-1].startswith(f"messages[{last}]"), "the compacted history gets its own breakpoint"
    assert first.cache_creation_input_tokens > 0, "the compacted history is written anew"
    assert 0 < first.cache_read_input_tokens, "the tools and system prompt are still read from the cache"
    assert second.cache_read_input_tokens >= first.cache_read_input_tokens + first.cache_creation_input_tokens - 16
    assert second.cache_read_input_tokens > first.cache_read_input_tokens
    assert_ledger_closed(main_requests(requests))


def test_disable_prompt_caching_sends_no_breakpoint(tmp_path: Path) -> None:
    with MockApi(TOOL_TURNS) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path, DISABLE_PROMPT_CACHING="1")
        requests = api.requests
    assert run.returncode == 0, run.stderr
    assert all(marked_blocks(r) == [] for r in requests)
    assert all(r.cache_read_input_tokens == r.cache_creation_input_tokens == 0 for r in requests)
    usage = run.result["usage"]
    assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0


def test_a_compaction_s_summary_request_reads_the_history_the_agent_s_requests_cached(tmp_path: Path) -> None:
    text = context_scenario(SUMMARY_RULE, turns(4800, 4800, 1000, 1000))
    with MockApi(text) as api:
        run = run_cli(
            [*SMALL, "-p", "print things", "--auto-compact-threshold", "57"], api=api, cwd=tmp_path, **CACHING_ON
        )
        requests = api.requests
    assert run.returncode == 0, run.stderr
    summary = summaries(requests)[0]
    before = requests[requests.index(summary) - 1]
    assert summary.system == before.system and summary.tool_definitions == before.tool_definitions
    assert summary.messages[:-1] == before.messages[: len(summary.messages) - 1], "the history as the agent sent it"
    assert summary.cache_read_input_tokens >= 0.9 * summary.input_tokens, "read from the cache, not written again"


RESUMED = """schema_version: 1
scenario: caching
model: mock-primary
models:
  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo one"}}}]}
    - reply: {content: [{text: "first done"}]}
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo two"}}}]}
    - reply: {content: [{text: "second done"}]}
"""


def test_a_resumed_session_reads_the_prefix_the_run_before_it_cached(tmp_path: Path) -> None:
    session = "5d1b3c1e-0000-4000-8000-00000000c0de"
    with MockApi(RESUMED) as api:
        first = run_cli(["-p", "one", "--model", "mock-primary", "--session-id", session], api=api, cwd=tmp_path)
        second = run_cli(["-p", "two", "--model", "mock-primary", "--resume", session], api=api, cwd=tmp_path)
        requests = api.requests
    assert first.returncode == second.returncode == 0, second.stderr
    ended, resumed = requests[1], requests[2]
    assert resumed.messages[: len(ended.messages)] == ended.messages, "the history is sent again byte for byte"
    assert resumed.cache_read_input_tokens == ended.cache_read_input_tokens + ended.cache_creation_input_tokens


PAUSED = """schema_version: 1
scenario: caching
model: mock-primary
prompt_cache: {min_tokens: 0}
models:
  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo one"}}}]}
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo two"}}}]}
      pause_s: 400
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo three"}}}]}
    - reply: {content: [{text: "done"}]}
      pause_s: 400
"""


def test_once_the_cache_expires_between_two_requests_the_breakpoints_ask_for_an_hour(tmp_path: Path) -> None:
    with MockApi(PAUSED) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path, **CACHING_ON)
        requests = api.requests
    assert run.returncode == 0, run.stderr
    first, missed, hour, after_pause = requests
    assert missed.cache_read_input_tokens < missed.cache_creation_input_tokens, "6 min 40 s later: written again"
    assert first.cache_creation_1h_input_tokens == missed.cache_creation_1h_input_tokens == 0
    assert hour.cache_creation_1h_input_tokens == hour.cache_creation_input_tokens > 0, "written for an hour"
    assert after_pause.cache_read_input_tokens >= hour.cache_read_input_tokens + hour.cache_creation_input_tokens
    cost = run.result["total_cost_usd"]
    assert cost == pytest.approx(sum(expected_cost("mock-primary", r) for r in usages(requests)), rel=1e-6)


def usages(requests: list[RecordedRequest]) -> list[dict[str, Any]]:
    """Each request's usage as the reply reported it, a 1-hour write priced at twice the input price."""
    return [
        {
            "input_tokens": r.input_tokens - r.cache_read_input_tokens - r.cache_creation_input_tokens,
            "output_tokens": r.output_tokens,
            "cache_creation_input_tokens": r.cache_creation_input_tokens - r.cache_creation_1h_input_tokens,
            "cache_read_input_tokens": r.cache_read_input_tokens,
            "hour": r.cache_creation_1h_input_tokens,
        }
        for r in requests
    ]
