"""Context layer, compaction: summarising older messages, shrinking a summary request, collapses, surfacing.

Owns the ``compact_transcript`` effect, the compacting states' exit and the edge handlers and guards of compaction.
The pure parts are in ``services`` (``compaction``, ``clearing``, ``collapse``, ``reactive``); the YAML
chooses the path.
"""

from __future__ import annotations

import attrs

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..hooks import hook
from ..messages import Message, MessageView, message_tokens, visible_text, with_content
from ..outcome import evolved, with_outcome
from ..request import (
    TRANSIENT_FAILURES,
    ModelCall,
    ModelFailure,
    ModelReply,
    RequestLogged,
    api_error_text,
    back_off,
    count_attempt,
    retry_after_cap_s,
    with_request,
)
from ..session import hidden_calls, hidden_calls_note
from .data import C, Compacted, CompactionDone, CompactionFailed, ContextServices, Measured, with_context
from .measuring import effective_window
from .services import collapse, compaction, estimates, reactive, rounds

__all__ = [
    "KEEP_RECENT_FRACTION",
    "SUMMARY_MAX_TOKENS",
    "apply_compaction",
    "apply_manual_compaction",
    "can_drop_oldest_group",
    "can_keep_more_rounds",
    "commit_staged_collapses",
    "compact_transcript",
    "drop_oldest_group",
    "has_staged_collapses",
    "keep_more_rounds",
    "note_compaction_failure",
    "note_summary_failure",
    "nothing_older_to_summarise",
    "plan_compaction",
    "plan_manual_compaction",
    "plan_reactive_compaction",
    "record_summary_attempt",
    "surface_context_window_exceeded",
    "surface_manual_compaction_failure",
    "surface_prompt_too_long",
    "wait_before_summary_retry",
]

SUMMARY_MAX_TOKENS = 8_192
# Of the effective window, kept verbatim (whole groups) by a compaction. Whatever is kept is
# written to the cache again behind the new summary and read by every later request, where
# the summary request reads it once at 0.1x: 10 % (not 30 %) brought a long session's
# conversation cost from 1.14x Claude Code's to 1.00x (python tools/bench_cost.py).
KEEP_RECENT_FRACTION = 0.1
_TRIGGERS: dict[str, compaction.CompactTrigger] = {"auto_compacting": "auto", "manual_compacting": "manual"}


@uses(states=("auto_compacting", "manual_compacting"), params=("max_retry_after_s",))
async def compact_transcript(
    ctx: EffectContext[C, ContextServices],
) -> Event[Compacted] | Event[CompactionFailed] | Event[ModelFailure]:
    """Send the summary request for the planned older part; build the compacted transcript."""
    run = ctx.run
    data = run.data
    context = data.context
    services = ctx.services
    plan = context.plan
    if plan is None:  # the guard can_compact held on the way in
        return Event(name="summary_failed", data=CompactionFailed(reason="nothing to summarise"))
    trigger: compaction.CompactTrigger = _TRIGGERS.get(run.state, "reactive")
    instructions = data.hooks.manual_compact if trigger == "manual" else None
    pre = await hook(ctx, "PreCompact", {"trigger": trigger, "custom_instructions": instructions or None})
    if pre is not None and (pre.blocked or not pre.continue_):
        reason = "; ".join(pre.block_reasons) or pre.stop_reason or "a PreCompact hook blocked the compaction"
        return Event(name="summary_failed", data=CompactionFailed(reason=reason))
    catalog = data.request.tool_catalog
    call = ModelCall(  # the agent's own system prompt, tools and history: the prefix its requests cached
        model=data.request.model,
        messages=MessageView.of(compaction.summary_request_messages(plan.older, instructions)),
        system=services.system_prompt,
        tools=(*services.tool_definitions, *catalog) if catalog else services.tool_definitions,
        max_tokens=min(SUMMARY_MAX_TOKENS, data.request.max_tokens),
        stream=False,
        attempt=1,
        idle_timeout_s=services.idle_timeout_s,
        instructions=services.instructions,
        cache_ttl=data.request.cache_ttl,
    )
    outcome = await services.backend.send(call, None)
    ctx.publish(RequestLogged(outcome.log))
    if isinstance(outcome, ModelFailure):
        if outcome.kind == "prompt_too_long":
            return Event(name="summary_too_long", data=CompactionFailed(reason=outcome.message, log=outcome.log))
        cap = retry_after_cap_s(run)
        if outcome.kind in TRANSIENT_FAILURES and (outcome.retry_after_s is None or outcome.retry_after_s <= cap):
            return Event(name="summary_failed_transiently", data=outcome)
        if outcome.kind in TRANSIENT_FAILURES:  # not slept through, as a model request's would not be
            reason = f"{api_error_text(outcome)} (asked to retry in {outcome.retry_after_s:g} s, over {cap:g} s)"
            return Event(name="summary_failed", data=CompactionFailed(reason=reason, log=outcome.log))
        reason = f"{outcome.kind} {outcome.status or ''}: {outcome.message}".strip()
        return Event(name="summary_failed", data=CompactionFailed(reason=reason, log=outcome.log))
    summary = visible_text(outcome.content).strip()
    if not summary:
        return Event(
            name="summary_failed", data=CompactionFailed(reason="the summary request returned no text", log=outcome.log)
        )
    removed = data.messages.to_list()[: len(data.messages) - len(plan.recent)]
    attachments = compaction.regenerate_attachments(removed, services.tool_context.cwd)
    messages = compaction.compacted_messages(summary, plan.recent, attachments)
    boundary = compaction.CompactBoundary(
        trigger=trigger,
        pre_tokens=context.estimate,
        post_tokens=context.overhead + sum(message_tokens(m) for m in messages),
        lossy=context.dropped_messages > 0,
        dropped_messages=context.dropped_messages,
        summarized_messages=len(plan.older),
    )
    ctx.publish(CompactionDone(boundary=boundary))
    return Event(name="compacted", data=Compacted(messages=tuple(messages), boundary=boundary, log=outcome.log))


