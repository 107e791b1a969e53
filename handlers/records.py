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
validators are switched off): the same record, without parsing keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any, TypeVar

import attrs

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
    fields = attrs.fields(cls)
    names = [a.name for a in fields]
    if any(not a.init or a.converter is not None or a.alias != a.name or not a.name.isidentifier() for a in fields):
        return None
    if any(hasattr(cls, hook) for hook in ("__attrs_pre_init__", "__attrs_post_init__", "__attrs_init__")):
        return None
    init = getattr(cls.__dict__.get("__init__"), "__code__", None)
    if init is None or not init.co_filename.startswith("<attrs generated"):
        return None  # an __init__ of the class's own
    if "_attrs_cached_hash" in getattr(cls, "__slots__", ()):
        return None  # a cached hash: __init__ sets a slot that is no field
    if not all(isinstance(cls.__dict__.get(name), MemberDescriptorType) for name in names):
        return None  # not slotted: its fields are not slots to set
    namespace: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_names": frozenset(names),
        "_fallback": fallback,
        "_disabled": attrs.validators.get_disabled,
    }
    lines = [
        "def copy(inst, changes):",
        "    if not _names.issuperset(changes):",
        "        return _fallback(inst, changes)  # an unknown name: the constructor's TypeError",
        "    self = _new(_cls)",
    ]
    for name in names:
        namespace[f"_set_{name}"] = cls.__dict__[name].__set__  # the slot's own setter
        lines.append(f"    _set_{name}(self, changes[{name!r}] if {name!r} in changes else inst.{name})")
    checked = [a for a in fields if a.validator is not None]
    if checked:
        lines.append("    if not _disabled():")
        for a in checked:
            namespace[f"_check_{a.name}"] = a.validator
            namespace[f"_field_{a.name}"] = a
            lines.append(f"        _check_{a.name}(self, _field_{a.name}, self.{a.name})")
    lines.append("    return self")
    exec(compile("\n".join(lines) + "\n", f"<queryloop evolve {cls.__qualname__}>", "exec"), namespace)
    copier: Callable[[Any, dict[str, Any]], Any] = namespace["copy"]
    return copier


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
