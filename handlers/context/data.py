"""The context layer's slice of the run data, what its handlers need, and the items it publishes.

Owns :class:`ContextData`, the protocols context handlers work on, its effects' payloads and
:class:`CompactionDone`. Writes the request slice only through the request layer's functions.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import attrs
from attrs import evolve

from ..hooks import HooksData, HookServices
from ..messages import Message
from ..request import ModelFailure, RequestLog, RequestRun, RequestServices
from ..session import SessionData
from ..tools import ToolContext, ToolsData
from .services.clearing import Clearing
from .services.collapse import StagedCollapse
from .services.compaction import CompactBoundary, CompactionPlan

__all__ = [
    "Compacted",
    "CompactionDone",
    "CompactionFailed",
    "ContextData",
    "ContextRun",
    "ContextServices",
    "Measured",
    "with_context",
]


@attrs.frozen(kw_only=True, slots=True)
class ContextData:
    """What the context layer keeps between steps."""

    auto_compact: bool = True
    estimate: int = 0  # the last measured request estimate (tokens)
    overhead: int = 0  # the estimate of the system prompt and tool definitions (fixed for a run)
    count_tokens_offered: bool = True  # False once the server refused count_tokens for good
    staged: tuple[StagedCollapse, ...] = ()  # large old tool results that can be collapsed at no API cost
    microcompact: bool = True  # clear old tool results below the threshold when that frees enough
    clearable_calls_seen: int = 0  # calls of the clearable tools in the history when old results were last looked for
    plan: CompactionPlan | None = None  # the compaction in progress (older part shrinks on head truncation)
    dropped_messages: int = 0  # messages dropped unsummarised by head truncation in this compaction
    compaction_turns: tuple[int, ...] = ()  # the turn of every successful compaction
    boundaries: tuple[CompactBoundary, ...] = ()
    compact_error: str | None = None  # why the last compaction failed
    summary_failure: ModelFailure | None = None  # the summary request's last transient failure (its retry-after)


class ContextRun(RequestRun, Protocol):
    """The run data as context-layer handlers see it."""

    @property
    def context(self) -> ContextData: ...

    @property
    def tools(self) -> ToolsData: ...

    @property
    def session(self) -> SessionData: ...

    @property
    def hooks(self) -> HooksData: ...


C = TypeVar("C", bound=ContextRun)


def with_context(data: C, **changes: Any) -> C:
    """The run data with its context slice changed as given."""
    return data.evolve(context=evolve(data.context, **changes))


class ContextServices(RequestServices, HookServices, Protocol):
    """What context-layer effects use: the model (count_tokens, summaries), the threshold, the cwd, hooks."""

    @property
    def auto_compact_threshold(self) -> float: ...

    @property
    def tool_context(self) -> ToolContext: ...


# ---- event payloads ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True, slots=True)
class Measured:
    """``within_threshold`` / ``over_threshold``: the next request's estimate and what could be collapsed."""

    estimate: int
    staged: tuple[StagedCollapse, ...]
    count_tokens_offered: bool
    clearing: Clearing | None = None
    """Old tool results worth clearing (``within_threshold`` only; the ``microcompact`` edge's guard)."""
    clearable_calls: int | None = None
    """How many calls of the clearable tools the history held when they were looked for; ``None`` when they were not."""


@attrs.frozen(kw_only=True, slots=True)
class Compacted:
    """``compacted``: the new transcript and its boundary; ``log``: the summary request."""

    messages: tuple[Message, ...]
    boundary: CompactBoundary
    log: RequestLog


@attrs.frozen(kw_only=True, slots=True)
class CompactionFailed:
    """``summary_too_long`` / ``summary_failed``: why; ``log``: the summary request, if one was sent."""

    reason: str
    log: RequestLog | None = None

    def __str__(self) -> str:
        return self.reason


@attrs.frozen(kw_only=True, slots=True)
class CompactionDone:
    """A compaction replaced older messages with a summary (Claude Code's system/compact_boundary)."""

    boundary: CompactBoundary
