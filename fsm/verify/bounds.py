"""Symbolic worst cases: each figure as an expression of the caps, from the machine's structure alone.

Owns :func:`figure_bounds`, :func:`figure_values` (the same construction at given caps), the most over a
box of caps and the run budgets paid once per run. Expressions: ``expr``; the walk: ``decompose``. How a
bound is built: docs/machines.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..model.spec import RUN, MachineSpec
from .algebra import Box, Numbers, Value
from .decompose import Memo, effective_resets, figure, figure_effects
from .expr import INF, Expr, Symbols, polynomial_text, polynomial_value

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
    sym = Symbols(spec)
    memo = Memo(spec)
    wanted = None if names is None else set(names)
    skip_run = set(unbounded_runs)
    done: dict[frozenset[str], tuple[Expr, Expr]] = {}  # figures of the same effects: built once
    out: dict[str, Bound] = {}
    for name, effects in figure_effects(spec).items():
        if wanted is not None and name not in wanted:
            continue
        if effects not in done:
            per_step, per_run = figure(spec, effects, sym, memo, per_run=name not in skip_run)
            done[effects] = (per_step, INF if per_run is None else per_run)
        per_step, per_run = done[effects]
        out[name] = Bound(name=name, effects=effects, per_step=per_step, per_run=per_run)
    return out


def figure_values(spec: MachineSpec, params: Mapping[str, object]) -> tuple[dict[str, Value], dict[str, Value]]:
    """Every figure's bound evaluated at ``params`` (each cap as ``spec.cap_of`` resolves it), directly:
    per turn, then per run."""
    num = Numbers(spec, params)
    memo = Memo(spec)
    done: dict[frozenset[str], tuple[Value, Value]] = {}
    per_step: dict[str, Value] = {}
    per_run: dict[str, Value] = {}
    for name, effects in figure_effects(spec).items():
        if effects not in done:
            step, run = figure(spec, effects, num, memo, per_run=True)
            assert run is not None
            done[effects] = (step, run)
        per_step[name], per_run[name] = done[effects]
    return per_step, per_run


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
    return expr.span(spec, Box(spec, low, high))[1]


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
    memo = Memo(spec)
    figures = {name: effects for name, effects in figure_effects(spec).items() if name in set(names)}
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
            num = Numbers(spec, at, as_expressions=True)
            per_point[point] = {e: figure(spec, e, num, memo, per_run=False)[0] for e in set(figures.values())}
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
