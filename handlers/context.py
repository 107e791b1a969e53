"""Context layer: token accounting, staged collapses, compaction, and surfacing prompt-too-long.

Owns the ``measure_context`` and ``compact_transcript`` effects and the pure edge
handlers and guards of the context transitions. The pure services (estimates,
API-round groups, collapse staging, summary requests, attachments) live in
``fsm.agent.context``. Which path is taken — collapse, reactive compaction, breaker,
surfacing — is decided by ``machines/query_loop.yaml``.

Token accounting: the transcript keeps a running local estimate (see
``fsm.agent.context.message_tokens``); the last successful reply's real
``usage.input_tokens`` corrects it (``LoopServices.token_correction``); near the
threshold the server's ``count_tokens`` is asked when it offers it.
"""

from __future__ import annotations

import attrs

from fsm.agent import context as ctxsvc
from fsm.agent.loop_state import (
    CompactionDone,
    LoopData,
    LoopServices,
    MessageView,
    ModelCall,
    RequestLogged,
    updated,
    visible_text,
)
from fsm.agent.model_client import ModelFailure, ModelReply
from fsm.agent.pricing import model_info
from fsm.runtime import EffectContext, Event, RunState

from .hooks import hook
from .request import api_error_text

__all__ = [
    "apply_compaction",
    "can_compact",
    "can_drop_oldest_group",
    "commit_staged_collapses",
    "compact_transcript",
    "drop_oldest_group",
    "effective_window",
    "has_staged_collapses",
    "measure_context",
    "note_compaction_failure",
    "plan_compaction",
    "record_measurement",
    "refill_thrashing",
    "skip_compaction_breaker_open",
    "surface_prompt_too_long",
    "surface_thrashing",
]

DEFAULT_CONTEXT_WINDOW = 200_000
MAX_OUTPUT_RESERVE = 20_000
STAGING_FRACTION = 0.5  # collapses are staged (a scan of the history) only past half the window
RAPID_TURNS = 3
SUMMARY_MAX_TOKENS = 8_192
KEEP_RECENT_FRACTION = 0.3  # of the effective window, kept verbatim (whole groups) by a compaction


def effective_window(data: LoopData) -> int:
    """Context window minus the output reserve, for the current model (data file; 200k if unknown)."""
    info = model_info(data.model)
    window = info.context_window if info else DEFAULT_CONTEXT_WINDOW
    reserve = min(data.max_tokens, info.max_output_tokens if info else MAX_OUTPUT_RESERVE, MAX_OUTPUT_RESERVE)
    return max(1, window - reserve)



# ---- effects --------------------------------------------------------------------------------


async def measure_context(ctx: EffectContext) -> Event:
    """Estimate the next request and compare it with the auto-compact threshold."""
    data: LoopData = ctx.run.data
    services: LoopServices = ctx.services
    config = services.config
    estimate = data.overhead + data.messages.tokens + services.token_correction
    window = effective_window(data)
    staged = data.staged
    if estimate > window * STAGING_FRACTION:
        staged = ctxsvc.stage_collapses(data.messages.to_list())
    threshold = window * config.auto_compact_threshold
    if estimate > threshold:
        call = ModelCall(
            model=data.model, messages=data.messages, system=config.system_prompt, tools=services.tool_definitions,
            max_tokens=data.max_tokens, stream=False, attempt=1, idle_timeout_s=config.idle_timeout_s,
        )
        counted = await services.backend.count_tokens(call)
        if counted is not None:
            estimate = counted
    name = "over_threshold" if estimate > threshold else "within_budget"
    return Event(name=name, data=(estimate, staged))


