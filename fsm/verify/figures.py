"""The declared figures beyond one turn: with the child runs a turn starts, over every accepted param
value, and the seconds of waits; each with the findings of a figure above its declared limit.

The bounds themselves are ``bounds``'; the records are ``report``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from ..model.spec import ChildrenSpec, CounterSpec, MachineSpec
from .bounds import Bound, Expr, figure_values, most_over, polynomial_text, polynomial_value, runs_of_steps
from .report import Composed, Finding, OverRanges

__all__ = [
    "composed_figures",
    "composed_findings",
    "figures_over_ranges",
    "polynomial",
    "range_findings",
    "settings",
    "show",
    "waits",
    "without_guard",
]


def without_guard(spec: MachineSpec, guard: str) -> MachineSpec:
    """``spec`` where ``guard`` never holds: without the edges it guards (and their progress bounds)."""
    kept = tuple(t for t in spec.transitions if guard not in t.guards)
    reasons = {t.reason for t in kept}
    return attrs.evolve(
        spec,
        transitions=kept,
        unbounded_by_design={r: d for r, d in spec.unbounded_by_design.items() if r in reasons},
        progress_bounds={r: b for r, b in spec.progress_bounds.items() if r in reasons},
    )


def range_box(spec: MachineSpec, at: Mapping[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    """Every value a run accepts, as a box: each int or number param from 0 to its declared ``max`` (the top
    of a nullable one is ``None``: unset, no limit), every other param at ``at``."""
    low, high = dict(at), dict(at)
    for p in spec.params:
        if p.type in ("int", "number") or (p.type is None and isinstance(p.default, int)):
            low[p.name] = 0
            high[p.name] = None if p.nullable or p.most is None else _whole(p.most)
    return low, high


def _whole(value: float) -> int | float:
    return int(value) if value == int(value) else value


def figures_over_ranges(spec: MachineSpec, at: Mapping[str, object], bounds: Mapping[str, Bound]) -> OverRanges:
    """The figures :class:`OverRanges` holds, from the expressions ``bounds`` (per turn, and per run where
    they are built)."""
    low, high = range_box(spec, at)
    wanted = {*spec.figure_max, *spec.figure_max_with_children}
    per_step = {name: most_over(bounds[name].per_step, spec, low, high) for name in spec.figures if name in wanted}
    per_run = {
        name: most_over(bounds[name].per_run, spec, low, high)
        for name, limit in spec.figure_max_per_run.items()
        if isinstance(limit, int)
    }
    return OverRanges(
        low=low, high=high, per_step=per_step, per_run=per_run, composed=_composed_over(spec, low, high, per_step)
    )


def _composed_over(
    spec: MachineSpec, low: Mapping[str, object], high: Mapping[str, object], own: Mapping[str, float]
) -> dict[str, Composed]:
    """Each ``children:`` entry's figures with ``max_with_children`` over the box, at the top of its ``steps``."""
    names = list(spec.figure_max_with_children)
    out: dict[str, Composed] = {}
    for child in spec.children:
        counter = spec.counter_map[child.starts]
        starts = spec.cap_of(counter, high) or 0
        top = spec.param_map[child.steps].most
        child_run = {name: math.inf for name in names}
        if top is not None and names:
            run_spec = _child_machine(spec, child)
            bounds = set(run_spec.progress_bounds.values())
            child_high = {**high, **{b: int(top) for b in bounds}}
            child_low = {**low, **{b: 0 for b in bounds}}
            if child.depth == 1 and isinstance(counter.cap, str):
                child_high[counter.cap] = child_low[counter.cap] = 0
            child_run = runs_of_steps(run_spec, child_high, names, low=child_low)
        out[child.name] = _composed(child, counter, starts, top, child_run, own)
    return out


def _child_machine(spec: MachineSpec, child: ChildrenSpec) -> MachineSpec:
    """The machine a child runs: at the last depth it starts none, so the edges its ``pending`` guards go."""
    return spec if child.pending is None or child.depth > 1 else without_guard(spec, child.pending)


def _composed(
    child: ChildrenSpec,
    counter: CounterSpec,
    starts: int,
    steps: float | None,
    child_run: dict[str, float],
    own: Mapping[str, float],
) -> Composed:
    """A ``children:`` entry's figures: each its turn's own plus ``starts`` child runs (``child_run`` holds the
    figures composed; ``steps``, the child's turns, None: unbounded)."""
    return Composed(
        starts_param=counter.cap if isinstance(counter.cap, str) else child.starts,
        steps_param=child.steps,
        starts=starts,
        child_steps=None if steps is None else int(steps),
        child_run=child_run,
        per_step={name: own[name] + (starts * child_run[name] if starts else 0) for name in child_run},
    )