@uses(counters=("summary_retries",), waits=("max_retry_after_s", "max_backoff_s"))
async def wait_before_summary_retry(ctx: EffectContext[C, ContextServices]) -> Event[None]:
    """Sleep before the summary request's retry, as a model request's retry would (see ``back_off``)."""
    retries = ("auto_summary_retry", "reactive_summary_retry", "manual_summary_retry")
    await back_off(ctx, ctx.run.data.context.summary_failure, counter="summary_retries", retry_reasons=retries)
    return Event(name="elapsed")


def record_summary_attempt(run: RunState[C], event: Event[Compacted | CompactionFailed | ModelFailure | None]) -> C:
    """Exit of the compacting states: a summary request's usage and time count like any attempt's."""
    log = event.data.log if isinstance(event.data, (Compacted, CompactionFailed, ModelFailure)) else None
    if log is None:
        return run.data
    return count_attempt(run.data, log)


# ---- guards ---------------------------------------------------------------------------------


def has_staged_collapses(run: RunState[C], event: Event[object]) -> bool:
    """Large old tool results are staged for collapse."""
    return bool(run.data.context.staged)


def can_drop_oldest_group(run: RunState[C], event: Event[object]) -> bool:
    """The part being summarised still has more than one API-round group."""
    plan = run.data.context.plan
    return plan is not None and compaction.drop_oldest_group(plan.older) is not None


@uses(counters=("reactive_compacts",))
def nothing_older_to_summarise(run: RunState[C], event: Event[ModelFailure | ModelReply]) -> bool:
    """A reactive compaction could be tried (on, not yet this turn), but no round is older than the ones it keeps."""
    if not run.data.context.auto_compact or run.count("reactive_compacts") >= (run.cap("reactive_compacts") or 0):
        return False
    return reactive.reactive_plan(run.data.messages.to_list(), gap=_gap(event)) is None


def can_keep_more_rounds(run: RunState[C], event: Event[CompactionFailed]) -> bool:
    """The summary request was too long; with more newest rounds kept, it still summarises a round."""
    plan = run.data.context.plan
    return plan is not None and reactive.shrunk_plan(plan, gap=_gap(event)) is not None


def _gap(event: Event[object]) -> int | None:
    """By how many tokens the answer that brought ``event`` says the request was over."""
    data = event.data
    if isinstance(data, ModelFailure):
        return reactive.token_gap(data.message)
    return reactive.token_gap(data.reason) if isinstance(data, CompactionFailed) else None


# ---- edge handlers --------------------------------------------------------------------------


def plan_compaction(run: RunState[C], event: Event[Measured]) -> C:
    """Auto-compaction: the summary replaces everything but the most recent whole groups that fit 10 % of the window."""
    keep = int(effective_window(run) * KEEP_RECENT_FRACTION)
    plan = compaction.plan_compaction(run.data.messages.to_list(), keep_recent_tokens=keep)
    return with_context(
        run.data, plan=plan, dropped_messages=0, estimate=event.data.estimate, compact_error=None, summary_failure=None
    )


