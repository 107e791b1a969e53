"""How the run ends and what it tells the user, whichever layer ends it; the run data every layer shares.

Owns :class:`Outcome`, :class:`Notice` and :class:`SharedData` (the message graph and the outcome). Holds no layer's
state.
"""

from __future__ import annotations

from typing import Any, Protocol, Self, TypeVar

import attrs
from attrs import evolve

from .messages import MessageView

__all__ = ["Notice", "Outcome", "SharedData", "evolved", "with_outcome"]


@attrs.frozen(kw_only=True, slots=True)
class Outcome:
    """What the run will report: its answer or its surfaced (previously withheld) error."""

    partial_text: str = ""  # visible text of this turn, kept across continuations and tool requests
    result_text: str = ""
    error: str | None = None
    api_error_status: int | None = None
    stop_reason: str | None = None  # of the last complete reply
    notices: tuple[str, ...] = ()  # tombstones and switches, for the transcript and verbose output
    structured_output: dict[str, Any] | None = None  # --json-schema: the StructuredOutput call's input, once valid


class SharedData(Protocol):
    """The composed run data as every layer sees it: the message graph, the outcome, and a way to evolve it."""

    @property
    def messages(self) -> MessageView: ...

    @property
    def outcome(self) -> Outcome: ...

    def evolve(self, **changes: Any) -> Self:
        """A copy with the named slices replaced (``attrs.evolve``)."""
        ...


T = TypeVar("T", bound=SharedData)


def evolved(data: T, **changes: Any) -> T:
    """The run data with the named slices replaced — the body of most edge handlers (which return data)."""
    return data.evolve(**changes)


def with_outcome(data: T, *, note: str | None = None, **changes: Any) -> T:
    """The run data with its outcome changed as given; ``note`` appends a notice."""
    outcome = data.outcome
    if note is not None:
        changes["notices"] = (*outcome.notices, note)
    return data.evolve(outcome=evolve(outcome, **changes))


@attrs.frozen(slots=True)
class Notice:
    """A line for verbose output: a fallback switch, a tombstone, a hook's message."""

    text: str
