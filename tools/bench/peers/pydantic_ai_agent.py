"""pydantic-ai: an ``Agent`` on a ``FunctionModel`` (a zero-latency scripted model function) with one plain tool.

The agent is built once per process; each run is ``agent.run`` with no request limit
(its default of 50 requests would stop the longer runs).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from contract import FINAL_TEXT, NOTE, PROMPT, SYSTEM, PeerAgent, ToolCounter, check_peer

__all__ = ["load"]


def load(url: str) -> PeerAgent:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    script = [0, 0]  # calls so far, tool turns wanted

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        i = script[0]
        script[0] += 1
        if i < script[1]:
            return ModelResponse(parts=[ToolCallPart(tool_name="noop", args={"note": NOTE}, tool_call_id=f"call_{i}")])
        return ModelResponse(parts=[TextPart(FINAL_TEXT)])

    counter = ToolCounter()
    agent = Agent(FunctionModel(respond), system_prompt=SYSTEM)

    @agent.tool_plain
    async def noop(note: str) -> str:
        """Does nothing and says so."""
        return await counter.noop(note)

    async def run(turns: int, name: str) -> None:
        script[:] = [0, turns]
        counter.calls = 0
        result = await agent.run(PROMPT, usage_limits=UsageLimits(request_limit=None))
        check_peer("pydantic-ai", turns, counter.calls, result.output)

    pkg = "pydantic-ai-slim"
    return PeerAgent(framework="pydantic-ai (FunctionModel)", version=f"{pkg} {version(pkg)}", run=run)
