"""What a handler says it reads of the machine: counter, state and param names, checked at load.

Owns the :func:`uses` decorator and :class:`Uses`. A guard, effect or edge handler
that reads ``run.count("api_retries")``, compares ``run.state`` with a name or reads
a param declares those names; ``queryloop.fsm.load`` then refuses a machine that
binds the handler but does not declare them — a renamed counter fails when the
YAML is loaded, not when the edge first fires. Does not enforce the reads at run
time (``RunState.count`` raises on an unknown name anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["Uses", "uses", "uses_of"]

F = TypeVar("F", bound=Callable[..., Any])

_ATTRIBUTE = "__queryloop_uses__"


@attrs.frozen(kw_only=True)
class Uses:
    """The machine names one handler reads."""

    counters: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    params: tuple[str, ...] = ()


def uses(
    *, counters: tuple[str, ...] = (), states: tuple[str, ...] = (), params: tuple[str, ...] = ()
) -> Callable[[F], F]:
    """Declare the counters, states and params the decorated handler reads."""

    def mark(fn: F) -> F:
        setattr(fn, _ATTRIBUTE, Uses(counters=counters, states=states, params=params))
        return fn

    return mark


def uses_of(fn: Callable[..., Any]) -> Uses | None:
    """What ``fn`` declared with :func:`uses`, if anything."""
    declared = getattr(fn, _ATTRIBUTE, None)
    return declared if isinstance(declared, Uses) else None