def plan_manual_compaction(run: RunState[C], event: Event[None]) -> C:
    """A manual compaction (/compact): the whole history is summarised, nothing kept verbatim (None: too little)."""
    messages = run.data.messages
    plan = compaction.plan_compaction(messages.to_list(), keep_recent_tokens=0, min_recent_groups=0)
    estimate = run.data.context.overhead + run.data.request.tool_catalog_tokens + messages.tokens
    return with_context(
        run.data, plan=plan, dropped_messages=0, estimate=estimate, compact_error=None, summary_failure=None
    )


def plan_reactive_compaction(run: RunState[C], event: Event[ModelFailure]) -> C:
    """The request was too long: summarise the oldest rounds, keep the newest verbatim (see ``reactive``)."""
    plan = reactive.reactive_plan(run.data.messages.to_list(), gap=_gap(event))
    data = run.data
    estimate = data.context.overhead + data.request.tool_catalog_tokens + data.messages.tokens  # the running estimate
    data = with_request(run.data, failure=event.data)  # surfaced if the compaction fails
    return with_context(
        data, plan=plan, dropped_messages=0, estimate=estimate, compact_error=None, summary_failure=None
    )


def keep_more_rounds(run: RunState[C], event: Event[CompactionFailed]) -> C:
    """The summary request was itself too long: the newest rounds it held are kept verbatim instead (lossless)."""
    plan = run.data.context.plan
    assert plan is not None  # can_keep_more_rounds held
    return with_context(run.data, plan=reactive.shrunk_plan(plan, gap=_gap(event)))


