"""Building a slotted attrs record without its ``__init__``'s keyword handling.

Owns :func:`slot_function`: a function, generated once per class, that makes a new
instance of a slotted attrs class by setting each field's slot and then running the
fields' validators, as the ``__init__`` attrs generated does (unless validators are
switched off, ``attrs.validators.set_disabled``), without parsing keyword arguments or
looking up each field's setter by name. The engine builds a run state and a step at every
step (``queryloop.fsm.run.runtime``), and the handlers copy their records at every step
(``queryloop.handlers.records``). It refuses a class whose ``__init__`` does more — a
converter, a field left out of ``__init__`` or given another name, a pre- or post-init hook,
a cached hash, an ``__init__`` of the class's own — so it cannot silently drift from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MemberDescriptorType
from typing import Any

import attrs

__all__ = ["slot_function"]


def _only_sets_and_validates(cls: type) -> bool:
    """Whether the ``__init__`` of ``cls`` does nothing but set its fields' slots and run their validators."""
    fields = attrs.fields(cls)
    if any(not f.init or f.converter is not None or f.alias != f.name or not f.name.isidentifier() for f in fields):
        return False
    if any(hasattr(cls, hook) for hook in ("__attrs_pre_init__", "__attrs_post_init__", "__attrs_init__")):
        return False
    init = getattr(cls.__dict__.get("__init__"), "__code__", None)
    if init is None or not init.co_filename.startswith("<attrs generated"):
        return False  # an __init__ of the class's own
    if "_attrs_cached_hash" in getattr(cls, "__slots__", ()):
        return False  # a cached hash: __init__ sets a slot that is no field
    return all(isinstance(cls.__dict__.get(f.name), MemberDescriptorType) for f in fields)  # slotted


def slot_function(
    cls: type,
    signature: str,
    value: Callable[[str], str],
    *,
    prologue: Sequence[str] = (),
    names: Mapping[str, Any] | None = None,
) -> Callable[..., Any] | None:
    """``def <signature>:`` that runs ``prologue``, then returns a new ``cls`` whose field ``f`` is
    set to the expression ``value(f)`` (evaluated in the function) and validated; ``names`` are
    visible to the expressions and the prologue. None when ``cls`` is not a slotted attrs class
    whose ``__init__`` only sets and validates its fields."""
    if not _only_sets_and_validates(cls):
        return None
    fields = attrs.fields(cls)
    namespace: dict[str, Any] = {
        **(names or {}),
        "_new": object.__new__,
        "_cls": cls,
        "_disabled": attrs.validators.get_disabled,
    }
    lines = [f"def {signature}:", *(f"    {line}" for line in prologue), "    self = _new(_cls)"]
    for f in fields:
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot's own setter
        lines.append(f"    _set_{f.name}(self, {value(f.name)})")
    checked = [f for f in fields if f.validator is not None]
    if checked:
        lines.append("    if not _disabled():")
        for f in checked:
            namespace[f"_check_{f.name}"] = f.validator
            namespace[f"_field_{f.name}"] = f
            lines.append(f"        _check_{f.name}(self, _field_{f.name}, self.{f.name})")
    lines.append("    return self")
    name = signature.split("(", 1)[0]
    exec(compile("\n".join(lines) + "\n", f"<queryloop {name} {cls.__qualname__}>", "exec"), namespace)
    built: Callable[..., Any] = namespace[name]
    return built
