"""The engine's commands: ``check``, ``diagram`` and ``docs``, for any machine file.

Owns their flags, output and :func:`run_command` (exit codes, one-line user errors). The
program and the agent's commands are ``queryloop.frontends.cli``'s. Each command imports
the engine parts it runs only when it runs, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .errors import FsmError, SpecError

if TYPE_CHECKING:
    from .draw.ladder import View
    from .draw.trace import Trace
    from .model.load import Machine
    from .model.spec import MachineSpec
    from .verify.check import CheckReport
    from .verify.counterexample import Counterexample, Replayer
    from .verify.coverage import Coverage, RunSteps

__all__ = [
    "DiagramFile",
    "ProgramWords",
    "UsageError",
    "add_engine_commands",
    "diagram_files",
    "recovery_document",
    "render_view",
    "run_command",
]

DIAGRAM_FORMATS = ("dot", "svg", "png", "mermaid")
DEFAULT_FORMATS = ("svg", "mermaid")  # what diagrams/ commits: GitHub shows both; dot and png are drawn on request
TEXT_FORMATS = ("dot", "mermaid")
REGENERATE = "queryloop diagram --out diagrams"
_SUFFIX = {"dot": ".dot", "svg": ".svg", "mermaid": ".mmd", "png": ".png"}


class UsageError(Exception):
    """A bad flag or value on the command line."""


DefaultMachines = Callable[[], Sequence[Path]]
MakeReplayer = Callable[[], "Replayer"]


def _param_overrides(values: Sequence[str]) -> dict[str, object]:
    import yaml

    out: dict[str, object] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        out[name] = yaml.safe_load(raw)
    return out


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ---- check ----------------------------------------------------------------------------------


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


def _format_report(r: CheckReport, examples: Sequence[Counterexample] = ()) -> str:
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
    reports: list[dict[str, object]] = []  # with --format json, printed together at the end
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
            machines.append(load_machine(_display(path)))
        except SpecError as exc:
            machines.append(exc)
    return machines


def _check_one(
    machine: Machine | SpecError, params: Mapping[str, Any], args: argparse.Namespace, reports: list[dict[str, Any]]
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
        print(_format_report(report, examples))
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
        how = f" (replay: {replay.format(scenario=_display(path), machine=spec.path)})" if replay else ""
        print(f"{spec.path}: counterexample {n} written to {_display(path)}{how}", file=sys.stderr)
    return found


def _example_json(example: Counterexample) -> dict[str, object]:
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
    specs = _coverage_specs(args, runs)
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


# ---- diagram --------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class DiagramFile:
    """One file ``queryloop diagram`` writes: a view of a machine in a format."""

    machine: Path
    view: View
    fmt: str
    target: Path

    @property
    def compared(self) -> bool:
        """Whether ``--check`` compares it: DOT and Mermaid text only (SVG/PNG bytes vary with Graphviz and fonts)."""
        return self.fmt in TEXT_FORMATS


def _spec(path: Path) -> MachineSpec:
    from .model.load import load_machine

    return load_machine(_display(path), bind=False).spec


def _layer_views(spec: MachineSpec, layers: Sequence[str]) -> tuple[View, ...]:
    from .draw.ladder import View, layer_names

    known = layer_names(spec)
    missing = [name for name in layers if name not in known]
    if missing:
        raise UsageError(f"machine {spec.name!r} has no layer {missing[0]!r} (layers: {', '.join(known) or 'none'})")
    return tuple(View(kind="layer", layer=name) for name in layers)


def render_view(
    spec: MachineSpec, view: View, fmt: str, trace: Trace | None = None, coverage: Coverage | None = None
) -> bytes:
    """One view of ``spec`` in ``fmt`` (dot/svg/png/mermaid), deterministic for dot and mermaid."""
    from .draw.render import to_dot, to_mermaid

    if fmt == "mermaid":
        return to_mermaid(spec, view=view).encode()
    graph = to_dot(spec, view=view, trace=trace, coverage=coverage)
    if fmt == "dot":
        return str(graph.source).encode()
    data: bytes = graph.pipe(format=fmt)
    return data


def diagram_files(
    paths: Sequence[Path], formats: Sequence[str], out: Path, layers: Sequence[str] = ()
) -> list[DiagramFile]:
    """Every file to write: per machine its overview and layers (or its full diagram), in each format."""
    from .draw.ladder import views

    files = []
    for path in paths:
        spec = _spec(path)
        chosen = _layer_views(spec, layers) if layers else views(spec)
        for view in chosen:
            for fmt in formats:
                target = out / f"{spec.name}{view.suffix}{_SUFFIX[fmt]}"
                files.append(DiagramFile(machine=path, view=view, fmt=fmt, target=target))
    return files


def _orphans(paths: Sequence[Path], files: Sequence[DiagramFile], out: Path) -> list[Path]:
    """Files in ``out`` named like a view of these machines that no view produces (a layer renamed or gone),
    in any format: a view still drawn keeps its files of formats not asked for this time."""
    wanted = {f.target.with_suffix("") for f in files}
    found: set[Path] = set()
    for path in paths:
        name = _spec(path).name
        for suffix in _SUFFIX.values():
            found.update(p for p in out.glob(f"{name}*{suffix}") if p.name.split(".")[0] == name)
    return sorted(p for p in found if p.with_suffix("") not in wanted and not _is_overlay(p))


def _is_overlay(path: Path) -> bool:
    """A run or coverage overlay (``*.trace.*``, ``<machine>.coverage.*``): never committed, never an orphan."""
    parts = path.name.split(".")
    return "trace" in parts[1:] or parts[1] == "coverage"


def _trace_machine(args: argparse.Namespace, trace: Trace) -> MachineSpec:
    """The machine a run is drawn on: the one named by --machine, else the shipped one the log names or fits."""
    from .draw.trace import TraceError, check_trace

    if args.machine:
        if len(args.machine) > 1:
            raise UsageError("--trace draws one run on one machine; give --machine once")
        spec = _spec(Path(args.machine[0]))
        check_trace(spec, trace)
        return spec
    specs = [_spec(p) for p in args.default_machines()]
    named = [s for s in specs if s.name == trace.machine]
    for spec in named or specs:
        try:
            check_trace(spec, trace)
        except TraceError:
            if named:
                raise
            continue
        return spec
    raise TraceError(f"{trace.path}: no machine has every step of this run; name one with --machine FILE")


def cmd_trace(args: argparse.Namespace) -> int:
    from .draw.ladder import View
    from .draw.trace import read_trace

    trace = read_trace(args.trace)
    spec = _trace_machine(args, trace)
    formats = args.format or ["dot", "svg"]
    if "mermaid" in formats:
        raise UsageError("--trace draws with Graphviz: use --format dot, svg or png")
    chosen = _layer_views(spec, args.layer) if args.layer else (View(kind="full" if args.whole else "run"),)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(args.trace).stem
    for view in chosen:
        for fmt in formats:
            target = out / f"{stem}.trace{view.suffix}{_SUFFIX[fmt]}"
            target.write_bytes(render_view(spec, view, fmt, trace))
            print(f"wrote {target}", file=sys.stderr)
    return 0


def _coverage_views(spec: MachineSpec, layers: Sequence[str]) -> tuple[View, ...]:
    """The named layers, else the full machine and, with two layers or more, each layer."""
    from .draw.ladder import View, layer_names

    if layers:
        return _layer_views(spec, layers)
    named = layer_names(spec)
    return (View(kind="full"), *(View(kind="layer", layer=n) for n in named if len(named) > 1))


def _coverage_specs(args: argparse.Namespace, runs: Sequence[RunSteps]) -> list[MachineSpec]:
    """The machines named by --machine, else the shipped ones the runs name."""
    if args.machine:
        return [_spec(Path(p)) for p in args.machine]
    named = {name for run in runs for name in run.steps if name is not None}
    return [spec for spec in (_spec(p) for p in args.default_machines()) if spec.name in named]


def cmd_diagram_coverage(args: argparse.Namespace) -> int:
    """Draw which transitions the runs recorded in ``--coverage DIR`` took: ``<out>/<machine>.coverage[.<layer>].*``."""
    from .verify.coverage import CoverageError, coverage_of, read_runs

    if args.check or args.whole:
        raise UsageError(f"--coverage draws every transition; it takes no {'--check' if args.check else '--whole'}")
    formats = args.format or ["dot", "svg"]
    if "mermaid" in formats:
        raise UsageError("--coverage draws with Graphviz: use --format dot, svg or png")
    runs = read_runs(args.coverage)
    specs = _coverage_specs(args, runs)
    if not specs:
        raise CoverageError(f"{args.coverage}: no recorded step of any known machine (name one with --machine FILE)")
    reports = [coverage_of(spec, runs) for spec in specs]
    for cov in reports:
        if not cov.runs:
            raise CoverageError(f"{args.coverage}: no recorded run of machine {cov.machine!r} ({cov.path})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for spec, cov in zip(specs, reports, strict=True):
        for view in _coverage_views(spec, args.layer):
            for fmt in formats:
                target = out / f"{spec.name}.coverage{view.suffix}{_SUFFIX[fmt]}"
                target.write_bytes(render_view(spec, view, fmt, coverage=cov))
                print(f"wrote {target}", file=sys.stderr)
    return 0


def cmd_diagram(args: argparse.Namespace) -> int:
    if args.coverage is not None:
        if args.trace:
            raise UsageError("--trace draws one run, --coverage many: give one of them")
        return cmd_diagram_coverage(args)
    if args.trace:
        if args.check:
            raise UsageError("--check compares committed diagrams; it takes no --trace")
        return cmd_trace(args)
    paths = [Path(p) for p in args.machine] if args.machine else list(args.default_machines())
    formats = args.format or list(DEFAULT_FORMATS)
    out = Path(args.out)
    files = diagram_files(paths, formats, out, args.layer)
    orphans = [] if args.layer else _orphans(paths, files, out)
    if args.check:
        stale = [str(f.target) for f in files if f.compared and _is_stale(f)]
        stale += [f"{p} (no longer drawn)" for p in orphans]
        if stale:
            print(
                "stale diagrams: " + ", ".join(stale) + "\nregenerate them with: " + REGENERATE,
                file=sys.stderr,
            )
            return 1
        return 0
    specs = {path: _spec(path) for path in paths}
    for f in files:
        f.target.parent.mkdir(parents=True, exist_ok=True)
        f.target.write_bytes(render_view(specs[f.machine], f.view, f.fmt))
        print(f"wrote {f.target}", file=sys.stderr)
    for p in orphans:
        p.unlink()
        print(f"removed {p} (no longer drawn)", file=sys.stderr)
    return 0


def _is_stale(f: DiagramFile) -> bool:
    return not f.target.exists() or f.target.read_bytes() != render_view(_spec(f.machine), f.view, f.fmt)


# ---- docs -----------------------------------------------------------------------------------


def recovery_document(paths: Sequence[Path]) -> str:
    """The recovery ladders of the machines at ``paths``, as ``queryloop docs`` writes them (and the site shows)."""
    from .draw.recovery import recovery_markdown

    return recovery_markdown([_spec(p) for p in paths])


def cmd_docs(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.machine] if args.machine else list(args.default_machines())
    text = recovery_document(paths).encode()
    target = Path(args.out)
    if args.check:
        if not target.exists() or target.read_bytes() != text:
            print(f"stale: {target}\nregenerate it with: queryloop docs --out {args.out}", file=sys.stderr)
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(text)
    print(f"wrote {target}", file=sys.stderr)
    return 0


# ---- commands -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ProgramWords:
    """How the program that adds the engine's commands names what they point to: the engine knows none of its flags."""

    replay: str | None = None
    """The command that replays a run ``check --counterexamples`` wrote, with ``{scenario}`` and ``{machine}``
    where their paths go (None: not shown)."""
    trace_log: str = "a JSON-lines log of its steps"
    """The log of one run that ``diagram --trace`` reads, as the program's users know it."""


