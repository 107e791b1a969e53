"""The hook layer's slice of the run data and what its handlers need.

:class:`HooksData`: whether the model is answering a Stop hook's block, and whether the run submits a prompt or a
manual compaction.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import attrs
from attrs import evolve

from ..outcome import SharedData

__all__ = ["HooksData", "HooksRun", "with_hooks"]


@attrs.frozen(kw_only=True, slots=True)
class HooksData:
    """What the hook layer keeps between steps."""

    stop_hook_active: bool = False  # the next Stop hook runs after one of its blocks (stdin `stop_hook_active`)
    start_source: str = "startup"  # SessionStart's `source`: startup, resume (--resume/--continue) or fork
    # the run compacts the session's history instead of sending a prompt (/compact): the user's
    # instructions for the summary ("" for none); None: an ordinary prompt
    manual_compact: str | None = None
    # a sub-agent's run: its id and type (its Stop hooks are SubagentStop; SessionStart and UserPromptSubmit
    # are the parent's); None: the session's own run
    agent_id: str | None = None
    agent_type: str | None = None
    agent_transcript: str | None = None  # a sub-agent's sidechain transcript (SubagentStop's agent_transcript_path)


class HooksRun(SharedData, Protocol):
    """The run data as hook-layer handlers see it."""

    @property
    def hooks(self) -> HooksData: ...


H = TypeVar("H", bound=HooksRun)


def with_hooks(data: H, **changes: Any) -> H:
    """The run data with its hooks slice changed as given."""
    return data.evolve(hooks=evolve(data.hooks, **changes))
