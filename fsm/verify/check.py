"""The model checker: the properties a machine declaration must have, proven from the YAML alone.

Its passes are listed in docs/machines.md. No handler runs: a Python guard is a free boolean.
"""

from __future__ import annotations

import math
import operator
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sized
from contextlib import contextmanager
from typing import Any

import attrs
import networkx as nx

from ..model.load import INTERNAL_ERROR
from ..model.properties import broken_guard_meanings, broken_properties
from ..model.spec import RUN, SPAN, MachineSpec, TransitionSpec
from .bounds import (
    Bound,
    Expr,
    figure_bounds,
    figure_values,
    most_over,
    polynomial_text,
    polynomial_value,
    runs_of_steps,
)

__all__ = [
    "CheckReport",
    "Composed",
    "Finding",
    "OverRanges",
    "Progress",
    "check_spec",
    "composed_figures",
    "print_progress",
    "progress_line",
]

Progress = Callable[[str, str, int, float], None]
"""Told, during a long exploration: the machine's name, the phase (``exploring``, ``analysing``), the
configurations found so far and the seconds spent."""

PROGRESS_EVERY_S = 10.0


def progress_line(machine: str, phase: str, configurations: int, elapsed_s: float) -> str:
    """What the command prints each time it is told the exploration's progress."""
    return f"queryloop check: {phase} {machine}: {configurations:,} configurations, {elapsed_s:.0f} s"


def print_progress(machine: str, phase: str, configurations: int, elapsed_s: float) -> None:
    """The command's :data:`Progress`: one line on stderr, so a long exploration shows it is alive."""
    print(progress_line(machine, phase, configurations, elapsed_s), file=sys.stderr, flush=True)


@attrs.define
class _Status:
    """Where an exploration is, read by the progress thread (the search itself never waits for it)."""

    phase: str = "exploring"
    configs: Sized = ()


@contextmanager
def _told_every_few_seconds(progress: Progress | None, machine: str) -> Iterator[_Status]:
    status = _Status()
    if progress is None:
        yield status
        return
    stop = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            progress(machine, status.phase, len(status.configs), time.monotonic() - started)

    thread = threading.Thread(target=beat, name=f"check-progress-{machine}", daemon=True)
    thread.start()
    try:
        yield status
    finally:
        stop.set()
        thread.join()


_Config = tuple[str, tuple[int, ...]]
_Cand = tuple[TransitionSpec, int | None, int, tuple[int, ...]]  # edge, counter index (tracked), cap, resets


@attrs.frozen(kw_only=True)
class Finding:
    """One property violation: which pass, what, the states/reasons involved and a counterexample."""

    check: str
    message: str
    states: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    trace: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class Composed:
    """A turn's figures with the runs of this machine it may start (a ``children:`` entry), at given params.

    ``per_step[f]`` = the turn's own bound of ``f`` + ``starts`` × ``child_run[f]``, where
    ``child_run`` is the per-run bound of the same machine with its turn bound (every
    ``unbounded_by_design`` bound) set to ``child_steps``, its run budgets paid once per run
    (:func:`~fsm.verify.bounds.runs_of_steps`); infinite when ``child_steps`` is unset.
    Depth 1: a child starts none, so its run adds no children of its own. Each term is a
    proven bound, so the sum is one, provided a child starts only on an edge its ``starts``
    counter counts (the machine's: the engine takes none past the cap in a step) and runs
    with ``child_steps`` as its step bound.
    """

    starts_param: str  # the param that caps the starts (the counter's name when its cap is a number)
    steps_param: str
    starts: int
    child_steps: int | None
    child_run: Mapping[str, float]
    per_step: Mapping[str, float]


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


@attrs.frozen(kw_only=True)
class OverRanges:
    """The declared figures for every value a run accepts: each int or number param from 0 to its declared
    ``max`` (``low`` to ``high``; a nullable one also unset, ``None`` in ``high``), every other at ``at``.

    ``per_step`` (the figures with a ``max``) and ``per_run`` (those with a number as ``max_per_run``) are
    proven by interval arithmetic over that box (:func:`~fsm.verify.bounds.most_over`), with no monotonicity
    in the caps assumed. ``composed`` is each ``children:`` entry's turn with the runs it starts, for every
    value of its ``steps`` param up to its ``max`` (unset, it is unbounded by design): its own figure, plus
    the most starts times a child run whose run budgets are paid once and whose other caps range over the box.
    """

    low: Mapping[str, Any]
    high: Mapping[str, Any]
    per_step: Mapping[str, float]
    per_run: Mapping[str, float]
    composed: Mapping[str, Composed]


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
            run_spec = spec if child.pending is None or child.depth > 1 else without_guard(spec, child.pending)
            bounds = set(run_spec.progress_bounds.values())
            child_high = {**high, **{b: int(top) for b in bounds}}
            child_low = {**low, **{b: 0 for b in bounds}}
            if child.depth == 1 and isinstance(counter.cap, str):
                child_high[counter.cap] = child_low[counter.cap] = 0
            child_run = runs_of_steps(run_spec, child_high, names, low=child_low)
        out[child.name] = Composed(
            starts_param=counter.cap if isinstance(counter.cap, str) else child.starts,
            steps_param=child.steps,
            starts=starts,
            child_steps=None if top is None else int(top),
            child_run=child_run,
            per_step={name: own[name] + (starts * child_run[name] if starts else 0) for name in names},
        )
    return out


