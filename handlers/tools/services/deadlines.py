"""Each tool call's deadline, all of a run's calls behind one timer.

Owns :class:`CallDeadlines`; running a call under its deadline is ``dispatch``'s.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["CallDeadlines"]

T = TypeVar("T")


class CallDeadlines:
    """A run's tool calls, each in an ``asyncio.timeout(None)`` this expires at the call's deadline.

    One timer, set for the earliest deadline watched, expires every call past its deadline
    when it goes off (the call's task is cancelled, and its ``timeout`` raises TimeoutError),
    then is set again for the earliest left. A call that ends only leaves the watch: no timer
    is set or cancelled per call, as an ``asyncio.timeout(deadline)`` of its own would (about
    2.5 µs a call). The timer is on the loop of the calls watched; a call on another loop
    (a context used again under a new ``asyncio.run``) starts the watch afresh there.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: dict[asyncio.Timeout, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = math.inf

    async def run(self, timeout: asyncio.Timeout, seconds: float, work: Awaitable[T]) -> T:
        """Await ``work`` inside the entered ``timeout``, which expires ``seconds`` from now."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._start_on(loop)
        when = loop.time() + seconds
        self._due[timeout] = when
        if when < self._armed_for:
            self._arm(when)
        try:
            return await work
        finally:
            self._due.pop(timeout, None)

    def _start_on(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._loop, self._due, self._timer, self._armed_for = loop, {}, None, math.inf

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = when
        self._timer = self._loop.call_at(when, self._went_off)

    def _went_off(self) -> None:
        """Expire every call due by the time the timer was set for; set it for the earliest deadline left."""
        assert self._loop is not None
        fired, self._timer, self._armed_for = self._armed_for, None, math.inf
        now = self._loop.time()
        for timeout, when in list(self._due.items()):
            if when <= fired:
                del self._due[timeout]
                timeout.reschedule(now)  # expires at once: its task is cancelled, and it raises TimeoutError
        if self._due:
            self._arm(min(self._due.values()))
