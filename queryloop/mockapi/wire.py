"""The Messages API's shapes as the embedded server reads and writes them.

Owns the token estimates, compact JSON, the plain text of a prompt's parts and how each reply block is streamed;
not the server (server) nor the scenario it plays.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .prompt_cache import without_breakpoints

__all__ = ["estimate_input_tokens", "estimate_output_tokens"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _compact(value: object) -> str:
    """Compact JSON; a lone surrogate in a string (a scenario may script one) goes as its ``\\uXXXX`` escape,
    as the API writes it: the raw code point cannot be encoded as UTF-8."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def _prompt(body: Mapping[str, object], marked: bool) -> tuple[Any, Any, Any]:
    """``(system, messages, tools)`` of a request body, without cache markers (what the estimate counts)."""
    system, messages, tools = body.get("system"), body.get("messages"), body.get("tools")
    return without_breakpoints(system, messages, tools) if marked else (system, messages, tools)


def _as_read(system: object) -> object:
    """A system prompt as the model reads it: one plain text block is the string it holds."""
    if isinstance(system, list) and len(system) == 1 and isinstance(system[0], dict):
        block = system[0]
        if set(block) == {"type", "text"} and block["type"] == "text" and isinstance(block["text"], str):
            return block["text"]
    return system


def estimate_input_tokens(system: object, messages: object, tools: object) -> int:
    """The server's input-token estimate: ``ceil(len(compact JSON of system+messages+tools) / 4)``."""
    return math.ceil(len(_compact({"system": system, "messages": messages, "tools": tools})) / 4)


def estimate_output_tokens(content: Sequence[Mapping[str, Any]]) -> int:
    """The server's output-token estimate for reply ``content``: ``max(1, ceil(chars / 4))``."""
    chars = 0
    for block in content:
        if block["type"] == "text":
            chars += len(block["text"])
        elif block["type"] == "thinking":
            chars += len(block["thinking"])
        elif str(block["type"]).endswith("tool_use"):  # tool_use, server_tool_use, mcp_tool_use
            chars += len(str(block.get("name", ""))) + len(_compact(block.get("input", {})))
    return max(1, math.ceil(chars / 4))


def _pieces(text: str, target: int) -> list[str]:
    """Split ``text`` into several chunks of about ``target`` characters (at least two when possible)."""
    if len(text) < 2:
        return [text]
    count = max(2, math.ceil(len(text) / target))
    size = math.ceil(len(text) / count)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _text_of(content: object) -> str:
    """The plain text of a message ``content`` or ``system`` value (strings, text blocks, tool results)."""
    if isinstance(content, str):
        return content
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    out.append(block["text"])
                elif block.get("type") == "tool_result":
                    out.append(_text_of(block.get("content")))
    return "\n".join(out)


def _last_user_text(messages: object) -> str:
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _text_of(message.get("content"))
    return ""


def _first_user_text(messages: object) -> str:
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "user":
                return _text_of(message.get("content"))
    return ""


_SIGNED = {
    "thinking": "signature",
    "server_tool_use": "id",
    "web_search_tool_result": "tool_use_id",
    "compaction": "encrypted_content",
}
"""The blocks the API checks when they come back, and the field that names each (the server remembers them)."""


def _issued_key(block: Any) -> tuple[str, str] | None:
    field = _SIGNED.get(str(block.get("type"))) if isinstance(block, dict) else None
    value = block.get(field) if field is not None else None
    return (block["type"], value) if isinstance(value, str) else None


def _block_events(block: Mapping[str, Any]) -> tuple[dict[str, object], list[dict[str, object]]]:
    """A block's ``content_block_start`` object and its deltas, as the API streams it.

    The start object has the block's keys in its order, the fields the deltas fill empty:
    text and its citations (``text_delta``, ``citations_delta``), thinking and its signature,
    a tool call's input (``input_json_delta``: ``tool_use``, ``server_tool_use``,
    ``mcp_tool_use``), a compaction's content (one ``compaction_delta``). Any other block
    (``redacted_thinking``, ``web_search_tool_result`` …) comes whole in its start event. A
    client that applies the deltas to the start object has the block as it was, byte for byte.
    """
    kind = str(block["type"])
    start = dict(block)
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start["text"] = ""
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], 16)]
        if "citations" in block:
            start["citations"] = None
            deltas += [{"type": "citations_delta", "citation": c} for c in block["citations"] or ()]
    elif kind == "thinking":
        start.update(thinking="", signature="")
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], 24)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind.endswith("tool_use") and isinstance(block.get("input"), dict):
        start["input"] = {}
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [{"type": "input_json_delta", "partial_json": p} for p in _pieces(_compact(block["input"]), 12)]
    elif kind == "compaction":
        filled = {k: block[k] for k in ("content", "encrypted_content") if k in block}
        start.update(dict.fromkeys(filled))
        deltas = [{"type": "compaction_delta", **filled}]
    return start, deltas
