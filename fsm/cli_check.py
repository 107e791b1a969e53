"""``queryloop check``: its params, one machine's check (with SPIN and counterexamples) and ``--coverage``.

Prints text (``cli_report``) or JSON. Imports the verify room only when it runs.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cli_files import UsageError, coverage_specs, display
from .cli_report import format_report
from .errors import SpecError

if TYPE_CHECKING:
    from .model.load import Machine
    from .model.spec import MachineSpec
    from .verify.check import CheckReport
    from .verify.counterexample import Counterexample

__all__ = ["cmd_check"]


def _param_overrides(values: Sequence[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        out[name] = yaml.safe_load(raw)
    return out


def _checked_params(values: Mapping[str, object], specs: Sequence[MachineSpec]) -> None:
    """``--set`` names a param of a checked machine with a value of its type, or it is a usage error."""
    if not specs:
        return  # nothing loaded: the spec errors are the report
    for name, value in values.items():
        owners = [p for spec in specs for p in spec.params if p.name == name]
        if not owners:
            known = sorted({p.name for spec in specs for p in spec.params})
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known) or 'none'}"
            raise UsageError(f"--set {name}: no checked machine has a param {name!r}{hint}")
        for p in owners:
            problem = p.problem_with(value)
            if problem is not None:
                raise UsageError(f"--set {name}={json.dumps(value)}: {name} {problem}")


def cmd_check(args: argparse.Namespace) -> int:
    if args.coverage is not None:
        return cmd_coverage(args)
    if args.fail_under is not None:
        raise UsageError("--fail-under applies to --coverage DIR")
    paths = [Path(p) for p in args.machine] if args.machine else list(args.default_machines())
    params = _param_overrides(args.set)
    if args.counterexamples is not None and args.make_replayer is None:
        raise UsageError("--counterexamples: this program has no scenario writer")
    machines = _load_all(paths)
    _checked_params(params, [m.spec for m in machines if not isinstance(m, SpecError)])
    reports: list[dict[str, Any]] = []  # with --format json, printed together at the end
    failed = False
    for machine in machines:
        failed |= _check_one(machine, params, args, reports)
    if args.format == "json":
        print(json.dumps(reports, indent=2))
    return 1 if failed else 0


def _load_all(paths: Sequence[Path]) -> list[Machine | SpecError]:
    """Each machine, or why it cannot be loaded: a spec error is that machine's report, not the command's end."""
    from .model.load import load_machine

    machines: list[Machine | SpecError] = []
    for path in paths:
        try:
            machines.append(load_machine(display(path)))
        except SpecError as exc:
            machines.append(exc)
    return machines


def _check_one(
    machine: Machine | SpecError, params: Mapping[str, Any], args: argparse.Namespace, reports: list[dict[str, object]]
) -> bool:
    """Check one machine and print (or, with --format json, add to ``reports``) what was found; True if it failed."""
    from .verify.check import check_spec, print_progress

    if isinstance(machine, SpecError):
        if args.format == "json":
            path = machine.problems[0].path if machine.problems else ""
            reports.append({"path": path, "ok": False, "spec_errors": [str(p) for p in machine.problems]})
        else:
            print(f"{machine}", file=sys.stdout)
        return True
    known = {p.name for p in machine.spec.params}
    report = check_spec(
        machine.spec,
        {k: v for k, v in params.items() if k in known},
        explore=args.explore or args.spin,
        progress=print_progress,  # a line on stderr every ten seconds of a long exploration
    )
    examples = _counterexamples(machine.spec, report, args)
    if args.format == "json":
        reports.append(report.to_json())
        if examples:
            reports[-1]["counterexamples"] = [_example_json(c) for c in examples]
    else:
        print(format_report(report, examples))
    spun = not args.spin or _spin_agrees(machine.spec, report, reports[-1] if args.format == "json" else None)
    return not report.ok or not spun


def _spin_agrees(spec: MachineSpec, report: CheckReport, json_report: dict[str, Any] | None) -> bool:
    """SPIN's verdict beside ours (``--spin``); without SPIN installed, a usage error saying how to get it."""
    from .verify.spin import SpinNotFound, spin_beside

    try:
        return spin_beside(spec, report, json_report)
    except SpinNotFound as exc:
        raise UsageError(str(exc)) from None


def _counterexamples(spec: MachineSpec, report: CheckReport, args: argparse.Namespace) -> tuple[Counterexample, ...]:
    """The shortest run showing each finding; with ``--counterexamples DIR``, each replayable one written there."""
    if report.ok:
        return ()
    from .verify.counterexample import counterexamples

    writing = args.counterexamples is not None
    replayer = args.make_replayer() if args.make_replayer is not None else None
    found = counterexamples(spec, report, replayer=replayer)
    if not writing or replayer is None:
        return found
    out = Path(args.counterexamples)
    out.mkdir(parents=True, exist_ok=True)
    for n, example in enumerate(found, 1):
        if example.run is None:
            continue
        if not example.replayable:
            print(f"{spec.path}: counterexample {n} not replayable: {example.why}", file=sys.stderr)
            continue
        try:
            path = replayer.write(spec, example, out / f"{spec.name}-{n}")
        except ValueError as exc:
            print(f"{spec.path}: counterexample {n} not replayable: {exc}", file=sys.stderr)
            continue
        replay = args.words.replay
        how = f" (replay: {replay.format(scenario=display(path), machine=spec.path)})" if replay else ""
        print(f"{spec.path}: counterexample {n} written to {display(path)}{how}", file=sys.stderr)
    return found


def _example_json(example: Counterexample) -> dict[str, Any]:
    return {
        "finding": example.finding.message,
        "shows": example.shows,
        "reasons": list(example.reasons),
        "shown_at": None if example.run is None else example.run.taken_at,
        "replayable": example.replayable,
        "why": example.why,
    }


def cmd_coverage(args: argparse.Namespace) -> int:
    """Which transitions the recorded runs in ``--coverage DIR`` took, per machine; 1 under ``--fail-under``."""
    from .verify.coverage import coverage_of, format_coverage, read_runs

    runs = read_runs(args.coverage)
    specs = coverage_specs(args, runs)
    if not specs:
        print(f"{args.coverage}: no recorded step of any known machine (name one with --machine FILE)")
        return 1
    reports = [coverage_of(spec, runs) for spec in specs]
    if args.format == "json":
        print(json.dumps([c.to_json() for c in reports], indent=2))
    else:
        print("\n".join(format_coverage(c, fail_under=args.fail_under) for c in reports))
    under = args.fail_under is not None and any(c.percent < args.fail_under for c in reports)
    return 1 if under else 0
