"""Session layer, opening: a new session, or a stored one resumed — its history read, its dangling calls answered.

A resumed call without a result gets the ledger's recorded one, else an error saying it may have partly run.
"""

from __future__ import annotations

import asyncio

from queryloop.fsm import EffectContext, Event, RunState

from ..messages import MessageView, user_message
from ..outcome import Notice, with_outcome
from .data import Restored, S, SessionServices, with_session
from .services.transcript import answer_dangling, load_history, load_ledger

__all__ = ["answer_dangling_calls", "open_session", "resume_history", "start_session"]


def _restore(services: SessionServices) -> Restored:
    store = services.session
    assert store is not None and store.source is not None
    history = load_history(store.source.transcript)
    ledger, ledger_warnings = load_ledger(store.source.ledger)
    answers, found = answer_dangling(history.messages, ledger)
    return Restored(
        messages=history.messages,
        meta=history.meta,
        ledger=ledger,
        leaf=history.leaf,
        answers=tuple(answers),
        recovered=found,
        warnings=(*history.warnings, *ledger_warnings),
    )


async def open_session(ctx: EffectContext[S, SessionServices]) -> Event[Restored | None]:
    """A new session, or the stored one's history (read in a worker thread) and its repairs."""
    store = ctx.services.session
    if not ctx.run.data.session.resume or store is None or store.source is None:
        await asyncio.sleep(0)  # nothing to read; still a point where an interrupt lands
        return Event(name="session_new")
    restored = await asyncio.to_thread(_restore, ctx.services)
    for warning in restored.warnings:
        ctx.publish(Notice(f"warning: {warning}"))
    return Event(name="dangling_calls_found" if restored.answers else "history_restored", data=restored)


def _with_prompt(data: S, messages: MessageView) -> S:
    """``messages`` then this run's prompt; the prompt is no turn of its own (user_turns unchanged).

    A run that compacts the history (/compact) brings no prompt: ``messages`` alone.
    """
    if data.hooks.manual_compact is not None:
        return data.evolve(messages=messages, user_turns=data.user_turns)
    prompt = user_message(data.session.prompt)
    return data.evolve(messages=messages.append(prompt), user_turns=data.user_turns)


def start_session(run: RunState[S], event: Event[None]) -> S:
    """A new session: the prompt is the first message."""
    return _with_prompt(run.data, run.data.messages)


def resume_history(run: RunState[S], event: Event[Restored]) -> S:
    """The stored history, as it ended, then the prompt; the session's ledger comes along."""
    restored = event.data
    data = with_session(run.data, ledger=restored.ledger, restored_leaf=restored.leaf, restored=len(restored.messages))
    return _with_prompt(data, MessageView.of(restored.messages, restored.meta))


def answer_dangling_calls(run: RunState[S], event: Event[Restored]) -> S:
    """The stored history, the results its last tool_use blocks never got, then the prompt."""
    restored = event.data
    data = with_session(
        run.data,
        ledger=restored.ledger,
        restored_leaf=restored.leaf,
        restored=len(restored.messages),
        recovered=frozenset(restored.recovered),
    )
    view = MessageView.of(restored.messages, restored.meta).append(user_message(list(restored.answers)))
    missing = len(restored.answers) - len(restored.recovered)
    note = (
        f"resumed: {len(restored.recovered)} dangling call(s) answered with their recorded result, "
        f"{missing} marked interrupted"
    )
    return with_outcome(_with_prompt(data, view), note=note)
