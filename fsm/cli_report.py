"""``queryloop check``'s text: a :class:`~fsm.verify.check.CheckReport` as the lines the command prints.

Owns the wording only; the JSON is the report's own (``CheckReport.to_json``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .verify.check import CheckReport
    from .verify.counterexample import Counterexample

__all__ = ["format_report"]


def _figures(values: Mapping[str, float], sign: str = "≤") -> str:
    return ", ".join(
        f"{name.rpartition('.')[2]} {sign} {'∞' if n == math.inf else int(n)}" for name, n in values.items()
    )


def _seconds(s: float) -> str:
    if s == math.inf:
        return "∞"
    hours, rest = divmod(round(s), 3600)
    return f"{s:g} s" + (f" ({hours} h {rest // 60} min)" if hours else "")


def _wait_line(r: CheckReport, name: str, total: float, where: str) -> str:
    """The worst-case time one step scope (``r.step``) spends in ``name``'s invocations, and what it rests on."""
    count = r.per_step[name]
    n = "∞" if count == math.inf else str(int(count))
    return (
        f"  worst-case wait per {r.step}, {where}: {name} ≤ {_seconds(total)} = {n} × {_seconds(r.each_s[name])} "
        "(each one at most its `each_s` params, which the handlers clamp it to)"
    )


def _range_lines(r: CheckReport) -> list[str]:
    """The declared figures for every value a run accepts (each param within its declared ``max``)."""
    ranges = r.over_ranges
    if ranges is None:
        return []
    lines = [
        f"  worst case per {r.step}, for every value a run accepts (each param from 0 to its `max`; proven by "
        f"intervals over every setting): {_figures(ranges.per_step)}"
    ]
    if ranges.per_run:
        lines.append(f"  worst case per run, for every value a run accepts: {_figures(ranges.per_run)}")
    for name, c in ranges.composed.items():
        if c.child_steps is None:
            continue
        lines.append(
            f"  per {r.step} with its {name}, for every value a run accepts ({c.steps_param} set, "
            f"up to {c.child_steps}; {c.starts_param} up to {c.starts}): {_figures(c.per_step)}"
        )
    return lines


def format_report(r: CheckReport, examples: Sequence[Counterexample] = ()) -> str:
    changed = {k: v for k, v in r.at.items() if r.defaults.get(k) != v}
    where = "at " + ", ".join(f"{k}={v}" for k, v in changed.items()) if changed else "at the defaults"
    lines = [
        f"{r.path}: machine {r.machine!r}: {r.states} states, {r.transitions} transitions",
        *_per_step_lines(r, where),
        *_per_run_lines(r, where),
        *_composed_lines(r, where),
        *_range_lines(r),
        *_explored_lines(r),
    ]
    if r.ok:
        lines.append(
            "  ok: every state reachable and able to end without an interrupt, no edge shadowed, every recovery "
            "cycle bounded" + (", nothing stuck" if r.explored else " (--explore: also every configuration)")
        )
    return "\n".join([*lines, *_finding_lines(r, examples)])


def _per_step_lines(r: CheckReport, where: str) -> list[str]:
    """The figures' worst case per step scope, their expressions and the worst-case waits."""
    return [
        f"  worst case per {r.step}, {where} (a bound for every cap value): {_figures(r.per_step)}",
        *(f"    {name} per {r.step} there = {per_step}" for name, (per_step, _) in r.expressions.items()),
        *(_wait_line(r, name, total, where) for name, total in r.wait_s_per_step.items()),
    ]


def _per_run_lines(r: CheckReport, where: str) -> list[str]:
    """The figures bounded per run with their expressions, and those unbounded (by design, and why)."""
    bounded = {k: v for k, v in r.per_run.items() if v != math.inf}
    unbounded = [k.rpartition(".")[2] for k, v in r.per_run.items() if v == math.inf]
    lines: list[str] = []
    if bounded:
        lines.append(f"  worst case per run, {where}: {_figures(bounded)}")
        lines += [f"    {name} per run there = {run}" for name, (_, run) in r.expressions.items() if name in bounded]
    if unbounded:
        why = "; ".join(f"{text} ({reason})" for reason, text in r.unbounded_by_design.items())
        lines.append(f"  unbounded per run: {', '.join(unbounded)}" + (f" — by design: {why}" if why else ""))
    return lines


def _composed_lines(r: CheckReport, where: str) -> list[str]:
    """Per ``children:`` entry, the figures per step with the children it starts (or why they are unbounded)."""
    lines: list[str] = []
    for name, c in r.composed.items():
        if c.child_steps is None:
            lines.append(
                f"  per {r.step} with its {name}, {where}: unbounded — {c.steps_param} is unset, so a child's "
                "progress steps have no limit (set it for a bound)"
            )
            continue
        runs = f"{c.starts} × a run of at most {c.child_steps} {r.step}s"
        head = f"  per {r.step} with its {name}, {where} (its own + {c.starts_param}={c.starts} × a run at"
        lines.append(f"{head} {c.steps_param}={c.child_steps}; depth 1): {_figures(c.per_step)}")
        mr = next(iter(c.per_step), None)  # the first figure declared, its terms spelled out
        if mr is not None:
            own = c.per_step[mr] - c.starts * c.child_run[mr]
            lines.append(f"    {mr} there = {int(own)} + {runs} ({int(c.child_run[mr])} each) = {int(c.per_step[mr])}")
    return lines


def _explored_lines(r: CheckReport) -> list[str]:
    """With ``--explore``: the configurations explored and the exact worst case beside the bound."""
    if not r.explored:
        return []
    scope = {k: v for k, v in r.params.items() if r.defaults.get(k) != v}
    caps = ", ".join(f"{k}={v} (default {r.defaults[k]})" for k, v in scope.items()) or "the defaults"
    exact = ", ".join(
        f"{name.rpartition('.')[2]} = {n} (bound {int(r.symbolic_at_params[name])})"
        if r.symbolic_at_params.get(name) != n
        else f"{name.rpartition('.')[2]} = {n}"
        for name, n in r.worst_case.items()
    )
    return [
        f"  explored {r.configurations} configurations at {caps}:",
        f"    exact worst case per {r.step}: {exact or 'not computed (see the findings)'}",
    ]


def _finding_lines(r: CheckReport, examples: Sequence[Counterexample]) -> list[str]:
    """Each finding, its trace and, where one was found, the shortest run that shows it."""
    from .verify.counterexample import format_counterexample

    shown = {id(c.finding): c for c in examples}
    lines: list[str] = []
    for f in r.findings:
        lines.append(f"  FINDING [{f.check}] {f.message}")
        lines += [f"      {t}" for t in f.trace]
        if id(f) in shown:
            lines.extend(format_counterexample(shown[id(f)]))
    return lines