async def compact_transcript(ctx: EffectContext) -> Event:
    """Send the summary request for the planned older part; build the compacted transcript."""
    run = ctx.run
    data: LoopData = run.data
    services: LoopServices = ctx.services
    config = services.config
    plan = data.plan
    if plan is None:  # the guard can_compact held on the way in
        return Event(name="compact_failed", data="nothing to summarise")
    trigger: ctxsvc.CompactTrigger = "auto" if run.state == "auto_compacting" else "reactive"
    pre = await hook(ctx, "PreCompact", {"trigger": trigger, "custom_instructions": None})
    if pre is not None and (pre.blocked or not pre.continue_):
        reason = "; ".join(pre.block_reasons) or pre.stop_reason or "a PreCompact hook blocked the compaction"
        return Event(name="compact_failed", data=reason)
    call = ModelCall(
        model=data.model,
        messages=MessageView.of(ctxsvc.summary_request_messages(plan.older)),
        system=ctxsvc.SUMMARY_SYSTEM_PROMPT,
        tools=(),
        max_tokens=min(SUMMARY_MAX_TOKENS, data.max_tokens),
        stream=False,
        attempt=1,
        idle_timeout_s=config.idle_timeout_s,
    )
    outcome = await services.backend.send(call, None)
    services.record(outcome.log)
    ctx.publish(RequestLogged(outcome.log))
    if isinstance(outcome, ModelFailure):
        if outcome.kind == "prompt_too_long":
            return Event(name="summary_too_long", data=outcome.message)
        return Event(name="compact_failed", data=f"{outcome.kind} {outcome.status or ''}: {outcome.message}".strip())
    summary = visible_text(outcome.content).strip()
    if not summary:
        return Event(name="compact_failed", data="the summary request returned no text")
    removed = data.messages.to_list()[: len(data.messages) - len(plan.recent)]
    attachments = ctxsvc.regenerate_attachments(removed, config.tool_context.cwd)
    messages = ctxsvc.compacted_messages(summary, plan.recent, attachments)
    boundary = ctxsvc.CompactBoundary(
        trigger=trigger,
        pre_tokens=data.estimate,
        post_tokens=data.overhead + sum(ctxsvc.message_tokens(m) for m in messages),
        lossy=data.dropped_messages > 0,
        dropped_messages=data.dropped_messages,
        summarized_messages=len(plan.older),
    )
    ctx.publish(CompactionDone(boundary=boundary))
    return Event(name="compacted", data=(messages, boundary))


# ---- guards ---------------------------------------------------------------------------------


def can_compact(run: RunState, event: Event) -> bool:
    """Compaction is enabled and there are at least 2 API-round groups to split."""
    data: LoopData = run.data
    return data.auto_compact and len(ctxsvc.api_round_groups(data.messages.to_list())) >= 2


def refill_thrashing(run: RunState, event: Event) -> bool:
    """This would be the third compaction in a row each fewer than 3 turns after the previous (start counts)."""
    data: LoopData = run.data
    turns = (0, *data.compaction_turns, data.turn)
    if len(turns) < 4:
        return False
    last3 = turns[-4:]
    return all(b - a < RAPID_TURNS for a, b in zip(last3, last3[1:], strict=False))


def has_staged_collapses(run: RunState, event: Event) -> bool:
    data: LoopData = run.data
    return bool(data.staged)


def can_drop_oldest_group(run: RunState, event: Event) -> bool:
    data: LoopData = run.data
    return data.plan is not None and ctxsvc.drop_oldest_group(data.plan.older) is not None


# ---- edge handlers --------------------------------------------------------------------------


def record_measurement(run: RunState, event: Event) -> RunState:
    """Keep the staged collapses (the estimate itself is recomputed whenever it is needed)."""
    data: LoopData = run.data
    estimate, staged = event.data
    if staged == data.staged:
        return run  # the common case: nothing to stage, nothing to record
    return updated(run, estimate=estimate, staged=staged)


def plan_compaction(run: RunState, event: Event) -> RunState:
    """Choose what the summary replaces: everything but the most recent whole groups."""
    data: LoopData = run.data
    if isinstance(event.data, tuple):  # over_threshold: the measured estimate
        estimate = event.data[0]
    else:  # prompt_too_long: the running local estimate
        estimate = data.overhead + data.messages.tokens
    keep = int(effective_window(data) * KEEP_RECENT_FRACTION)
    plan = ctxsvc.plan_compaction(data.messages.to_list(), keep_recent_tokens=keep)
    return updated(run, plan=plan, dropped_messages=0, estimate=estimate, compact_error=None)


