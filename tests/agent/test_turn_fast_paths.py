"""What a tool turn's cheaper paths still decide: the ledger invariant, a tool's deadline, the usage totals."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import attrs
import pytest

from queryloop.handlers.messages import MessageView, ToolCall, ToolResultBlock
from queryloop.handlers.request.services.usage import UsageTotals
from queryloop.handlers.tools.ledger import every_tool_use_answered
from queryloop.handlers.tools.services.base import ToolContext, ToolError, ToolOutput, ToolSpec
from queryloop.handlers.tools.services.dispatch import ToolRegistry, run_tool_calls


@attrs.frozen
class _Data:
    messages: MessageView


def _turn(calls: list[str], results: list[str]) -> _Data:
    uses = [{"type": "tool_use", "id": i, "name": "noop", "input": {}} for i in calls]
    answers = [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in results]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}, {"role": "assistant", "content": uses}]
    return _Data(messages=MessageView.of([*messages, {"role": "user", "content": answers}]))


def test_the_ledger_invariant_takes_the_results_in_any_order() -> None:
    assert every_tool_use_answered(_turn(["a", "b", "c"], ["a", "b", "c"])) is None
    assert every_tool_use_answered(_turn(["a", "b", "c"], ["c", "a", "b"])) is None


def test_the_ledger_invariant_refuses_a_result_given_twice_or_missing() -> None:
    twice = every_tool_use_answered(_turn(["a", "b"], ["a", "a"]))
    assert twice == "tool_use ['a', 'b'] answered by tool_result ['a', 'a']"
    missing = every_tool_use_answered(_turn(["a", "b"], ["b"]))
    assert missing == "tool_use ['a', 'b'] answered by tool_result ['b']"
    assert every_tool_use_answered(_turn(["a"], ["a", "a"])) is not None


def _spec(run: Any) -> ToolSpec:
    schema = {"type": "object"}
    return ToolSpec(
        name="T", description="t", input_schema=schema, concurrency_safe=True, read_only=True, idempotent=True, run=run
    )


def _call(tmp_path: Path, run: Any, timeout_s: float = 5.0) -> ToolResultBlock:
    ctx = ToolContext(cwd=tmp_path, tool_timeout_s=timeout_s)
    calls = [ToolCall(id="toolu_1", name="T", input={})]
    (block,) = asyncio.run(run_tool_calls(calls, ToolRegistry(tools=[_spec(run)]), ctx))
    return block


def test_a_tool_that_finishes_without_waiting_gives_its_output_and_its_errors(tmp_path: Path) -> None:
    async def quick(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content="done")

    async def refuses(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        raise ToolError("no")

    async def times_out_itself(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        raise TimeoutError("its own")

    assert _call(tmp_path, quick)["content"] == "done"
    assert _call(tmp_path, refuses)["content"] == "T failed: no"
    assert _call(tmp_path, times_out_itself)["content"] == "T failed with TimeoutError: its own"


def test_a_tool_that_waits_then_overruns_is_stopped_at_its_deadline(tmp_path: Path) -> None:
    async def waits_then_sleeps(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(0)
        await asyncio.sleep(30)
        return ToolOutput(content="never")

    async def waits_then_answers(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(0.01)
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            return ToolOutput(content="cancelled")
        return ToolOutput(content="after waiting")

    block = _call(tmp_path, waits_then_sleeps, timeout_s=0.2)
    assert block["content"] == "T did not finish within 0.2 s and was stopped"
    assert _call(tmp_path, waits_then_answers)["content"] == "after waiting"


def test_a_tool_returning_another_awaitable_runs_under_its_deadline(tmp_path: Path) -> None:
    def future(tool_input: Any, ctx: ToolContext) -> asyncio.Future[ToolOutput]:
        return asyncio.get_running_loop().create_future()  # never resolved

    block = _call(tmp_path, future, timeout_s=0.2)
    assert block["content"] == "T did not finish within 0.2 s and was stopped"


def test_cancelling_a_waiting_tool_cancels_it_and_lets_it_clean_up(tmp_path: Path) -> None:
    cleaned: list[str] = []

    async def waits(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(0)
        try:
            await asyncio.sleep(30)
        finally:
            cleaned.append("yes")
        return ToolOutput(content="never")

    async def main() -> None:
        ctx = ToolContext(cwd=tmp_path, tool_timeout_s=60)
        calls = [ToolCall(id="toolu_1", name="T", input={})]
        task = asyncio.create_task(run_tool_calls(calls, ToolRegistry(tools=[_spec(waits)]), ctx))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cleaned == ["yes"]


def test_usage_totals_add_each_count_and_the_cache_write_split_when_a_reply_gives_one() -> None:
    split = {"ephemeral_1h_input_tokens": 7, "ephemeral_5m_input_tokens": 3}
    full = {"input_tokens": 1, "output_tokens": 2, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 4}
    totals = UsageTotals().add("claude-sonnet-4-5", {**full, "cache_creation": split})
    totals = totals.add("claude-sonnet-4-5", {"input_tokens": 5, "output_tokens": None, "cache_creation": "odd"})
    usage = totals.by_model["claude-sonnet-4-5"]
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (2, 6, 2)
    assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (10, 4)
    assert (usage.ephemeral_1h_input_tokens, usage.ephemeral_5m_input_tokens) == (7, 3)
    # 6 in at $3, 2 out at $15, 3 written for 5 minutes at $3.75 and 7 for an hour at $6, 4 read at $0.30 (per M)
    assert usage.cost_usd == pytest.approx((6 * 3 + 2 * 15 + 3 * 3.75 + 7 * 6 + 4 * 0.3) / 1e6)


def test_calls_running_together_are_each_stopped_at_their_own_deadline(tmp_path: Path) -> None:
    hung_ended = asyncio.Event()

    async def run(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        if tool_input["t"] > 1:  # the long deadline, watched first: it outlives the short one's stop
            await hung_ended.wait()
            return ToolOutput(content="finished after the other was stopped")
        try:
            await asyncio.sleep(30)
        finally:
            hung_ended.set()
        return ToolOutput(content="never")

    long = attrs.evolve(_spec(run), name="L", own_timeout_s=lambda tool_input, ctx: 60.0)
    calls = [ToolCall(id="toolu_long", name="L", input={"t": 60}), ToolCall(id="toolu_short", name="T", input={"t": 0})]
    ctx = ToolContext(cwd=tmp_path, tool_timeout_s=0.2)  # the short call's deadline; the long one's is its own

    first, second = asyncio.run(run_tool_calls(calls, ToolRegistry(tools=[long, _spec(run)]), ctx))

    assert first["content"] == "finished after the other was stopped"
    assert second["content"] == "T did not finish within 0.2 s and was stopped"


def test_a_context_used_again_under_a_new_event_loop_still_stops_a_call_at_its_deadline(tmp_path: Path) -> None:
    async def hangs(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(30)
        return ToolOutput(content="never")

    async def quick(tool_input: Any, ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content="done")

    ctx = ToolContext(cwd=tmp_path, tool_timeout_s=0.2)
    calls = [ToolCall(id="toolu_1", name="T", input={})]
    for run in (quick, hangs, quick, hangs):  # a timer left set, then one that went off, on loops since closed
        (block,) = asyncio.run(run_tool_calls(calls, ToolRegistry(tools=[_spec(run)]), ctx))
        assert block["content"] == ("done" if run is quick else "T did not finish within 0.2 s and was stopped")
