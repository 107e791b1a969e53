"""``--permission-prompt-tool mcp__SERVER__TOOL``: an MCP server's tool answers what would ask.

Owns :func:`mcp_permission_asker` and :func:`read_answer`. The answer is someone else's text: anything but an allow
or deny of the expected shape denies the call, never raises (docs/security.md, a permission prompt tool).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ...messages import ToolCall
from ...tools import AskPermission, PermissionAnswer, ToolContext, ToolOutput
from .client import McpManager

__all__ = ["MAX_ANSWER_CHARS", "mcp_permission_asker", "read_answer"]

MAX_ANSWER_CHARS: Final = 1 << 20  # an answer longer than this is not read: it is no decision
_EXPECTED: Final = 'expected {"behavior": "allow", "updatedInput"?: {...}} or {"behavior": "deny", "message": "..."}'


def _text(content: object) -> str:
    """The text of a tool's output: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    return ""


def _decoded(text: str) -> object:
    if len(text) > MAX_ANSWER_CHARS:
        raise ValueError(f"{len(text)} characters, more than {MAX_ANSWER_CHARS}")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_answer(tool_name: str, output: ToolOutput) -> PermissionAnswer:
    """The permission prompt tool's ``output`` as an answer; anything but a valid decision denies, saying why."""
    text = _text(output.content)
    if output.is_error:
        return PermissionAnswer(allow=False, message=f"the permission prompt tool {tool_name} failed: {text[:500]}")
    try:
        answer = _decoded(text)
    except ValueError as exc:
        return _invalid(tool_name, f"not JSON ({exc})")
    if not isinstance(answer, dict):
        return _invalid(tool_name, f"a JSON {type(answer).__name__}, not an object")
    behavior = answer.get("behavior")
    if behavior == "deny" and isinstance(answer.get("message"), str):
        return PermissionAnswer(allow=False, message=answer["message"])
    if behavior == "allow":
        updated = answer.get("updatedInput")
        if updated is None or (isinstance(updated, dict) and not updated):  # absent or {}: the call as it was
            return PermissionAnswer(allow=True)
        if isinstance(updated, dict):
            return PermissionAnswer(allow=True, updated_input=updated)
        return _invalid(tool_name, "its updatedInput is not an object")
    return _invalid(tool_name, f"behavior {behavior!r}" if behavior != "deny" else "a deny without a message")


def _invalid(tool_name: str, what: str) -> PermissionAnswer:
    return PermissionAnswer(
        allow=False, message=f"the permission prompt tool {tool_name} gave no decision: {what}; {_EXPECTED}"
    )


def mcp_permission_asker(manager: McpManager, tool_name: str, *, cwd: Path) -> AskPermission:
    """The permission callback that asks the MCP tool ``tool_name`` of ``manager``'s servers."""

    async def ask(call: ToolCall, reason: str) -> PermissionAnswer:
        spec = manager.tool_spec(tool_name)
        if spec is None:
            return PermissionAnswer(allow=False, message=f"the permission prompt tool {tool_name} is not available")
        request: dict[str, object] = {"tool_name": call.name, "input": dict(call.input), "tool_use_id": call.id}
        return read_answer(tool_name, await spec.run(request, ToolContext(cwd=cwd)))

    return ask
