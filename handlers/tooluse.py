"""Tool layer: recording tool requests, running the tools, returning results, closing the ledger.

Owns the ``run_tools`` effect (the complete tool_use blocks of the last assistant
message, through ``fsm.agent.tools.run_tool_calls``) and the edge handlers that keep
the ledger invariant: every tool_use sent to the model is followed by its tool_result,
including after an abort (synthetic error results for dangling calls).
"""

from __future__ import annotations

from typing import Any

import attrs

from fsm.agent.hooks import HookOutcome
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
    """Run the permitted calls; merge their results with the gate's refusals in the model's order.

    Each result then passes the PostToolUse hooks: a block adds the hook's reason for the
    model, an ``updatedOutput`` replaces the output (an invalid one keeps the original and
    attaches the hook error), ``continue: false`` ends the run once every result is in.
    """
    from .hooks import (
        hook,  # the hook layer builds on this module, not the other way round
    )

    data: LoopData = ctx.run.data
    services: LoopServices = ctx.services
    publish = ctx.publish
    calls = {c.id: c for c in data.pending}

    def on_result(call: ToolCall, result: dict[str, object]) -> None:
        publish(ToolResultPublished(call=call, result=result))

    ran = await run_tool_calls(data.pending, services.config.tools, services.config.tool_context, on_result=on_result)  # type: ignore[arg-type]
    by_id: dict[str, dict[str, Any]] = {str(r["tool_use_id"]): dict(r) for r in (*ran, *data.denied)}
    stop: HookOutcome | None = None
    if services.config.hooks.matchers:
        for tool_use_id, result in by_id.items():
            call = calls.get(tool_use_id)
            if call is None:
                continue  # refused by the gate: it never ran, PostToolUse does not apply
            post = await hook(ctx, "PostToolUse", {"tool_name": call.name, "tool_input": call.input, "tool_use_id": call.id, "tool_response": result.get("content")})
            if post is None:
                continue
            by_id[tool_use_id] = _apply_post_hook(result, post)
            if not post.continue_:
                stop = post
    order = data.order or tuple(calls)
    results = tuple(by_id[i] for i in order if i in by_id)
    if stop is not None:
        return Event(name="hook_stopped", data=(results, stop))
    return Event(name="tools_done", data=results)


def _apply_post_hook(result: dict[str, Any], post: HookOutcome) -> dict[str, Any]:
    content = result.get("content")
    if post.updated_output is not None:
        if isinstance(post.updated_output, str):
            content = post.updated_output
        else:
            content = f"{content}\n[PostToolUse hook error: updatedOutput must be a string, got {type(post.updated_output).__name__}; the original output is kept]"
    notes = [*post.block_reasons] if (post.blocked or post.decision == "block") else []
    notes += list(post.additional_context)
    if notes:
        content = f"{content}\n[PostToolUse hook] " + "\n".join(notes)
    return {**result, "content": content}


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
    return updated(run, messages=data.messages.append({"role": "user", "content": results}), pending=(), denied=(), order=(), partial_text="", turn=data.turn + 1)


def record_tool_results_at_turn_limit(run: RunState, event: Event) -> RunState:
    """The turn limit is reached: keep this turn's results (the ledger stays closed) and say why the run ends."""
    run = record_tool_results(run, event)
    limit = run.params.get("max_turns")
    return updated(run, error=f"Reached the maximum number of turns ({limit})")


def close_dangling_tool_uses(run: RunState, event: Event) -> RunState:
    """User abort: every tool_use without a result gets a synthetic error result (ledger stays closed).

    Calls the permission gate already refused keep their refusal; the others are marked
    interrupted. Results follow the model's order.
    """
    data: LoopData = run.data
    messages = data.messages
    if data.pending or data.denied:
        by_id = {str(r["tool_use_id"]): dict(r) for r in data.denied}
        by_id.update((str(r["tool_use_id"]), dict(r)) for r in synthetic_error_results(data.pending, INTERRUPTED))
        order = data.order or tuple(by_id)
        messages = messages.append({"role": "user", "content": [by_id[i] for i in order if i in by_id]})
    return updated(run, messages=messages, pending=(), denied=(), order=(), result_text=data.partial_text, error="Interrupted by the user")
