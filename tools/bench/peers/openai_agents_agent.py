"""The OpenAI Agents SDK: an ``Agent`` on a custom ``Model`` (zero latency, scripted) with one function tool.

Tracing is turned off (it would export to OpenAI's servers, and nothing here may leave
the machine). The agent is built once per process; each run is ``Runner.run`` with
``max_turns`` above N (its default of 10 would stop the runs).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import Any

from contract import FINAL_TEXT, NOTE, PROMPT, SYSTEM, PeerAgent, ToolCounter, check_peer

__all__ = ["load"]


def load(url: str) -> PeerAgent:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)
    script = [0, 0]  # calls so far, tool turns wanted

    class ScriptedModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            i = script[0]
            script[0] += 1
            output: list[Any]
            if i < script[1]:
                arguments = json.dumps({"note": NOTE})
                output = [
                    ResponseFunctionToolCall(
                        type="function_call", call_id=f"call_{i}", name="noop", arguments=arguments, id=f"fc_{i}"
                    )
                ]
            else:
                text = ResponseOutputText(type="output_text", text=FINAL_TEXT, annotations=[])
                output = [
                    ResponseOutputMessage(
                        id=f"msg_{i}", type="message", role="assistant", status="completed", content=[text]
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("the benchmark runs the agent without streaming")

    counter = ToolCounter()

    @function_tool
    async def noop(note: str) -> str:
        """Does nothing and says so."""
        return await counter.noop(note)

    agent = Agent(name="bench", instructions=SYSTEM, model=ScriptedModel(), tools=[noop])

    async def run(turns: int, name: str) -> None:
        script[:] = [0, turns]
        counter.calls = 0
        result = await Runner.run(agent, PROMPT, max_turns=turns + 5)
        check_peer("OpenAI Agents SDK", turns, counter.calls, result.final_output)

    return PeerAgent(
        framework="OpenAI Agents SDK (custom Model)", version=f"openai-agents {version('openai-agents')}", run=run
    )
