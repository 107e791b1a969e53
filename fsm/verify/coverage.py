"""Transition coverage: which transitions of a machine recorded runs took, and which none did.

A trace line with string ``from``, ``event``, ``reason`` and ``to`` is one step; steps the machine does not declare
are kept apart.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..errors import FsmError
from ..model.load import INTERNAL_ERROR
from ..model.spec import MachineSpec, TransitionSpec

__all__ = ["Coverage", "CoverageError", "RunSteps", "coverage_of", "format_coverage", "read_runs"]

Edge = tuple[str, str]  # (source state, reason)


class CoverageError(FsmError):
    """The traces cannot be read (a missing directory, a file that cannot be opened)."""


@attrs.frozen(kw_only=True)
class RunSteps:
    """The steps one trace file holds, per machine name (``None``: a log that names no machine)."""

    path: str
    steps: Mapping[str | None, tuple[tuple[str, str, str, str], ...]]  # machine -> (source, event, reason, dest)
    unreadable_lines: int = 0


@attrs.frozen(kw_only=True)
class Coverage:
    """Which of a machine's transitions the runs took (``taken``: how many times each)."""

    machine: str
    path: str
    edges: tuple[TransitionSpec, ...]  # one per (source, reason), in YAML order
    taken: Mapping[Edge, int]
    runs: int  # trace files with at least one step of this machine
    foreign: Mapping[Edge, int] = attrs.field(factory=dict)  # steps naming this machine that it does not declare

    @property
    def total(self) -> int:
        return len(self.edges)

    @property
    def covered(self) -> int:
        return sum(1 for t in self.edges if self.taken.get((t.source, t.reason), 0) > 0)

    @property
    def percent(self) -> float:
        return 100.0 * self.covered / self.total if self.total else 100.0

    @property
    def missing(self) -> tuple[TransitionSpec, ...]:
        return tuple(t for t in self.edges if not self.taken.get((t.source, t.reason)))

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "path": self.path,
            "runs": self.runs,
            "transitions": self.total,
            "covered": self.covered,
            "percent": round(self.percent, 2),
            "taken": [
                {"from": t.source, "reason": t.reason, "count": self.taken.get((t.source, t.reason), 0)}
                for t in self.edges
            ],
            "missing": [
                {"from": t.source, "event": t.event, "to": t.dest, "reason": t.reason, "line": t.line}
                for t in self.missing
            ],
            "not_in_machine": [{"from": s, "reason": r, "count": n} for (s, r), n in self.foreign.items()],
        }


def _trace_files(where: Path) -> list[Path]:
    if where.is_file():
        return [where]
    if not where.is_dir():
        raise CoverageError(f"{where}: no such trace directory or file (set QUERYLOOP_TRACE_DIR when running)")
    return sorted(p for p in where.rglob("*.jsonl") if p.is_file())


def _read_file(path: Path) -> RunSteps:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CoverageError(f"{path}: cannot read the trace: {exc.strerror}") from None
    announced: str | None = None
    steps: dict[str | None, list[tuple[str, str, str, str]]] = {}
    unreadable = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            unreadable += 1  # e.g. the last line of a run killed mid-write
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("type") == "system" and obj.get("subtype") == "init" and isinstance(obj.get("machine"), str):
            announced = obj["machine"]
            continue
        fields = [obj.get(k) for k in ("from", "event", "reason", "to")]
        if not all(isinstance(f, str) for f in fields):
            continue
        machine = obj.get("machine") if isinstance(obj.get("machine"), str) else announced
        source, event, reason, dest = (str(f) for f in fields)
        steps.setdefault(machine, []).append((source, event, reason, dest))
    return RunSteps(path=str(path), steps={k: tuple(v) for k, v in steps.items()}, unreadable_lines=unreadable)


def read_runs(where: str | Path) -> list[RunSteps]:
    """Every trace under ``where`` (a directory, searched for ``*.jsonl``, or one file)."""
    return [_read_file(p) for p in _trace_files(Path(where))]


def coverage_of(spec: MachineSpec, runs: Iterable[RunSteps]) -> Coverage:
    """The coverage of ``spec`` by the steps of ``runs`` that name it (or name no machine)."""
    edges = tuple({(t.source, t.reason): t for t in spec.transitions}.values())
    declared = {(t.source, t.reason): t for t in edges}
    taken: Counter[Edge] = Counter()
    foreign: Counter[Edge] = Counter()
    count = 0
    for run in runs:
        mine = [*run.steps.get(spec.name, ()), *run.steps.get(None, ())]
        if not mine:
            continue
        count += 1
        for source, event, reason, dest in mine:
            if reason == event == dest == INTERNAL_ERROR:
                continue  # the engine's step when the machine's Python raised: not a transition of the YAML
            t = declared.get((source, reason))
            if t is not None and (t.event, t.dest) == (event, dest):
                taken[(source, reason)] += 1
            else:
                foreign[(source, reason)] += 1
    return Coverage(
        machine=spec.name, path=spec.path, edges=edges, taken=dict(taken), runs=count, foreign=dict(foreign)
    )


def format_coverage(cov: Coverage, *, fail_under: float | None = None) -> str:
    """The text report: the figure, each missing transition with its YAML line, steps the machine lacks."""
    lines = [
        f"{cov.path}: machine {cov.machine!r}: {cov.covered} of {cov.total} transitions taken "
        f"({cov.percent:.1f} %) by {cov.runs} recorded run(s)"
    ]
    for t in cov.missing:
        where = f"{cov.path}:{t.line}" if t.line is not None else cov.path
        lines.append(f"  missing: {t.source} --{t.event}--> {t.dest} by {t.reason!r} ({where})")
    for (source, reason), n in sorted(cov.foreign.items()):
        lines.append(f"  not in the machine: {source} by {reason!r} ({n} step(s); traces of another version of it?)")
    if fail_under is not None and cov.percent < fail_under:
        lines.append(f"  FAIL: coverage {cov.percent:.1f} % is under --fail-under {fail_under:g} %")
    return "\n".join(lines)
