"""The ``Agent`` tool: the model starts a sub-agent with it (Claude Code's name and input shape, our words).

Owns the tool's schema and description and its deadline. What a call does is ``queryloop.run.subagents``'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ...tools import AGENT_TOOL, ToolContext, ToolRun, ToolSpec
from .definitions import MODEL_FAMILIES, AgentDefinition

__all__ = ["DEFAULT_AGENT", "LAUNCH_TIMEOUT_S", "agent_tool"]

DEFAULT_AGENT: Final = "general-purpose"
"""The agent a call that names no ``subagent_type`` starts."""

LAUNCH_TIMEOUT_S: Final = 30.0
"""How long launching a background agent may take (its run goes on after the call)."""

_DESCRIPTION = """Start a sub-agent: a separate agent with its own conversation and tools that works on one \
task you describe and reports back. Use it for a self-contained piece of work (a search across many files, \
a change with several steps) whose result you need but whose steps you do not.

By default the agent runs in the background: this call returns at once with the agent's id, you go on with \
other work, and its final answer reaches you later in a <task-notification> message. Set run_in_background \
to false to wait for the answer instead; it is then this call's result. Several agents may run at once: \
start them in one reply.

The agent sees only your prompt, not this conversation: say everything it needs (paths, what to look for, \
what to report). Its answer is its final message; tell it what to put there.

Agents you may start (subagent_type):
{agents}"""


def agent_tool(agents: Sequence[AgentDefinition], run: ToolRun, *, timeout_s: float) -> ToolSpec:
    """The Agent tool offering ``agents``; ``run`` carries out a call; a waited-for call may take ``timeout_s``."""
    listing = "\n".join(f"- {a.name}: {a.description}" for a in agents)

    def deadline(tool_input: Mapping[str, object], ctx: ToolContext) -> float:
        return timeout_s if tool_input.get("run_in_background") is False else LAUNCH_TIMEOUT_S

    return ToolSpec(
        name=AGENT_TOOL,
        description=_DESCRIPTION.format(agents=listing),
        input_schema=_SCHEMA,
        concurrency_safe=True,  # agents started in one reply run side by side
        read_only=True,  # the call changes nothing itself; each of the agent's own calls passes the gate
        idempotent=False,  # a started agent is on the ledger: a repeated call is answered, not started again
        run=run,
        own_timeout_s=deadline,
    )


_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "description": {"type": "string", "description": "A short (3-5 word) description of the task"},
        "prompt": {"type": "string", "description": "The task for the agent: everything it needs to know"},
        "subagent_type": {
            "type": "string",
            "description": "The kind of agent to start (listed above; default: general-purpose)",
        },
        "model": {
            "type": "string",
            "enum": sorted(MODEL_FAMILIES),
            "description": "A model family for this agent; without it, the agent's own model, else yours",
        },
        "run_in_background": {
            "type": "boolean",
            "description": "false: wait for the agent's answer as this call's result (default: true)",
        },
    },
    "required": ["description", "prompt"],
    "additionalProperties": False,
}
