"""The floor: a hand-written minimal loop over a list of dicts, with a zero-latency model function.

``floor`` never serialises anything; ``floor_body`` also builds each request's body
with ``json.dumps`` of the full params (what a loop that speaks HTTP must do at least
once per request), so the cost of materialising the transcript is visible on its own.
"""

from __future__ import annotations

import json
from typing import Any

from contract import FINAL_TEXT, NOOP_DESCRIPTION, NOTE, PROMPT, SYSTEM, PeerAgent, ToolCounter, check_peer

__all__ = ["load", "load_with_body"]

_TOOLS = [{"name": "noop", "description": NOOP_DESCRIPTION, "input_schema": {"type": "object"}}]


def _model(i: int, turns: int) -> dict[str, Any]:
    if i < turns:
        block = {"type": "tool_use", "id": f"toolu_{i}", "name": "noop", "input": {"note": NOTE}}
        return {"role": "assistant", "content": [block], "stop_reason": "tool_use"}
    return {"role": "assistant", "content": [{"type": "text", "text": FINAL_TEXT}], "stop_reason": "end_turn"}


async def _play(turns: int, *, encode: bool) -> None:
    tool = ToolCounter()
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    i = 0
    while True:
        if encode:
            json.dumps({"model": "m", "max_tokens": 1024, "system": SYSTEM, "tools": _TOOLS, "messages": messages})
        reply = _model(i, turns)
        i += 1
        messages.append({"role": "assistant", "content": reply["content"]})
        if reply["stop_reason"] != "tool_use":
            break
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": await tool.noop(**b["input"])}
            for b in reply["content"]
            if b["type"] == "tool_use"
        ]
        messages.append({"role": "user", "content": results})
    check_peer("floor", turns, tool.calls, messages[-1]["content"][0]["text"])


def load(url: str) -> PeerAgent:
    async def run(turns: int, model: str) -> None:
        await _play(turns, encode=False)

    return PeerAgent(framework="hand-written loop (floor)", version="-", run=run)


def load_with_body(url: str) -> PeerAgent:
    async def run(turns: int, model: str) -> None:
        await _play(turns, encode=True)

    return PeerAgent(framework="hand-written loop + json.dumps body", version="-", run=run)