def range_findings(spec: MachineSpec, ranges: OverRanges, found: list[Finding]) -> list[Finding]:
    """A figure above its declared limit for some value a run accepts, where it is not above it at the caps
    checked already (``found``: that finding says it, with a run that shows it)."""
    said = {f.message.split("'")[1] for f in found if f.check == "figure" and "'" in f.message}
    out: list[Finding] = []
    where = "for a value a run accepts (every param within its declared `max`)"
    fix = "lower a param's `max`, or raise the figure's"
    for name, most in spec.figure_max.items():
        if name not in said and ranges.per_step[name] > most:
            message = f"{show(ranges.per_step[name])} per {spec.step_scope} {where}, above its declared max {most}"
            out.append(Finding(check="figure", message=f"figure {name!r} may reach {message} ({fix})"))
    for name, value in ranges.per_run.items():
        limit = spec.figure_max_per_run[name]
        if name not in said and isinstance(limit, int) and value > limit:
            message = f"{show(value)} per run {where}, above its declared max_per_run {limit}"
            out.append(Finding(check="figure", message=f"figure {name!r} may reach {message} ({fix})"))
    for child in ranges.composed.values():
        for name, most in spec.figure_max_with_children.items():
            value = child.per_step[name]
            if name not in said and child.child_steps is not None and value > most:
                run = child.child_run[name]
                terms = (
                    f"{show(value - child.starts * run)} + {child.starts} × {show(run)}"
                    if run < math.inf
                    else ("a child's run has no bound there")
                )
                message = (
                    f"figure {name!r} with its children may reach {show(value)} per {spec.step_scope} {where}: "
                    f"{child.steps_param} up to {child.child_steps}, {child.starts_param} up to {child.starts} "
                    f"({terms}), above its declared max_with_children {most} ({fix})"
                )
                out.append(Finding(check="figure", message=message))
    return out


def composed_figures(spec: MachineSpec, at: Mapping[str, Any], own: Mapping[str, float]) -> dict[str, Composed]:
    """Every ``children:`` entry's :class:`Composed` figures at ``at`` (``own``: the turn's own per-turn bounds)."""
    out: dict[str, Composed] = {}
    for child in spec.children:
        counter = spec.counter_map[child.starts]
        starts = spec.cap_of(counter, at) or 0  # the loader holds the cap to a value for every caller
        steps = at.get(child.steps)
        if steps is None:
            child_run = {name: math.inf for name in spec.figures}
        else:
            # with its `starts` counter's cap at 0 at the last depth (the runtime has no sub-agents there)
            run_spec = _child_machine(spec, child)
            child_at = {**at, **{bound: int(steps) for bound in set(run_spec.progress_bounds.values())}}
            if child.depth == 1 and isinstance(counter.cap, str):
                child_at[counter.cap] = 0
            _, values = figure_values(run_spec, child_at)
            # each run budget (Stop-hook blocks, fallback hops) paid once per child run, not once per turn
            budgeted = runs_of_steps(run_spec, child_at, spec.figures)
            child_run = {name: min(values[name], budgeted[name]) for name in spec.figures}
        out[child.name] = _composed(child, counter, starts, steps, child_run, own)
    return out


def composed_findings(spec: MachineSpec, at: Mapping[str, object], composed: Mapping[str, Composed]) -> list[Finding]:
    """A figure with ``max_with_children`` above it per turn with the runs the turn starts, where that is bounded
    (the children's turns set): at ``at``, the budgets of each child run charged over the whole range of
    what one of its turns may spend (:func:`~fsm.verify.bounds.runs_of_steps`)."""
    out: list[Finding] = []
    for child in composed.values():
        for name, most in spec.figure_max_with_children.items():
            value = child.per_step[name]
            if value != math.inf and value > most:
                out.append(
                    Finding(
                        check="figure",
                        message=f"figure {name!r} with its children can reach {show(value)} per {spec.step_scope} at "
                        f"{child.steps_param}={child.child_steps}, {child.starts_param}={child.starts} "
                        f"({show(value - child.starts * child.child_run[name])} + {child.starts} × "
                        f"{show(child.child_run[name])}), above its declared max_with_children {most}",
                    )
                )
    return out


def waits(
    spec: MachineSpec, at: Mapping[str, Any], per_step: Mapping[str, float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Each ``each_s`` figure's seconds per invocation at ``at`` (its largest term) and its worst case per turn."""
    each: dict[str, float] = {}
    for name, terms in spec.figure_each_s.items():
        values = [at.get(t) if isinstance(t, str) else t for t in terms]
        known = [float(v) for v in values if v is not None]
        each[name] = math.inf if len(known) < len(values) else max(known)
    # no invocation waits nothing, however long one may be (and an unbounded count of waits of 0 s is 0 s)
    total = {name: per_step[name] * s if per_step[name] and s else 0.0 for name, s in each.items()}
    return each, total


def polynomial(bound: Expr, spec: MachineSpec, at: Mapping[str, object], figure: float = math.inf) -> str:
    """The bound as a polynomial of the caps; where it is above the ``figure`` at ``at`` (a cap of 0 there), why."""
    poly = bound.resolve(spec, at)
    if poly is None:
        return "unbounded"
    text = polynomial_text(poly)
    value = polynomial_value(poly, at)
    if value > figure:
        text += (
            f" ({show(value)} here, above the bound {show(figure)}: an edge whose cap is 0 here never fires, and no "
            "term of a polynomial is there at every cap of 1 or more and gone at 0)"
        )
    return text


def show(value: float) -> str:
    return "∞" if value == math.inf else str(int(value))


def settings(spec: MachineSpec, values: Mapping[str, object]) -> str:
    caps = {c.cap for c in spec.counters if isinstance(c.cap, str)}
    shown = [f"{k}={values[k]}" for k in values if k in caps]
    return ", ".join(shown) or "the declared caps"
