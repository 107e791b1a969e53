"""The run's records: the frozen run state, an effect's event, a taken step and a run's failure.

Owns :class:`RunState` (its counters held within caps), :class:`Event`, :class:`Step` and :class:`RunFailure`.
Choosing and taking a step is ``program``'s; driving a run is ``runtime``'s.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import attrs

from ..errors import InternalError

__all__ = ["Event", "RunFailure", "RunState", "Step"]

D = TypeVar("D")
P_co = TypeVar("P_co", covariant=True)


@attrs.frozen(kw_only=True, slots=True)
class Event(Generic[P_co]):
    """An outcome an effect returns: a declared event name and its payload (a record named for it)."""

    name: str
    data: P_co = None  # type: ignore[assignment]  # an event without a payload carries None


_INT = frozenset((int,))
_last_within: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
"""The last ``(counters, limits)`` pair found within caps: both tuples of ints, immutable and kept
alive here, so the same two objects are within caps for as long as they are held. Most steps
carry the counters over unchanged (the same tuple object, under the same limits): the answer is
then known without a pass. Process-wide, rightly: the answer depends only on the two immutable
tuples it holds, so no run can see another's (a validator sees no run-scoped object to hold it)."""


def _counters_within_caps(instance: RunState[Any], attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    global _last_within
    limits = instance.limits
    last = _last_within
    if value is last[0] and limits is last[1]:
        return  # these very tuples were found within caps (a step that changed no counter)
    if len(value) == len(limits) and (not value or min(value) >= 0) and all(map(operator.le, value, limits)):
        if type(value) is tuple and type(limits) is tuple and {*map(type, value), *map(type, limits)} == _INT:
            _last_within = (value, limits)  # tuples of ints only: immutable, so the answer cannot change
        return  # the fast path: one C-level pass per step
    for name, count, cap in zip(instance.counter_names, value, instance.caps, strict=True):
        if count < 0 or (cap is not None and count > cap):
            raise InternalError(f"counter {name!r} = {count} is outside 0..{cap}; the engine must never allow this")


# RunState and Step are built on every step, so unlike the other records their fields may also be given by
# position, in the order declared: the engine's step does, since parsing nine keywords cost about a sixth of a
# step (issue 53). Everyone else names them; tests/engine/test_runtime.py pins the order.
@attrs.frozen(slots=True)
class RunState(Generic[D]):
    """Everything one run is, replaced whole at every step (``attrs.evolve``), never mutated.

    ``data`` is the application's own frozen record (the agent's transcript view,
    model, …); the engine only carries it to handlers and effects.
    """

    machine: str
    state: str
    counter_names: tuple[str, ...]
    caps: tuple[int | None, ...]
    limits: tuple[int, ...]  # caps with unbounded (None) as sys.maxsize, for the validator's fast path
    counters: tuple[int, ...] = attrs.field(validator=_counters_within_caps)
    params: Mapping[str, Any]
    data: D
    steps: int = 0

    def count(self, name: str) -> int:
        """The current value of the counter ``name``."""
        return self.counters[self.counter_names.index(name)]

    def cap(self, name: str) -> int | None:
        """The cap of the counter ``name`` in this run (None: unbounded)."""
        return self.caps[self.counter_names.index(name)]

    def counter_dict(self) -> dict[str, int]:
        return dict(zip(self.counter_names, self.counters, strict=True))


@attrs.frozen(slots=True)  # fields by position in the engine's step (see RunState)
class Step:
    """One taken transition, as recorded in the trace and yielded by the driver."""

    index: int
    source: str
    event: str
    reason: str
    dest: str
    progress: bool
    counter_names: tuple[str, ...]
    counters: tuple[int, ...]
    terminal: bool

    def counter_dict(self) -> dict[str, int]:
        return dict(zip(self.counter_names, self.counters, strict=True))


@attrs.frozen(kw_only=True, slots=True)
class RunFailure:
    """Why a run ended in ``internal_error``: the exception an effect, guard or handler raised, and its traceback."""

    exception: Exception
    traceback: str  # formatted, with the original cause chained

    @property
    def message(self) -> str:
        return str(self.exception)
