"""Context layer, before sending: the running estimate, staged collapses, the auto-compact decision's inputs.

Owns the ``measure_context`` effect, the exit of ``checking_context``, the guards ``can_compact`` and
``refill_thrashing``, and the edges that leave without compacting. Token accounting: docs/graph.md.
"""

from __future__ import annotations

import itertools

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..messages import MessageView
from ..outcome import evolved, with_outcome
from ..request import ModelCall, model_info
from ..tools import CLEARABLE_TOOLS
from .data import C, ContextData, ContextServices, Measured, with_context
from .services import collapse, rounds
from .services.clearing import MICROCOMPACT_MIN_TOKENS, Clearing, clear_results, plan_clearing

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "RAPID_TURNS",
    "can_compact",
    "clear_old_tool_results",
    "effective_window",
    "estimate_of",
    "measure_context",
    "old_results_clearable",
    "record_count_tokens_offer",
    "record_measurement",
    "refill_thrashing",
    "skip_compaction_breaker_open",
    "surface_thrashing",
]

DEFAULT_CONTEXT_WINDOW = 200_000
MAX_OUTPUT_RESERVE = 20_000
STAGING_FRACTION = 0.5  # collapses are staged (a scan of the history) only past half the window
RAPID_TURNS = 3


def effective_window(run: RunState[C]) -> int:
    """Context window minus the output reserve, for the current model (data file; 200k if unknown)."""
    request = run.data.request
    info = model_info(request.model)
    window = info.context_window if info else DEFAULT_CONTEXT_WINDOW
    reserve = min(request.max_tokens, info.max_output_tokens if info else MAX_OUTPUT_RESERVE, MAX_OUTPUT_RESERVE)
    return max(1, window - reserve)


def estimate_of(run: RunState[C]) -> int:
    """The next request's estimate: system and tools, the messages, corrected by the last real count."""
    data = run.data
    context, request = data.context, data.request
    overhead = context.overhead + request.tool_catalog_tokens
    correction = (
        request.real_input_tokens - (overhead + request.sent_message_tokens) if request.real_input_tokens else 0
    )
    return overhead + data.messages.tokens + correction


async def measure_context(ctx: EffectContext[C, ContextServices]) -> Event[Measured]:
    """Estimate the next request and compare it with the auto-compact threshold."""
    run = ctx.run
    data = run.data
    context = data.context
    services = ctx.services
    estimate = estimate_of(run)
    window = effective_window(run)
    staged = context.staged
    if estimate > window * STAGING_FRACTION:
        staged = tuple(collapse.stage_collapses(data.messages.to_list()))
    threshold = window * services.auto_compact_threshold
    offered = context.count_tokens_offered
    if estimate > threshold and offered:
        call = ModelCall(
            model=data.request.model,
            messages=data.messages,
            system=services.system_prompt,
            tools=(*services.tool_definitions, *data.request.tool_catalog),
            max_tokens=data.request.max_tokens,
            stream=False,
            attempt=1,
            idle_timeout_s=services.idle_timeout_s,
            instructions=services.instructions,
        )
        counted = await services.backend.count_tokens(call)
        offered = counted.offered
        if counted.tokens is not None:
            estimate = counted.tokens
    if estimate > threshold:
        measured = Measured(estimate=estimate, staged=staged, count_tokens_offered=offered)
        return Event(name="over_threshold", data=measured)
    clearing, calls = _old_results(run)
    return Event(
        name="within_threshold",
        data=Measured(
            estimate=estimate,
            staged=staged,
            count_tokens_offered=offered,
            clearing=clearing,
            clearable_calls=calls,
        ),
    )


def _old_results(run: RunState[C]) -> tuple[Clearing | None, int | None]:
    """The old tool results worth clearing, and how many calls of the clearable tools the
    history holds if they were looked for: only when the history could free enough, and
    again only once that number changed (a clearing pays more only as calls age out)."""
    context = run.data.context
    messages = run.data.messages
    if not context.microcompact or messages.tokens < MICROCOMPACT_MIN_TOKENS:
        return None, None
    calls = messages.count_calls(CLEARABLE_TOOLS)
    if calls == context.clearable_calls_seen:
        return None, None
    clearing = plan_clearing(messages)
    return (clearing if clearing.pays else None), calls


