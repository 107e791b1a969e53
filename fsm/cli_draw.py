"""``queryloop diagram`` (views, ``--check``, a run's trace, coverage overlays) and ``queryloop docs``.

Imports the draw room only when it runs; never the checker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .cli_files import UsageError, coverage_specs, unbound_spec

if TYPE_CHECKING:
    from .draw.ladder import View
    from .draw.trace import Trace
    from .model.spec import MachineSpec
    from .verify.coverage import Coverage

__all__ = [
    "DEFAULT_FORMATS",
    "DIAGRAM_FORMATS",
    "REGENERATE",
    "TEXT_FORMATS",
    "DiagramFile",
    "cmd_diagram",
    "cmd_docs",
    "diagram_files",
    "recovery_document",
    "render_view",
]

DIAGRAM_FORMATS = ("dot", "svg", "png", "mermaid")
DEFAULT_FORMATS = ("svg", "mermaid")  # what diagrams/ commits: GitHub shows both; dot and png are drawn on request
TEXT_FORMATS = ("dot", "mermaid")
REGENERATE = "queryloop diagram --out diagrams"
_SUFFIX = {"dot": ".dot", "svg": ".svg", "mermaid": ".mmd", "png": ".png"}


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
        spec = unbound_spec(path)
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
        name = unbound_spec(path).name
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
        spec = unbound_spec(Path(args.machine[0]))
        check_trace(spec, trace)
        return spec
    specs = [unbound_spec(p) for p in args.default_machines()]
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


def cmd_diagram_coverage(args: argparse.Namespace) -> int:
    """Draw which transitions the runs recorded in ``--coverage DIR`` took: ``<out>/<machine>.coverage[.<layer>].*``."""
    from .verify.coverage import CoverageError, coverage_of, read_runs

    if args.check or args.whole:
        raise UsageError(f"--coverage draws every transition; it takes no {'--check' if args.check else '--whole'}")
    formats = args.format or ["dot", "svg"]
    if "mermaid" in formats:
        raise UsageError("--coverage draws with Graphviz: use --format dot, svg or png")
    runs = read_runs(args.coverage)
    specs = coverage_specs(args, runs)
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
    specs = {path: unbound_spec(path) for path in paths}
    for f in files:
        f.target.parent.mkdir(parents=True, exist_ok=True)
        f.target.write_bytes(render_view(specs[f.machine], f.view, f.fmt))
        print(f"wrote {f.target}", file=sys.stderr)
    for p in orphans:
        p.unlink()
        print(f"removed {p} (no longer drawn)", file=sys.stderr)
    return 0


def _is_stale(f: DiagramFile) -> bool:
    return not f.target.exists() or f.target.read_bytes() != render_view(unbound_spec(f.machine), f.view, f.fmt)


# ---- docs -----------------------------------------------------------------------------------


def recovery_document(paths: Sequence[Path]) -> str:
    """The recovery ladders of the machines at ``paths``, as ``queryloop docs`` writes them (and the site shows)."""
    from .draw.recovery import recovery_markdown

    return recovery_markdown([unbound_spec(p) for p in paths])


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