def _range_findings(spec: MachineSpec, ranges: OverRanges, found: list[Finding]) -> list[Finding]:
    """A figure above its declared limit for some value a run accepts, where it is not above it at the caps
    checked already (``found``: that finding says it, with a run that shows it)."""
    said = {f.message.split("'")[1] for f in found if f.check == "figure" and "'" in f.message}
    out: list[Finding] = []
    where = "for a value a run accepts (every param within its declared `max`)"
    fix = "lower a param's `max`, or raise the figure's"
    for name, most in spec.figure_max.items():
        if name not in said and ranges.per_step[name] > most:
            message = f"{_show(ranges.per_step[name])} per {spec.step_scope} {where}, above its declared max {most}"
            out.append(Finding(check="figure", message=f"figure {name!r} may reach {message} ({fix})"))
    for name, value in ranges.per_run.items():
        limit = spec.figure_max_per_run[name]
        if name not in said and isinstance(limit, int) and value > limit:
            message = f"{_show(value)} per run {where}, above its declared max_per_run {limit}"
            out.append(Finding(check="figure", message=f"figure {name!r} may reach {message} ({fix})"))
    for child in ranges.composed.values():
        for name, most in spec.figure_max_with_children.items():
            value = child.per_step[name]
            if name not in said and child.child_steps is not None and value > most:
                run = child.child_run[name]
                terms = (
                    f"{_show(value - child.starts * run)} + {child.starts} × {_show(run)}"
                    if run < math.inf
                    else ("a child's run has no bound there")
                )
                message = (
                    f"figure {name!r} with its children may reach {_show(value)} per {spec.step_scope} {where}: "
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
            # a child at the last depth starts none: its run is the machine's without the edges `pending` guards,
            # with its `starts` counter's cap at 0 (the runtime has no sub-agents there: nothing is admitted)
            run_spec = spec if child.pending is None or child.depth > 1 else without_guard(spec, child.pending)
            child_at = {**at, **{bound: int(steps) for bound in set(run_spec.progress_bounds.values())}}
            if child.depth == 1 and isinstance(counter.cap, str):
                child_at[counter.cap] = 0
            _, values = figure_values(run_spec, child_at)
            # each run budget (Stop-hook blocks, fallback hops) paid once per child run, not once per turn
            budgeted = runs_of_steps(run_spec, child_at, spec.figures)
            child_run = {name: min(values[name], budgeted[name]) for name in spec.figures}
        out[child.name] = Composed(
            starts_param=counter.cap if isinstance(counter.cap, str) else child.starts,
            steps_param=child.steps,
            starts=starts,
            child_steps=None if steps is None else int(steps),
            child_run=child_run,
            per_step={name: own[name] + (starts * child_run[name] if starts else 0) for name in spec.figures},
        )
    return out


@attrs.frozen(kw_only=True)
class CheckReport:
    """What the checker proved or found for one machine, with its figures.

    ``per_step`` / ``per_run`` are the symbolic bounds evaluated at ``at`` (the defaults,
    updated by the caller's params); ``math.inf`` is unbounded. When the configurations
    were explored (at ``params``), ``worst_case`` holds the exact per-turn figures there and
    ``reachable`` every configuration (counters whose cap is unset are always 0 there).
    """

    machine: str
    path: str
    states: int
    transitions: int
    findings: tuple[Finding, ...]
    step: str = SPAN  # the scope the figures "per" it are counted over (the machine's widest: progress ends it)
    # per declared figure, per step and per run: the bound's largest branch at `at`, as a polynomial of the caps
    expressions: Mapping[str, tuple[str, str]] = attrs.field(factory=dict, repr=False)
    at: Mapping[str, Any] = attrs.field(factory=dict)
    per_step: Mapping[str, float] = attrs.field(factory=dict)
    per_run: Mapping[str, float] = attrs.field(factory=dict)
    unbounded_by_design: Mapping[str, str] = attrs.field(factory=dict)
    explored: bool = False
    configurations: int = 0
    params: Mapping[str, Any] = attrs.field(factory=dict)  # the caps explored with
    worst_case: Mapping[str, int] = attrs.field(factory=dict)  # explored: max invocations between progress steps
    worst_case_per_run: Mapping[str, int] = attrs.field(factory=dict)  # explored, when every run is bounded
    symbolic_at_params: Mapping[str, float] = attrs.field(factory=dict)  # the bounds at the explored caps
    symbolic_per_run_at_params: Mapping[str, float] = attrs.field(factory=dict)
    defaults: Mapping[str, Any] = attrs.field(factory=dict)
    # per `children:` entry: each declared figure per turn with the children the turn may start (at `at`)
    composed: Mapping[str, Composed] = attrs.field(factory=dict)
    # per figure with `each_s`: the seconds one invocation may take at `at` (the largest of its terms), and the
    # worst-case seconds per turn (per_step × that); inf when a term is an unset param
    each_s: Mapping[str, float] = attrs.field(factory=dict)
    wait_s_per_step: Mapping[str, float] = attrs.field(factory=dict)
    # the declared figures for every value a run accepts (each param within its declared range)
    over_ranges: OverRanges | None = None
    reachable: frozenset[tuple[str, tuple[int, ...]]] = attrs.field(factory=frozenset, repr=False, eq=False)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        step = self.step  # the keys name the machine's step scope

        out: dict[str, object] = {
            "machine": self.machine,
            "path": self.path,
            "ok": self.ok,
            "states": self.states,
            "transitions": self.transitions,
            "figures_at": dict(self.at),
            f"worst_case_per_{step}": {k: _json_int(v) for k, v in self.per_step.items()},
            "worst_case_per_run": {k: _json_int(v) for k, v in self.per_run.items()},
            "expressions": {
                name: {f"per_{step}": one, "per_run": all_} for name, (one, all_) in self.expressions.items()
            },
            "unbounded_by_design": dict(self.unbounded_by_design),
            "param_defaults": dict(self.defaults),
            "findings": [f.to_json() for f in self.findings],
        }
        if self.wait_s_per_step:
            out[f"worst_wait_s_per_{step}"] = {
                name: {"each_s": _json_number(self.each_s[name]), f"per_{step}_s": _json_number(s)}
                for name, s in self.wait_s_per_step.items()
            }
        if self.composed:
            out[f"composed_per_{step}"] = _composed_json(self.composed, step)
        if self.over_ranges is not None:
            out["over_ranges"] = _ranges_json(self.over_ranges, step)
        if self.explored:
            out["explored"] = {
                "params": dict(self.params),
                "configurations": self.configurations,
                f"worst_case_per_{step}": dict(self.worst_case),
                f"symbolic_per_{step}": {k: _json_int(v) for k, v in self.symbolic_at_params.items()},
                "worst_case_per_run": dict(self.worst_case_per_run),
                "symbolic_per_run": {k: _json_int(v) for k, v in self.symbolic_per_run_at_params.items()},
            }
        return out


def _ranges_json(ranges: OverRanges, step: str) -> dict[str, object]:
    return {
        "params": {k: [ranges.low[k], ranges.high[k]] for k in ranges.high if ranges.low[k] != ranges.high[k]},
        f"worst_case_per_{step}": {k: _json_int(v) for k, v in ranges.per_step.items()},
        "worst_case_per_run": {k: _json_int(v) for k, v in ranges.per_run.items()},
        f"composed_per_{step}": _composed_json(ranges.composed, step),
    }


def _composed_json(composed: Mapping[str, Composed], step: str) -> dict[str, object]:
    """Each ``children:`` entry's figures, keyed in the machine's step scope."""
    return {
        name: {
            f"starts_per_{step}": c.starts,
            f"child_{step}s": c.child_steps,
            "child_run": {k: _json_int(v) for k, v in c.child_run.items()},
            f"per_{step}": {k: _json_int(v) for k, v in c.per_step.items()},
        }
        for name, c in composed.items()
    }


def _json_int(v: float) -> int | None:
    """A count for JSON: ``None`` for unbounded."""
    return None if v == math.inf else int(v)


def check_spec(
    spec: MachineSpec,
    params: Mapping[str, object] | None = None,
    *,
    explore: bool = True,
    max_configs: int = 2_000_000,
    progress: Progress | None = None,
) -> CheckReport:
    """Run the passes over ``spec``.

    The figures are evaluated at the params' defaults updated by ``params``; the exploration
    (when ``explore``) runs at each param's ``check`` value (else its default), updated by
    ``params``, and is exact for those caps only. Passes 1 and 2 hold for every cap value.
    An exploration that runs long calls ``progress`` about every ten seconds.
    """
    at = spec.param_defaults
    at.update(params or {})
    findings = _graph_pass(spec)
    findings += _shadow_pass(spec)
    findings += _termination_pass(spec)
    findings += _run_pass(spec)
    findings += _loophole_pass(spec)
    findings += [
        Finding(check="property", message=b.message, reasons=b.reasons, states=(b.source,) if b.source else ())
        for b in broken_properties(spec)
    ]
    findings += [
        Finding(check="guard", message=b.message, reasons=b.reasons, states=(b.source,) if b.source else ())
        for b in broken_guard_meanings(spec)
    ]
    per_step, per_run = figure_values(spec, at)
    # a per-run expression is shown (and used) only where the run is bounded at these params
    bounds = figure_bounds(spec, spec.figures, unbounded_runs=[n for n, v in per_run.items() if v == math.inf])
    for name, most in spec.figure_max.items():
        if per_step[name] > most:
            findings.append(
                Finding(
                    check="figure",
                    message=f"figure {name!r} can reach {_show(per_step[name])} per {spec.step_scope} at "
                    f"{_settings(spec, at)}, above its declared max {most} "
                    f"(there the bound is {_polynomial(bounds[name].per_step, spec, at)})",
                )
            )
    for name, limit in spec.figure_max_per_run.items():
        run_most = spec.limit_of(limit, at)
        if run_most is not None and per_run[name] > run_most:
            findings.append(
                Finding(
                    check="figure",
                    message=f"figure {name!r} can reach {_show(per_run[name])} per run at {_settings(spec, at)}, "
                    f"above its declared max_per_run {limit} = {run_most} "
                    f"(there the bound is {_polynomial(bounds[name].per_run, spec, at)})",
                )
            )
    each_s, wait_s = _waits(spec, at, per_step)
    composed = composed_figures(spec, at, per_step)
    findings += _composed_findings(spec, at, composed)
    ranges = figures_over_ranges(spec, at, bounds) if spec.figure_max or spec.figure_max_per_run else None
    if ranges is not None:
        findings += _range_findings(spec, ranges, findings)
    report = CheckReport(
        machine=spec.name,
        path=spec.path,
        states=len(spec.states),
        transitions=len(spec.transitions),
        findings=tuple(findings),
        step=spec.step_scope,
        expressions={
            name: (_polynomial(b.per_step, spec, at, per_step[name]), _polynomial(b.per_run, spec, at, per_run[name]))
            for name, b in bounds.items()
        },
        at=at,
        per_step=per_step,
        per_run=per_run,
        unbounded_by_design=dict(spec.unbounded_by_design),
        defaults=spec.param_defaults,
        composed=composed,
        each_s=each_s,
        wait_s_per_step=wait_s,
        over_ranges=ranges,
    )
    if not explore:
        return report
    values = spec.param_check_values
    values.update(params or {})
    with _told_every_few_seconds(progress, spec.name) as status:
        explored, more, worst, worst_run = _exploration_pass(spec, values, max_configs, status)
    shadowed = {f.reasons for f in findings if f.check == "dead_edge"}
    more = [f for f in more if not (f.check == "dead_edge" and f.reasons in shadowed)]
    symbolic, symbolic_run = figure_values(spec, values)
    for per, exact_values, bound_values in ((spec.step_scope, worst, symbolic), (RUN, worst_run, symbolic_run)):
        for name, exact in exact_values.items():
            if exact > bound_values[name]:
                more.append(
                    Finding(
                        check="bound",
                        message=f"{name!r}: exploration found {exact} per {per} at {_settings(spec, values)}, "
                        f"above the symbolic bound {_show(bound_values[name])} (a checker bug: please report it)",
                    )
                )
    return attrs.evolve(
        report,
        findings=(*report.findings, *more),
        explored=True,
        configurations=len(explored),
        reachable=explored,
        params=values,
        worst_case=worst,
        worst_case_per_run=worst_run,
        symbolic_at_params=symbolic,
        symbolic_per_run_at_params=symbolic_run,
    )


def _composed_findings(spec: MachineSpec, at: Mapping[str, object], composed: Mapping[str, Composed]) -> list[Finding]:
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
                        message=f"figure {name!r} with its children can reach {_show(value)} per {spec.step_scope} at "
                        f"{child.steps_param}={child.child_steps}, {child.starts_param}={child.starts} "
                        f"({_show(value - child.starts * child.child_run[name])} + {child.starts} × "
                        f"{_show(child.child_run[name])}), above its declared max_with_children {most}",
                    )
                )
    return out


