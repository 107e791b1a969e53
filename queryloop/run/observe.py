"""What a run tells those who watch it: a closed set of typed items, and the observers that read them.

Owns :data:`Observation` — every kind of item a run hands its observers: each
:class:`~queryloop.fsm.Step` it takes (a transition, its reason and counters) and what
its effects publish as they go (a model request's text as it streams, a complete
reply, an attempt that failed or was logged, a retry about to wait, a tool's result,
a compaction, a notice, an MCP call's progress), a sub-agent's start and end and every
item of its run — and the :class:`Observer` protocol. An observer (the renderers of
``queryloop.frontends.console``, the interactive status line, the Agent SDK's lines)
is given to :class:`~queryloop.run.agent.AgentRun` when it is made and told every item
in order, the abort step included. Whatever states and reasons it
compares steps with, its class declares with :func:`queryloop.fsm.uses`
(``@uses(states=..., reasons=...)``), and the run refuses it for a machine that lacks
one (:func:`queryloop.fsm.check_observers`), as the loader refuses a handler.
"""

from __future__ import annotations

from typing import Protocol, get_args

import attrs

from queryloop.fsm import Step
from queryloop.handlers.agents import AgentReport
from queryloop.handlers.context import CompactionDone
from queryloop.handlers.mcp import McpProgress
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import ApiRetry, AssistantMessage, RequestFailed, RequestLogged, StreamEvent, TextDelta
from queryloop.handlers.tools import ToolResultPublished

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
