"""Symbolic worst cases: each figure as an expression of the caps, from the machine's structure alone.

Owns :class:`Expr` and :func:`figure_values` (the same construction at given caps). How a bound is built:
docs/machines.md.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import attrs
import networkx as nx

from ..model.spec import RUN, CounterSpec, MachineSpec, TransitionSpec

__all__ = [
    "Bound",
    "Expr",
    "effective_resets",
    "figure_bounds",
    "figure_values",
    "most_over",
    "polynomial_text",
    "polynomial_value",
    "runs_of_steps",
]

Value = float  # a bound's value: an integer, or math.inf
V = TypeVar("V")


# ---- expressions --------------------------------------------------------------------------


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
        self, spec: MachineSpec, box: _Box, memo: dict[Expr, tuple[Value, Value]] | None = None
    ) -> tuple[Value, Value]:
        """The least and the most the expression takes for every cap in ``box`` (interval arithmetic, each
        operation's span holding all its values on its arguments' spans: no monotonicity is assumed)."""
        memo = {} if memo is None else memo
        found = memo.get(self)
        if found is None:
            found = memo[self] = self._span(spec, box, memo)
        return found

    def _span(self, spec: MachineSpec, box: _Box, memo: dict[Expr, tuple[Value, Value]]) -> tuple[Value, Value]:
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


# ---- the decomposition ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Bound:
    """One figure's worst case, per turn (between two progress steps) and per run, as expressions."""

    name: str
    effects: frozenset[str]
    per_step: Expr
    per_run: Expr


def figure_bounds(
    spec: MachineSpec, names: Iterable[str] | None = None, *, unbounded_runs: Iterable[str] = ()
) -> dict[str, Bound]:
    """The bounds of the figures ``names`` (default: every declared figure, then every effect's own)
    as expressions, keyed as ``CheckReport.worst_case``. For the figures in ``unbounded_runs`` (known
    unbounded per run at the params of interest) the per-run expression is not built: it is ∞."""
    sym = _Sym(spec)
    memo = _Memo(spec)
    wanted = None if names is None else set(names)
    skip_run = set(unbounded_runs)
    done: dict[frozenset[str], tuple[Expr, Expr]] = {}  # figures of the same effects: built once
    out: dict[str, Bound] = {}
    for name, effects in _figures(spec).items():
        if wanted is not None and name not in wanted:
            continue
        if effects not in done:
            per_step, per_run = _figure(spec, effects, sym, memo, per_run=name not in skip_run)
            done[effects] = (per_step, INF if per_run is None else per_run)
        per_step, per_run = done[effects]
        out[name] = Bound(name=name, effects=effects, per_step=per_step, per_run=per_run)
    return out


def figure_values(spec: MachineSpec, params: Mapping[str, object]) -> tuple[dict[str, Value], dict[str, Value]]:
    """Every figure's bound evaluated at ``params`` (each cap as ``spec.cap_of`` resolves it), directly:
    per turn, then per run."""
    num = _Num(spec, params)
    memo = _Memo(spec)
    done: dict[frozenset[str], tuple[Value, Value]] = {}
    per_step: dict[str, Value] = {}
    per_run: dict[str, Value] = {}
    for name, effects in _figures(spec).items():
        if effects not in done:
            step, run = _figure(spec, effects, num, memo, per_run=True)
            assert run is not None
            done[effects] = (step, run)
        per_step[name], per_run[name] = done[effects]
    return per_step, per_run


def _figures(spec: MachineSpec) -> dict[str, frozenset[str]]:
    figures = {name: frozenset(effects) for name, effects in spec.figures.items()}
    for s in spec.states:
        if s.effect:
            figures.setdefault(s.effect, frozenset({s.effect}))
    return figures


class _Algebra(Protocol[V]):
    """How bounds are combined: as numbers at fixed caps (:class:`_Num`) or as expressions (:class:`_Sym`)."""

    def const(self, n: float) -> V: ...
    def cap(self, counter: CounterSpec) -> V: ...
    def add(self, terms: Iterable[V]) -> V: ...
    def sub(self, a: V, b: V) -> V: ...
    def mul(self, a: V, b: V) -> V: ...
    def max(self, terms: Iterable[V]) -> V: ...
    def min(self, terms: Iterable[V]) -> V: ...
    def when(self, cap: V, value: V) -> V: ...
    def fires(self, t: TransitionSpec) -> bool: ...


