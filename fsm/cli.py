"""The engine's commands: ``check`` and ``diagram``, for any machine file.

Owns their flags, their output and :func:`run_command` (exit codes, one-line user
errors, no tracebacks for user mistakes). Which machines are checked or drawn when
none is named is the caller's (the ``queryloop`` program passes the shipped ones);
the program itself, with the agent's commands, is ``queryloop.cli``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from .check import CheckReport, check_spec
from .errors import FsmError, SpecError
from .load import load_machine
from .render import to_dot, to_mermaid

__all__ = ["UsageError", "add_engine_commands", "diagram_targets", "render", "run_command"]

DIAGRAM_FORMATS = ("dot", "svg", "mermaid", "png")
_SUFFIX = {"dot": ".dot", "svg": ".svg", "mermaid": ".mmd", "png": ".png"}


class UsageError(Exception):
    """A bad flag or value on the command line."""


DefaultMachines = Callable[[], Sequence[Path]]


def _param_overrides(values: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
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


def _format_report(r: CheckReport) -> str:
    head = (
        f"{r.path}: machine {r.machine!r}: {r.states} states, {r.transitions} transitions, "
        f"{r.configurations} configurations explored"
    )
    lines = [head]
    defaults = {k: v for k, v in r.defaults.items() if r.params.get(k) != v}
    if defaults:
        lines.append(
            "  explored with "
            + ", ".join(f"{k}={r.params[k]} (default {v})" for k, v in defaults.items())
            + "; change with --set NAME=VALUE"
        )
    if r.worst_case:
        figures = ", ".join(f"{name.rpartition('.')[2]} ≤ {n}" for name, n in r.worst_case.items())
        lines.append(f"  worst case per progress step: {figures}")
    if r.ok:
        lines.append("  ok: every state reachable, none stuck, every recovery cycle bounded")
    for f in r.findings:
        lines.append(f"  FINDING [{f.check}] {f.message}")
        for t in f.trace:
            lines.append(f"      {t}")
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.machine] if args.machine else list(args.default_machines())
    params = _param_overrides(args.set)
    reports: list[dict[str, Any]] = []
    failed = False
    for path in paths:
        try:
            machine = load_machine(_display(path))
        except SpecError as exc:
            failed = True
            if args.format == "json":
                reports.append({"path": _display(path), "ok": False, "spec_errors": [str(p) for p in exc.problems]})
            else:
                print(f"{exc}", file=sys.stdout)
            continue
        known = {p.name for p in machine.spec.params}
        report = check_spec(machine.spec, {k: v for k, v in params.items() if k in known})
        failed |= not report.ok
        if args.format == "json":
            reports.append(report.to_json())
        else:
            print(_format_report(report))
    if args.format == "json":
        print(json.dumps(reports, indent=2))
    return 1 if failed else 0


# ---- diagram --------------------------------------------------------------------------------


def render(path: Path, fmt: str) -> bytes:
    """The diagram of the machine at ``path`` in ``fmt`` (dot/svg/png/mermaid), deterministic."""
    spec = load_machine(_display(path), bind=False).spec
    if fmt == "mermaid":
        return to_mermaid(spec).encode()
    graph = to_dot(spec)
    if fmt == "dot":
        return str(graph.source).encode()
    data: bytes = graph.pipe(format=fmt)
    return data


def diagram_targets(paths: Sequence[Path], formats: Sequence[str], out: Path) -> list[tuple[Path, Path, str]]:
    """(machine file, output file, format) for every requested diagram."""
    targets = []
    for path in paths:
        name = load_machine(_display(path), bind=False).spec.name
        for fmt in formats:
            targets.append((path, out / f"{name}{_SUFFIX[fmt]}", fmt))
    return targets


def cmd_diagram(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.machine] if args.machine else list(args.default_machines())
    formats = args.format or ["dot", "svg", "mermaid"]
    out = Path(args.out)
    stale: list[str] = []
    for path, target, fmt in diagram_targets(paths, formats, out):
        data = render(path, fmt)
        if args.check:
            if not target.exists() or target.read_bytes() != data:
                stale.append(str(target))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"wrote {target}", file=sys.stderr)
    if stale:
        print(
            "stale diagrams: " + ", ".join(stale) + "\nregenerate them with: queryloop diagram --out diagrams",
            file=sys.stderr,
        )
        return 1
    return 0


# ---- commands -------------------------------------------------------------------------------


def add_engine_commands(sub: Any, *, default_machines: DefaultMachines) -> None:
    """Add ``check`` and ``diagram`` to a subparsers action; ``default_machines`` lists what they use unasked."""
    check = sub.add_parser("check", help="model-check machine declarations (default: every shipped machine)")
    check.add_argument(
        "--machine", action="append", default=[], metavar="FILE", help="a machine YAML file (repeatable)"
    )
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="override a param for the check"
    )
    check.set_defaults(func=cmd_check, default_machines=default_machines)

    diagram = sub.add_parser("diagram", help="draw machines with Graphviz / Mermaid")
    diagram.add_argument("--machine", action="append", default=[], metavar="FILE")
    diagram.add_argument(
        "--format", action="append", choices=DIAGRAM_FORMATS, help="repeatable; default dot, svg and mermaid"
    )
    diagram.add_argument("--out", default="diagrams", metavar="DIR")
    diagram.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file in --out is stale")
    diagram.set_defaults(func=cmd_diagram, default_machines=default_machines)


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
    return rc
