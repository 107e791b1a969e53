"""One recorded run, read back from a stream-json log, so a diagram can draw the path it took.

Owns reading the log's ``system/transition`` and ``result`` lines and checking each step against the machine. Draws
nothing (``fsm.draw.render`` does).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..errors import FsmError
from ..model.load import INTERNAL_ERROR
from ..model.spec import MachineSpec

__all__ = ["Trace", "TraceError", "TraceStep", "check_trace", "read_trace"]


class TraceError(FsmError):
    """A run log that cannot be read, or whose steps are not edges of the machine it is drawn on."""


@attrs.frozen(kw_only=True)
class TraceStep:
    """One transition of the run, as logged: ``source --event--> dest`` by ``reason``, counters after it."""

    number: int  # 1-based, in the order taken
    line: int  # line of the log
    source: str
    event: str
    reason: str
    dest: str
    progress: bool = False
    counters: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Trace:
    """A run: its steps in order and, when the log has its result line, how it ended."""

    path: str
    machine: str | None = None  # as announced by the log's init line, when it does
    steps: tuple[TraceStep, ...] = ()
    terminal_reason: str | None = None
    is_error: bool | None = None

    def edge_counts(self) -> Counter[tuple[str, str]]:
        """How many times each ``(source, reason)`` edge was taken."""
        return Counter((s.source, s.reason) for s in self.steps)

    @property
    def visited(self) -> frozenset[str]:
        return frozenset(s.source for s in self.steps) | frozenset(s.dest for s in self.steps)

    @property
    def final_state(self) -> str | None:
        return self.steps[-1].dest if self.steps else None

    @property
    def failing_step(self) -> TraceStep | None:
        """The step that ended an error run (the last one); ``None`` for a run that did not fail."""
        return self.steps[-1] if self.is_error and self.steps else None


def _step(number: int, line: int, obj: Mapping[str, object], path: str) -> TraceStep:
    fields = {}
    for key in ("from", "event", "reason", "to"):
        value = obj.get(key)
        if not isinstance(value, str):
            raise TraceError(f"{path}:{line}: a transition line without a string {key!r}")
        fields[key] = value
    raw = obj.get("counters")
    counters = {k: v for k, v in raw.items() if isinstance(v, int)} if isinstance(raw, dict) else {}
    return TraceStep(
        number=number,
        line=line,
        source=fields["from"],
        event=fields["event"],
        reason=fields["reason"],
        dest=fields["to"],
        progress=obj.get("progress") is True,
        counters=counters,
    )


def read_trace(path: str | Path) -> Trace:
    """Read a stream-json log (``queryloop run --output-format stream-json --verbose``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{p}: cannot read the run log: {exc.strerror}") from None
    steps: list[TraceStep] = []
    machine: str | None = None
    terminal: str | None = None
    is_error: bool | None = None
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{p}:{line}: not a JSON line ({exc.msg}); expected a stream-json log") from None
        if not isinstance(obj, dict):
            continue
        if obj.get("type") == "system" and obj.get("subtype") == "init" and isinstance(obj.get("machine"), str):
            machine = obj["machine"]
        elif obj.get("type") == "system" and obj.get("subtype") == "transition":
            steps.append(_step(len(steps) + 1, line, obj, str(p)))
        elif obj.get("type") == "result":
            reason = obj.get("terminal_reason")
            terminal = reason if isinstance(reason, str) else None
            is_error = bool(obj.get("is_error"))
    if not steps:
        raise TraceError(
            f"{p}: no transition lines; write the log with `queryloop run --output-format stream-json --verbose`"
        )
    return Trace(path=str(p), machine=machine, steps=tuple(steps), terminal_reason=terminal, is_error=is_error)


def check_trace(spec: MachineSpec, trace: Trace) -> None:
    """Every step must be a declared edge of ``spec``: a log of another machine or version is refused.

    The engine's own step into ``internal_error`` (an effect, guard or handler raised) is
    no edge of the YAML; it is accepted into the state of that name, which every machine declares.
    """
    edges = {(t.source, t.reason): t for t in spec.transitions}
    for s in trace.steps:
        if s.reason == s.event == s.dest == INTERNAL_ERROR and INTERNAL_ERROR in spec.state_map:
            continue
        t = edges.get((s.source, s.reason))
        if t is None or (t.event, t.dest) != (s.event, s.dest):
            raise TraceError(
                f"{trace.path}:{s.line}: step {s.number} ({s.source} --{s.event}--> {s.dest} by {s.reason!r}) "
                f"is not an edge of machine {spec.name!r} ({spec.path}); was the log written by another "
                "version of the machine?"
            )
