"""The HTTP baseline: the same agent as a plain ``anthropic`` SDK loop, as a user would write it.

Owns :func:`bare_sdk_loop`: ``messages.create(stream=True)`` with the same system
prompt, tool definition, ``max_tokens`` and request-id header queryloop sends, and
the same two prompt-cache breakpoints (the system prompt as one marked text block;
the last block of the last message marked, on a copy of that message, as a user who
caches would do); the streamed blocks assembled by hand; each ``tool_use`` answered by
calling the no-op function directly; the ``tool_result`` message appended; until
``end_turn``. It keeps
the transcript as a list of dicts, which the SDK re-serialises on every request — as
any Messages API client must unless it prepares the body itself. Does not own timing
(an optional ``stamps`` list gets the time each request was sent).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import anthropic
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    TextDelta,
)

from queryloop.run.config import RequestSettings
from queryloop.run.defaults import DEFAULT_SYSTEM_PROMPT

from .agent import noop_definitions, noop_function
from .script import FINAL_TEXT, PROMPT

__all__ = ["MAX_TOKENS", "bare_sdk_loop"]

MAX_TOKENS = RequestSettings(model="").max_tokens
_EPHEMERAL = {"type": "ephemeral"}
_SYSTEM = [{"type": "text", "text": DEFAULT_SYSTEM_PROMPT, "cache_control": _EPHEMERAL}]


def _with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the last block of the last message marked for the cache (a prompt string has no block)."""
    last = messages[-1]
    content = last["content"]
    if not isinstance(content, list) or not content:
        return messages
    marked = {"role": last["role"], "content": [*content[:-1], {**content[-1], "cache_control": _EPHEMERAL}]}
    return [*messages[:-1], marked]


async def _one_request(
    client: anthropic.AsyncAnthropic, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str | None]:
    """One streamed request: the reply's blocks and its stop reason."""
    stream = await client.messages.create(
        model=model,
        messages=_with_breakpoint(messages),  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        system=_SYSTEM,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        extra_headers={"x-client-request-id": str(uuid.uuid4())},
        stream=True,
    )
    blocks: dict[int, dict[str, Any]] = {}
    json_parts: dict[int, list[str]] = {}
    stop_reason = None
    async for event in stream:
        if isinstance(event, RawContentBlockStartEvent):
            blocks[event.index] = event.content_block.model_dump(mode="json", exclude_none=True)
            json_parts[event.index] = []
        elif isinstance(event, RawContentBlockDeltaEvent):
            if isinstance(event.delta, TextDelta):
                blocks[event.index]["text"] = blocks[event.index].get("text", "") + event.delta.text
            elif isinstance(event.delta, InputJSONDelta):
                json_parts[event.index].append(event.delta.partial_json)
        elif isinstance(event, RawContentBlockStopEvent):
            block = blocks[event.index]
            if block["type"] == "tool_use":
                raw = "".join(json_parts[event.index])
                block["input"] = json.loads(raw) if raw else {}
        elif isinstance(event, RawMessageDeltaEvent):
            stop_reason = event.delta.stop_reason
    return [blocks[i] for i in sorted(blocks)], stop_reason


async def bare_sdk_loop(
    client: anthropic.AsyncAnthropic,
    model: str,
    turns: int,
    *,
    prompt: str = PROMPT,
    stamps: list[float] | None = None,
) -> list[dict[str, Any]]:
    """Play the agent with the bare SDK; returns the transcript. Exits unless it went as scripted."""
    tools = noop_definitions()
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    requests = 0
    while True:
        if stamps is not None:
            stamps.append(time.perf_counter())
        content, stop_reason = await _one_request(client, model, messages, tools)
        requests += 1
        messages.append({"role": "assistant", "content": content})
        if stop_reason != "tool_use":
            break
        results = [
            {
                "type": "tool_result",
                "tool_use_id": b["id"],
                "content": await noop_function(**b["input"]),
                "is_error": False,
            }
            for b in content
            if b["type"] == "tool_use"
        ]
        messages.append({"role": "user", "content": results})
    final = content[0].get("text") if content else None
    if requests != turns + 1 or stop_reason != "end_turn" or final != FINAL_TEXT:
        raise SystemExit(
            f"bench: the bare SDK loop made {requests} requests ending in {stop_reason!r} with {final!r} "
            f"(expected {turns + 1}, 'end_turn', {FINAL_TEXT!r})"
        )
    return messages
