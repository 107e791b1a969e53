"""How recorded runs mark a picture: one run's steps (:class:`RunMarks`) or many runs' coverage
(:class:`CoverageMarks`), as edge notes, colours, state marks, a title and legend rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..model.spec import StateSpec
from ..verify.coverage import Coverage
from .style import FADED, FAILED, MISSING, TAKEN
from .trace import Trace

__all__ = ["CoverageMarks", "Marks", "RunMarks"]


class Marks:
    """How recorded runs mark the picture: how often each ``(source, reason)`` edge was taken."""

    def __init__(self, counts: Mapping[tuple[str, str], int]) -> None:
        self.counts = counts
        self.visited = frozenset(s for (s, _), n in counts.items() if n)

    def count(self, source: str, reason: str) -> int:
        return self.counts.get((source, reason), 0)

    def note(self, source: str, reason: str) -> str:
        n = self.count(source, reason)
        return f"×{n}" if n else ""

    def colour(self, source: str, reason: str) -> str:
        return TAKEN if self.count(source, reason) else FADED

    def group_note(self, sources: Iterable[str], reason: str) -> str:
        """The note of an edge several sources share (drawn through a junction)."""
        return " ".join(n for n in (self.note(source, reason) for source in sources) if n)

    def style(self, taken: bool, colour: str | None = None) -> dict[str, str]:
        """What an edge's marking changes: colour and width (an edge no run took is faded)."""
        colour = colour or (TAKEN if taken else FADED)
        return {"color": colour, "penwidth": "1" if colour == FADED else "4" if colour == FAILED else "3"}

    def edge_style(self, source: str, reason: str) -> dict[str, str]:
        return self.style(self.count(source, reason) > 0, self.colour(source, reason))

    def mark_state(self, s: StateSpec, out: dict[str, str]) -> None:
        if s.name in self.visited:
            out.update(penwidth="3", color=TAKEN)
        elif not s.terminal:
            out.update(color=FADED, fontcolor="#9e9e9e")

    def title(self, title: str) -> str:
        return title

    def summary(self) -> str:
        return ""

    def legend(self) -> list[tuple[str, str, str]]:
        return []


class RunMarks(Marks):
    """One run: the steps each edge was taken at, the state it ended in, and the step that failed."""

    def __init__(self, trace: Trace) -> None:
        super().__init__(trace.edge_counts())
        self.trace = trace
        self.visited = trace.visited
        self.steps: dict[tuple[str, str], list[int]] = {}
        for step in trace.steps:
            self.steps.setdefault((step.source, step.reason), []).append(step.number)
        failing = trace.failing_step
        self.failing = (failing.source, failing.reason) if failing else None

    def note(self, source: str, reason: str) -> str:
        """``×2: steps 3, 5`` (at most four step numbers), ``✗`` on the failing step."""
        numbers = self.steps.get((source, reason), [])
        if not numbers:
            return ""
        shown = ", ".join(str(n) for n in numbers[:4]) + (", …" if len(numbers) > 4 else "")
        text = f"×{len(numbers)}: step{'s' if len(numbers) > 1 else ''} {shown}"
        return text + ("  ✗ failing step" if (source, reason) == self.failing else "")

    def colour(self, source: str, reason: str) -> str:
        if (source, reason) == self.failing:
            return FAILED
        return super().colour(source, reason)

    def mark_state(self, s: StateSpec, out: dict[str, str]) -> None:
        trace = self.trace
        if s.name == trace.final_state:
            ended = trace.terminal_reason or s.name
            out.update(penwidth="5", color=FAILED if trace.is_error else "#2e7d32")
            out["label"] = out.get("label", s.name) + f"\\n★ the run ended here: {ended}"
        else:
            super().mark_state(s, out)

    def title(self, title: str) -> str:
        t = self.trace
        end = t.terminal_reason or t.final_state or "?"
        return f"{title} · the run {t.path}: {len(t.steps)} steps, ended {end} ({'error' if t.is_error else 'success'})"

    def legend(self) -> list[tuple[str, str, str]]:
        return [
            ("", f'<FONT COLOR="{TAKEN}"><B>━━━</B></FONT>', "taken by the run: ×count: step numbers"),
            ("", f'<FONT COLOR="{FAILED}"><B>━━━</B></FONT>', "the failing step (the last of an error run)"),
            ("", f'<FONT COLOR="{FADED}"><B>───</B></FONT>', "not taken by the run"),
            ('BORDER="3"', "★", "where the run ended"),
        ]


class CoverageMarks(Marks):
    """Many runs: each edge's count summed over them; the edges none took dashed red, as missing."""

    def __init__(self, cov: Coverage) -> None:
        super().__init__(cov.taken)
        self.cov = cov
        self.visited |= frozenset(t.dest for t in cov.edges if self.count(t.source, t.reason))

    def note(self, source: str, reason: str) -> str:
        return super().note(source, reason) or "never taken"

    def colour(self, source: str, reason: str) -> str:
        return TAKEN if self.count(source, reason) else MISSING

    def group_note(self, sources: Iterable[str], reason: str) -> str:
        n = sum(self.count(source, reason) for source in sources)
        return f"×{n}" if n else "never taken"

    def style(self, taken: bool, colour: str | None = None) -> dict[str, str]:
        if taken:
            return {"color": colour or TAKEN, "penwidth": "3"}
        return {"color": MISSING, "penwidth": "1.5", "style": "dashed"}

    def title(self, title: str) -> str:
        return f"{title} · transition coverage"

    def summary(self) -> str:
        c = self.cov
        runs = f"{c.runs} run{'s' if c.runs != 1 else ''}"
        text = f"{c.covered} of {c.total} transitions taken ({c.percent:.1f} %) by {runs}"
        ignored = sum(c.foreign.values())
        if ignored:
            text += f"; {ignored} recorded step{'s' if ignored != 1 else ''} not in this machine ignored"
        return text

    def legend(self) -> list[tuple[str, str, str]]:
        return [
            ("", f'<FONT COLOR="{TAKEN}"><B>━━━</B></FONT>', "taken by the recorded runs: ×count, summed"),
            ("", f'<FONT COLOR="{MISSING}"><B>╌╌╌</B></FONT>', "never taken by any recorded run (missing)"),
        ]
