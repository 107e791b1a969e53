"""Helpers for driving machines without the world: a scripted effect and event-data guards.

A state whose effect is :func:`scripted` asks its ``services.next_event(run)`` for each outcome, so a test decides
every event and guard value.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from .model.contract import uses
from .run.records import Event, RunState
from .run.runtime import EffectContext

__all__ = ["Script", "broken_handler", "flag_a", "flag_b", "flag_c", "journal", "reads_retries", "scripted"]


class Script:
    """Services for :func:`scripted`: a fixed sequence of events, then ``fallback`` forever."""

    def __init__(self, events: Iterable[Event[object] | str], fallback: Event[object] | str | None = None) -> None:
        self.events: deque[Event[Any] | str] = deque(events)
        self.fallback = fallback

    def next_event(self, run: RunState[Any]) -> Event[object] | str:
        if self.events:
            return self.events.popleft()
        if self.fallback is None:
            raise LookupError(f"script exhausted in state {run.state!r}")
        return self.fallback


async def scripted(ctx: EffectContext[Any, Script]) -> Event[object] | str:
    """An effect that returns whatever the run's services script says."""
    event: Event[object] | str = ctx.services.next_event(ctx.run)
    return event


def _flag(event: Event[object], name: str) -> bool:
    data: object = event.data
    return bool(data.get(name)) if isinstance(data, dict) else False


def flag_a(run: RunState[Any], event: Event[object]) -> bool:
    """True when the event's data has a truthy ``a`` (scripted guard)."""
    return _flag(event, "a")


def flag_b(run: RunState[Any], event: Event[object]) -> bool:
    """True when the event's data has a truthy ``b`` (scripted guard)."""
    return _flag(event, "b")


def flag_c(run: RunState[Any], event: Event[object]) -> bool:
    """True when the event's data has a truthy ``c`` (scripted guard)."""
    return _flag(event, "c")


def journal(run: RunState[tuple[str, ...]], event: Event[object]) -> tuple[str, ...]:
    """An exit or edge handler that appends ``state:event`` to the run's data (a tuple of strings)."""
    return (*run.data, f"{run.state}:{event.name}")


def broken_handler(run: RunState[Any], event: Event[object]) -> object:
    """An exit or edge handler that always raises: the run ends in ``internal_error`` (tests of that path)."""
    raise RuntimeError(f"broken_handler raised on purpose in {run.state!r} on {event.name!r}")


@uses(counters=("retries",))
def reads_retries(run: RunState[Any], event: Event[object]) -> bool:
    """A guard that reads the counter ``retries`` and says so (a machine without it fails to load)."""
    return run.count("retries") < 1
