"""Output layer: what a complete reply does to the transcript — answers, truncation, nudges.

Owns the pure edge handlers for ``answered``, ``max_output_tokens_*``,
``malformed_tool_use_*``, ``thinking_only_*``, ``pause_turn_*``, ``refused`` and
``budget_exhausted``, and the guard ``escalation_configured``. Hidden meta messages
(the continuation prompt, the nudge) are appended with ``meta=True``: sent to the
model, never shown to the user.
"""

from __future__ import annotations

from fsm.agent.loop_state import LoopData, tool_calls_of, updated, visible_text
from fsm.agent.model_client import ModelReply
from fsm.agent.tools import synthetic_error_results
from fsm.runtime import Event, RunState

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


def _assistant(reply: ModelReply) -> dict[str, object]:
    return {"role": "assistant", "content": list(reply.content)}



def escalation_configured(run: RunState, event: Event) -> bool:
    """An escalated max_tokens cap is configured and above the current one."""
    data: LoopData = run.data
    return data.escalated_max_tokens is not None and data.escalated_max_tokens > data.max_tokens


def record_answer(run: RunState, event: Event) -> RunState:
    """The reply is the answer: append it; the result is all visible text of this turn."""
    data: LoopData = run.data
    reply: ModelReply = event.data
    text = data.partial_text + visible_text(reply.content)
    messages = data.messages.append(_assistant(reply)) if reply.content else data.messages
    return updated(run, messages=messages, reply=reply, result_text=text, partial_text="")


def escalate_max_tokens(run: RunState, event: Event) -> RunState:
    """Retry the same request once with the escalated cap; the truncated reply is discarded."""
    data: LoopData = run.data
    note = f"max_tokens {data.max_tokens} hit; retrying with {data.escalated_max_tokens}"
    return updated(run, max_tokens=data.escalated_max_tokens, reply=event.data, notices=(*data.notices, note))


def continue_after_truncation(run: RunState, event: Event) -> RunState:
    """Keep the partial answer and ask, in a hidden meta message, to continue exactly there."""
    data: LoopData = run.data
    reply: ModelReply = event.data
    messages = data.messages
    if reply.content:
        messages = messages.append(_assistant(reply))
    messages = messages.append({"role": "user", "content": CONTINUE_PROMPT}, meta=True)
    return updated(run, messages=messages, reply=reply, partial_text=data.partial_text + visible_text(reply.content))


def surface_truncation(run: RunState, event: Event) -> RunState:
    """Every continuation is spent: keep what was written and surface the withheld error."""
    data: LoopData = run.data
    reply: ModelReply = event.data
    text = data.partial_text + visible_text(reply.content)
    messages = data.messages.append(_assistant(reply)) if reply.content else data.messages
    error = (
        f"Response truncated: the model hit its output limit of {data.max_tokens} tokens "
        f"{run.count('output_recoveries') + 1} times in a row this turn"
    )
    return updated(run, messages=messages, reply=reply, result_text=text, partial_text="", error=error)


def drop_malformed_reply(run: RunState, event: Event) -> RunState:
    """A tool_use stop without a complete block is never executed, nor kept: ask again."""
    data: LoopData = run.data
    return updated(run, reply=event.data, notices=(*data.notices, "tombstoned a tool_use reply without a complete tool_use block"))


def surface_malformed_tool_use(run: RunState, event: Event) -> RunState:
    data: LoopData = run.data
    return updated(
        run,
        reply=event.data,
        error="The model stopped to use a tool twice without sending a complete tool_use block",
        notices=(*data.notices, "tombstoned a second malformed tool_use reply"),
    )


def nudge_for_visible_answer(run: RunState, event: Event) -> RunState:
    """The answer was only thinking: discard it and nudge once for visible text (hidden message)."""
    data: LoopData = run.data
    return updated(run, reply=event.data, messages=data.messages.append({"role": "user", "content": NUDGE_PROMPT}, meta=True))


def continue_paused_turn(run: RunState, event: Event) -> RunState:
    """pause_turn: send the paused content back so the model can continue its turn."""
    data: LoopData = run.data
    reply: ModelReply = event.data
    messages = data.messages.append(_assistant(reply)) if reply.content else data.messages
    return updated(run, messages=messages, reply=reply, partial_text=data.partial_text + visible_text(reply.content))


def record_over_budget(run: RunState, event: Event) -> RunState:
    """The budget is spent: keep the reply; its tool calls are answered, not run, so the ledger stays closed."""
    data: LoopData = run.data
    reply: ModelReply = event.data
    messages = data.messages.append(_assistant(reply)) if reply.content else data.messages
    calls = tool_calls_of(reply.content)
    if calls:
        results = synthetic_error_results(calls, "Not run: the run reached its --max-budget-usd limit")
        messages = messages.append({"role": "user", "content": list(results)})
    text = data.partial_text + visible_text(reply.content)
    return updated(run, messages=messages, reply=reply, result_text=text, partial_text="", error="Reached the --max-budget-usd limit")