class _Num:
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


class _Box:
    """Interval arithmetic: a bound's least and most over every cap from ``low`` to ``high`` (a null param in
    ``high``: no limit). Each operation's span holds every value the operation takes on its arguments' spans,
    so the most of a figure is a bound for every setting in the box: no monotonicity in the caps is assumed
    (a bound subtracts charges, and a larger cap may take a path a smaller one does not)."""

    def __init__(self, spec: MachineSpec, low: Mapping[str, object], high: Mapping[str, object]) -> None:
        self.low, self.high = _Num(spec, low), _Num(spec, high)

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


MOST_BOXES = 64
"""The most sub-boxes :func:`most_over` splits a box of caps into before it settles for the most of their spans."""


def most_over(expr: Expr, spec: MachineSpec, low: Mapping[str, object], high: Mapping[str, object]) -> Value:
    """A bound of ``expr`` for every setting of the caps from ``low`` to ``high``, proven by interval arithmetic,
    and as tight as :data:`MOST_BOXES` sub-boxes make it: the box whose span reaches highest is split in two at
    the middle of its widest param until no span reaches above a value the expression takes at a corner (then
    that value is the most, exactly) or the boxes are spent (then the highest span, still a bound)."""
    used = _caps_in(expr, spec)
    names = [n for n in used if isinstance(low.get(n), int) and isinstance(high.get(n), int)]
    best = -math.inf
    boxes: list[tuple[Value, dict[str, Any], dict[str, Any]]] = [(_span_top(expr, spec, low, high), {**low}, {**high})]
    for _ in range(MOST_BOXES):
        boxes.sort(key=lambda b: b[0])
        top, lo, hi = boxes[-1]
        best = max(best, expr.evaluate(spec, hi))
        if top <= best:
            return best
        wide = max(names, key=lambda n: hi[n] - lo[n], default=None)
        if wide is None or hi[wide] == lo[wide]:
            return top
        boxes.pop()
        middle = (lo[wide] + hi[wide]) // 2
        for a, b in ((lo[wide], middle), (middle + 1, hi[wide])):
            part_lo, part_hi = {**lo, wide: a}, {**hi, wide: b}
            boxes.append((_span_top(expr, spec, part_lo, part_hi), part_lo, part_hi))
    return max(max(b[0] for b in boxes), best)


def _caps_in(expr: Expr, spec: MachineSpec) -> list[str]:
    """The params whose values ``expr`` reads (the caps of its counters), in the spec's order."""
    found: set[str] = set()
    seen: set[Expr] = set()
    todo = [expr]
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        if e.op == "cap" and isinstance(cap := spec.counter_map[e.counter].cap, str):
            found.add(cap)
        todo.extend(e.args)
    return [p.name for p in spec.params if p.name in found]


def _span_top(expr: Expr, spec: MachineSpec, low: Mapping[str, object], high: Mapping[str, object]) -> Value:
    return expr.span(spec, _Box(spec, low, high))[1]


MOST_BUDGET_POINTS = 256
"""The most settings of the run budgets :func:`runs_of_steps` evaluates a figure at (else it gives no bound)."""


