"""The embedded server's prompt cache: reads the longest stored prefix in reach of a breakpoint,
writes each long-enough breakpoint's prefix, per model, and refuses a fifth breakpoint like the API."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest

from queryloop.mockapi.prompt_cache import (
    LOOKBACK_SEGMENTS,
    CacheUsage,
    PromptCache,
    breakpoint_problem,
    count_breakpoints,
    min_cacheable_tokens,
    usage_fields,
    without_breakpoints,
)
from queryloop.mockapi.scenario import ScenarioError, parse_scenario
from queryloop.mockapi.server import MockServer, estimate_input_tokens

CC = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "s" * 400, "cache_control": CC}]


def text(t: str, *, mark: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": t, **({"cache_control": CC} if mark else {})}


def conversation(turns: int, *, mark_last: bool = True) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": [text(f"question {i} " + "q" * 200)]})
        messages.append({"role": "assistant", "content": [text(f"answer {i} " + "a" * 200)]})
    messages.append({"role": "user", "content": [text("now", mark=mark_last)]})
    return messages


def test_a_new_prefix_is_written_and_the_next_turn_reads_it() -> None:
    cache = PromptCache(min_tokens=0)
    first = cache.account("m", SYSTEM, conversation(1), None)
    assert first.read == 0 and first.write > 0 and first.breakpoints == 2
    second = cache.account("m", SYSTEM, conversation(2), None)
    assert second.read > 0 and second.write > 0
    assert second.read + second.write > first.write, "the history grew; only the new part is written"


def test_the_same_request_again_reads_everything_and_writes_nothing() -> None:
    cache = PromptCache(min_tokens=0)
    first = cache.account("m", SYSTEM, conversation(2), None)
    again = cache.account("m", SYSTEM, conversation(2), None)
    assert again == CacheUsage(read=first.write, write=0, breakpoints=2)


def test_a_moved_marker_does_not_change_the_prefix() -> None:
    cache = PromptCache(min_tokens=0)
    marked = conversation(2)
    cache.account("m", SYSTEM, marked, None)
    moved = conversation(2, mark_last=False)
    moved[-2] = {**moved[-2], "content": [text(moved[-2]["content"][0]["text"], mark=True)]}
    assert cache.account("m", SYSTEM, moved, None).read > 0


def test_string_content_and_one_text_block_are_the_same_prefix() -> None:
    cache = PromptCache(min_tokens=0)
    cache.account("m", None, [{"role": "user", "content": [text("hello there", mark=True)]}], None)
    later = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": [text("hi", mark=True)]}]
    assert cache.account("m", None, later, None).read > 0


def test_caches_are_per_model() -> None:
    cache = PromptCache(min_tokens=0)
    cache.account("a", SYSTEM, conversation(1), None)
    assert cache.account("b", SYSTEM, conversation(1), None).read == 0


def test_a_prefix_shorter_than_the_minimum_is_not_written() -> None:
    cache = PromptCache(min_tokens=10_000)
    assert cache.account("m", SYSTEM, conversation(1), None).write == 0
    assert cache.account("m", SYSTEM, conversation(1), None).read == 0


def test_a_hit_is_looked_for_only_within_twenty_segments_before_a_breakpoint() -> None:
    def later(blocks_between: int) -> list[dict[str, Any]]:
        """The cached opening, ``blocks_between`` assistant blocks, then a marked last block."""
        return [
            {"role": "user", "content": [text("start")]},
            {"role": "assistant", "content": [text(str(i)) for i in range(blocks_between)]},
            {"role": "user", "content": [text("end", mark=True)]},
        ]

    cache = PromptCache(min_tokens=0)
    cache.account("m", None, [{"role": "user", "content": [text("start", mark=True)]}], None)
    assert cache.account("m", None, later(LOOKBACK_SEGMENTS - 2), None).read > 0
    assert cache.account("m", None, later(LOOKBACK_SEGMENTS + 5), None).read == 0


def test_a_request_without_breakpoints_reads_and_writes_nothing() -> None:
    cache = PromptCache(min_tokens=0)
    cache.account("m", SYSTEM, conversation(1), None)
    assert cache.account("m", "plain", conversation(1, mark_last=False), None) == CacheUsage()


def test_more_than_four_breakpoints_is_the_api_s_400_message() -> None:
    tools = [{"name": f"t{i}", "input_schema": {}, "cache_control": CC} for i in range(4)]
    assert count_breakpoints(SYSTEM, conversation(1), tools) == 6
    assert breakpoint_problem(SYSTEM, conversation(1), tools) == (
        "A maximum of 4 blocks with cache_control may be provided. Found 6."
    )
    assert breakpoint_problem(SYSTEM, conversation(1), tools[:2]) is None


def test_the_usage_splits_the_estimate_and_never_goes_negative() -> None:
    assert usage_fields(100, CacheUsage(read=60, write=30)) == {
        "input_tokens": 10,
        "cache_read_input_tokens": 60,
        "cache_creation_input_tokens": 30,
    }
    assert sum(usage_fields(10, CacheUsage(read=8, write=8)).values()) == 10


def test_markers_do_not_count_in_the_input_estimate() -> None:
    bare = without_breakpoints(SYSTEM, conversation(1), None)
    assert "cache_control" not in str(bare)
    assert estimate_input_tokens(*bare) < estimate_input_tokens(SYSTEM, conversation(1), None)


def test_a_scenario_sets_the_minimum_and_rejects_a_bad_one() -> None:
    head = "schema_version: 1\nscenario: t\nmodel: m\n"
    assert parse_scenario(head + "prompt_cache: {min_tokens: 5}\n").cache_min_tokens == 5
    assert parse_scenario(head).cache_min_tokens is None
    with pytest.raises(ScenarioError):
        parse_scenario(head + "prompt_cache: {min_tokens: -1}\n")


SCENARIO = """schema_version: 1
scenario: t
model: m
prompt_cache: {min_tokens: 0}
models:
  m:
    - reply: {content: [{text: "one"}]}
    - reply: {content: [{text: "two"}]}
