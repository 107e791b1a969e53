"""Held steps: a scripted answer that waits for an event instead of a time.

Owns :class:`Hold` (what a step's answer waits for: a request to a named step, or a file) and :class:`Holds`, the
server's record of the named steps reached; not the steps themselves (scenario). The format: docs/scenarios.md.
"""

from __future__ import annotations

import asyncio
import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

__all__ = ["HOLD_MAX_S", "HOLD_SCHEMA", "Hold", "Holds", "hold_of", "hold_problem"]

HOLD_MAX_S = 120.0
"""How long a hold waits unless its ``max_s`` says otherwise: past it, the request is answered with an error that
names the hold (a hold nothing releases is reported, never a hang)."""

_POLL_S = 0.02  # how often a hold on a file looks for it

HOLD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "step": {"type": "string", "minLength": 1},
        "file": {"type": "string", "minLength": 1},
        "max_s": {"type": "number", "exclusiveMinimum": 0},
    },
    "additionalProperties": False,
}


@attrs.frozen(kw_only=True)
class Hold:
    """What a step's answer waits for: a request answered by the step named ``step``, or the file ``file``."""

    step: str | None = None
    file: str | None = None
    max_s: float = HOLD_MAX_S

    def describe(self) -> str:
        """The event, in words (an expired hold's message names it)."""
        if self.step is not None:
            return f"a request to the step named {self.step!r}"
        return f"the file {self.file}"


def hold_of(raw: Mapping[str, Any]) -> Hold | str:
    """The hold a step's ``hold:`` mapping asks for, or what is wrong with it."""
    kinds = [k for k in ("step", "file") if k in raw]
    if len(kinds) != 1:
        found = " and ".join(kinds) if kinds else "neither"
        return f"a hold waits for exactly one of 'step' or 'file', found {found}"
    return Hold(step=raw.get("step"), file=raw.get("file"), max_s=float(raw.get("max_s", HOLD_MAX_S)))


class _Held(Protocol):
    """A scenario step, as far as holds read it."""

    @property
    def where(self) -> str: ...
    @property
    def line(self) -> int | None: ...
    @property
    def name(self) -> str | None: ...
    @property
    def hold(self) -> Hold | None: ...


def hold_problem(steps: Iterable[_Held]) -> tuple[_Held, str, str] | None:
    """The first step whose name or hold cannot work, what is wrong and how to fix it (None: all can)."""
    named: dict[str, str] = {}
    listed = list(steps)
    for step in listed:
        if step.name is not None:
            if step.name in named:
                return step, f"step name {step.name!r} is also used at {named[step.name]}", "give each its own name"
            named[step.name] = step.where
    for step in listed:
        wanted = step.hold.step if step.hold is not None else None
        if wanted is None:
            continue
        if wanted == step.name:
            return step, "the step holds until a request to itself, which it answers first", "name another step"
        if wanted not in named:
            close = difflib.get_close_matches(wanted, list(named), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"named steps: {', '.join(sorted(named)) or 'none'}"
            return step, f"hold names step {wanted!r}, which no step is called", fix
    return None


class Holds:
    """The named steps the server has reached, and the waits on them; ``closing`` ends every wait (the server stops)."""

    def __init__(self, closing: asyncio.Event) -> None:
        self._closing = closing
        self._reached: dict[str, asyncio.Event] = {}

    def reach(self, name: str | None) -> None:
        """A request came in that the step called ``name`` answers: the holds on it are released."""
        if name is not None:
            self._event(name).set()

    def _event(self, name: str) -> asyncio.Event:
        return self._reached.setdefault(name, asyncio.Event())

    async def wait(self, hold: Hold) -> bool:
        """Wait until ``hold``'s event happened or the server stops; False when its ``max_s`` passed first."""
        try:
            async with asyncio.timeout(hold.max_s):
                if hold.step is not None:
                    await self._either(self._event(hold.step))
                else:
                    assert hold.file is not None
                    while not os.path.exists(hold.file) and not self._closing.is_set():
                        await asyncio.sleep(_POLL_S)  # a file tells no one it appeared: looked for
        except TimeoutError:
            return False
        return True

    async def _either(self, event: asyncio.Event) -> None:
        """Until ``event`` is set or the server stops."""
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._closing.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
