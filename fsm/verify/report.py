"""The checker's records: a finding, the composed and over-range figures, and the report with its JSON.

Computes nothing: the passes (``passes``, ``explore``) and the figures (``figures``) fill them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from ..model.spec import SPAN

__all__ = ["CheckReport", "Composed", "Finding", "OverRanges", "json_int", "json_number"]


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

        out: dict[str, Any] = {
            "machine": self.machine,
            "path": self.path,
            "ok": self.ok,
            "states": self.states,
            "transitions": self.transitions,
            "figures_at": dict(self.at),
            f"worst_case_per_{step}": {k: json_int(v) for k, v in self.per_step.items()},
            "worst_case_per_run": {k: json_int(v) for k, v in self.per_run.items()},
            "expressions": {
                name: {f"per_{step}": one, "per_run": all_} for name, (one, all_) in self.expressions.items()
            },
            "unbounded_by_design": dict(self.unbounded_by_design),
            "param_defaults": dict(self.defaults),
            "findings": [f.to_json() for f in self.findings],
        }
        if self.wait_s_per_step:
            out[f"worst_wait_s_per_{step}"] = {
                name: {"each_s": json_number(self.each_s[name]), f"per_{step}_s": json_number(s)}
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
                f"symbolic_per_{step}": {k: json_int(v) for k, v in self.symbolic_at_params.items()},
                "worst_case_per_run": dict(self.worst_case_per_run),
                "symbolic_per_run": {k: json_int(v) for k, v in self.symbolic_per_run_at_params.items()},
            }
        return out


def _ranges_json(ranges: OverRanges, step: str) -> dict[str, Any]:
    return {
        "params": {k: [ranges.low[k], ranges.high[k]] for k in ranges.high if ranges.low[k] != ranges.high[k]},
        f"worst_case_per_{step}": {k: json_int(v) for k, v in ranges.per_step.items()},
        "worst_case_per_run": {k: json_int(v) for k, v in ranges.per_run.items()},
        f"composed_per_{step}": _composed_json(ranges.composed, step),
    }


def _composed_json(composed: Mapping[str, Composed], step: str) -> dict[str, Any]:
    """Each ``children:`` entry's figures, keyed in the machine's step scope."""
    return {
        name: {
            f"starts_per_{step}": c.starts,
            f"child_{step}s": c.child_steps,
            "child_run": {k: json_int(v) for k, v in c.child_run.items()},
            f"per_{step}": {k: json_int(v) for k, v in c.per_step.items()},
        }
        for name, c in composed.items()
    }


def json_int(v: float) -> int | None:
    """A count for JSON: ``None`` for unbounded."""
    return None if v == math.inf else int(v)


def json_number(v: float) -> float | None:
    return None if v == math.inf else v
