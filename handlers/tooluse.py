"""Tool layer: recording tool requests, running the tools, returning results, closing the ledger.

Owns the ``run_tools`` effect (the complete tool_use blocks of the last assistant
message, through ``fsm.agent.tools.run_tool_calls``) and the edge handlers that keep
the ledger invariant: every tool_use sent to the model is followed by its tool_result,
including after an abort (synthetic error results for dangling calls).
"""

from __future__ import annotations

import attrs

from fsm.agent.loop_state import (
    LoopData,
    LoopServices,
    ToolResultPublished,
    tool_calls_of,
    updated,
    visible_text,
)
from fsm.agent.model_client import ModelFailure, ModelReply
from fsm.agent.tools import ToolCall, run_tool_calls, synthetic_error_results
from fsm.runtime import EffectContext, Event, RunState

__all__ = ["close_dangling_tool_uses", "record_tool_request", "record_tool_results", "record_tool_results_at_turn_limit", "run_tools"]

INTERRUPTED = "Interrupted by the user before this tool finished; it may have partly run."


async def run_tools(ctx: EffectContext) -> Event:
    """Run the pending calls; results come back in the model's order, failures as is_error results."""
    data: LoopData = ctx.run.data
    services: LoopServices = ctx.services
    publish = ctx.publish

    def on_result(call: ToolCall, result: dict[str, object]) -> None:
        publish(ToolResultPublished(call=call, result=result))

    results = await run_tool_calls(data.pending, services.config.tools, services.config.tool_context, on_result=on_result)  # type: ignore[arg-type]
    return Event(name="tools_done", data=tuple(results))


def record_tool_request(run: RunState, event: Event) -> RunState:
    """Append the assistant message and remember its complete tool_use blocks as pending calls.

    After a stream cut only the blocks that completed are in the message (the cut block,
    if any, is gone), so exactly those tools run — once.
    """
    data: LoopData = run.data
    source = event.data
    if isinstance(source, ModelFailure):
        content = list(source.partial_content)
        note = (*data.notices, f"stream cut after {len(content)} complete block(s); kept them, no re-request")
        reply = data.reply
    else:
        assert isinstance(source, ModelReply)
        content = list(source.content)
        note = data.notices
        reply = source
    message = {"role": "assistant", "content": content}
    return attrs.evolve(
        run,
        data=attrs.evolve(
            data,
            messages=data.messages.append(message),
            pending=tool_calls_of(content),
            reply=reply,
            partial_text=data.partial_text + visible_text(content),
            notices=note,
        ),
    )


def record_tool_results(run: RunState, event: Event) -> RunState:
    """Append the tool_results as the next user message; nothing is pending any more."""
    data: LoopData = run.data
    results = list(event.data)
    return run.with_data(attrs.evolve(data, messages=data.messages.append({"role": "user", "content": results}), pending=(), partial_text=""))


def record_tool_results_at_turn_limit(run: RunState, event: Event) -> RunState:
    """The turn limit is reached: keep this turn's results (the ledger stays closed) and say why the run ends."""
    run = record_tool_results(run, event)
    limit = run.params.get("max_turns")
    return updated(run, error=f"Reached the maximum number of turns ({limit})")


def close_dangling_tool_uses(run: RunState, event: Event) -> RunState:
    """User abort: every tool_use without a result gets a synthetic error result (ledger stays closed)."""
    data: LoopData = run.data
    messages = data.messages
    if data.pending:
        messages = messages.append({"role": "user", "content": list(synthetic_error_results(data.pending, INTERRUPTED))})
    return attrs.evolve(
        run,
        data=attrs.evolve(data, messages=messages, pending=(), result_text=data.partial_text, error="Interrupted by the user"),
    )