"""


def test_replies_over_http_report_the_cache_usage_the_sdk_reads() -> None:
    async def main() -> tuple[list[Any], MockServer]:
        async with MockServer(parse_scenario(SCENARIO)) as server:
            client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
            try:
                usages = []
                for turns in (1, 2):
                    reply = await client.messages.create(
                        model="m", max_tokens=10, system=SYSTEM, messages=conversation(turns)
                    )
                    usages.append(reply.usage)
                with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
                    tools: Any = [{"name": f"t{i}", "input_schema": {}, "cache_control": CC} for i in range(4)]
                    await client.messages.create(
                        model="m", max_tokens=10, system=SYSTEM, messages=conversation(1), tools=tools
                    )
            finally:
                await client.close()
            return usages, server

    (first, second), server = asyncio.run(main())
    assert first.cache_read_input_tokens == 0 and (first.cache_creation_input_tokens or 0) > 0
    assert (second.cache_read_input_tokens or 0) > 0
    recorded = list(server.requests)
    assert [r.cache_read_input_tokens for r in recorded[:2]] == [0, second.cache_read_input_tokens]
    assert recorded[0].cache_breakpoints == ("system[0]", "messages[2][0]")
    assert recorded[0].system == "s" * 400, "one text block sent for its marker is logged as the prompt it holds"
    assert recorded[0].messages == tuple(without_breakpoints(None, conversation(1), None)[1])
    assert recorded[0].input_tokens == (
        first.input_tokens + first.cache_creation_input_tokens + (first.cache_read_input_tokens or 0)
    )
    assert recorded[2].response_status == 400


# ---- the documented rules: minimum per model, lifetime, 1-hour ttl ------------------------------
# Anthropic's prompt-caching documentation: the minimum cacheable length is per model; an entry
# lives 5 minutes, refreshed each time it is used, or an hour with ``ttl: "1h"`` (written at 2x the
# input price, 5-minute writes at 1.25x); a longer ttl must come before a shorter one.

HOUR = {"type": "ephemeral", "ttl": "1h"}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_minimum_cacheable_length_is_the_documented_one_per_model() -> None:
    assert [
        min_cacheable_tokens(m)
        for m in (
            "claude-sonnet-4-5-20250929",
            "claude-sonnet-4-20250514",
            "claude-opus-4-1-20250805",
            "claude-opus-4-5-20251101",
            "claude-haiku-4-5-20251001",
            "claude-sonnet-4-6",
            "claude-3-5-haiku-20241022",
            "mock-primary",
        )
    ] == [1024, 1024, 1024, 4096, 4096, 2048, 2048, 1024]


def test_a_prefix_between_two_models_minimums_is_written_for_one_only() -> None:
    cache = PromptCache()
    system = [text("s" * 8000, mark=True)]  # about 2,000 server tokens
    messages = [{"role": "user", "content": "hi"}]
    assert cache.account("claude-sonnet-4-5", system, messages, None).write > 0
    assert cache.account("claude-opus-4-5", system, messages, None).write == 0


def test_a_five_minute_entry_is_refreshed_by_each_hit_and_expires_five_minutes_after_the_last() -> None:
    clock = Clock()
    cache = PromptCache(min_tokens=0, clock=clock)
    written = cache.account("m", SYSTEM, conversation(1), None).write
    for _ in range(3):  # 4 min 50 s apart, three times: 14.5 minutes after the write, still read
        clock.now += 290
        assert cache.account("m", SYSTEM, conversation(1), None) == CacheUsage(read=written, write=0, breakpoints=2)
    clock.now += 301
    assert cache.account("m", SYSTEM, conversation(1), None) == CacheUsage(read=0, write=written, breakpoints=2)


def test_an_hour_entry_outlives_a_pause_that_expires_a_five_minute_one() -> None:
    clock = Clock()
    cache = PromptCache(min_tokens=0, clock=clock)
    system = [text("s" * 400, mark=True) | {"cache_control": HOUR}]
    first = cache.account("m", system, conversation(1), None)
    assert 0 < first.write_1h < first.write, "the system prompt is written for an hour, the history for 5 minutes"
    clock.now += 50 * 60
    after = cache.account("m", system, conversation(1), None)
    assert after.read == first.write_1h and after.write == first.write - first.write_1h and after.write_1h == 0
    clock.now += 61 * 60
    assert cache.account("m", system, conversation(1), None).read == 0


def test_an_hour_write_is_reported_apart_in_the_usage_as_the_api_does() -> None:
    assert usage_fields(100, CacheUsage(read=10, write=60, write_1h=40))["cache_creation"] == {
        "ephemeral_5m_input_tokens": 20,
        "ephemeral_1h_input_tokens": 40,
    }
    assert "cache_creation" not in usage_fields(100, CacheUsage(read=10, write=60))


def test_a_longer_ttl_after_a_shorter_one_and_an_unknown_ttl_are_refused() -> None:
    hour_tail = conversation(1)
    hour_tail[-1] = {"role": "user", "content": [text("now") | {"cache_control": HOUR}]}
    assert breakpoint_problem(SYSTEM, hour_tail, None) is not None, "1h on the history after a 5m system"
    hour_system = [text("s" * 400) | {"cache_control": HOUR}]
    assert breakpoint_problem(hour_system, conversation(1), None) is None, "1h system, 5m history"
    odd = [text("s") | {"cache_control": {"type": "ephemeral", "ttl": "2h"}}]
    assert breakpoint_problem(odd, conversation(1), None) is not None


PAUSES = """schema_version: 1
scenario: t
model: m
prompt_cache: {min_tokens: 0}
default:
  - reply: {content: [{text: "one"}]}
  - reply: {content: [{text: "two"}]}
    pause_s: 240
  - reply: {content: [{text: "three"}]}
    pause_s: 240
  - reply: {content: [{text: "four"}]}
    pause_s: 301
"""


def test_a_scenario_s_pauses_move_the_cache_clock_without_waiting() -> None:
    async def main() -> MockServer:
        async with MockServer(parse_scenario(PAUSES)) as server:
            client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
            try:
                for _ in range(4):
                    await client.messages.create(model="m", max_tokens=10, system=SYSTEM, messages=conversation(1))
            finally:
                await client.close()
            return server

    server = asyncio.run(main())
    reads = [r.cache_read_input_tokens for r in server.requests]
    writes = [r.cache_creation_input_tokens for r in server.requests]
    assert reads[0] == 0 and reads[1] == reads[2] == writes[0] > 0, "4 min apart: each hit refreshes the entry"
    assert reads[3] == 0 and writes[3] == writes[0], "5 min 1 s after the last hit: written again"
    assert server.model_time_skipped == 781
    assert [r.output_tokens for r in server.requests] == [1, 1, 2, 1]