def record_count_tokens_offer(run: RunState[C], event: Event[Measured | None]) -> C:
    """Exit of ``checking_context``: once the server refuses ``count_tokens`` for good, stop asking."""
    measured = event.data
    if measured is None or measured.count_tokens_offered == run.data.context.count_tokens_offered:
        return run.data
    return with_context(run.data, count_tokens_offered=measured.count_tokens_offered)


# ---- guards ---------------------------------------------------------------------------------


def can_compact(run: RunState[C], event: Event[object]) -> bool:
    """Compaction is enabled and there are at least 2 API-round groups to split."""
    return run.data.context.auto_compact and len(rounds.api_round_groups(run.data.messages.to_list())) >= 2


def refill_thrashing(run: RunState[C], event: Event[object]) -> bool:
    """This would be the third compaction in a row each fewer than 3 turns after the previous (start counts)."""
    turns = (0, *run.data.context.compaction_turns, run.data.tools.turn)
    if len(turns) < 4:
        return False
    last3 = turns[-4:]
    return all(b - a < RAPID_TURNS for a, b in itertools.pairwise(last3))


# ---- edge handlers --------------------------------------------------------------------------


def record_measurement(run: RunState[C], event: Event[Measured]) -> C:
    """Keep the staged collapses and when old results were looked for (the estimate itself is
    recomputed whenever it is needed)."""
    measured = event.data
    context = run.data.context
    seen = context.clearable_calls_seen if measured.clearable_calls is None else measured.clearable_calls
    if measured.staged == context.staged and seen == context.clearable_calls_seen:
        return run.data  # the common case: nothing to stage, nothing to record
    return with_context(run.data, estimate=measured.estimate, staged=measured.staged, clearable_calls_seen=seen)


def old_results_clearable(run: RunState[C], event: Event[Measured]) -> bool:
    """Clearing the old results of Read, Bash, Grep, … (all but the newest 4) pays: it frees at least
    10,000 tokens, and at least what the next request writes to the cache again."""
    return event.data.clearing is not None


def clear_old_tool_results(run: RunState[C], event: Event[Measured]) -> C:
    """Microcompaction: the old tool results become ``[Old tool result content cleared]``; the
    history is written to the cache again once, and every later request reads less of it."""
    clearing = event.data.clearing
    assert clearing is not None  # the edge's guard
    data = record_measurement(run, event)
    messages = data.messages.to_list()
    cleared = clear_results(messages, clearing)
    meta = [data.messages.is_meta(i) for i in range(len(messages))]
    kept = tuple(s for s in data.context.staged if cleared[s.message_index] is messages[s.message_index])
    data = with_context(evolved(data, messages=MessageView.of(cleared, meta)), staged=kept)
    cleared_count, freed = len(clearing.tool_use_ids), clearing.tokens_freed
    return with_outcome(data, note=f"microcompact: cleared {cleared_count} old tool result(s), ~{freed} tokens freed")


@uses(counters=("auto_compact_failures",))
def skip_compaction_breaker_open(run: RunState[C], event: Event[Measured]) -> C:
    """The breaker is open: send without compacting, and say so."""
    failures = run.count("auto_compact_failures")
    note = f"auto-compaction skipped: {failures} attempts in a row failed (breaker open until a compaction succeeds)"
    data = with_context(run.data, estimate=event.data.estimate, staged=event.data.staged)
    return with_outcome(data, note=note)


def surface_thrashing(run: RunState[C], event: Event[Measured]) -> C:
    """The rapid-refill breaker: compacting again would only burn summary requests."""
    data: ContextData = run.data.context
    gaps = ", ".join(str(t) for t in data.compaction_turns[-2:])
    message = (
        f"Stopped: the context refills faster than compaction can empty it (compactions after turns {gaps}, "
        f"and again at turn {run.data.tools.turn}); the session is thrashing. Start a new session or reduce "
        "large tool outputs."
    )
    return with_outcome(run.data, error=message)
