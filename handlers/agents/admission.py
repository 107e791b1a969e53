"""Agents layer: the Agent calls a tool turn may start, admitted one by one before the tools run.

Owns the effect of ``admitting_agents`` (the next permitted Agent call of the turn not yet
admitted, or none) and its two edge handlers: one admits that call (the machine counts it,
``agent_launches``, capped at ``max_agents_per_turn`` per turn), the other gives every call
still waiting an error result instead of a sub-agent once the cap is reached. A call is
admitted in the model's order, before anything runs, so the cap is the machine's and not a
count kept inside the Agent tool while the calls run in parallel.
"""

from __future__ import annotations

import attrs

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..messages import ToolCall, tool_result_block
from ..tools.services.names import AGENT_TOOL
from .data import A, AgentsRun, AgentsServices, with_agents

__all__ = ["admit_agent_call", "next_agent_call", "refuse_agent_calls", "waiting_agent_calls"]


def waiting_agent_calls(data: AgentsRun) -> tuple[ToolCall, ...]:
    """The permitted Agent calls of this tool turn not admitted yet, in the model's order."""
    admitted = data.agents.admitted
    return tuple(c for c in data.tools.pending if c.name == AGENT_TOOL and c.id not in admitted)


async def next_agent_call(ctx: EffectContext[A, AgentsServices]) -> Event[ToolCall | None]:
    """The first Agent call of the turn still to be admitted, or none (every one is, or the turn has none)."""
    waiting = waiting_agent_calls(ctx.run.data)
    if not waiting:
        return Event(name="agent_calls_admitted", data=None)
    return Event(name="agent_call_waiting", data=waiting[0])


def admit_agent_call(run: RunState[A], event: Event[ToolCall]) -> A:
    """The call starts its sub-agent when the tools run; earlier turns' admissions are dropped."""
    data = run.data
    pending = {c.id for c in data.tools.pending}
    kept = tuple(i for i in data.agents.admitted if i in pending)
    return with_agents(data, admitted=(*kept, event.data.id))


@uses(params=("max_agents_per_turn",))
def refuse_agent_calls(run: RunState[A], event: Event[ToolCall]) -> A:
    """The turn admitted as many Agent calls as it may: each one still waiting gets an error result, starts
    nothing, and the other calls run."""
    data = run.data
    tools = data.tools
    refused = waiting_agent_calls(data)
    ids = {c.id for c in refused}
    cap = run.params.get("max_agents_per_turn")
    admitted = sum(1 for c in tools.pending if c.name == AGENT_TOOL and c.id not in ids)
    text = (
        f"Not started: this turn started {admitted} agents already, the most one turn may start "
        f"(max_agents_per_turn is {cap}); start it in a later turn"
    )
    tools = attrs.evolve(
        tools,
        order=tools.order or tuple(c.id for c in tools.pending),
        pending=tuple(c for c in tools.pending if c.id not in ids),
        denied=(*tools.denied, *(dict(tool_result_block(c.id, text, is_error=True)) for c in refused)),
    )
    return data.evolve(tools=tools)
