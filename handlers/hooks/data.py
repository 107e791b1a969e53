"""The hook layer's slice of the run data and what its handlers need.

Owns :class:`HooksData` (whether the model is answering a Stop hook's block) and
the protocol of the run data hook-layer handlers work on.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import attrs

from queryloop.fsm import RunState

from ..outcome import SharedData, evolved

__all__ = ["HooksData", "HooksRun", "with_hooks"]


@attrs.frozen(kw_only=True, slots=True)
class HooksData:
    """What the hook layer keeps between steps."""

    stop_hook_active: bool = False  # the next Stop hook runs after one of its blocks (stdin `stop_hook_active`)


class HooksRun(SharedData, Protocol):
    """The run data as hook-layer handlers see it."""

    @property
    def hooks(self) -> HooksData: ...


H = TypeVar("H", bound=HooksRun)


def with_hooks(run: RunState[H], **changes: Any) -> RunState[H]:
    """``run`` with its hooks slice changed as given."""
    return evolved(run, hooks=attrs.evolve(run.data.hooks, **changes))
