"""Output layer: what a complete reply means, and what it does to the transcript.

Owns the ``read_reply`` effect and the edges of the answer and its continuations. Hidden messages go with
``meta=True``.
"""

from __future__ import annotations

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..messages import (
    Message,
    MessageView,
    assistant_message,
    final_text,
    synthetic_error_results,
    tool_calls_of,
    user_message,
    visible_text,
)
from ..outcome import evolved, with_outcome
from ..request import ModelReply, with_request
from .data import Out, OutputServices, with_output

__all__ = [
    "CONTINUE_PROMPT",
    "MALFORMED_TOOL_USE_PROMPT",
    "NUDGE_PROMPT",
    "STRUCTURED_OUTPUT_PROMPT",
    "classify_reply",
    "continue_after_truncation",
    "continue_paused_turn",
    "escalate_max_tokens",
    "escalation_configured",
    "nudge_for_structured_output",
    "nudge_for_visible_answer",
    "read_reply",
    "receive_reply",
    "record_answer",
    "record_over_budget",
    "report_malformed_tool_use",
    "surface_malformed_tool_use",
    "surface_truncation",
]

# Our own wording of the seed's rule: resume mid-thought, no apology, no recap.
CONTINUE_PROMPT = (
    "Your previous response was cut off by the output token limit. Continue exactly where it "
    "stopped, mid-sentence if need be. Do not apologise, do not repeat or summarise what you "
    "already wrote; if the remaining work is large, split it into smaller steps."
)
NUDGE_PROMPT = "Your last response contained only reasoning. Please give your answer to the user as visible text."
# Claude Code 2.1.235's marker leads (a program reading the transcript may look for it); the words are ours.
STRUCTURED_OUTPUT_PROMPT = (
    "[structured-output-enforce] This request needs its answer as a StructuredOutput tool call, and none was made. "
    "Call StructuredOutput now with input that follows its schema."
)
MALFORMED_TOOL_USE_PROMPT = (
    "Your last response stopped to use a tool, but the tool call was incomplete and could not be read, "
    "so nothing ran. Send the tool call again, complete."
)


def _assistant(reply: ModelReply) -> Message:
    return assistant_message(list(reply.content))


def _with_reply(messages: MessageView, reply: ModelReply) -> MessageView:
    return messages.append(_assistant(reply)) if reply.content else messages


def classify_reply(reply: ModelReply) -> str:
    """The event for a complete reply, from its stop_reason and its blocks."""
    has_tools = any(b.get("type") == "tool_use" for b in reply.content)
    stop = reply.stop_reason
    if stop == "tool_use":
        return "asked_for_tools" if has_tools else "tool_use_malformed"
    if stop == "max_tokens":
        return "truncated"
    if stop == "refusal":
        return "refused"
    if stop == "pause_turn":
        return "paused"
    if stop == "model_context_window_exceeded":
        return "context_overflowed"  # recovered exactly like a 400 prompt-too-long
    if has_tools:
        return "asked_for_tools"
    thinking = any(b.get("type") in ("thinking", "redacted_thinking") for b in reply.content)
    if thinking and not visible_text(reply.content).strip():
        return "thought_only"
    return "answered"


