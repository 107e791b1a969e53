"""What a run tells those who watch it: a closed set of typed items, and the observers that read them.

Owns :data:`Observation` and the :class:`Observer` protocol. An observer declares with ``@uses`` the states and
reasons it compares steps with, checked against the machine.
"""

from __future__ import annotations

from typing import Protocol, get_args

import attrs

from queryloop.fsm import Step
from queryloop.handlers.agents import AgentReport
from queryloop.handlers.context import CompactionDone
from queryloop.handlers.hooks import HookReported
from queryloop.handlers.mcp import McpProgress
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import ApiRetry, AssistantMessage, RequestFailed, RequestLogged, StreamEvent, TextDelta
from queryloop.handlers.tools import PermissionDenied, ToolResultPublished

__all__ = ["OBSERVATION_TYPES", "Observation", "Observer", "SubagentEnded", "SubagentItem", "SubagentStarted"]


@attrs.frozen(kw_only=True, slots=True)
class SubagentStarted:
    """An Agent call started a sub-agent (``background``: its call only acknowledges it)."""

    tool_use_id: str
    agent_id: str
    agent_type: str
    description: str
    prompt: str
    background: bool
    model: str = ""  # the model it runs on
    output_file: str = ""  # its sidechain transcript ("" when the session is not kept)


@attrs.frozen(kw_only=True, slots=True)
class SubagentEnded:
    """A sub-agent's run ended: how (its report), whether its parent waits for the report or has its answer."""

    report: AgentReport


@attrs.frozen(kw_only=True, slots=True)
class SubagentItem:
    """An item of a sub-agent's run, as its parent's observers see it: the Agent call that started it, and the item."""

    tool_use_id: str
    agent_id: str
    item: Observation


Observation = (
    Step
    | TextDelta
    | StreamEvent
    | AssistantMessage
    | RequestLogged
    | RequestFailed
    | ApiRetry
    | ToolResultPublished
    | PermissionDenied
    | HookReported
    | CompactionDone
    | Notice
    | McpProgress
    | SubagentItem
    | SubagentStarted
    | SubagentEnded
)
"""Every item a run hands its observers."""

OBSERVATION_TYPES: tuple[type, ...] = get_args(Observation)


class Observer(Protocol):
    """Told every item of a run as it happens (its class declares the states and reasons it reads)."""

    def observe(self, item: Observation) -> None: ...
