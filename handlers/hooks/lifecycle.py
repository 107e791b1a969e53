"""Hook layer: SessionStart and UserPromptSubmit before the first request, Stop hooks at the end, `continue: false`.

Owns the ``submit_prompt`` and ``run_stop_hooks`` effects and their edge handlers. Other hook events run in their
own layer (PreToolUse in the gate, PreCompact before a summary).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..messages import final_text, user_message
from ..outcome import evolved, with_outcome
from .data import H, HooksRun, with_hooks
from .services.calling import HookServices, hook, stopped
from .services.context import context_notes, reminder_block
from .services.results import HookOutcome

__all__ = [
    "PromptAccepted",
    "record_block_limit",
    "record_hook_stop",
    "record_prompt_context",
    "run_stop_hooks",
    "send_stop_feedback",
    "stop_hook_input",
    "submit_prompt",
]


@attrs.frozen(kw_only=True)
class PromptAccepted:
    """``prompt_accepted``: what SessionStart and UserPromptSubmit hooks added as context, in order, each labelled."""

    context: tuple[str, ...] = ()


async def submit_prompt(
    ctx: EffectContext[H, HookServices],
) -> Event[HookOutcome] | Event[PromptAccepted] | Event[None]:
    """SessionStart then UserPromptSubmit: context is added, a block erases the prompt.

    A run started to compact the history (/compact) has no prompt: SessionStart runs, then
    the compaction is requested (UserPromptSubmit is a prompt's hook).
    """
    if ctx.run.data.hooks.agent_id is not None:  # a sub-agent: the session's prompt hooks ran for its parent
        return Event(name="prompt_accepted", data=PromptAccepted())
    first: Mapping[str, object] = ctx.run.data.messages.last() or {}
    prompt = first.get("content") if isinstance(first.get("content"), str) else ""
    context: list[str] = []
    start = await hook(ctx, "SessionStart", {"source": ctx.run.data.hooks.start_source})
    if stopped(start):
        assert start is not None
        return Event(name="stopped_by_hook", data=start)
    if ctx.run.data.hooks.manual_compact is not None:
        return Event(name="compaction_requested")
    source = ctx.run.data.hooks.start_source
    context.extend(context_notes(start, "SessionStart hook", output_marker=f"SessionStart:{source} hook"))
    submit = await hook(ctx, "UserPromptSubmit", {"prompt": prompt})
    if stopped(submit) or (submit is not None and submit.blocked):
        assert submit is not None
        return Event(name="stopped_by_hook" if stopped(submit) else "prompt_blocked", data=submit)
    context.extend(context_notes(submit, "UserPromptSubmit hook"))
    return Event(name="prompt_accepted", data=PromptAccepted(context=tuple(context)))


def record_prompt_context(run: RunState[H], event: Event[PromptAccepted]) -> H:
    """Hook output for SessionStart/UserPromptSubmit becomes context after the prompt.

    Each note carries its hook's marker, all inside one ``<system-reminder>`` block: the
    model reads it as what a hook said, not as the user's words (Claude Code 2.1.235 sends
    it as a system message; queryloop's transcript keeps to user and assistant turns).
    """
    block = reminder_block(event.data.context)
    if block is None:
        return run.data
    return evolved(run.data, messages=run.data.messages.append(user_message([block]), meta=True))


def record_hook_stop(run: RunState[H], event: Event[HookOutcome]) -> H:
    """A hook stopped the run (or blocked the prompt): its reason is the result."""
    outcome = event.data
    reason = outcome.stop_reason or (
        "; ".join(outcome.block_reasons) if outcome.block_reasons else f"{outcome.event} hook stopped the run"
    )
    return with_outcome(run.data, error=reason)


async def run_stop_hooks(ctx: EffectContext[H, HookServices]) -> Event[HookOutcome | None]:
    """The model answered: Stop hooks may accept the end, block it (feedback for the model) or stop.

    A sub-agent's run runs the SubagentStop hooks instead, told the agent's id and type.
    """
    hooks = ctx.run.data.hooks
    if hooks.agent_id is None:
        outcome = await hook(ctx, "Stop", stop_hook_input(ctx.run.data))
    else:
        agent = {
            "agent_id": hooks.agent_id,
            "agent_type": hooks.agent_type,
            "agent_transcript_path": hooks.agent_transcript,
        }
        outcome = await hook(ctx, "SubagentStop", {**stop_hook_input(ctx.run.data), **agent})
    if outcome is None:
        return Event(name="stop_accepted")
    if stopped(outcome):
        return Event(name="stopped_by_hook", data=outcome)
    if outcome.blocked or outcome.decision == "block":
        return Event(name="stop_blocked", data=outcome)
    return Event(name="stop_accepted", data=outcome)


def stop_hook_input(data: HooksRun) -> dict[str, object]:
    """What a Stop hook reads besides the common fields: ``stop_hook_active``, ``last_assistant_message``,
    ``background_tasks`` and ``session_crons``.

    As in Claude Code, ``last_assistant_message`` is the answer's text (:func:`final_text`,
    trimmed) and is left out when the answer ends without text (only thinking, say). The
    two lists are Claude Code 2.1.235's work that would wake the session later (background
    agents, scheduled wake-ups); queryloop has neither, so both are always empty, as Claude
    Code sends them when nothing is pending.
    """
    last: Mapping[str, object] = data.messages.last() or {}
    content = last.get("content") if last.get("role") == "assistant" else None
    text = final_text(content).strip() if isinstance(content, list) else ""
    active = {"stop_hook_active": data.hooks.stop_hook_active}
    pending: dict[str, object] = {"background_tasks": [], "session_crons": []}
    return {**active, "last_assistant_message": text, **pending} if text else {**active, **pending}


def send_stop_feedback(run: RunState[H], event: Event[HookOutcome]) -> H:
    """The hook's reason goes back to the model as the next user turn."""
    reason = "; ".join(event.data.block_reasons) or "A Stop hook asked you to continue."
    message = user_message(f"Stop hook feedback:\n{reason}")
    return with_hooks(evolved(run.data, messages=run.data.messages.append(message)), stop_hook_active=True)


@uses(counters=("stop_hook_blocks",))
def record_block_limit(run: RunState[H], event: Event[HookOutcome]) -> H:
    """Stop hooks blocked as often as the cap allows: the run ends with a warning instead of looping."""
    limit = run.cap("stop_hook_blocks")
    return with_outcome(
        run.data, error=f"Stop hooks blocked {limit} times in a row; stopping instead of looping (warning)"
    )
