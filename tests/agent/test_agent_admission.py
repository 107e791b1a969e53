"""The machine's admission of Agent calls (``admitting_agents``): counted by place, not by tool_use id.

In process, with a scripted model (the e2e tests in tests/e2e/test_subagents.py take the same edges
against the embedded server, whose scenarios cannot repeat an id): a model or a gateway that repeats
a tool_use id, within a turn or across turns, still gets at most ``max_agents_per_turn`` sub-agents a
turn, and a run that offers no Agent tool admits a tool of its own named ``Agent`` without a cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from queryloop import tool
from queryloop.handlers.request.services.backends import ModelCall
from queryloop.run.agent import AgentRun
from queryloop.run.config import AgentOptions, Limits, PermissionSettings, RequestSettings, ToolSettings
from queryloop.run.subagents import CHILD_CONTEXT
from queryloop.testing import ScriptedBackend, scripted_reply


def agent_call(call_id: str, n: int) -> dict[str, Any]:
    task = {"description": f"task {n}", "prompt": f"child task {n}", "run_in_background": False}
    return {"type": "tool_use", "id": call_id, "name": "Agent", "input": task}


def play(tmp_path: Path, turns: list[list[str]], **options: Any) -> tuple[int, list[list[dict[str, Any]]]]:
    """A parent whose tool turns are ``turns`` (each a list of Agent call ids), then an answer: the child runs
    started, and each tool turn's results as the parent sent them back."""
    children = 0
    results: list[list[dict[str, Any]]] = []

    def script(call: ModelCall) -> Any:
        nonlocal children
        if CHILD_CONTEXT[:40] in (call.system or ""):
            children += 1
            return scripted_reply([{"type": "text", "text": "child done"}], call=call)
        last = call.messages.to_list()[-1]
        if isinstance(last["content"], list) and last["content"][0].get("type") == "tool_result":
            results.append(last["content"])
        done = len(results)
        if done < len(turns):
            calls = [agent_call(i, n) for n, i in enumerate(turns[done])]
            return scripted_reply(calls, "tool_use", call=call)
        return scripted_reply([{"type": "text", "text": "FINAL"}], call=call)

    async def run() -> dict[str, Any]:
        agent = AgentRun(
            AgentOptions(
                prompt="go",
                cwd=tmp_path,
                request=RequestSettings(model="scripted"),
                permissions=PermissionSettings(mode="bypassPermissions"),
                limits=Limits(params={"max_agents_per_turn": 2}),
                **options,
            ),
            ScriptedBackend(script),
        )
        async with contextlib.aclosing(agent.events()) as items:
            async for _ in items:
                pass
        return agent.result()

    result = asyncio.run(run())
    assert result["result"] == "FINAL", result
    return children, results


def refusals(results: list[dict[str, Any]]) -> int:
    return sum(1 for r in results if r.get("is_error") and "max_agents_per_turn is 2" in str(r["content"]))


def test_a_repeated_id_within_a_turn_is_counted_once_per_call(tmp_path: Path) -> None:
    children, _ = play(tmp_path, [["dup", "dup", "dup"]])  # (its results share the id: the tool layer keys them so)
    assert children == 2


def test_ids_reused_in_a_later_turn_are_admitted_afresh_and_capped_again(tmp_path: Path) -> None:
    children, results = play(tmp_path, [["a", "b", "c"], ["a", "b", "c"]])
    assert children == 4 and [refusals(r) for r in results] == [1, 1]


def test_a_tool_of_the_runs_own_named_agent_is_not_capped_where_no_sub_agent_can_start(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool(name="Agent", read_only=True)
    async def own_agent(description: str, prompt: str, run_in_background: bool = True) -> str:
        """A tool of the caller's own that happens to be named Agent."""
        ran.append(prompt)
        return "ran"

    children, results = play(
        tmp_path, [["x1", "x2", "x3"]], tools=ToolSettings(builtins=("Read",), custom_tools=(own_agent,))
    )
    assert children == 0 and len(ran) == 3 and refusals(results[0]) == 0


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUERYLOOP_HOME", str(tmp_path / "home"))