def receive_reply(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """Keep the complete reply for ``reading_reply`` (its usage was counted on the way out of the call)."""
    return with_output(run.data, reply=event.data)


async def read_reply(ctx: EffectContext[Out, OutputServices]) -> Event[ModelReply]:
    """What the reply means; a reply that brought the run's cost to its budget ends it, whatever it says."""
    reply = ctx.run.data.output.reply
    assert reply is not None  # reply_received kept it
    budget = ctx.services.max_budget_usd
    if budget is not None and ctx.run.data.request.usage.known_cost_usd + ctx.services.cost_elsewhere_usd() >= budget:
        return Event(name="budget_spent", data=reply)
    event = classify_reply(reply)
    if event == "answered" and _structured_output_missing(ctx.run.data):
        event = "answered_unstructured"
    return Event(name=event, data=reply)


def _structured_output_missing(data: Out) -> bool:
    """The answer must be a StructuredOutput call (``--json-schema``), and the model was not yet asked for one.

    Claude Code 2.1.235 asks once per prompt; the machine's counter bounds it per turn too.
    """
    return data.output.structured_output_required and not data.output.structured_output_nudged


def escalation_configured(run: RunState[Out], event: Event[object]) -> bool:
    """An escalated max_tokens cap is configured and above the current one."""
    escalated = run.data.output.escalated_max_tokens
    return escalated is not None and escalated > run.data.request.max_tokens


def nudge_for_structured_output(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """The model answered without its StructuredOutput call: keep the answer, ask for the call (hidden message)."""
    reply = event.data
    asked = user_message(STRUCTURED_OUTPUT_PROMPT)
    data = evolved(run.data, messages=_with_reply(run.data.messages, reply).append(asked, meta=True))
    data = with_output(data, structured_output_nudged=True)
    return with_outcome(data, stop_reason=reply.stop_reason, result_text=final_text(reply.content), partial_text="")


def record_answer(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """The reply is the answer: append it; the result is its text (:func:`final_text`), not the turn's pieces.

    After max_tokens or pause_turn continuations the earlier pieces are in the transcript
    and were streamed as they came; like Claude Code, the result is the last reply's.
    """
    reply = event.data
    data = evolved(run.data, messages=_with_reply(run.data.messages, reply))
    return with_outcome(data, stop_reason=reply.stop_reason, result_text=final_text(reply.content), partial_text="")


def escalate_max_tokens(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """Retry the same request once with the escalated cap; the truncated reply is discarded."""
    escalated = run.data.output.escalated_max_tokens
    assert escalated is not None  # the guard escalation_configured held
    note = f"max_tokens {run.data.request.max_tokens} hit; retrying with {escalated}"
    return with_outcome(with_request(run.data, max_tokens=escalated), stop_reason=event.data.stop_reason, note=note)


def continue_after_truncation(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """Keep the partial answer and ask, in a hidden meta message, to continue exactly there."""
    reply = event.data
    messages = _with_reply(run.data.messages, reply).append({"role": "user", "content": CONTINUE_PROMPT}, meta=True)
    partial = run.data.outcome.partial_text + visible_text(reply.content)
    return with_outcome(evolved(run.data, messages=messages), stop_reason=reply.stop_reason, partial_text=partial)


@uses(counters=("output_recoveries",))
def surface_truncation(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """Every continuation is spent: keep what was written and surface the withheld error."""
    reply = event.data
    text = run.data.outcome.partial_text + visible_text(reply.content)
    error = (
        f"Response truncated: the model hit its output limit of {run.data.request.max_tokens} tokens "
        f"{run.count('output_recoveries') + 1} times in a row this turn"
    )
    data = evolved(run.data, messages=_with_reply(run.data.messages, reply))
    return with_outcome(data, stop_reason=reply.stop_reason, result_text=text, partial_text="", error=error)


def report_malformed_tool_use(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """A tool_use stop without a complete block: keep what did arrive, tell the model, ask again.

    The incomplete block never reached the reply (the client drops it), so nothing runs;
    the reply's other blocks stay in the transcript and a hidden message tells the model
    its call was malformed — as Claude Code does — instead of re-sending the identical
    request, which would likely get the identical reply.
    """
    reply = event.data
    told = user_message(MALFORMED_TOOL_USE_PROMPT)
    data = evolved(run.data, messages=_with_reply(run.data.messages, reply).append(told, meta=True))
    partial = run.data.outcome.partial_text + visible_text(reply.content)
    note = "a tool_use reply without a complete tool_use block: its text kept, the model told, asked again"
    return with_outcome(data, stop_reason=reply.stop_reason, partial_text=partial, note=note)


def surface_malformed_tool_use(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """The second malformed tool_use reply this turn: tombstoned too, and the run ends with why."""
    return with_outcome(
        run.data,
        stop_reason=event.data.stop_reason,
        error="The model stopped to use a tool twice without sending a complete tool_use block",
        note="tombstoned a second malformed tool_use reply",
    )


def nudge_for_visible_answer(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """The answer was only thinking: discard it and nudge once for visible text (hidden message)."""
    messages = run.data.messages.append({"role": "user", "content": NUDGE_PROMPT}, meta=True)
    return with_outcome(evolved(run.data, messages=messages), stop_reason=event.data.stop_reason)


def continue_paused_turn(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """pause_turn: send the paused content back so the model can continue its turn."""
    reply = event.data
    partial = run.data.outcome.partial_text + visible_text(reply.content)
    return with_outcome(
        evolved(run.data, messages=_with_reply(run.data.messages, reply)),
        stop_reason=reply.stop_reason,
        partial_text=partial,
    )


def record_over_budget(run: RunState[Out], event: Event[ModelReply]) -> Out:
    """The budget is spent: keep the reply; its tool calls are answered, not run, so the ledger stays closed.

    The answers are meta (hidden): Claude Code 2.1.235 stops here without running the calls,
    shows no tool result and counts no turn for them; they exist only for a later ``--resume``.
    """
    reply = event.data
    messages = _with_reply(run.data.messages, reply)
    calls = tool_calls_of(reply.content)
    if calls:
        results = synthetic_error_results(calls, "Not run: the run reached its --max-budget-usd limit")
        messages = messages.append({"role": "user", "content": list(results)}, meta=True)
    text = run.data.outcome.partial_text + visible_text(reply.content)
    data = evolved(run.data, messages=messages)
    return with_outcome(
        data,
        stop_reason=reply.stop_reason,
        result_text=text,
        partial_text="",
        error="Reached the --max-budget-usd limit",
    )
