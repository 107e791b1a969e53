"""Request layer: calling the model, classifying the outcome, backoff, model and stream fallback.

Owns the effect that sends one attempt (``call_model``) and maps its typed result to
one of the events ``calling_model`` declares, the backoff effect, and the pure edge
handlers of the request-layer transitions. Which edge is taken — retry, fallback,
stream fallback, surfacing — is decided by ``machines/query_loop.yaml``, never here.
"""

from __future__ import annotations

import asyncio

import attrs

from fsm.agent.loop_state import (
    ApiRetry,
    AssistantMessage,
    LoopData,
    LoopServices,
    ModelCall,
    RequestFailed,
    TextDelta,
    updated,
    visible_text,
)
from fsm.agent.model_client import ModelFailure, ModelReply
from fsm.runtime import EffectContext, Event, RunState

__all__ = [
    "api_error_text",
    "call_model",
    "classify_failure",
    "classify_reply",
    "fallback_available",
    "note_failure",
    "surface_failure",
    "switch_to_fallback_model",
    "wait_before_retry",
]

_FAILURE_EVENTS = {
    "retryable": "retryable_error",
    "overloaded": "overloaded",
    "model_unavailable": "model_unavailable",
    "fatal": "request_rejected",
    "prompt_too_long": "prompt_too_long",
    "media_too_large": "media_too_large",
    "malformed_response": "malformed_response",
}


def classify_failure(failure: ModelFailure) -> str:
    """The event for a failed attempt; a broken stream keeps complete tool_use blocks apart."""
    if failure.kind == "stream_broken":
        if any(b.get("type") == "tool_use" for b in failure.partial_content):
            return "stream_cut_after_tool_use"
        return "stream_broken"
    return _FAILURE_EVENTS[failure.kind]


def classify_reply(reply: ModelReply) -> str:
    """The event for a complete reply, from its stop_reason and its blocks."""
    has_tools = any(b.get("type") == "tool_use" for b in reply.content)
    stop = reply.stop_reason
    if stop == "tool_use":
        return "tool_use" if has_tools else "malformed_tool_use"
    if stop == "max_tokens":
        return "truncated"
    if stop == "refusal":
        return "refused"
    if stop == "pause_turn":
        return "paused"
    if stop == "model_context_window_exceeded":
        return "prompt_too_long"  # recovered exactly like a 400 prompt-too-long
    if has_tools:
        return "tool_use"
    if not visible_text(reply.content).strip() and any(b.get("type") in ("thinking", "redacted_thinking") for b in reply.content):
        return "thinking_only"
    return "answered"


async def call_model(ctx: EffectContext) -> Event:
    """Send the transcript to the current model once; streaming unless a stream fallback is in force."""
    run = ctx.run
    data: LoopData = run.data
    services: LoopServices = ctx.services
    config = services.config
    call = ModelCall(
        model=data.model,
        messages=data.messages,
        system=config.system_prompt,
        tools=services.tool_definitions,
        max_tokens=data.max_tokens,
        stream=run.count("stream_fallbacks") == 0,
        attempt=run.count("api_retries") + 1,
        idle_timeout_s=config.idle_timeout_s,
    )
    publish = ctx.publish
    outcome = await services.backend.send(call, lambda text: publish(TextDelta(text)))
    services.record(outcome.log)
    if isinstance(outcome, ModelFailure):
        publish(RequestFailed(failure=outcome))
        return Event(name=classify_failure(outcome), data=outcome)
    publish(AssistantMessage(message={"role": "assistant", "content": list(outcome.content)}, model=outcome.model, log=outcome.log))
    usage = outcome.usage
    real = int(usage.get("input_tokens") or 0) + int(usage.get("cache_read_input_tokens") or 0) + int(usage.get("cache_creation_input_tokens") or 0)
    if real:  # the real count corrects the running local estimate (handlers.context.measure_context)
        services.token_correction = real - (services.overhead_tokens + data.messages.tokens)
    budget = config.max_budget_usd
    if budget is not None and services.usage.known_cost_usd >= budget:
        return Event(name="over_budget", data=outcome)
    return Event(name=classify_reply(outcome), data=outcome)


async def wait_before_retry(ctx: EffectContext) -> str:
    """Sleep before the retry: retry-after(-ms) when the server sent one, else backoff with jitter.

    When the retry budget is already spent the machine will surface the failure instead
    of retrying, so the sleep would only delay that; it is skipped.
    """
    run = ctx.run
    data: LoopData = run.data
    services: LoopServices = ctx.services
    config = services.config
    retries, cap = run.count("api_retries"), run.cap("api_retries")
    if cap is not None and retries >= cap:
        return "elapsed"
    failure = data.failure
    if failure is not None and failure.retry_after_s is not None:
        delay = max(0.0, failure.retry_after_s)
    else:
        delay = min(config.retry_base_delay_s * (2**retries), config.retry_max_delay_s)
        delay *= 1.0 - 0.25 * services.rng.random()  # jitter, so clients don't retry in lockstep
    ctx.publish(
        ApiRetry(
            attempt=retries + 1,
            max_retries=cap,
            retry_delay_ms=round(delay * 1000),
            error_status=failure.status if failure else None,
            error=failure.message if failure else "",
        )
    )
    await asyncio.sleep(delay)
    return "elapsed"


# ---- guards ---------------------------------------------------------------------------------


def fallback_available(run: RunState, event: Event) -> bool:
    """Another model remains in the --fallback-model chain."""
    data: LoopData = run.data
    return bool(data.fallback_models)


# ---- edge handlers ----------------------------------------------------------------------------


def note_failure(run: RunState, event: Event) -> RunState:
    """Remember the failed attempt (its retry-after, status) for the backoff and for surfacing."""
    return updated(run, failure=event.data)


def switch_to_fallback_model(run: RunState, event: Event) -> RunState:
    """Rerun the same logical turn on the next model; what the failed attempt produced is tombstoned."""
    data: LoopData = run.data
    failure: ModelFailure = event.data
    nxt, rest = data.fallback_models[0], data.fallback_models[1:]
    note = f"model {data.model} {failure.kind.replace('_', ' ')} ({failure.status}); switched to {nxt}"
    if failure.partial_content:
        note += f"; tombstoned {len(failure.partial_content)} provisional block(s)"
    return run.with_data(attrs.evolve(data, model=nxt, fallback_models=rest, failure=failure, notices=(*data.notices, note)))


def surface_failure(run: RunState, event: Event) -> RunState:
    """The recovery budget is spent (or there is none): the withheld error becomes the result."""
    data: LoopData = run.data
    failure: ModelFailure | None = event.data if isinstance(event.data, ModelFailure) else data.failure
    if failure is None:
        return updated(run, error="API Error: the request failed")
    message = api_error_text(failure)
    if run.state == "backing_off":
        message += f" (gave up after {run.count('api_retries')} retries)"
    return updated(run, failure=failure, error=message, api_error_status=failure.status)


def api_error_text(failure: ModelFailure) -> str:
    """How a surfaced API failure reads in the result: ``API Error: 400 prompt is too long: …``."""
    status = f"{failure.status} " if failure.status else ""
    return f"API Error: {status}{failure.message}".rstrip()
