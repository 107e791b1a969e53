"""How the run ends and what it tells the user, whichever layer ends it; the run data every layer shares.

Owns :class:`Outcome`, :class:`Notice` and :class:`SharedData` (the message graph and the outcome). Holds no layer's
state.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MemberDescriptorType
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
    reads them by name in one call. A class whose constructor only stores its fields (no
    validator, converter or init hook) is copied slot by slot, as that constructor would;
    any other is built by its constructor, so its checks run as with attrs'. Either refuses
    an unknown name, as attrs' does.
    """
    cls = type(record)
    copy = _COPIERS.get(cls)
    if copy is None:
        copy = _COPIERS[cls] = _copier(cls)
    return copy(record, changes)  # type: ignore[no-any-return]


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    """``copy(record, changes)``: a new ``cls`` from ``record``'s init fields, ``changes`` put over them.

    Its source names only ``cls``'s own attrs fields (identifiers, never data of a run)."""
    fields = attrs.fields(cls)
    setters = _slot_setters(cls, fields)
    if setters is not None:
        return _slot_copier(cls, fields, setters)
    pairs = ", ".join(f"{a.alias!r}: record.{a.name}" for a in fields if a.init)
    namespace: dict[str, Any] = {"cls": cls}
    exec(f"def copy(record, changes):\n    return cls(**{{{pairs}, **changes}})\n", namespace)
    copier: Callable[[Any, dict[str, Any]], Any] = namespace["copy"]
    return copier


def _slot_setters(cls: type, fields: tuple[attrs.Attribute[Any], ...]) -> list[Any] | None:
    """Each field's slot setter when ``cls``'s constructor does nothing but store its fields, else None.

    That is: every slot of the class is a field (or ``__weakref__``), every field is an init
    field with no validator or converter, the class has no ``__attrs_pre_init__``,
    ``__attrs_post_init__`` or ``__attrs_init__`` (its own ``__init__``), and every class it
    is made of has slots and no ``__init__`` attrs did not write."""
    if any(hasattr(cls, hook) for hook in ("__attrs_pre_init__", "__attrs_post_init__", "__attrs_init__")):
        return None
    made_of = cls.__mro__[:-1]  # all but object
    if any("__slots__" not in k.__dict__ or ("__init__" in k.__dict__ and not _attrs_made(k)) for k in made_of):
        return None
    if any(not a.init or a.validator is not None or a.converter is not None for a in fields):
        return None
    slots = {name for k in cls.__mro__ for name in k.__dict__.get("__slots__", ())} - {"__weakref__"}
    if slots != {a.name for a in fields}:
        return None  # not a slots class, or a slot the constructor fills that is no field (a cached hash)
    setters = [next(k.__dict__[a.name] for k in cls.__mro__ if a.name in k.__dict__) for a in fields]
    if not all(isinstance(s, MemberDescriptorType) for s in setters):
        return None
    return [s.__set__ for s in setters]


def _attrs_made(cls: type) -> bool:
    """Whether attrs made ``cls`` itself (not only a class it derives from)."""
    return "__attrs_attrs__" in cls.__dict__


def _slot_copier(
    cls: type, fields: tuple[attrs.Attribute[Any], ...], setters: list[Any]
) -> Callable[[Any, dict[str, Any]], Any]:
    """The copy of a class whose constructor only stores its fields: each slot set, from ``changes`` by alias."""
    known = frozenset(a.alias for a in fields)
    lines = [
        "def copy(record, changes):",
        "    if not changes.keys() <= known:",
        "        refuse(cls, changes, known)",
        "    new = new_of(cls)",
        *(
            f"    set_{i}(new, changes[{a.alias!r}] if {a.alias!r} in changes else record.{a.name})"
            for i, a in enumerate(fields)
        ),
        "    return new",
    ]
    namespace: dict[str, Any] = {"cls": cls, "known": known, "refuse": _refuse, "new_of": object.__new__}
    namespace.update((f"set_{i}", setter) for i, setter in enumerate(setters))
    exec("\n".join(lines) + "\n", namespace)
    copier: Callable[[Any, dict[str, Any]], Any] = namespace["copy"]
    return copier


def _refuse(cls: type, changes: dict[str, Any], known: frozenset[str]) -> None:
    """The error the constructor would raise for a name it does not take."""
    unknown = sorted(set(changes) - known)
    raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}")


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
