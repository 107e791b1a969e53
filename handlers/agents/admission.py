"""Agents layer: the Agent calls a tool turn may start, admitted one by one before the tools run.

Owns the ``admitting_agents`` effect and its edges: admit the next call (``agent_launches``) or refuse the rest.
Calls count by their place in the turn, not by id (ids may repeat).
"""

from __future__ import annotations

import attrs

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..messages import ToolCall, ToolResultBlock, tool_result_block
from ..tools import AGENT_TOOL
from .data import A, AgentsRun, AgentsServices, with_agents

__all__ = ["admit_agent_call", "next_agent_call", "refuse_agent_calls", "waiting_agent_calls"]


def _admitted(data: AgentsRun) -> int:
    """How many of this tool turn's Agent calls are admitted (0 at the turn's start)."""
    turn, count = data.agents.admitted
    return count if turn == data.tools.turn else 0


def waiting_agent_calls(data: AgentsRun) -> tuple[ToolCall, ...]:
    """The permitted Agent calls of this tool turn not admitted yet, in the model's order."""
    return tuple(c for c in data.tools.pending if c.name == AGENT_TOOL)[_admitted(data) :]


async def next_agent_call(ctx: EffectContext[A, AgentsServices]) -> Event[ToolCall | None]:
    """The first Agent call of the turn still to be admitted, or none (every one is, the turn has none, or the
    run starts no sub-agents)."""
    waiting = waiting_agent_calls(ctx.run.data) if ctx.services.subagents is not None else ()
    if not waiting:
        return Event(name="agent_calls_admitted", data=None)
    return Event(name="agent_call_waiting", data=waiting[0])


def admit_agent_call(run: RunState[A], event: Event[ToolCall]) -> A:
    """The next Agent call of the turn starts its sub-agent when the tools run."""
    data = run.data
    return with_agents(data, admitted=(data.tools.turn, _admitted(data) + 1))


@uses(params=("max_agents_per_turn",))
def refuse_agent_calls(run: RunState[A], event: Event[ToolCall]) -> A:
    """The turn admitted as many Agent calls as it may: each one still waiting gets an error result, starts
    nothing, and the other calls run. A call is counted when it is admitted, whether or not it then starts (an
    unknown agent type, an invalid input or max_running_agents may still refuse it)."""
    data = run.data
    tools = data.tools
    admitted = _admitted(data)
    cap = run.params.get("max_agents_per_turn")
    text = (
        f"Not started: this turn's first {admitted} Agent calls are the most one turn may make "
        f"(max_agents_per_turn is {cap}); make it in a later turn"
    )
    agent_calls = 0
    pending: list[ToolCall] = []
    refused: list[ToolResultBlock] = []
    for call in tools.pending:
        if call.name == AGENT_TOOL:
            agent_calls += 1
            if agent_calls > admitted:
                refused.append(tool_result_block(call.id, text, is_error=True))
                continue
        pending.append(call)
    tools = attrs.evolve(
        tools,
        order=tools.order or tuple(c.id for c in tools.pending),
        pending=tuple(pending),
        denied=(*tools.denied, *refused),
    )
    return data.evolve(tools=tools)
