"""What a handler or an observer says it reads of the machine: counter, state, param and reason names.

:func:`uses` declares them; ``bind`` refuses a machine that lacks one, so a rename fails at load, not when the
edge fires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["Uses", "reads_of", "uses", "uses_of"]

F = TypeVar("F", bound=Callable[..., Any])

_ATTRIBUTE = "__queryloop_uses__"


@attrs.frozen(kw_only=True)
class Uses:
    """The machine names one handler reads."""

    counters: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    waits: tuple[str, ...] = ()  # an effect that sleeps: the params whose largest value bounds one sleep


def uses(
    *,
    counters: tuple[str, ...] = (),
    states: tuple[str, ...] = (),
    params: tuple[str, ...] = (),
    reasons: tuple[str, ...] = (),
    waits: tuple[str, ...] = (),
) -> Callable[[F], F]:
    """Declare the counters, states, params and reasons the decorated handler (or observer class) reads.

    ``waits``: an effect that sleeps names the params (seconds) whose largest value bounds one of its
    sleeps, as it clamps them; the loader then holds every figure that counts the effect to an ``each_s``
    naming each of them, so ``check``'s worst-case wait is never below what the effect may sleep.
    """

    def mark(fn: F) -> F:
        declared = Uses(counters=counters, states=states, params=(*params, *waits), reasons=reasons, waits=waits)
        setattr(fn, _ATTRIBUTE, declared)
        return fn

    return mark


def uses_of(fn: Callable[..., Any]) -> Uses | None:
    """What ``fn`` declared with :func:`uses`, if anything."""
    declared = getattr(fn, _ATTRIBUTE, None)
    return declared if isinstance(declared, Uses) else None


def reads_of(observer: object) -> Uses:
    """Everything an observer's class (or ``observer``, a class) and its bases declared with :func:`uses`."""
    kind = observer if isinstance(observer, type) else type(observer)
    found = [vars(cls)[_ATTRIBUTE] for cls in kind.__mro__ if isinstance(vars(cls).get(_ATTRIBUTE), Uses)]
    return Uses(
        **{
            kind: tuple(sorted({name for declared in found for name in getattr(declared, kind)}))
            for kind in ("counters", "states", "params", "reasons")
        }
    )
