"""LangGraph: ``create_react_agent`` with a scripted chat model (``BaseChatModel``, zero latency) and one tool.

The graph is compiled once per process (as queryloop's machine is loaded once); each
run invokes it with ``ainvoke`` and a recursion limit that lets N tool turns through
(LangGraph's default of 25 steps would stop at 12).
"""

from __future__ import annotations

import warnings
from importlib.metadata import version
from typing import Any

from contract import FINAL_TEXT, NOOP_DESCRIPTION, NOTE, PROMPT, SYSTEM, PeerAgent, ToolCounter, check_peer

__all__ = ["load"]


def load(url: str) -> PeerAgent:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool

    with warnings.catch_warnings():  # create_react_agent is deprecated in LangGraph 1.x, still shipped
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    # _llm_type, _generate and _agenerate are the methods LangChain's custom chat model guide says a subclass
    # implements (its public seam, underscore and all), not internals overridden; _agenerate answers on the loop,
    # where the default would hop to a thread for each reply.
    class ScriptedChatModel(BaseChatModel):
        """``script[1]`` tool-call replies, then the final text; ``script[0]`` counts the calls."""

        script: list[int]

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _reply(self) -> ChatResult:
            i = self.script[0]
            self.script[0] += 1
            if i < self.script[1]:
                call = {"name": "noop", "args": {"note": NOTE}, "id": f"call_{i}", "type": "tool_call"}
                message = AIMessage(content="", tool_calls=[call])
            else:
                message = AIMessage(content=FINAL_TEXT)
            return ChatResult(generations=[ChatGeneration(message=message)])

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            return self._reply()

        async def _agenerate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            return self._reply()

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    counter = ToolCounter()
    noop = StructuredTool.from_function(coroutine=counter.noop, name="noop", description=NOOP_DESCRIPTION)
    model = ScriptedChatModel(script=[0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(model, [noop], prompt=SYSTEM)

    async def run(turns: int, name: str) -> None:
        model.script[:] = [0, turns]
        counter.calls = 0
        state = await graph.ainvoke({"messages": [("user", PROMPT)]}, config={"recursion_limit": 2 * turns + 10})
        check_peer("LangGraph", turns, counter.calls, state["messages"][-1].content)

    return PeerAgent(framework="LangGraph (create_react_agent)", version=f"langgraph {version('langgraph')}", run=run)