def runs_of_steps(
    spec: MachineSpec, params: Mapping[str, object], names: Iterable[str], *, low: Mapping[str, object] | None = None
) -> dict[str, Value]:
    """Every figure ``names`` per run, each run budget charged once to the whole run, not to every turn.

    A run is at most T = 1 + (the caps of the progress counters) turns, when every progress edge is counted
    by a counter nothing resets. A *run budget* is a session counter nothing resets, not a progress one,
    whose cap is a param no other counter's cap reads (the Stop-hook blocks, the fallback hops). A turn
    that spends ``n_c`` of each budget ``c`` is bounded by the per-turn bound ``B`` with each such cap set to
    ``n_c`` (a bound for every cap value), and over the run the ``n_c`` sum to at most ``c``'s cap ``N_c``.
    With ``D_c`` the largest step ``B(n + e_c) − B(n)`` anywhere in the box ``0 ≤ n ≤ N``, every
    ``B(n) ≤ B(0) + Σ_c D_c·n_c`` (a sum of such steps), so the run is at most ``T·B(0) + Σ_c D_c·N_c``:
    the budgets' terms of the per-turn figure are paid once per run. With ``low``, every other cap ranges from
    ``low`` to ``params`` and ``B(n)`` is their most (:func:`most_over`, proven by intervals): a function of
    ``n`` alone at least the bound at every such setting, so the same sum holds for all of them (T and the
    ``N_c`` are taken at ``params``, the sum growing with each). ``math.inf`` where that does not
    apply (a progress edge not so counted, an unset cap, a box of more than :data:`MOST_BUDGET_POINTS`).
    """
    memo = _Memo(spec)
    figures = {name: effects for name, effects in _figures(spec).items() if name in set(names)}
    unbounded = {name: math.inf for name in figures}
    counted = [t.counter for t in spec.transitions if t.progress]
    if not counted or not all(c is not None and c in memo.never_reset for c in counted):
        return unbounded
    caps = {c.name: spec.cap_of(c, params) for c in spec.counters}
    if any(caps[c] is None for c in counted if c is not None):
        return unbounded
    progress_steps = 1 + sum(int(caps[c] or 0) for c in dict.fromkeys(counted) if c is not None)
    readers: dict[str, int] = {}
    for c in spec.counters:
        if isinstance(c.cap, str):
            readers[c.cap] = readers.get(c.cap, 0) + 1
    budgets = [
        c
        for c in spec.counters
        if c.name in memo.never_reset
        and c.name not in counted
        and c.scope == RUN
        and isinstance(c.cap, str)
        and readers[c.cap] == 1
        and caps[c.name] is not None
    ]
    sizes = [int(caps[c.name] or 0) for c in budgets]
    if math.prod(size + 1 for size in sizes) > MOST_BUDGET_POINTS:
        return unbounded
    # the per-turn bound of every figure at every point of the box (each point: the caps the turn spends)
    per_point: dict[tuple[int, ...], dict[frozenset[str], Value]] = {}
    exprs = None if low is None else {b.effects: b.per_step for b in figure_bounds(spec, figures).values()}
    for point in itertools.product(*(range(size + 1) for size in sizes)):
        spent = {str(c.cap): n - c.cap_offset for c, n in zip(budgets, point, strict=True)}
        at = {**params, **spent}
        if low is None or exprs is None:
            num = _Num(spec, at, as_expressions=True)
            per_point[point] = {e: _figure(spec, e, num, memo, per_run=False)[0] for e in set(figures.values())}
        else:
            per_point[point] = {e: most_over(expr, spec, {**low, **spent}, at) for e, expr in exprs.items()}
    out: dict[str, Value] = {}
    for name, effects in figures.items():
        values = {point: found[effects] for point, found in per_point.items()}
        zero = values[(0,) * len(budgets)]
        steps = [
            max(
                (values[(*n[:i], n[i] + 1, *n[i + 1 :])] - v for n, v in values.items() if n[i] < sizes[i]),
                default=0,
            )
            for i in range(len(budgets))
        ]
        total = progress_steps * zero + sum(max(d, 0) * size for d, size in zip(steps, sizes, strict=True))
        out[name] = math.inf if math.isnan(total) else total
    return out


class _Sym:
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


