"""The agents layer: background sub-agents a run launched report back to it.

Its states are ``admitting_agents``, ``collecting_agent_reports`` and ``awaiting_agents``. Here: ``data``,
``admission``, ``reporting`` and ``services`` (the ``Agent`` tool, definitions). ``queryloop.run.subagents``
assembles a sub-agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .admission import admit_agent_call, next_agent_call, refuse_agent_calls, waiting_agent_calls
    from .data import AgentReport, AgentsData, AgentsRun, AgentsServices, AgentStatus, SubagentPool, outstanding
    from .reporting import agents_running, await_report, collect_report, deliver_report, notification_text
    from .services.definitions import (
        BUILT_IN_AGENTS,
        AgentDefinition,
        AgentDefinitionError,
        agents_from_files,
        agents_from_json,
        merge_agents,
    )
    from .services.tool import DEFAULT_AGENT, agent_tool
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".admission": (
                "admit_agent_call",
                "next_agent_call",
                "refuse_agent_calls",
                "waiting_agent_calls",
            ),
            ".data": (
                "AgentReport",
                "AgentStatus",
                "AgentsData",
                "AgentsRun",
                "AgentsServices",
                "SubagentPool",
                "outstanding",
            ),
            ".reporting": (
                "agents_running",
                "await_report",
                "collect_report",
                "deliver_report",
                "notification_text",
            ),
            ".services.definitions": (
                "AgentDefinition",
                "AgentDefinitionError",
                "BUILT_IN_AGENTS",
                "agents_from_files",
                "agents_from_json",
                "merge_agents",
            ),
            ".services.tool": (
                "DEFAULT_AGENT",
                "agent_tool",
            ),
        },
    )

__all__ = [
    "AgentDefinition",
    "AgentDefinitionError",
    "AgentReport",
    "AgentStatus",
    "AgentsData",
    "AgentsRun",
    "AgentsServices",
    "BUILT_IN_AGENTS",
    "DEFAULT_AGENT",
    "SubagentPool",
    "admit_agent_call",
    "agent_tool",
    "agents_from_files",
    "agents_from_json",
    "agents_running",
    "await_report",
    "collect_report",
    "deliver_report",
    "merge_agents",
    "next_agent_call",
    "notification_text",
    "outstanding",
    "refuse_agent_calls",
    "waiting_agent_calls",
]