def add_engine_commands(
    sub: Any,
    *,
    default_machines: DefaultMachines,
    replayer: MakeReplayer | None = None,
    words: ProgramWords | None = None,
) -> None:
    """Add ``check`` and ``diagram`` to a subparsers action; ``default_machines`` lists what they use unasked.

    ``replayer`` makes what writes ``check --counterexamples``' runs as files to replay (None: the
    option is refused); ``words`` says how the program replays such a run and which log it writes.
    """
    words = words or ProgramWords()
    check = sub.add_parser("check", help="model-check machine declarations (default: every shipped machine)")
    check.add_argument(
        "--machine", action="append", default=[], metavar="FILE", help="a machine YAML file (repeatable)"
    )
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="override a param for the check"
    )
    check.add_argument(
        "--coverage",
        metavar="DIR",
        help="instead of checking: which transitions the runs recorded in DIR took (QUERYLOOP_TRACE_DIR)",
    )
    check.add_argument(
        "--fail-under", type=float, metavar="PCT", help="with --coverage: exit 1 when a machine's coverage is lower"
    )
    check.add_argument(
        "--explore",
        action="store_true",
        help="also explore every (state, counters) configuration at the params' check values (seconds): "
        "stuck configurations, edges that never fire, and the exact figures there beside the bounds",
    )
    check.add_argument(
        "--spin",
        action="store_true",
        help="also verify each machine with SPIN (exported as Promela): configurations, properties and "
        "liveness, at the explored params and at the smallest caps with the nullable ones flipped, beside ours "
        "(implies --explore)",
    )
    check.add_argument(
        "--counterexamples",
        metavar="DIR",
        help="also write the shortest run showing each finding as a scenario in DIR"
        + (f", to replay with `{words.replay.format(scenario='FILE', machine='MACHINE')}`" if words.replay else "")
        + " (waits scaled down to milliseconds)",
    )
    check.set_defaults(func=cmd_check, default_machines=default_machines, make_replayer=replayer, words=words)

    diagram = sub.add_parser(
        "diagram",
        help="draw machines with Graphviz / Mermaid: an overview and one diagram per layer; or one run on the graph",
    )
    diagram.add_argument("--machine", action="append", default=[], metavar="FILE")
    diagram.add_argument(
        "--format",
        action="append",
        choices=DIAGRAM_FORMATS,
        help="repeatable; default svg and mermaid, the committed pair (with --trace or --coverage: dot and svg)",
    )
    diagram.add_argument("--out", default="diagrams", metavar="DIR")
    diagram.add_argument(
        "--layer", action="append", default=[], metavar="NAME", help="draw only this layer (repeatable)"
    )
    diagram.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when a Mermaid (or asked-for DOT) file in --out is stale or a view is gone",
    )
    diagram.add_argument(
        "--trace",
        metavar="FILE",
        help=f"overlay one run ({words.trace_log}) on the machine: writes <out>/<FILE stem>.trace[.<layer>].<format>",
    )
    diagram.add_argument(
        "--whole",
        action="store_true",
        help="with --trace: draw the whole machine under the run, not only the states it visited",
    )
    diagram.add_argument(
        "--coverage",
        metavar="DIR",
        help="overlay the runs recorded in DIR (QUERYLOOP_TRACE_DIR): edges taken with their summed counts, "
        "the others dashed red; writes <out>/<machine>.coverage[.<layer>].<format>",
    )
    diagram.set_defaults(func=cmd_diagram, default_machines=default_machines)

    docs = sub.add_parser("docs", help="write the recovery ladders (per event, the candidates in order) as Markdown")
    docs.add_argument("--machine", action="append", default=[], metavar="FILE")
    docs.add_argument("--out", default="docs/recovery.md", metavar="FILE")
    docs.add_argument("--check", action="store_true", help="write nothing; exit 1 when --out is stale")
    docs.set_defaults(func=cmd_docs, default_machines=default_machines)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command: user errors become one line on stderr and an exit code, never a traceback."""
    try:
        rc: int = args.func(args)
    except UsageError as exc:
        print(f"queryloop: error: {exc}", file=sys.stderr)
        return 2
    except FsmError as exc:
        print(f"queryloop: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`queryloop check | head`): stop quietly, like other tools
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 141
    return rc