@attrs.define
class _Memo:
    """What the decomposition finds from the structure alone, kept across the figures of one
    machine: a figure changes only the weights, so each edge set is decomposed once."""

    spec: MachineSpec
    splits: dict[tuple[str, ...], _Split] = attrs.field(factory=dict)
    parts: dict[tuple[str, ...], _Part] = attrs.field(factory=dict)
    never_reset: frozenset[str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.never_reset = frozenset(c.name for c in self.spec.counters) - effective_resets(self.spec)

    def split(self, edges: list[TransitionSpec], nodes: list[str]) -> _Split:
        key = (*nodes, "|", *(t.reason for t in edges))
        found = self.splits.get(key)
        if found is None:
            found = self.splits[key] = _Split.of(edges, nodes)
        return found

    def part(self, inner: list[TransitionSpec]) -> _Part:
        key = tuple(t.reason for t in inner)
        found = self.parts.get(key)
        if found is None:
            found = self.parts[key] = _Part.of(self.spec, inner)
        return found


def effective_resets(spec: MachineSpec) -> frozenset[str]:
    """The counters some edge resets where they may be above 0: a run budget is decided by what a reset does,
    not by where one is written. A reset on an edge leaving a state no walk reaches from an edge counting the
    counter without a reset of it in between (the counter is always 0 there) changes no run."""
    out: set[str] = set()
    for c in spec.counters:
        resetting = [t for t in spec.transitions if c.name in spec.resets_of(t)]
        if resetting and _above_zero_at(spec, c.name) & {t.source for t in resetting}:
            out.add(c.name)
    return frozenset(out)


def _above_zero_at(spec: MachineSpec, counter: str) -> set[str]:
    """The states where ``counter`` may be above 0: reached from an edge that counts it, through edges that do
    not reset it (an edge that counts it leaves it at 1 or more, whatever it resets)."""
    seen = {t.dest for t in spec.transitions if t.counter == counter}
    todo = list(seen)
    while todo:
        here = todo.pop()
        for t in spec.transitions:
            if t.source == here and t.dest not in seen and counter not in spec.resets_of(t):
                seen.add(t.dest)
                todo.append(t.dest)
    return seen


@attrs.frozen
class _Split:
    """An edge set's strongly connected components: their states (in node order), the edges inside
    each, the edges entering each from another, and the components in topological order."""

    comp_of: Mapping[str, int]
    states: Mapping[int, list[str]]
    inner: Mapping[int, list[TransitionSpec]]
    entering: Mapping[int, list[tuple[str, str]]]
    topo: list[int]

    @classmethod
    def of(cls, edges: list[TransitionSpec], nodes: list[str]) -> _Split:
        g: nx.MultiDiGraph[str] = nx.MultiDiGraph()
        g.add_nodes_from(nodes)
        for t in edges:
            g.add_edge(t.source, t.dest, key=t.reason)
        dag = nx.condensation(g)
        members: Mapping[int, set[str]] = nx.get_node_attributes(dag, "members")
        comp_of: Mapping[str, int] = dag.graph["mapping"]
        inner: dict[int, list[TransitionSpec]] = {comp: [] for comp in members}
        entering: dict[int, list[tuple[str, str]]] = {}
        for t in edges:
            if comp_of[t.source] == comp_of[t.dest]:
                inner[comp_of[t.source]].append(t)
            else:
                entering.setdefault(comp_of[t.dest], []).append((t.source, t.dest))
        return cls(
            comp_of=comp_of,
            states={comp: [n for n in nodes if n in states] for comp, states in members.items()},
            inner=inner,
            entering=entering,
            topo=list(nx.topological_sort(dag)),
        )


@attrs.frozen
class _Part:
    """One component's bounding edges (counting a counter no edge inside resets), the plain
    self-loops among them, the rest, and the edges left without them."""

    bounding: list[TransitionSpec]
    plain: list[TransitionSpec]
    rest: list[TransitionSpec]
    residual: list[TransitionSpec]

    @classmethod
    def of(cls, spec: MachineSpec, inner: list[TransitionSpec]) -> _Part:
        reset_inside: set[str] = set()
        for t in inner:
            reset_inside |= spec.resets_of(t)
        bounding = [t for t in inner if t.counter is not None and t.counter not in reset_inside]
        plain = [t for t in bounding if t.source == t.dest and not spec.resets_of(t)]
        return cls(
            bounding=bounding,
            plain=plain,
            rest=[t for t in bounding if t not in plain],
            residual=[t for t in inner if t not in bounding],
        )


def _figure(
    spec: MachineSpec, effects: frozenset[str], alg: _Algebra[V], memo: _Memo, *, per_run: bool
) -> tuple[V, V | None]:
    """The figure of ``effects`` per turn, and per run (``None`` unless ``per_run``)."""
    weight = {s.name: 1 if s.effect in effects else 0 for s in spec.states}
    nodes = list(spec.state_map)
    # An edge whose counter's cap is 0 is never taken: it joins nothing, not even a cycle. (A number at given
    # caps knows which caps are 0 there; an expression knows only the literal ones.)
    taken = [t for t in spec.transitions if alg.fires(t)]
    step_edges = [t for t in taken if not t.progress]
    starts = list(dict.fromkeys([spec.initial, *(t.dest for t in taken if t.progress)]))
    pairs = _pairs(spec, step_edges, nodes, weight, alg, memo)
    per_step = alg.max(value for (v, _), value in pairs.items() if v in starts)
    if not per_run:
        return per_step, None
    pairs = _pairs(spec, taken, nodes, weight, alg, memo)
    whole = alg.max(value for (v, _), value in pairs.items() if v == spec.initial)
    # Also: a run is at most 1 + (progress steps) turns, when every progress edge is counted by a
    # counter nothing resets (the sum of those caps bounds the progress steps).
    counted = [t.counter for t in spec.transitions if t.progress]
    if all(c is not None and c in memo.never_reset for c in counted):
        steps = alg.add(alg.cap(spec.counter_map[c]) for c in dict.fromkeys(counted) if c is not None)
        return per_step, alg.min((whole, alg.mul(alg.add((alg.const(1), steps)), per_step)))
    return per_step, whole


def _pairs(
    spec: MachineSpec,
    edges: list[TransitionSpec],
    nodes: list[str],
    weight: Mapping[str, int],
    alg: _Algebra[V],
    memo: _Memo,
) -> dict[tuple[str, str], V]:
    """``(v, w) ->`` a bound of the weight of a walk from ``v`` to ``w`` over ``edges`` (both ends counted);
    a pair no walk joins is absent."""
    split = memo.split(edges, nodes)
    inside: dict[int, dict[str, list[tuple[str, V]]]] = {}  # component -> v -> [(w, pair bound)]
    for comp, order in split.states.items():
        inner = split.inner[comp]
        pairs = (
            _component_pairs(spec, inner, order, weight, alg, memo)
            if inner
            else {(order[0], order[0]): alg.const(weight[order[0]])}
        )
        by_start: dict[str, list[tuple[str, V]]] = {}
        for (a, w), value in pairs.items():
            by_start.setdefault(a, []).append((w, value))
        inside[comp] = by_start
    rank = {comp: i for i, comp in enumerate(split.topo)}
    out: dict[tuple[str, str], V] = {}
    for v in nodes:
        reach: dict[str, V] = dict(inside[split.comp_of[v]].get(v, ()))
        for comp in split.topo[rank[split.comp_of[v]] + 1 :]:
            into: dict[str, list[V]] = {}
            for x, y in split.entering.get(comp, ()):
                if x in reach:
                    into.setdefault(y, []).append(reach[x])
            if not into:
                continue
            found: dict[str, list[V]] = {}
            for a, values in into.items():
                best = alg.max(values)
                for w, value in inside[comp].get(a, ()):
                    found.setdefault(w, []).append(alg.add((best, value)))
            for w, values in found.items():
                reach[w] = alg.max(values)
        for w, value in reach.items():
            out[(v, w)] = value
    return out


def _component_pairs(
    spec: MachineSpec,
    inner: list[TransitionSpec],
    states: list[str],
    weight: Mapping[str, int],
    alg: _Algebra[V],
    memo: _Memo,
) -> dict[tuple[str, str], V]:
    """Pair bounds inside one strongly connected component (see the module docstring)."""
    part = memo.part(inner)
    if not part.bounding:
        endless = alg.const(math.inf if any(weight[s] for s in states) else 0)
        return {(v, w): endless for v in states for w in states}
    residual = _pairs(spec, part.residual, states, weight, alg, memo)
    # A bounding self-loop that resets nothing returns where it left with every other budget as it
    # was: taking it out of a walk leaves a walk the rest of the analysis bounds, so its traversals
    # only add their target's weight, at most cap times — they cut no piece.
    loops: dict[str, V] = {}
    for t in part.plain:
        assert t.counter is not None
        loops[t.counter] = alg.max((loops.get(t.counter, alg.const(0)), alg.const(weight[t.dest])))
    looped = alg.add(alg.mul(alg.cap(spec.counter_map[c]), value) for c, value in loops.items())
    bounding = part.rest
    if not bounding:
        return {pair: alg.add((value, looped)) for pair, value in residual.items()}
    targets = list(dict.fromkeys(t.dest for t in bounding))
    counted: dict[str, list[TransitionSpec]] = {}
    for t in bounding:
        assert t.counter is not None
        counted.setdefault(t.counter, []).append(t)
    # A walk v → w crossing K ≥ 1 bounding edges b1..bK is: a first piece v → src(b1), K−1 middle
    # pieces target(b_i) → src(b_i+1), a last piece target(bK) → w. A middle piece is charged either
    # to the edge that ends it ("before") or to the one that starts it ("after"); each charging gives
    # a bound (a counter c is crossed at most cap(c) times), and the smaller of the two holds.
    before, after = _charges(residual, counted, targets, bounding, alg)

    def middle(charge: Mapping[str, V]) -> V:
        return alg.add(alg.mul(alg.cap(spec.counter_map[c]), value) for c, value in charge.items())

    gates = {t.counter: alg.cap(spec.counter_map[t.counter]) for t in bounding if t.counter is not None}

    def possible(t: TransitionSpec, value: V) -> V:
        """``value`` when ``t`` can be crossed at all (its cap is not 0), else nothing."""
        assert t.counter is not None
        return alg.when(gates[t.counter], value)

    first, last = _piece_ends(states, bounding, residual, (before, after), alg, possible)
    return _walks(states, residual, (first, last), (middle(before), middle(after)), looped, alg)


def _charges(
    residual: Mapping[tuple[str, str], V],
    counted: Mapping[str, list[TransitionSpec]],
    targets: list[str],
    bounding: list[TransitionSpec],
    alg: _Algebra[V],
) -> tuple[dict[str, V], dict[str, V]]:
    """Each counter's charge for a middle piece, charged to the edge that ends it (before) or starts it (after).

    A charge is at least 0: a pair no walk joins at some caps (an edge whose cap is 0 there) is -∞ in
    ``residual``, and a charge of -∞ subtracted from the first (or last) piece made the bound +∞."""
    zero = alg.const(0)
    before: dict[str, V] = {}
    after: dict[str, V] = {}
    for counter, ts in counted.items():
        pieces = [residual[(a, t.source)] for t in ts for a in targets if (a, t.source) in residual]
        if pieces:
            before[counter] = alg.max((*pieces, zero))
        pieces = [residual[(t.dest, b.source)] for t in ts for b in bounding if (t.dest, b.source) in residual]
        if pieces:
            after[counter] = alg.max((*pieces, zero))
    return before, after


_Ends = dict[str, tuple[V, V]]  # a state -> (charged before, charged after)


def _piece_ends(
    states: list[str],
    bounding: list[TransitionSpec],
    residual: Mapping[tuple[str, str], V],
    charges: tuple[Mapping[str, V], Mapping[str, V]],
    alg: _Algebra[V],
    possible: Callable[[TransitionSpec, V], V],
) -> tuple[_Ends[V], _Ends[V]]:
    """The first piece depends on v alone and the last on w alone: each side's maxima once per state."""
    before, after = charges
    zero = alg.const(0)
    first: _Ends[V] = {}
    last: _Ends[V] = {}
    for v in states:
        starts = [(t, residual[(v, t.source)]) for t in bounding if (v, t.source) in residual]
        if starts:
            first[v] = (
                alg.max(possible(t, alg.sub(p, before.get(t.counter or "", zero))) for t, p in starts),
                alg.max(possible(t, p) for t, p in starts),
            )
        ends = [(t, residual[(t.dest, v)]) for t in bounding if (t.dest, v) in residual]
        if ends:
            last[v] = (
                alg.max(possible(t, p) for t, p in ends),
                alg.max(possible(t, alg.sub(p, after.get(t.counter or "", zero))) for t, p in ends),
            )
    return first, last


def _walks(
    states: list[str],
    residual: Mapping[tuple[str, str], V],
    ends: tuple[_Ends[V], _Ends[V]],
    middles: tuple[V, V],
    looped: V,
    alg: _Algebra[V],
) -> dict[tuple[str, str], V]:
    """Each pair's bound: the walk with no bounding edge, or the smaller of the two chargings, plus the loops."""
    (first, last), (middle_before, middle_after) = ends, middles
    out: dict[tuple[str, str], V] = {}
    for v in states:
        for w in states:
            candidates = [residual[(v, w)]] if (v, w) in residual else []
            if v in first and w in last:
                (start_before, start_after), (end_before, end_after) = first[v], last[w]
                # charged before: b1's own charge is not paid (its piece is the first one);
                # charged after: bK's own charge is not paid (its piece is the last one)
                by_before = alg.add((start_before, middle_before, end_before))
                by_after = alg.add((start_after, middle_after, end_after))
                candidates.append(alg.min((by_before, by_after)))
            if candidates:
                out[(v, w)] = alg.add((alg.max(candidates), looped))
    return out