def drop_oldest_group(run: RunState, event: Event) -> RunState:
    """The summary request is itself too long: drop its oldest third of groups (at least one; lossy) and retry."""
    data: LoopData = run.data
    assert data.plan is not None
    older: list[dict[str, object]] = list(data.plan.older)
    groups = len(ctxsvc.api_round_groups(older))
    dropped_messages, dropped_groups = 0, 0
    for _ in range(max(1, groups // 3)):
        step = ctxsvc.drop_oldest_group(older)
        if step is None:
            break
        older, count = step
        dropped_messages += count
        dropped_groups += 1
    plan = attrs.evolve(data.plan, older=tuple(older), older_groups=data.plan.older_groups - dropped_groups)
    return updated(run, plan=plan, dropped_messages=data.dropped_messages + dropped_messages)


def apply_compaction(run: RunState, event: Event) -> RunState:
    data: LoopData = run.data
    messages, boundary = event.data
    note = f"compacted ({boundary.trigger}): {boundary.pre_tokens} → {boundary.post_tokens} tokens" + (
        f", lossy: {boundary.dropped_messages} message(s) dropped unsummarised" if boundary.lossy else ""
    )
    return updated(
        run,
        messages=MessageView.of(messages),
        plan=None,
        staged=(),
        estimate=boundary.post_tokens,
        compaction_turns=(*data.compaction_turns, data.turn),
        boundaries=(*data.boundaries, boundary),
        notices=(*data.notices, note),
    )


def note_compaction_failure(run: RunState, event: Event) -> RunState:
    data: LoopData = run.data
    detail = str(event.data)
    return updated(run, plan=None, compact_error=detail, notices=(*data.notices, f"auto-compaction failed: {detail}"))


def skip_compaction_breaker_open(run: RunState, event: Event) -> RunState:
    data: LoopData = run.data
    estimate, staged = event.data
    note = f"auto-compaction skipped: {run.count('auto_compact_failures')} attempts in a row failed (breaker open until a compaction succeeds)"
    return updated(run, estimate=estimate, staged=staged, notices=(*data.notices, note))


def commit_staged_collapses(run: RunState, event: Event) -> RunState:
    """Zero-API-cost recovery: the staged large old tool results become stubs."""
    data: LoopData = run.data
    messages = ctxsvc.commit_collapses(data.messages.to_list(), data.staged)
    freed = sum(s.tokens_freed for s in data.staged)
    note = f"collapsed {len(data.staged)} old tool result(s), ~{freed} tokens freed"
    return updated(run, messages=MessageView.of(messages), staged=(), failure=_failure(event), notices=(*data.notices, note))


def _failure(event: Event) -> ModelFailure | None:
    return event.data if isinstance(event.data, ModelFailure) else None


def surface_prompt_too_long(run: RunState, event: Event) -> RunState:
    """Recovery is spent or impossible: the withheld error becomes the result, with why."""
    data: LoopData = run.data
    failure = _failure(event) or data.failure
    if isinstance(event.data, ModelReply):
        message = "Prompt is too long: the model stopped at its context window (model_context_window_exceeded)"
    elif failure is not None and failure.kind == "prompt_too_long":
        message = api_error_text(failure)
    else:
        message = "Prompt is too long"
    if run.state == "reactive_compacting":
        message += f"\nautomatic compaction failed: {event.data}"
    elif not data.auto_compact:
        message += "\nautomatic compaction is disabled; " + ctxsvc.not_compactable_hint_from(data.messages.tokens, data.overhead)
    elif len(ctxsvc.api_round_groups(data.messages.to_list())) < 2:
        message += "\nnothing to compact (fewer than 2 message groups); " + ctxsvc.not_compactable_hint_from(data.messages.tokens, data.overhead)
    return updated(run, error=message, failure=failure, api_error_status=failure.status if failure else None, plan=None)


def surface_thrashing(run: RunState, event: Event) -> RunState:
    data: LoopData = run.data
    gaps = ", ".join(str(t) for t in data.compaction_turns[-2:])
    message = (
        f"Stopped: the context refills faster than compaction can empty it (compactions after turns {gaps}, "
        f"and again at turn {data.turn}); the session is thrashing. Start a new session or reduce large tool outputs."
    )
    return updated(run, error=message)

