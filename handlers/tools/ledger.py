"""The ledger invariant the machine watches (``invariants:`` in machines/query_loop.yaml).

Owns :func:`every_tool_use_answered`: before a request, every tool_use of the last assistant message has exactly one
tool_result after it. Reads only the end of the transcript.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..outcome import SharedData

__all__ = ["every_tool_use_answered"]


def _blocks(message: Mapping[str, object], kind: str, key: str) -> list[str]:
    content = message.get("content")
    blocks: Sequence[object] = content if isinstance(content, list) else ()
    return [str(b.get(key)) for b in blocks if isinstance(b, dict) and b.get("type") == kind]


def every_tool_use_answered(data: SharedData) -> str | None:
    """What leaves a tool_use of the last assistant message without exactly one tool_result, or None."""
    messages = data.messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages.at(index)
        if message.get("role") != "assistant":
            continue
        calls = _blocks(message, "tool_use", "id")
        if not calls:
            return None
        answer: Mapping[str, object] = messages.at(index + 1) if index + 1 < len(messages) else {}
        results = _blocks(answer, "tool_result", "tool_use_id") if answer.get("role") == "user" else []
        # the same ids, each as often (usually in the same order: one comparison); sorted, not counted: cheaper
        if results != calls and sorted(results) != sorted(calls):
            return f"tool_use {sorted(calls)} answered by tool_result {sorted(results)}"
        return None
    return None
