"""Replacing fields of the frozen records the run data is made of, at the cost of one constructor call.

Every step replaces the run data whole, and most edge handlers replace one or two
slices of it, so the copy is on the hot path of every tool turn. ``attrs.evolve`` looks
up the class's fields and walks them on every call; :func:`evolve` builds, once per
class, a function that passes each field to the constructor by name, so converters and
validators run exactly as they do for ``attrs.evolve`` (only ``init`` fields are
passed; an unknown name is a ``TypeError`` from the constructor, as there). For a
slotted class whose ``__init__`` only sets its fields and runs their validators (no
converter, no field left out of ``__init__``, no pre- or post-init hook, no cached hash), the copy sets
the slots itself and then runs the validators as that ``__init__`` does (unless
validators are switched off; ``queryloop.fsm.run.slots``): the same record, without parsing
keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from queryloop.fsm.run.slots import slot_function

__all__ = ["evolve"]

R = TypeVar("R")

_COPIERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def _by_constructor(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    """A copier that calls ``cls(...)`` with every init field by name (any attrs class)."""
    fields = [(a.name, a.alias) for a in attrs.fields(cls) if a.init]
    for name, alias in fields:
        if not (name.isidentifier() and alias.isidentifier()):  # never true of an attrs field; checked, not assumed
            raise TypeError(f"{cls.__qualname__}: field {name!r} cannot be copied by name")
    args = ", ".join(
        f"{alias}=changes.pop({alias!r}) if {alias!r} in changes else inst.{name}" for name, alias in fields
    )
    source = f"def copy(inst, changes):\n    return cls({args}, **changes)\n"
    namespace: dict[str, Any] = {"cls": cls}
    exec(compile(source, f"<queryloop evolve {cls.__qualname__}>", "exec"), namespace)
    copier: Callable[[Any, dict[str, Any]], Any] = namespace["copy"]
    return copier


def _by_slots(cls: type, fallback: Callable[[Any, dict[str, Any]], Any]) -> Callable[[Any, dict[str, Any]], Any] | None:
    """A copier that sets the slots of a new ``cls`` and runs the validators as its ``__init__`` does; None when
    that ``__init__`` does more than that (then only the constructor copies it as ``attrs.evolve`` would)."""
    names = frozenset(a.name for a in attrs.fields(cls))
    return slot_function(
        cls,
        "copy(inst, changes)",
        lambda name: f"changes[{name!r}] if {name!r} in changes else inst.{name}",
        prologue=(
            "if not _names.issuperset(changes):",
            "    return _fallback(inst, changes)  # the constructor's error",
        ),
        names={"_names": names, "_fallback": fallback},
    )


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    fallback = _by_constructor(cls)
    copier = _by_slots(cls, fallback) or fallback
    _COPIERS[cls] = copier
    return copier


def evolve(inst: R, **changes: Any) -> R:
    """A copy of the attrs instance ``inst`` with ``changes`` (init names) applied — ``attrs.evolve``, faster."""
    cls = inst.__class__
    copier = _COPIERS.get(cls) or _copier(cls)
    result: R = copier(inst, changes)
    return result
