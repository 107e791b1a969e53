"""Effects, guards and edge handlers for the example machines in ``machines/examples/`` (``package`` of their YAML).

Each example's ``services`` is a :class:`Feed`: a scripted world (which fetches
fail, how many items exist). Owns nothing the engine or the agent layer needs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

import attrs

from queryloop.fsm import EffectContext, Event, RunState, uses

__all__ = [
    "Feed",
    "ItemsData",
    "call_service",
    "fetch_item",
    "has_more_items",
    "record_item",
    "store_item",
    "wait_backoff",
]


@attrs.frozen(kw_only=True)
class ItemsData:
    """The example's own run data: items processed so far."""

    done: tuple[str, ...] = ()
    pending: str | None = None


class Feed:
    """The scripted world: outcomes per fetch (``ok``/``transient``/``fatal``) and the item count."""

    def __init__(self, outcomes: Iterable[str], items: int = 3, backoff_s: float = 0.0) -> None:
        self.outcomes: deque[str] = deque(outcomes)
        self.items = items
        self.backoff_s = backoff_s

    def next_outcome(self) -> str:
        return self.outcomes.popleft() if self.outcomes else "ok"


async def fetch_item(ctx: EffectContext[ItemsData, Feed]) -> Event[str | None]:
    """Fetch the next item; the feed decides whether the attempt fails."""
    outcome = ctx.services.next_outcome()
    ctx.publish(f"fetch attempt -> {outcome}")
    if outcome == "ok":
        return Event(name="fetched", data=f"item-{len(ctx.run.data.done) + 1}")
    return Event(name="failed_transiently" if outcome == "transient" else "failed_for_good")


async def wait_backoff(ctx: EffectContext[ItemsData, Feed]) -> Event[None]:
    """Sleep before retrying (zero in tests)."""
    await asyncio.sleep(ctx.services.backoff_s)
    return Event(name="elapsed")


async def store_item(ctx: EffectContext[ItemsData, Feed]) -> Event[None]:
    """Store the fetched item; report whether more remain."""
    return Event(name="stored")


async def call_service(ctx: EffectContext[object, Feed]) -> Event[None]:
    """One call to a scripted remote service for the circuit-breaker example."""
    outcome = ctx.services.next_outcome()
    return Event(name="succeeded" if outcome == "ok" else "failed")


@uses(params=("items",))
def has_more_items(run: RunState[ItemsData], event: Event[object]) -> bool:
    """More items remain after the one just stored (guard)."""
    wanted: int = run.params["items"]
    return len(run.data.done) < wanted


def record_item(run: RunState[ItemsData], event: Event[str]) -> ItemsData:
    """Remember the fetched item (edge handler: it returns the new run data)."""
    return attrs.evolve(run.data, done=(*run.data.done, str(event.data)))
