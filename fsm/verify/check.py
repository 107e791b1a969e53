"""The model checker: the properties a machine declaration must have, proven from the YAML alone.

Runs the passes (``passes``, ``explore``, listed in docs/machines.md) and the figures (``figures``) into one
:class:`CheckReport`. No handler runs: a Python guard is a free boolean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from ..model.properties import broken_guard_meanings, broken_properties
from ..model.spec import RUN, MachineSpec
from .bounds import figure_bounds, figure_values
from .explore import exploration_pass
from .figures import (
    composed_figures,
    composed_findings,
    figures_over_ranges,
    polynomial,
    range_findings,
    settings,
    show,
    waits,
    without_guard,
)
from .passes import graph_pass, loophole_pass, run_pass, shadow_pass, termination_pass
from .progress import Progress, print_progress, progress_line, told_every_few_seconds
from .report import CheckReport, Composed, Finding, OverRanges

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
    "without_guard",
]


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
    findings = graph_pass(spec)
    findings += shadow_pass(spec)
    findings += termination_pass(spec)
    findings += run_pass(spec)
    findings += loophole_pass(spec)
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
                    message=f"figure {name!r} can reach {show(per_step[name])} per {spec.step_scope} at "
                    f"{settings(spec, at)}, above its declared max {most} "
                    f"(there the bound is {polynomial(bounds[name].per_step, spec, at)})",
                )
            )
    for name, limit in spec.figure_max_per_run.items():
        run_most = spec.limit_of(limit, at)
        if run_most is not None and per_run[name] > run_most:
            findings.append(
                Finding(
                    check="figure",
                    message=f"figure {name!r} can reach {show(per_run[name])} per run at {settings(spec, at)}, "
                    f"above its declared max_per_run {limit} = {run_most} "
                    f"(there the bound is {polynomial(bounds[name].per_run, spec, at)})",
                )
            )
    each_s, wait_s = waits(spec, at, per_step)
    composed = composed_figures(spec, at, per_step)
    findings += composed_findings(spec, at, composed)
    ranges = figures_over_ranges(spec, at, bounds) if spec.figure_max or spec.figure_max_per_run else None
    if ranges is not None:
        findings += range_findings(spec, ranges, findings)
    report = CheckReport(
        machine=spec.name,
        path=spec.path,
        states=len(spec.states),
        transitions=len(spec.transitions),
        findings=tuple(findings),
        step=spec.step_scope,
        expressions={
            name: (polynomial(b.per_step, spec, at, per_step[name]), polynomial(b.per_run, spec, at, per_run[name]))
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
    with told_every_few_seconds(progress, spec.name) as status:
        explored, more, worst, worst_run = exploration_pass(spec, values, max_configs, status)
    shadowed = {f.reasons for f in findings if f.check == "dead_edge"}
    more = [f for f in more if not (f.check == "dead_edge" and f.reasons in shadowed)]
    symbolic, symbolic_run = figure_values(spec, values)
    for per, exact_values, bound_values in ((spec.step_scope, worst, symbolic), (RUN, worst_run, symbolic_run)):
        for name, exact in exact_values.items():
            if exact > bound_values[name]:
                more.append(
                    Finding(
                        check="bound",
                        message=f"{name!r}: exploration found {exact} per {per} at {settings(spec, values)}, "
                        f"above the symbolic bound {show(bound_values[name])} (a checker bug: please report it)",
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
