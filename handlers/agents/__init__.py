"""The agents layer: background sub-agents a run launched report back to it.

Its states are ``admitting_agents``, ``collecting_agent_reports`` and ``awaiting_agents``. Here: ``data``,
``admission``, ``reporting`` and ``services`` (the ``Agent`` tool, definitions). ``queryloop.run.subagents``
assembles a sub-agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm.lazy import lazy_exports

if TYPE_CHECKING:
    from .admission import admit_agent_call, next_agent_call, refuse_agent_calls, waiting_agent_calls
    from .data import AgentReport, AgentsData, AgentsRun, AgentsServices, AgentStatus, SubagentPool, outstanding
    from .reporting import agents_running, await_report, collect_report, deliver_report, notification_text
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".admission": ("admit_agent_call", "next_agent_call", "refuse_agent_calls", "waiting_agent_calls"),
            ".data": (
                "AgentReport",
                "AgentStatus",
                "AgentsData",
                "AgentsRun",
                "AgentsServices",
                "SubagentPool",
                "outstanding",
            ),
            ".reporting": ("agents_running", "await_report", "collect_report", "deliver_report", "notification_text"),
        },
    )

__all__ = [
    "AgentReport",
    "AgentStatus",
    "AgentsData",
    "AgentsRun",
    "AgentsServices",
    "SubagentPool",
    "admit_agent_call",
    "agents_running",
    "await_report",
    "collect_report",
    "deliver_report",
    "next_agent_call",
    "notification_text",
    "outstanding",
    "refuse_agent_calls",
    "waiting_agent_calls",
]