def drop_oldest_group(run: RunState[C], event: Event[CompactionFailed]) -> C:
    """The summary request is itself too long: drop its oldest third of groups (at least one; lossy) and retry."""
    context = run.data.context
    assert context.plan is not None
    older: list[Message] = list(context.plan.older)
    groups = len(rounds.api_round_groups(older))
    dropped_messages, dropped_groups = 0, 0
    for _ in range(max(1, groups // 3)):
        step = compaction.drop_oldest_group(older)
        if step is None:
            break
        older, count = step
        dropped_messages += count
        dropped_groups += 1
    plan = attrs.evolve(context.plan, older=tuple(older), older_groups=context.plan.older_groups - dropped_groups)
    return with_context(run.data, plan=plan, dropped_messages=context.dropped_messages + dropped_messages)


def apply_compaction(run: RunState[C], event: Event[Compacted]) -> C:
    """The summary replaces the older messages; the boundary is recorded."""
    context = run.data.context
    boundary = event.data.boundary
    note = f"compacted ({boundary.trigger}): {boundary.pre_tokens} → {boundary.post_tokens} tokens" + (
        f", lossy: {boundary.dropped_messages} message(s) dropped unsummarised" if boundary.lossy else ""
    )
    messages = _with_hidden_calls_note(run.data, list(event.data.messages))
    data = evolved(run.data, messages=MessageView.of(messages))
    data = with_context(
        data,
        plan=None,
        staged=(),
        estimate=boundary.post_tokens,
        compaction_turns=(*context.compaction_turns, data.tools.turn),
        boundaries=(*context.boundaries, boundary),
    )
    return with_outcome(data, note=note)


def apply_manual_compaction(run: RunState[C], event: Event[Compacted]) -> C:
    """The summary replaces the history (see :func:`apply_compaction`); the result says what it freed."""
    boundary = event.data.boundary
    text = f"Compacted the conversation: {boundary.pre_tokens} → {boundary.post_tokens} tokens" + (
        f" ({boundary.dropped_messages} message(s) dropped unsummarised)" if boundary.lossy else ""
    )
    return with_outcome(apply_compaction(run, event), result_text=text)


def _with_hidden_calls_note(data: C, messages: list[Message]) -> list[Message]:
    """The compacted transcript, its summary message telling which completed calls it summarised away.

    A call of a tool that is not idempotent the model can no longer see must not be run
    again by mistake: the summary message lists each with its recorded result (the ledger).
    """
    note = hidden_calls_note(hidden_calls(data.session, messages)) if data.session.ledger else ""
    content = messages[0].get("content") if note and messages else None
    if not isinstance(content, list):
        return messages
    return [with_content(messages[0], [*content, {"type": "text", "text": note}]), *messages[1:]]


def note_summary_failure(run: RunState[C], event: Event[ModelFailure]) -> C:
    """The summary request failed in a way a retry may cure: keep it for the backoff (retry-after) and the notes."""
    return with_context(run.data, summary_failure=event.data)


def note_compaction_failure(run: RunState[C], event: Event[CompactionFailed | None]) -> C:
    """The compaction failed; the request goes out uncompacted (the breaker counts the failure)."""
    detail = str(event.data) if event.data is not None else _summary_retries_spent(run)
    return with_outcome(
        with_context(run.data, plan=None, compact_error=detail), note=f"auto-compaction failed: {detail}"
    )


def commit_staged_collapses(run: RunState[C], event: Event[ModelFailure | ModelReply]) -> C:
    """Zero-API-cost recovery: the staged large old tool results become stubs."""
    staged = run.data.context.staged
    messages = collapse.commit_collapses(run.data.messages.to_list(), staged)
    freed = sum(s.tokens_freed for s in staged)
    data = evolved(run.data, messages=MessageView.of(messages))
    data = with_request(with_context(data, staged=()), failure=_failure(event))
    return with_outcome(data, note=f"collapsed {len(staged)} old tool result(s), ~{freed} tokens freed")


def _failure(event: Event[object]) -> ModelFailure | None:
    return event.data if isinstance(event.data, ModelFailure) else None


def _summary_retries_spent(run: RunState[C]) -> str:
    failure = run.data.context.summary_failure
    return "the summary request kept failing" + (f" ({api_error_text(failure)})" if failure else "")


def surface_manual_compaction_failure(run: RunState[C], event: Event[CompactionFailed | None]) -> C:
    """A manual compaction could not be done: why is the result; the history stays as it was."""
    detail = str(event.data) if event.data is not None else _summary_retries_spent(run)
    return with_outcome(
        with_context(run.data, plan=None, compact_error=detail), error=f"Error during compaction: {detail}"
    )


PROMPT_TOO_LONG = "Prompt is too long"
REQUEST_TOO_LARGE = "Request too large: the request is over the API's size limit; remove large attachments or images"
CONTEXT_WINDOW_EXCEEDED = "API Error: the model reached the end of its context window"


@uses(states=("reactive_compacting", "backing_off_reactive_summary"))
def surface_prompt_too_long(run: RunState[C], event: Event[ModelFailure | CompactionFailed | None]) -> C:
    """Recovery is spent or impossible: the withheld error becomes the result, as Claude Code reports it.

    ``Prompt is too long`` with status 400 whatever the API said — or, for a 413 (a body
    over the size limit, not a window), that, with status 413 — and, only when the
    summary request failed (an error, its retries spent, a PreCompact hook), why
    compaction failed. The API's message and what fills the request are kept as a notice.
    """
    data = run.data
    failure = _failure(event) or data.request.failure
    too_large = failure is not None and failure.status == 413
    result = REQUEST_TOO_LARGE if too_large else PROMPT_TOO_LONG
    history, overhead = data.messages.tokens, data.context.overhead
    why = [api_error_text(failure)] if failure is not None else []
    if run.state == "reactive_compacting" and event.name == "summary_failed":
        result += f"; automatic compaction failed: {event.data}"
    elif run.state == "backing_off_reactive_summary":
        result += f"; automatic compaction failed: {_summary_retries_spent(run)}"
    elif run.state == "reactive_compacting":  # the summary request stayed too long however much was kept
        why.append("the summary request was itself too long with every round but the first kept")
    elif not data.context.auto_compact:
        why.append("automatic compaction is disabled; " + estimates.not_compactable_hint_from(history, overhead))
    else:
        why.append("nothing could be compacted; " + estimates.not_compactable_hint_from(history, overhead))
    data = with_context(with_request(data, failure=failure), plan=None)
    return with_outcome(data, note="; ".join(why), error=result, api_error_status=413 if too_large else 400)


@uses(counters=("output_recoveries",))
def surface_context_window_exceeded(run: RunState[C], event: Event[ModelReply]) -> C:
    """The model stopped at its context window again after every continuation: an API error, no status."""
    reply = event.data
    data = run.data
    if reply.content:  # kept in the transcript, as a truncated answer is
        data = evolved(data, messages=data.messages.append({"role": "assistant", "content": list(reply.content)}))
    note = f"stopped at the context window {run.count('output_recoveries') + 1} times this turn"
    return with_outcome(
        data, note=note, stop_reason=reply.stop_reason, error=CONTEXT_WINDOW_EXCEEDED, api_error_status=None
    )
