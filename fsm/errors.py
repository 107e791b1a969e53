"""The engine's error hierarchy.

User errors (a machine that cannot be built, a finding, a failed handler) are kept apart from
:class:`InternalError`, a broken engine invariant: a bug in queryloop.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CheckFailed",
    "FsmError",
    "HandlerError",
    "InternalError",
    "SpecError",
    "SpecProblem",
    "TransitionError",
]


class FsmError(Exception):
    """Base class of every error the engine raises on purpose."""


class SpecProblem:
    """One problem found while turning YAML into a machine: where, what, and how to fix it."""

    __slots__ = ("column", "fix", "line", "message", "path")

    def __init__(
        self, path: str, line: int | None, message: str, fix: str | None = None, *, column: int | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.message = message
        self.fix = fix
        self.column = column

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        if self.line is not None and self.column is not None:
            where += f":{self.column}"
        text = f"{where}: {self.message}"
        if self.fix:
            text += f" ({self.fix})"
        return text

    def __repr__(self) -> str:
        return f"SpecProblem({str(self)!r})"


class SpecError(FsmError, ValueError):
    """A machine declaration cannot become a machine; carries every problem with `path:line`."""

    def __init__(self, problems: Sequence[SpecProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    @property
    def first(self) -> SpecProblem:
        return self.problems[0]


class CheckFailed(FsmError):
    """The model checker found at least one property violation (see ``findings``)."""

    def __init__(self, machine: str, findings: Sequence[object]) -> None:
        self.machine = machine
        self.findings = tuple(findings)
        super().__init__(f"{machine}: {len(self.findings)} finding(s)")


class TransitionError(FsmError):
    """An event arrived that the current state cannot take (no candidate edge could fire)."""


class HandlerError(FsmError):
    """A Python handler named by the machine failed or broke its contract; the original is ``__cause__``."""


class InternalError(FsmError):
    """An engine invariant broke. This is a bug in queryloop, please report it with the trace."""
