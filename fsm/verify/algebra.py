"""How bounds combine: the operations a bound is built of, as numbers at given caps (:class:`Numbers`) or
as intervals over a box of caps (:class:`Box`). The same operations as expressions are ``expr``'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from ..model.spec import CounterSpec, MachineSpec, TransitionSpec

__all__ = ["Algebra", "Box", "Numbers", "Span", "V", "Value"]

Value = float  # a bound's value: an integer, or math.inf
V = TypeVar("V")


class Algebra(Protocol[V]):
    """How bounds are combined: as numbers at fixed caps (:class:`Numbers`) or as expressions (:class:`Symbols`)."""

    def const(self, n: float) -> V: ...
    def cap(self, counter: CounterSpec) -> V: ...
    def add(self, terms: Iterable[V]) -> V: ...
    def sub(self, a: V, b: V) -> V: ...
    def mul(self, a: V, b: V) -> V: ...
    def max(self, terms: Iterable[V]) -> V: ...
    def min(self, terms: Iterable[V]) -> V: ...
    def when(self, cap: V, value: V) -> V: ...
    def fires(self, t: TransitionSpec) -> bool: ...


class Numbers:
    """Bounds as numbers at the caps ``params``. An edge whose cap is 0 there is left out (no run takes it),
    unless ``as_expressions``: then, as in an :class:`Expr`, only one whose cap is the literal 0, so the bound
    is the expression's value (what :func:`runs_of_steps` needs: its steps from a cap of 0 are the
    expression's, one unit each, not the first one also making an edge possible)."""

    def __init__(self, spec: MachineSpec, params: Mapping[str, object], *, as_expressions: bool = False) -> None:
        self.spec, self.params = spec, params
        self.as_expressions = as_expressions
        self.caps: dict[str, float] = {}

    def const(self, n: float) -> float:
        return n

    def cap(self, counter: CounterSpec) -> float:
        found = self.caps.get(counter.name)
        if found is None:
            cap = self.spec.cap_of(counter, self.params)
            found = self.caps[counter.name] = math.inf if cap is None else cap
        return found

    def add(self, terms: Iterable[float]) -> float:
        values = list(terms)
        return math.inf if math.inf in values else sum(values)

    def sub(self, a: float, b: float) -> float:
        return math.inf if a == math.inf else a - b

    def mul(self, a: float, b: float) -> float:
        return 0 if 0 in (a, b) else a * b

    def max(self, terms: Iterable[float]) -> float:
        return max(terms)

    def min(self, terms: Iterable[float]) -> float:
        return min(terms)

    def when(self, cap: float, value: float) -> float:
        return value if cap > 0 else -math.inf

    def fires(self, t: TransitionSpec) -> bool:
        if self.as_expressions:
            return not self.spec.never_fires(t)
        return t.counter is None or self.cap(self.spec.counter_map[t.counter]) > 0


Span = tuple[float, float]  # the least and the most a bound may be over a box of caps


class Box:
    """Interval arithmetic: a bound's least and most over every cap from ``low`` to ``high`` (a null param in
    ``high``: no limit). Each operation's span holds every value the operation takes on its arguments' spans,
    so the most of a figure is a bound for every setting in the box: no monotonicity in the caps is assumed
    (a bound subtracts charges, and a larger cap may take a path a smaller one does not)."""

    def __init__(self, spec: MachineSpec, low: Mapping[str, object], high: Mapping[str, object]) -> None:
        self.low, self.high = Numbers(spec, low), Numbers(spec, high)

    def const(self, n: float) -> Span:
        return (n, n)

    def cap(self, counter: CounterSpec) -> Span:
        return (self.low.cap(counter), self.high.cap(counter))

    def add(self, terms: Iterable[Span]) -> Span:
        spans = list(terms)
        return (self.low.add(a for a, _ in spans), self.high.add(b for _, b in spans))

    def mul(self, a: Span, b: Span) -> Span:
        corners = [self.low.mul(x, y) for x in a for y in b]
        return (min(corners), max(corners))

    def max(self, terms: Iterable[Span]) -> Span:
        spans = list(terms)
        return (max(a for a, _ in spans), max(b for _, b in spans))

    def min(self, terms: Iterable[Span]) -> Span:
        spans = list(terms)
        return (min(a for a, _ in spans), min(b for _, b in spans))

    def when(self, cap: Span, value: Span) -> Span:
        return (value[0] if cap[0] > 0 else -math.inf, value[1] if cap[1] > 0 else -math.inf)
