"""The messages of the Python API, shaped and named as the Claude Agent SDK for Python's.

:func:`parse_message` reads one ``stream-json`` line into one, so the API says what the command line says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "AssistantMessage",
    "ContentBlock",
    "Message",
    "ResultMessage",
    "SystemMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "UserMessage",
    "parse_message",
]


@attrs.frozen
class TextBlock:
    """Text the model wrote."""

    text: str


@attrs.frozen
class ThinkingBlock:
    """The model's extended thinking, with the signature the API checks when it is sent back."""

    thinking: str
    signature: str = ""


@attrs.frozen
class ToolUseBlock:
    """A tool call the model made."""

    id: str
    name: str
    input: dict[str, Any]


@attrs.frozen
class ToolResultBlock:
    """A tool call's result, as the next request carries it."""

    tool_use_id: str
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock


@attrs.frozen
class UserMessage:
    """A user message: here, a tool's result (``tool_use_result`` is its text, as the CLI's ``user`` line has it)."""

    content: str | list[ContentBlock]
    uuid: str | None = None
    parent_tool_use_id: str | None = None
    tool_use_result: Any = None


@attrs.frozen
class AssistantMessage:
    """One content block of a model reply, with the reply's id, model, stop reason and usage (the CLI's shape)."""

    content: list[ContentBlock]
    model: str
    parent_tool_use_id: str | None = None
    error: str | None = None
    usage: dict[str, Any] | None = None
    message_id: str | None = None
    stop_reason: str | None = None
    session_id: str | None = None
    uuid: str | None = None


@attrs.frozen
class SystemMessage:
    """A ``system`` line: ``subtype`` (``init``, ``api_retry``, ``transition``, …) and the whole line as ``data``."""

    subtype: str
    data: dict[str, Any]


@attrs.frozen
class ResultMessage:
    """How the prompt ended: the result line's fields (``modelUsage`` as ``model_usage``).

    ``terminal_reason`` names the machine's end (``completed``, ``max_turns``,
    ``aborted_streaming``, ``aborted_tools`` after an interrupt, …); ``result`` is the
    answer (or the error shown) of a ``success`` subtype, ``errors`` what an error
    subtype lists.
    """

    subtype: str
    duration_ms: int
    duration_api_ms: int
    is_error: bool
    num_turns: int
    session_id: str
    stop_reason: str | None = None
    total_cost_usd: float | None = None
    usage: dict[str, Any] | None = None
    result: str | None = None
    model_usage: dict[str, Any] | None = None
    permission_denials: list[Any] | None = None
    errors: list[str] | None = None
    api_error_status: int | None = None
    uuid: str | None = None
    terminal_reason: str | None = None
    ttft_ms: int | None = None


Message = UserMessage | AssistantMessage | SystemMessage | ResultMessage


def _block(raw: Mapping[str, Any]) -> ContentBlock | None:
    """One API content block; kinds the SDK has no class for (redacted thinking, …) are left out."""
    kind = raw.get("type")
    if kind == "text":
        return TextBlock(text=str(raw.get("text", "")))
    if kind == "thinking":
        return ThinkingBlock(thinking=str(raw.get("thinking", "")), signature=str(raw.get("signature", "")))
    if kind == "tool_use":
        return ToolUseBlock(id=str(raw["id"]), name=str(raw["name"]), input=dict(raw.get("input") or {}))
    if kind == "tool_result":
        return ToolResultBlock(
            tool_use_id=str(raw["tool_use_id"]), content=raw.get("content"), is_error=raw.get("is_error")
        )
    return None


def _content(raw: object) -> str | list[ContentBlock]:
    if isinstance(raw, str):
        return raw
    blocks = (_block(b) for b in raw if isinstance(b, Mapping)) if isinstance(raw, list) else ()
    return [b for b in blocks if b is not None]


def _assistant(line: Mapping[str, Any]) -> AssistantMessage:
    message = line["message"]
    content = _content(message.get("content", []))
    return AssistantMessage(
        content=content if isinstance(content, list) else [TextBlock(text=content)],
        model=str(message.get("model", "")),
        parent_tool_use_id=line.get("parent_tool_use_id"),
        usage=message.get("usage"),
        message_id=message.get("id"),
        stop_reason=message.get("stop_reason"),
        session_id=line.get("session_id"),
        uuid=line.get("uuid"),
    )


def _result(line: Mapping[str, Any]) -> ResultMessage:
    return ResultMessage(
        subtype=str(line["subtype"]),
        duration_ms=int(line["duration_ms"]),
        duration_api_ms=int(line["duration_api_ms"]),
        is_error=bool(line["is_error"]),
        num_turns=int(line["num_turns"]),
        session_id=str(line["session_id"]),
        stop_reason=line.get("stop_reason"),
        total_cost_usd=line.get("total_cost_usd"),
        usage=line.get("usage"),
        result=line.get("result"),
        model_usage=line.get("modelUsage"),
        permission_denials=line.get("permission_denials"),
        errors=line.get("errors"),
        api_error_status=line.get("api_error_status"),
        uuid=line.get("uuid"),
        terminal_reason=line.get("terminal_reason"),
        ttft_ms=line.get("ttft_ms"),
    )


def parse_message(line: Mapping[str, Any]) -> Message | None:
    """One ``stream-json`` line as a message; None for a line of a type the API does not yield."""
    kind = line.get("type")
    if kind == "assistant":
        return _assistant(line)
    if kind == "user":
        message = line.get("message", {})
        return UserMessage(
            content=_content(message.get("content", "")),
            uuid=line.get("uuid"),
            parent_tool_use_id=line.get("parent_tool_use_id"),
            tool_use_result=line.get("tool_use_result"),
        )
    if kind == "system":
        return SystemMessage(subtype=str(line.get("subtype", "")), data=dict(line))
    if kind == "result":
        return _result(line)
    return None
