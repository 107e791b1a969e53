"""How the run ends and what it tells the user, whichever layer ends it; the run data every layer shares.

Owns :class:`Outcome`, :class:`Notice` and :class:`SharedData` (the message graph and the outcome). Holds no layer's
state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, Self, TypeVar

import attrs

from .messages import MessageView

__all__ = ["Notice", "Outcome", "SharedData", "evolve", "evolved", "with_outcome"]

A = TypeVar("A", bound=attrs.AttrsInstance)

_COPIERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def evolve(record: A, **changes: Any) -> A:
    """``attrs.evolve(record, **changes)``, by a copying function written once per class.

    The handlers copy a record a few times every tool turn; attrs' own looks the fields up at
    each copy, and a loop over them costs as much. A class's fields never change, so its copy
    reads them by name in one call. The copy is built by the class's constructor, so its
    validators and converters run as with attrs', and an unknown name is refused as there.
    """
    cls = type(record)
    copy = _COPIERS.get(cls)
    if copy is None:
        copy = _COPIERS[cls] = _copier(cls)
    return copy(record, changes)  # type: ignore[no-any-return]


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    """``copy(record, changes)``: a new ``cls`` from ``record``'s init fields, ``changes`` put over them.

    Its source names only ``cls``'s own attrs fields (identifiers, never data of a run)."""
    pairs = ", ".join(f"{a.alias!r}: record.{a.name}" for a in attrs.fields(cls) if a.init)
    namespace: dict[str, Any] = {"cls": cls}
    exec(f"def copy(record, changes):\n    return cls(**{{{pairs}, **changes}})\n", namespace)
    copier: Callable[[Any, dict[str, Any]], Any] = namespace["copy"]
    return copier


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


def evolved(data: T, **changes: object) -> T:
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
