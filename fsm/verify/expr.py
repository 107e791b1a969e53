"""A bound as an expression of the caps (:class:`Expr`), its constructors, and the polynomial it is printed as.

:class:`Symbols` builds bounds as expressions; what a bound is built of is ``decompose``'s.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..model.spec import CounterSpec, MachineSpec, TransitionSpec
from .algebra import Box, Value

__all__ = [
    "INF",
    "ZERO",
    "Expr",
    "Symbols",
    "add",
    "const",
    "maximum",
    "mul",
    "polynomial_text",
    "polynomial_value",
]


@attrs.frozen(cache_hash=True)
class Expr:
    """A bound as an expression: ``op`` is ``const``, ``cap`` (a counter's cap), ``sum``, ``prod``,
    ``max``, ``min`` or ``when`` (its second argument if its first, a cap, is at least 1; else
    nothing, ``-inf``)."""

    op: str
    value: float = 0  # const: the number (math.inf for unbounded)
    counter: str = ""  # cap: the counter whose cap it is
    args: tuple[Expr, ...] = ()

    def evaluate(self, spec: MachineSpec, params: Mapping[str, object], memo: dict[Expr, Value] | None = None) -> Value:
        """The expression's value with the caps ``params`` give (``math.inf``: unbounded).

        ``memo`` keeps each sub-expression's value for one ``params``: bounds share their pieces,
        and :meth:`resolve` evaluates the same ones again at every level.
        """
        if self.op == "const":
            return self.value
        if memo is None:
            memo = {}
        elif self in memo:
            return memo[self]
        memo[self] = value = self._evaluate(spec, params, memo)
        return value

    def _evaluate(self, spec: MachineSpec, params: Mapping[str, object], memo: dict[Expr, Value]) -> Value:
        if self.op == "cap":
            cap = spec.cap_of(spec.counter_map[self.counter], params)
            return math.inf if cap is None else cap
        values = [a.evaluate(spec, params, memo) for a in self.args]
        if self.op == "sum":
            return math.inf if math.inf in values else sum(values)
        if self.op == "max":
            return max(values)
        if self.op == "min":
            return min(values)
        if self.op == "when":
            return values[1] if values[0] > 0 else -math.inf
        out: Value = 1
        for v in values:
            if v == 0:
                return 0  # no traversal (or a piece of no invocation): nothing, however often
            out *= v
        return out

    def span(
        self, spec: MachineSpec, box: Box, memo: dict[Expr, tuple[Value, Value]] | None = None
    ) -> tuple[Value, Value]:
        """The least and the most the expression takes for every cap in ``box`` (interval arithmetic, each
        operation's span holding all its values on its arguments' spans: no monotonicity is assumed)."""
        memo = {} if memo is None else memo
        found = memo.get(self)
        if found is None:
            found = memo[self] = self._span(spec, box, memo)
        return found

    def _span(self, spec: MachineSpec, box: Box, memo: dict[Expr, tuple[Value, Value]]) -> tuple[Value, Value]:
        if self.op == "const":
            return (self.value, self.value)
        if self.op == "cap":
            return box.cap(spec.counter_map[self.counter])
        spans = [a.span(spec, box, memo) for a in self.args]
        if self.op == "sum":
            return box.add(spans)
        if self.op == "max":
            return box.max(spans)
        if self.op == "min":
            return box.min(spans)
        if self.op == "when":
            return box.when(spans[0], spans[1])
        out = spans[0]
        for factor in spans[1:]:
            out = box.mul(out, factor)
        return out

    def resolve(
        self, spec: MachineSpec, params: Mapping[str, object], memo: dict[Expr, Value] | None = None
    ) -> dict[tuple[str, ...], float] | None:
        """The bound at ``params`` as a polynomial in the cap params (monomial → coefficient), one that holds
        for every cap value; ``None`` when it is unbounded at ``params``.

        Each maximum and minimum takes its branch largest (smallest) at the top of every cap's declared
        range (`max:`; a cap without one, at its value in ``params``), where every edge is possible: the
        branch that grows fastest. The branch largest at ``params`` would not do: with a cap at 0 it leaves
        out that cap's terms (every `when` of it is nothing), and the polynomial printed at caps of 0 was
        below the bound at the defaults, or even at those caps (8 for 14). Where the polynomial is below
        the bound at ``params``, that branch is added in monomial by monomial (every monomial of caps is at
        least 0, so the result is at least both everywhere). That the fastest-growing branch of a maximum
        is at least the others everywhere is not proven here, only checked: the shipped machine's
        polynomials equal the bound at its defaults and at every cap 0, and the tests evaluate them against
        the exploration at small caps. ``memo`` keeps the values of the sub-expressions at ``params`` (see
        :meth:`evaluate`).
        """
        memo = {} if memo is None else memo
        exact = self.evaluate(spec, params, memo)
        if exact == math.inf:
            return None
        top = dict(params)
        for p in spec.params:
            value = params.get(p.name)
            if p.most is not None and isinstance(value, int) and not isinstance(value, bool):
                top[p.name] = int(p.most)
        grows = self._branch(spec, top, {})
        here = self._branch(spec, params, memo)
        if grows is None or here is None:
            return here
        if polynomial_value(grows, params) >= exact:
            return grows
        monos = {*grows, *here}
        both = {mono: max(grows.get(mono, 0), here.get(mono, 0)) for mono in monos}
        return {mono: k for mono, k in both.items() if k}

    def _branch(
        self, spec: MachineSpec, params: Mapping[str, object], memo: dict[Expr, Value]
    ) -> dict[tuple[str, ...], float] | None:
        """The branch of the bound that is largest at ``params``, as a polynomial in the cap params;
        ``None`` when it is unbounded or no branch is possible there. It equals the bound at ``params``."""
        if self.op == "const":
            return None if abs(self.value) == math.inf else ({(): self.value} if self.value else {})
        if self.op == "cap":
            return self._cap_branch(spec, params, memo)
        if self.op in ("max", "min"):
            values = [a.evaluate(spec, params, memo) for a in self.args]
            best = (max if self.op == "max" else min)(values)
            return self.args[values.index(best)]._branch(spec, params, memo)
        if self.op == "when":
            return self.args[1]._branch(spec, params, memo) if self.args[0].evaluate(spec, params, memo) > 0 else None
        if self.op == "prod" and any(a.evaluate(spec, params, memo) == 0 for a in self.args):
            return {}  # nothing, however large the other factors (an unbounded cap times no invocation)
        polys = [a._branch(spec, params, memo) for a in self.args]
        if any(p is None for p in polys):
            return None
        return _combined(self.op, [p for p in polys if p is not None])

    def _cap_branch(
        self, spec: MachineSpec, params: Mapping[str, object], memo: dict[Expr, Value]
    ) -> dict[tuple[str, ...], float] | None:
        """A cap as a polynomial: a constant, or its param plus its offset (``None`` when it is unset)."""
        c = spec.counter_map[self.counter]
        if isinstance(c.cap, int):
            return {(): c.cap} if c.cap else {}
        value = self.evaluate(spec, params, memo)
        if value == math.inf:
            return None
        if value == 0 and c.cap_offset < 0:
            return {}  # clamped at 0 here
        return {(c.cap,): 1, (): c.cap_offset} if c.cap_offset else {(c.cap,): 1}


def _combined(op: str, polys: list[dict[tuple[str, ...], float]]) -> dict[tuple[str, ...], float]:
    """The sum (``op`` "sum") or the product of polynomials, without zero terms."""
    out: dict[tuple[str, ...], float] = {}
    if op == "sum":
        for p in polys:
            for mono, k in p.items():
                out[mono] = out.get(mono, 0) + k
    else:
        out = {(): 1}
        for p in polys:
            out = _times(out, p)
    return {mono: k for mono, k in out.items() if k}


def polynomial_value(poly: Mapping[tuple[str, ...], float], params: Mapping[str, Any]) -> float:
    """The polynomial's value at ``params`` (a null param: unbounded)."""
    total: float = 0
    for mono, k in poly.items():
        term = k
        for name in mono:
            value = params.get(name)
            term *= math.inf if value is None else value
        total += term
    return total


def _times(a: Mapping[tuple[str, ...], float], b: Mapping[tuple[str, ...], float]) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for m1, k1 in a.items():
        for m2, k2 in b.items():
            mono = tuple(sorted(m1 + m2))
            out[mono] = out.get(mono, 0) + k1 * k2
    return out


def polynomial_text(poly: Mapping[tuple[str, ...], float]) -> str:
    """``3·max_retries + max_fallback_hops·max_retries + 11``: highest degree first, the constant last."""
    terms = []
    for mono, k in sorted(poly.items(), key=lambda item: (-len(item[0]), item[0])):
        if not mono:
            continue
        factor = "" if k == 1 else f"{int(k)}·" if k == int(k) else f"{k}·"
        terms.append(factor + "·".join(mono))
    constant = poly.get((), 0)
    text = " + ".join(terms)
    if constant or not text:
        text = f"{text} {'−' if constant < 0 else '+'} {abs(int(constant))}" if text else str(int(constant))
    return text.replace("+ −", "−")


ZERO = Expr("const", 0)
INF = Expr("const", math.inf)


def const(n: float) -> Expr:
    return Expr("const", n)


def add(terms: Iterable[Expr]) -> Expr:
    flat: list[Expr] = []
    total: float = 0
    for t in terms:
        for a in t.args if t.op == "sum" else (t,):
            if a.op == "const":
                total += a.value
            else:
                flat.append(a)
    if total == math.inf:
        return INF
    if total:
        flat.append(const(total))
    return flat[0] if len(flat) == 1 else Expr("sum", args=tuple(flat)) if flat else ZERO


def mul(a: Expr, b: Expr) -> Expr:
    if ZERO in (a, b):
        return ZERO
    if a == const(1):
        return b
    if b == const(1):
        return a
    if a.op == "const" and b.op == "const":
        return const(a.value * b.value)
    return Expr("prod", args=(*(a.args if a.op == "prod" else (a,)), *(b.args if b.op == "prod" else (b,))))


def maximum(terms: Iterable[Expr]) -> Expr:
    seen: dict[Expr, None] = {}
    top = -math.inf
    for t in terms:
        for a in t.args if t.op == "max" else (t,):
            if a.op == "const":
                top = max(top, a.value)
            else:
                seen[a] = None
    flat = list(seen)
    if top == math.inf:
        return INF
    # the constant is kept unless another term is at least as large at every cap value: a term that may be
    # nothing (a `when` whose cap is 0) or below it (a difference) does not make it redundant
    if top > -math.inf and not any(_floor(a) >= top for a in flat):
        flat.append(const(top))
    return flat[0] if len(flat) == 1 else Expr("max", args=tuple(flat)) if flat else const(-math.inf)


@functools.cache
def _floor(e: Expr) -> float:
    """A lower bound of ``e`` at every cap value (``-inf``: none known). A cap is at least 0; a ``when`` may
    be nothing (``-inf``), and so may a sum holding one; a product is at least 0 only of factors at least 0."""
    if e.op == "const":
        return e.value
    if e.op == "cap":
        return 0
    if e.op == "when":
        return -math.inf
    floors = [_floor(a) for a in e.args]
    if e.op == "sum":
        return -math.inf if -math.inf in floors else sum(floors)
    if e.op == "max":
        return max(floors)
    if e.op == "min":
        return min(floors)
    return math.prod(floors) if all(f >= 0 for f in floors) else -math.inf


class Symbols:
    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec

    def const(self, n: float) -> Expr:
        return const(n)

    def cap(self, counter: CounterSpec) -> Expr:
        return const(counter.cap) if isinstance(counter.cap, int) else Expr("cap", counter=counter.name)

    def add(self, terms: Iterable[Expr]) -> Expr:
        return add(terms)

    def sub(self, a: Expr, b: Expr) -> Expr:
        return add((a, mul(const(-1), b)))

    def mul(self, a: Expr, b: Expr) -> Expr:
        return mul(a, b)

    def max(self, terms: Iterable[Expr]) -> Expr:
        return maximum(terms)

    def min(self, terms: Iterable[Expr]) -> Expr:
        args = tuple(dict.fromkeys(terms))
        return args[0] if len(args) == 1 else Expr("min", args=args)

    def when(self, cap: Expr, value: Expr) -> Expr:
        if cap.op == "const":
            return value if cap.value > 0 else const(-math.inf)
        return Expr("when", args=(cap, value))

    def fires(self, t: TransitionSpec) -> bool:
        return not self.spec.never_fires(t)
