"""Output layer: what a complete reply does to the transcript — answers, truncation, nudges.

Owns the pure edge handlers for ``answered``, ``max_output_tokens_*``,
``malformed_tool_use_*``, ``thinking_only_*``, ``pause_turn_*``, ``refused`` and
``budget_exhausted``, and the guard ``escalation_configured``. Hidden meta messages
(the continuation prompt, the nudge) are appended with ``meta=True``: sent to the
model, never shown to the user.
"""

from __future__ import annotations

from queryloop.fsm import Event, RunState, uses

from ..messages import Message, MessageView, synthetic_error_results, tool_calls_of, visible_text
from ..outcome import evolved, with_outcome
from ..request.client import ModelReply
from ..request.data import with_request
from .data import Out

__all__ = [
    "CONTINUE_PROMPT",
    "NUDGE_PROMPT",
    "continue_after_truncation",
    "continue_paused_turn",
    "drop_malformed_reply",
    "escalate_max_tokens",
    "escalation_configured",
    "nudge_for_visible_answer",
    "record_answer",
    "record_over_budget",
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


def _assistant(reply: ModelReply) -> Message:
    return {"role": "assistant", "content": list(reply.content)}


def _with_reply(messages: MessageView, reply: ModelReply) -> MessageView:
    return messages.append(_assistant(reply)) if reply.content else messages


def escalation_configured(run: RunState[Out], event: Event[object]) -> bool:
    """An escalated max_tokens cap is configured and above the current one."""
    escalated = run.data.output.escalated_max_tokens
    return escalated is not None and escalated > run.data.request.max_tokens


def record_answer(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """The reply is the answer: append it; the result is all visible text of this turn."""
    reply = event.data
    outcome = run.data.outcome
    run = evolved(run, messages=_with_reply(run.data.messages, reply))
    return with_outcome(
        run,
        stop_reason=reply.stop_reason,
        result_text=outcome.partial_text + visible_text(reply.content),
        partial_text="",
    )


def escalate_max_tokens(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """Retry the same request once with the escalated cap; the truncated reply is discarded."""
    escalated = run.data.output.escalated_max_tokens
    assert escalated is not None  # the guard escalation_configured held
    note = f"max_tokens {run.data.request.max_tokens} hit; retrying with {escalated}"
    return with_outcome(with_request(run, max_tokens=escalated), stop_reason=event.data.stop_reason, note=note)


def continue_after_truncation(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """Keep the partial answer and ask, in a hidden meta message, to continue exactly there."""
    reply = event.data
    messages = _with_reply(run.data.messages, reply).append({"role": "user", "content": CONTINUE_PROMPT}, meta=True)
    partial = run.data.outcome.partial_text + visible_text(reply.content)
    return with_outcome(evolved(run, messages=messages), stop_reason=reply.stop_reason, partial_text=partial)


@uses(counters=("output_recoveries",))
def surface_truncation(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """Every continuation is spent: keep what was written and surface the withheld error."""
    reply = event.data
    text = run.data.outcome.partial_text + visible_text(reply.content)
    error = (
        f"Response truncated: the model hit its output limit of {run.data.request.max_tokens} tokens "
        f"{run.count('output_recoveries') + 1} times in a row this turn"
    )
    run = evolved(run, messages=_with_reply(run.data.messages, reply))
    return with_outcome(run, stop_reason=reply.stop_reason, result_text=text, partial_text="", error=error)


def drop_malformed_reply(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """A tool_use stop without a complete block is never executed, nor kept: ask again."""
    note = "tombstoned a tool_use reply without a complete tool_use block"
    return with_outcome(run, stop_reason=event.data.stop_reason, note=note)


def surface_malformed_tool_use(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """The second malformed tool_use reply this turn: tombstoned too, and the run ends with why."""
    return with_outcome(
        run,
        stop_reason=event.data.stop_reason,
        error="The model stopped to use a tool twice without sending a complete tool_use block",
        note="tombstoned a second malformed tool_use reply",
    )


def nudge_for_visible_answer(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """The answer was only thinking: discard it and nudge once for visible text (hidden message)."""
    messages = run.data.messages.append({"role": "user", "content": NUDGE_PROMPT}, meta=True)
    return with_outcome(evolved(run, messages=messages), stop_reason=event.data.stop_reason)


def continue_paused_turn(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """pause_turn: send the paused content back so the model can continue its turn."""
    reply = event.data
    partial = run.data.outcome.partial_text + visible_text(reply.content)
    return with_outcome(
        evolved(run, messages=_with_reply(run.data.messages, reply)),
        stop_reason=reply.stop_reason,
        partial_text=partial,
    )


def record_over_budget(run: RunState[Out], event: Event[ModelReply]) -> RunState[Out]:
    """The budget is spent: keep the reply; its tool calls are answered, not run, so the ledger stays closed."""
    reply = event.data
    messages = _with_reply(run.data.messages, reply)
    calls = tool_calls_of(reply.content)
    if calls:
        results = synthetic_error_results(calls, "Not run: the run reached its --max-budget-usd limit")
        messages = messages.append({"role": "user", "content": list(results)})
    text = run.data.outcome.partial_text + visible_text(reply.content)
    run = evolved(run, messages=messages)
    return with_outcome(
        run,
        stop_reason=reply.stop_reason,
        result_text=text,
        partial_text="",
        error="Reached the --max-budget-usd limit",
    )
