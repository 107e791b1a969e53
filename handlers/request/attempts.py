"""Request layer, the attempt: sending the transcript once, saying how the attempt ended, counting it.

Owns the ``call_model`` effect and ``record_attempt``, the exit that adds each attempt's usage. The YAML chooses the
edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from queryloop.fsm import EffectContext, Event, RunState, uses

from .data import (
    AssistantMessage,
    ModelServices,
    R,
    RequestFailed,
    StreamEvent,
    TextDelta,
    cache_lifetime,
    count_attempt,
    real_input_tokens,
)
from .services.attempt import FailureKind, ModelFailure, ModelReply
from .services.backends import ModelCall

__all__ = ["call_model", "classify_failure", "record_attempt"]

# The machine's event for each kind of failure (every FailureKind has one; a test holds them to the YAML).
_FAILURE_EVENTS: Final[Mapping[FailureKind, str]] = {
    "retryable": "failed_transiently",
    "overloaded": "overloaded",
    "model_unavailable": "model_unavailable",
    "unauthorized": "unauthorized",
    "prompt_too_long": "context_overflowed",
    "media_too_large": "media_too_large",
    "fatal": "rejected",
    "stream_broken": "stream_broken",
    "malformed_response": "response_malformed",
}


def classify_failure(failure: ModelFailure) -> str:
    """The event for a failed attempt; a broken stream keeps complete tool_use blocks apart."""
    if failure.kind == "stream_broken" and any(b.get("type") == "tool_use" for b in failure.partial_content):
        return "stream_cut_after_tool_use"
    return _FAILURE_EVENTS[failure.kind]


@uses(counters=("stream_fallbacks", "api_retries"))
async def call_model(ctx: EffectContext[R, ModelServices]) -> Event[ModelReply | ModelFailure]:
    """Send the transcript to the current model once; streaming unless a stream fallback is in force."""
    run = ctx.run
    request = run.data.request
    services = ctx.services
    publish = ctx.publish
    call = ModelCall(
        model=request.model,
        messages=run.data.messages,
        system=services.system_prompt,
        tools=(*services.tool_definitions, *request.tool_catalog)
        if request.tool_catalog
        else services.tool_definitions,
        max_tokens=request.max_tokens,
        stream=run.count("stream_fallbacks") == 0,
        attempt=run.count("api_retries") + 1,
        idle_timeout_s=services.idle_timeout_s,
        instructions=services.instructions,
        cache_ttl=request.cache_ttl,
        on_stream_event=lambda event, ttft: publish(StreamEvent(event, ttft)),  # for --include-partial-messages
    )
    outcome = await services.backend.send(call, lambda text: publish(TextDelta(text)))
    if isinstance(outcome, ModelFailure):
        publish(RequestFailed(failure=outcome))
        return Event(name=classify_failure(outcome), data=outcome)
    message = {"role": "assistant", "content": list(outcome.content)}
    publish(AssistantMessage(message=message, model=outcome.model, log=outcome.log, message_id=outcome.message_id))
    return Event(name="replied", data=outcome)


def record_attempt(run: RunState[R], event: Event[ModelReply | ModelFailure | None]) -> R:
    """Exit of ``calling_model``: the attempt's usage and time count, whatever the machine does next.

    An answer's real input-token count is kept with the local estimate of the messages
    it was sent with, so the context layer can correct its running estimate.
    """
    outcome = event.data
    if not isinstance(outcome, (ModelReply, ModelFailure)):
        return run.data  # the abort event: no attempt finished
    if not isinstance(outcome, ModelReply):
        return count_attempt(run.data, outcome.log)
    real = real_input_tokens(outcome.usage)
    if not real:
        return count_attempt(run.data, outcome.log)
    cache = cache_lifetime(run.data.request, outcome.usage)
    return count_attempt(
        run.data, outcome.log, real_input_tokens=real, sent_message_tokens=run.data.messages.tokens, **cache
    )