def _waits(
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


def _json_number(v: float) -> float | None:
    return None if v == math.inf else v


def _polynomial(bound: Expr, spec: MachineSpec, at: Mapping[str, object], figure: float = math.inf) -> str:
    """The bound as a polynomial of the caps; where it is above the ``figure`` at ``at`` (a cap of 0 there), why."""
    poly = bound.resolve(spec, at)
    if poly is None:
        return "unbounded"
    text = polynomial_text(poly)
    value = polynomial_value(poly, at)
    if value > figure:
        text += (
            f" ({_show(value)} here, above the bound {_show(figure)}: an edge whose cap is 0 here never fires, and no "
            "term of a polynomial is there at every cap of 1 or more and gone at 0)"
        )
    return text


def _few(names: tuple[str, ...], most: int = 8) -> str:
    """``['a', 'b', …]``, at most ``most`` names and how many more."""
    shown = ", ".join(repr(n) for n in names[:most])
    return f"[{shown}, … {len(names) - most} more]" if len(names) > most else f"[{shown}]"


def _show(value: float) -> str:
    return "∞" if value == math.inf else str(int(value))


def _settings(spec: MachineSpec, values: Mapping[str, object]) -> str:
    caps = {c.cap for c in spec.counters if isinstance(c.cap, str)}
    shown = [f"{k}={values[k]}" for k in values if k in caps]
    return ", ".join(shown) or "the declared caps"


# ---- pass 1: graph ------------------------------------------------------------------------


def _graph_pass(spec: MachineSpec) -> list[Finding]:
    out: list[Finding] = []
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_nodes_from(s.name for s in spec.states)
    # an edge counted by a counter whose cap is the literal 0 never fires: what only it reaches is unreachable
    g.add_edges_from((t.source, t.dest) for t in spec.transitions if not spec.never_fires(t))
    reachable = nx.descendants(g, spec.initial) | {spec.initial}
    for dead in spec.transitions:
        if spec.never_fires(dead):
            out.append(
                Finding(
                    check="dead_edge",
                    message=f"transition {dead.reason!r} from {dead.source!r} can never fire: its counter "
                    f"{dead.counter!r} has the literal cap 0 (a setting of 0 belongs to a param a user sets, "
                    "not to the YAML)",
                    states=(dead.source,),
                    reasons=(dead.reason,),
                )
            )
    for s in spec.states:
        if s.name not in reachable and s.name != INTERNAL_ERROR:  # only the engine enters internal_error
            out.append(
                Finding(
                    check="reachability",
                    message=f"state {s.name!r} is unreachable from {spec.initial!r}",
                    states=(s.name,),
                )
            )
    terminals = set(spec.terminals) - {INTERNAL_ERROR}
    if not terminals:
        out.append(Finding(check="termination", message="the machine declares no terminal state; no run can end"))
    # every state has an abort edge to a terminal, so reaching one is only meaningful without it
    calm: nx.DiGraph[str] = nx.DiGraph()
    calm.add_nodes_from(s.name for s in spec.states)
    calm.add_edges_from((t.source, t.dest) for t in spec.transitions if t.event != spec.abort_event)
    can_end: set[str] = set(terminals)
    for t in terminals:
        can_end |= nx.ancestors(calm, t)
    for s in spec.states:
        if s.terminal:
            continue
        if g.out_degree(s.name) == 0:
            out.append(
                Finding(
                    check="dead_end", message=f"non-terminal state {s.name!r} has no outgoing edge", states=(s.name,)
                )
            )
        elif s.name not in can_end:
            out.append(
                Finding(
                    check="dead_end",
                    message=f"state {s.name!r} can never reach a terminal state unless the run is interrupted "
                    f"({spec.abort_event!r})",
                    states=(s.name,),
                )
            )
    return out


def _shadow_pass(spec: MachineSpec) -> list[Finding]:
    """Candidates that can never be tried: an earlier one with no counter fires whenever they could."""
    out: list[Finding] = []
    for (source, event), cands in spec.candidates().items():
        for i, t in enumerate(cands):
            earlier = next((e for e in cands[:i] if e.counter is None and set(e.guards) <= set(t.guards)), None)
            if earlier is not None:
                held = f"guards {list(earlier.guards)}" if earlier.guards else "no guard"
                out.append(
                    Finding(
                        check="dead_edge",
                        message=f"transition {t.reason!r} from {source!r} on {event!r} can never fire "
                        f"(shadowed by {earlier.reason!r} above it, which fires whenever it could: {held})",
                        states=(source,),
                        reasons=(t.reason,),
                    )
                )
    return out


def _loophole_pass(spec: MachineSpec) -> list[Finding]:
    """Bounds that hold only on paper: a cap that is null at the defaults, a loop no figure limits."""
    out: list[Finding] = []
    bounded_by_design = {
        spec.counter_map[t.counter].name for t in spec.transitions if t.reason in spec.progress_bounds and t.counter
    }
    defaults = spec.param_defaults
    for c in spec.counters:
        if isinstance(c.cap, str) and defaults.get(c.cap) is None and c.name not in bounded_by_design:
            out.append(
                Finding(
                    check="null_cap",
                    message=f"counter {c.name!r} bounds nothing at the defaults: its cap {c.cap!r} defaults to null, "
                    "so the budget or breaker it is meant to be is off unless a user sets it",
                    reasons=tuple(t.reason for t in spec.transitions if t.counter == c.name),
                )
            )
    if not spec.figure_max:
        return out  # a machine that declares no per-turn figure promises no figure to check against
    limited = {e for name in spec.figure_max for e in spec.figures[name]}
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_edges_from((t.source, t.dest) for t in spec.transitions if not t.progress and not spec.never_fires(t))
    looping = {n for scc in nx.strongly_connected_components(g) for n in scc if len(scc) > 1 or g.has_edge(n, n)}
    for s in spec.states:
        if s.name in looping and s.effect and s.effect not in limited:
            out.append(
                Finding(
                    check="figure",
                    message=f"state {s.name!r} runs {s.effect!r} in a recovery cycle, but no figure with a `max:` "
                    "sums it: list it in one, so a change that lets it loop more is caught",
                    states=(s.name,),
                )
            )
    return out


# ---- pass 2: termination (recursive SCC decomposition) ----------------------------------


def _termination_pass(spec: MachineSpec) -> list[Finding]:
    """Per turn: every cycle of non-progress edges is bounded by a counter for every cap value."""
    return _unbounded_cycles(
        spec,
        [t for t in spec.transitions if not t.progress and not spec.never_fires(t)],
        "unbounded recovery cycle",
        "add a `counter:` with a cap to one of its edges, or mark a real forward step `progress: true`",
    )


def _run_pass(spec: MachineSpec) -> list[Finding]:
    """Per run: progress edges bounded too, unless the machine lists them as unbounded by design."""
    per_step = {tuple(sorted(f.states)) for f in _termination_pass(spec)}
    fires = [t for t in spec.transitions if not spec.never_fires(t)]
    reach: nx.DiGraph[str] = nx.DiGraph()
    reach.add_node(spec.initial)
    reach.add_edges_from((t.source, t.dest) for t in fires)
    reached = {spec.initial} | nx.descendants(reach, spec.initial)  # a cycle no run reaches bounds no run
    found = _unbounded_cycles(
        spec,
        [t for t in fires if t.reason not in spec.unbounded_by_design and t.source in reached],
        "unbounded run: a cycle",
        f"count one of its progress edges with a `{RUN}` counter whose cap is an int or a non-nullable "
        "int param, or list a progress edge a user drives under `unbounded_by_design:` with what is unbounded",
    )
    return [attrs.evolve(f, check="progress_bound") for f in found if tuple(sorted(f.states)) not in per_step]


def _unbounded_cycles(spec: MachineSpec, edges: list[TransitionSpec], what: str, fix: str) -> list[Finding]:
    counters = spec.counter_map
    capped = {name for name, c in counters.items() if spec.bounds_always(c)}
    maybe = {name for name in counters if name not in capped}  # capped by a param that may be null
    out: list[Finding] = []

    def analyse(edges: list[TransitionSpec]) -> None:
        g: nx.MultiDiGraph[str] = nx.MultiDiGraph()
        for t in edges:
            g.add_edge(t.source, t.dest, key=t.reason)
        for scc in nx.strongly_connected_components(g):
            inner = [t for t in edges if t.source in scc and t.dest in scc]
            if not inner:
                continue
            reset_inside: set[str] = set()
            for t in inner:
                reset_inside |= spec.resets_of(t)
            bounding = [t for t in inner if t.counter in capped and t.counter not in reset_inside]
            if bounding:
                analyse([t for t in inner if t not in bounding])
                continue
            states = tuple(s.name for s in spec.states if s.name in scc)
            reasons = tuple(dict.fromkeys(t.reason for t in inner))
            resets = sorted({t.counter for t in inner if t.counter in capped} & reset_inside)
            nullable = sorted({t.counter for t in inner if t.counter in maybe and t.counter not in reset_inside})
            progress = [t.reason for t in inner if t.progress]
            detail = ""
            if progress:
                detail += f"; progress edge(s) {progress} are not counted by a bounded {RUN} counter"
            if resets:
                detail += f"; counter(s) {', '.join(map(repr, resets))} are reset inside the cycle"
            if nullable:
                caps = ", ".join(f"{c!r} (cap {counters[c].cap}, which may be null)" for c in nullable)
                detail += f"; counter(s) {caps} bound it only when set"
            if not detail:
                detail = "; no edge in it increments a capped counter"
            out.append(
                Finding(
                    check="termination",
                    message=f"{what} through states {_few(states)} via reasons {_few(reasons)}{detail} ({fix})",
                    states=states,
                    reasons=reasons,
                )
            )

    analyse(edges)
    return out


# ---- pass 3: exhaustive exploration ---------------------------------------------------------


# the breadth-first loop stays in one frame: it runs once per configuration, about a million at the check values
def _exploration_pass(  # noqa: C901
    spec: MachineSpec, params: Mapping[str, object], max_configs: int, status: _Status | None = None
) -> tuple[frozenset[_Config], list[Finding], dict[str, int], dict[str, int]]:
    out: list[Finding] = []
    names = [c.name for c in spec.counters]
    index = {n: i for i, n in enumerate(names)}
    caps = [spec.cap_of(c, params) for c in spec.counters]
    groups = spec.candidates()
    plan = _exploration_plan(spec, caps, index, groups)

    zero = (0,) * len(names)
    terminals = frozenset(spec.terminals)
    start: _Config = (spec.initial, zero)
    ids: dict[_Config, int] = {start: 0}
    configs: list[_Config] = [start]
    parent: list[tuple[int, str] | None] = [None]
    succ: list[list[tuple[int, str]]] = [[]]  # non-progress edges only
    segment_starts = {0}
    progress: list[list[tuple[int, str]]] = [[]]  # progress edges only
    fired: set[tuple[str, str]] = set()
    truncated = False

    def trace_to(node: int) -> tuple[str, ...]:
        path: list[str] = []
        cur: int | None = node
        while cur is not None:
            path.append(f"{configs[cur][0]} {_fmt(names, configs[cur][1])}")
            link = parent[cur]
            if link is None:
                break
            cur, reason = link
            path.append(f"  --{reason}-->")
        return tuple(reversed(path))

    status = status or _Status()
    status.configs = configs
    head = 0
    while head < len(configs):
        node = head
        head += 1
        state, counts = configs[node]
        steps = plan.get(state)
        if steps is None:
            continue
        for event, orders in steps:
            taken: set[int] = set()  # candidates already followed from this configuration on this event
            for tried in orders:
                took = False
                for t, ci, cap, resets in tried:
                    if ci is not None and counts[ci] >= cap:
                        continue
                    if id(t) in taken:
                        took = True
                        break
                    taken.add(id(t))
                    if resets or ci is not None:
                        nxt = list(counts)
                        for r in resets:
                            nxt[r] = 0
                        if ci is not None:
                            nxt[ci] += 1
                        new_counts = tuple(nxt)
                    else:
                        new_counts = counts
                    # a run that ended is its terminal state: its counters no longer matter
                    cfg: _Config = (t.dest, zero) if t.dest in terminals else (t.dest, new_counts)
                    fired.add((t.source, t.reason))
                    took = True
                    target = ids.get(cfg)
                    if target is None:
                        if len(configs) >= max_configs:
                            truncated = True
                            break
                        target = len(configs)
                        ids[cfg] = target
                        configs.append(cfg)
                        parent.append((node, t.reason))
                        succ.append([])
                        progress.append([])
                    if t.progress:
                        segment_starts.add(target)
                        progress[node].append((target, t.reason))
                    else:
                        succ[node].append((target, t.reason))
                    break  # the first candidate that can fire is taken
                if not took:
                    out.append(
                        Finding(
                            check="stuck",
                            message=f"stuck configuration: in {state!r} {_fmt(names, counts)} "
                            f"no edge can fire on {event!r}",
                            states=(state,),
                            trace=trace_to(node),
                        )
                    )
                    break
    status.phase = "analysing"
    if truncated:
        out.append(
            Finding(
                check="exploration",
                message=f"exploration stopped at {max_configs} configurations; lower the caps with params to check",
            )
        )
    out += _dead_edges(spec, {c[0] for c in configs}, fired, groups, caps, index)
    product = _Product(configs=configs, names=names, succ=succ, progress=progress, segment_starts=segment_starts)
    worst, worst_run, cycle_finding = _product_worst_cases(spec, product)
    out += cycle_finding
    if truncated:
        worst, worst_run = {}, {}  # a cut-off exploration proves no figure
    return frozenset(configs), out, worst, worst_run


def _exploration_plan(
    spec: MachineSpec, caps: list[int | None], index: Mapping[str, int], groups: Mapping[Any, Any]
) -> dict[str, list[tuple[str, tuple[tuple[_Cand, ...], ...]]]]:
    """Per state: [(event, orders), ...]; an order is the candidates whose guards all hold under one
    truth assignment of the decision's guard names (one value per name), in YAML order."""
    plan: dict[str, list[tuple[str, tuple[tuple[_Cand, ...], ...]]]] = {}
    for s in spec.states:
        if s.terminal:
            continue
        plan[s.name] = []
        for event in (*s.emits, spec.abort_event):
            cands = []
            for t in groups.get((s.name, event), ()):
                ci = None if t.counter is None or caps[index[t.counter]] is None else index[t.counter]
                cap = caps[ci] if ci is not None else 0
                cands.append((t, ci, cap or 0, tuple(index[c] for c in spec.resets_of(t))))
            plan[s.name].append((event, _orders(cands, caps, index)))
    return plan


def _dead_edges(
    spec: MachineSpec,
    visited: set[str],
    fired: set[tuple[str, str]],
    groups: Mapping[Any, Any],
    caps: list[int | None],
    index: Mapping[str, int],
) -> list[Finding]:
    """Each transition from a state the exploration reached that never fired there."""
    return [
        Finding(
            check="dead_edge",
            message=f"transition {t.reason!r} from {t.source!r} on {t.event!r} can never fire "
            f"({_why_dead(spec, t, groups, caps, index)})",
            states=(t.source,),
            reasons=(t.reason,),
        )
        for t in spec.transitions
        if (t.source, t.reason) not in fired and t.source in visited
    ]


@attrs.frozen
class _Product:
    """The explored (state, counters) product: its configurations and its edges, progress apart."""

    configs: list[_Config]
    names: list[str]
    succ: list[list[tuple[int, str]]]
    progress: list[list[tuple[int, str]]]
    segment_starts: set[int]


def _product_worst_cases(spec: MachineSpec, p: _Product) -> tuple[dict[str, int], dict[str, int], list[Finding]]:
    """The exact worst cases per step and per run, or the product's cycle without a progress edge."""
    order = _topological_order(p.succ)
    if order is None:
        cycle = _find_cycle(p.succ)
        reasons = tuple(reason for _, reason in cycle)
        finding = Finding(
            check="termination",
            message=f"the (state, counters) product has a cycle without a progress edge via reasons {list(reasons)}",
            states=tuple(dict.fromkeys(p.configs[n][0] for n, _ in cycle)),
            reasons=reasons,
            trace=tuple(f"{p.configs[n][0]} {_fmt(p.names, p.configs[n][1])}" for n, _ in cycle),
        )
        return {}, {}, [finding]
    worst = _worst_case(spec, p.configs, p.succ, order, p.segment_starts)
    whole = [a + b for a, b in zip(p.succ, p.progress, strict=True)]
    run_order = _topological_order(whole)
    if run_order is None:  # some run is unbounded at these caps
        return worst, {}, []
    return worst, _worst_case(spec, p.configs, whole, run_order, {0}), []


def _orders(cands: list[_Cand], caps: list[int | None], index: Mapping[str, int]) -> tuple[tuple[_Cand, ...], ...]:
    """The distinct candidate lists one decision can try, one per truth assignment of its guards.

    A guard name has one truth value per decision (the runtime calls a guard once per
    ``(run, event)``: a name cannot be true on one edge and false on the next). The cap of a
    counter whose cap is an unset param is untracked and explored as a free guard of its own.
    """
    names: list[str] = []
    for t, _, _, _ in cands:
        names.extend(_guard_names(t, caps, index))
    names = list(dict.fromkeys(names))
    out: dict[tuple[int, ...], tuple[_Cand, ...]] = {}
    for bits in range(1 << len(names)):
        true = {n for i, n in enumerate(names) if bits >> i & 1}
        chosen = tuple(i for i, c in enumerate(cands) if all(g in true for g in _guard_names(c[0], caps, index)))
        out.setdefault(chosen, tuple(cands[i] for i in chosen))
    return tuple(out.values())


def _guard_names(t: TransitionSpec, caps: list[int | None], index: Mapping[str, int]) -> tuple[str, ...]:
    free_cap = t.counter is not None and caps[index[t.counter]] is None
    return (*t.guards, f"{t.counter} < unset cap") if free_cap else t.guards


def _topological_order(succ: list[list[tuple[int, str]]]) -> list[int] | None:
    """Kahn's algorithm over the non-progress product; ``None`` when it has a cycle."""
    indegree = [0] * len(succ)
    for edges in succ:
        for target, _ in edges:
            indegree[target] += 1
    order = [n for n, d in enumerate(indegree) if d == 0]
    i = 0
    while i < len(order):
        for target, _ in succ[order[i]]:
            indegree[target] -= 1
            if indegree[target] == 0:
                order.append(target)
        i += 1
    return order if len(order) == len(succ) else None


def _find_cycle(succ: list[list[tuple[int, str]]]) -> list[tuple[int, str]]:
    """One cycle of the product as (node, reason of the edge leaving it), by iterative DFS."""
    colour = [0] * len(succ)  # 0 new, 1 on stack, 2 done
    for root in range(len(succ)):
        if colour[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[tuple[int, str]] = []
        colour[root] = 1
        while stack:
            node, i = stack[-1]
            if i < len(succ[node]):
                stack[-1] = (node, i + 1)
                target, reason = succ[node][i]
                if colour[target] == 1:
                    path.append((node, reason))
                    start = next(k for k, (n, _) in enumerate(path) if n == target)
                    return path[start:]
                if colour[target] == 0:
                    colour[target] = 1
                    path.append((node, reason))
                    stack.append((target, 0))
            else:
                colour[node] = 2
                stack.pop()
                if path:
                    path.pop()
    return []


def _worst_case(
    spec: MachineSpec, configs: list[_Config], succ: list[list[tuple[int, str]]], order: list[int], starts: set[int]
) -> dict[str, int]:
    """Longest path (in effect invocations) from a segment start over the acyclic product, per
    declared figure (a sum over several effects) and per effect.

    One pass for every figure: a configuration's worst cases are one tuple, a lane per
    distinct set of effects, combined lane-wise (``map``) from its successors' tuples, so a
    configuration that adds nothing and has one successor shares that successor's tuple."""
    effect_of = {s.name: s.effect for s in spec.states if s.effect}
    figures: dict[str, frozenset[str]] = {name: frozenset(effects) for name, effects in spec.figures.items()}
    for effect in dict.fromkeys(effect_of.values()):
        assert effect is not None
        figures.setdefault(effect, frozenset({effect}))
    lanes = list(dict.fromkeys(figures.values()))  # figures of the same effects share a lane
    nothing = (0,) * len(lanes)
    weights: dict[str, tuple[int, ...] | None] = {}  # per state; None: it adds nothing to any figure
    for state in spec.state_map:
        lane = tuple(1 if effect_of.get(state) in effects else 0 for effects in lanes)
        weights[state] = lane if any(lane) else None
    adds = [weights[state] for state, _ in configs]
    best: list[tuple[int, ...]] = [nothing] * len(configs)
    for node in reversed(order):
        edges = succ[node]
        if not edges:
            found = nothing
        elif len(edges) == 1:
            found = best[edges[0][0]]
        else:
            found = tuple(map(max, *[best[t] for t, _ in edges]))
        w = adds[node]
        best[node] = found if w is None else tuple(map(operator.add, w, found))
    tops = [best[s] for s in starts]
    top = nothing if not tops else tops[0] if len(tops) == 1 else tuple(map(max, *tops))
    return {name: top[lanes.index(effects)] for name, effects in figures.items()}


def _why_dead(
    spec: MachineSpec,
    t: TransitionSpec,
    groups: Mapping[tuple[str, str], tuple[TransitionSpec, ...]],
    caps: list[int | None],
    index: Mapping[str, int],
) -> str:
    cands = groups[(t.source, t.event)]
    for earlier in cands[: cands.index(t)]:
        if earlier.counter is None and set(earlier.guards) <= set(t.guards):
            held = f"guards {list(earlier.guards)}" if earlier.guards else "no guard"
            return f"shadowed by {earlier.reason!r} above it, which fires whenever it could ({held})"
    if t.counter is not None and caps[index[t.counter]] == 0:
        return f"its counter {t.counter!r} has cap 0"
    if t.event not in spec.state(t.source).emits and t.event != spec.abort_event:
        return f"{t.source!r} never emits {t.event!r}"
    return "no reachable configuration enables it"


def _fmt(names: list[str], counts: tuple[int, ...]) -> str:
    nonzero = [f"{n}={c}" for n, c in zip(names, counts, strict=True) if c]
    return "{" + ", ".join(nonzero) + "}"
