"""Replacing fields of the frozen records the run data is made of, at the cost of one constructor call.

Every step replaces the run data whole, and most edge handlers replace one or two
slices of it, so the copy is on the hot path of every tool turn. ``attrs.evolve`` looks
up the class's fields and walks them on every call; :func:`evolve` builds, once per
class, a function that passes each field to the constructor by name, so converters and
validators run exactly as they do for ``attrs.evolve`` (only ``init`` fields are
passed; an unknown name is a ``TypeError`` from the constructor, as there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["evolve"]

R = TypeVar("R")

_COPIERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
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
    _COPIERS[cls] = copier
    return copier


def evolve(inst: R, **changes: Any) -> R:
    """A copy of the attrs instance ``inst`` with ``changes`` (init names) applied — ``attrs.evolve``, faster."""
    cls = inst.__class__
    copier = _COPIERS.get(cls) or _copier(cls)
    result: R = copier(inst, changes)
    return result
