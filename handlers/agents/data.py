"""The agents layer's slice of the run data, the report a sub-agent's end becomes, and what its handlers need.

Owns :class:`AgentsData` (which background sub-agents have reported), :class:`AgentReport`, the
:class:`SubagentPool` protocol and the layer's protocols. The launches are the tool layer's
(``ToolsData.background``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal, Protocol, TypeVar

import attrs
from attrs import evolve

from ..outcome import SharedData
from ..tools import ToolsData

__all__ = [
    "AgentReport",
    "AgentStatus",
    "AgentsData",
    "AgentsRun",
    "AgentsServices",
    "SubagentPool",
    "outstanding",
    "with_agents",
]

AgentStatus = Literal["completed", "failed", "timed_out", "cancelled"]


@attrs.frozen(kw_only=True, slots=True)
class AgentReport:
    """How one sub-agent ended, as its parent is told."""

    agent_id: str
    tool_use_id: str  # the parent's Agent call that launched it
    description: str
    agent_type: str
    status: AgentStatus
    result: str  # its answer, or what went wrong
    total_tokens: int = 0
    tool_uses: int = 0
    duration_ms: int = 0
    transcript: str = ""  # its sidechain transcript (empty: not kept)

    @property
    def event(self) -> str:
        """The machine's event for this end: ``agent_completed``, ``agent_failed`` or ``agent_timed_out``."""
        return {"completed": "agent_completed", "timed_out": "agent_timed_out"}.get(self.status, "agent_failed")


class SubagentPool(Protocol):
    """The run's sub-agents as its agents layer reaches them."""

    def cost_usd(self) -> float:
        """What the sub-agents' requests have cost so far (the known prices)."""
        ...

    def knows(self, agent_id: str) -> bool:
        """Whether this pool started ``agent_id`` (a run restored elsewhere lost the ones it had not reported)."""
        ...

    def ended(self, agent_ids: Collection[str]) -> AgentReport | None:
        """The report of the first of ``agent_ids`` (launch order) that has ended, else None."""
        ...

    async def next_ended(self, agent_ids: Collection[str]) -> AgentReport:
        """Wait until one of ``agent_ids`` ends; its report (the first in launch order when several have)."""
        ...


@attrs.frozen(kw_only=True, slots=True)
class AgentsData:
    """What the agents layer keeps between steps."""

    reported: frozenset[str] = frozenset()  # background sub-agents whose end the parent was told of
    # (tool turn, how many of its Agent calls are admitted to start, in the model's order); another turn: none yet
    admitted: tuple[int, int] = (0, 0)


class AgentsRun(SharedData, Protocol):
    """The run data as agents-layer handlers see it."""

    @property
    def agents(self) -> AgentsData: ...

    @property
    def tools(self) -> ToolsData: ...  # its background: the launches


class AgentsServices(Protocol):
    """What agents-layer effects use."""

    @property
    def subagents(self) -> SubagentPool | None: ...


A = TypeVar("A", bound=AgentsRun)


def outstanding(data: AgentsRun) -> tuple[str, ...]:
    """The background sub-agents launched and not yet reported, in launch order."""
    reported = data.agents.reported
    return tuple(t.task_id for t in data.tools.background if t.kind == "agent" and t.task_id not in reported)


def with_agents(data: A, **changes: Any) -> A:
    """The run data with its agents slice changed as given."""
    return data.evolve(agents=evolve(data.agents, **changes))
