"""How the run ends and what it tells the user, whichever layer ends it; the run data every layer shares.

Owns :class:`Outcome`, :class:`Notice` and :class:`SharedData` (the message graph and the outcome). Holds no layer's
state.
"""

from __future__ import annotations

from typing import Any, Protocol, Self, TypeVar

import attrs

from .messages import MessageView

__all__ = ["Notice", "Outcome", "SharedData", "evolve", "evolved", "with_outcome"]

A = TypeVar("A", bound=attrs.AttrsInstance)

_INIT_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def evolve(record: A, **changes: Any) -> A:
    """``attrs.evolve(record, **changes)``, the class's init fields looked up once per class.

    The handlers copy a record a few times every tool turn; attrs' own looks the fields up at each
    copy. A class's fields never change, so its ``(name, alias)`` pairs are kept by class. The copy
    is built by the class's constructor, so its validators and converters run as with attrs'.
    """
    cls = type(record)
    fields = _INIT_FIELDS.get(cls)
    if fields is None:
        fields = _INIT_FIELDS[cls] = tuple((a.name, a.alias) for a in attrs.fields(cls) if a.init)
    for name, alias in fields:
        if alias not in changes:
            changes[alias] = getattr(record, name)
    return cls(**changes)


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
