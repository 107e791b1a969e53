"""A request's token estimates, and which part of a request is large when compaction cannot help.

Pure functions over what the model client would send (its system prompt, tools and messages); nothing is sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from ...messages import compact_json, messages_tokens

__all__ = [
    "DominantPart",
    "dominant_part",
    "dominant_part_from",
    "not_compactable_hint",
    "not_compactable_hint_from",
    "request_overhead_tokens",
    "request_tokens",
]


def _sent_tools(tools: Sequence[Mapping[str, object]]) -> list[Mapping[str, object]] | None:
    # The model client omits an empty tool list, so the server sees ``null`` for it.
    return list(tools) if tools else None


def request_overhead_tokens(system: str | None, tools: Sequence[Mapping[str, object]]) -> int:
    """The estimate of a request's system prompt and tool definitions, without messages.

    ``ceil(len(J) / 4)`` of the compact JSON of ``{"system", "messages": [], "tools"}``
    as the model client sends them (``null`` for an absent system prompt or no tools).
    """
    return math.ceil(len(compact_json({"system": system, "messages": [], "tools": _sent_tools(tools)})) / 4)


def request_tokens(
    system: str | None, tools: Sequence[Mapping[str, object]], messages: Sequence[Mapping[str, object]]
) -> int:
    """The whole-request estimate, exactly as the embedded server computes it."""
    body = {"system": system, "messages": list(messages), "tools": _sent_tools(tools)}
    return math.ceil(len(compact_json(body)) / 4)


DominantPart = Literal["history", "system prompt and tools"]


def dominant_part_from(history_tokens: int, overhead_tokens: int) -> DominantPart:
    """:func:`dominant_part` from estimates the caller already holds (its running total)."""
    return "history" if history_tokens > overhead_tokens else "system prompt and tools"


def dominant_part(
    system: str | None, tools: Sequence[Mapping[str, object]], messages: Sequence[Mapping[str, object]]
) -> DominantPart:
    """Which part of the request is larger: the conversation history or system + tools."""
    return dominant_part_from(messages_tokens(messages), request_overhead_tokens(system, tools))


def not_compactable_hint_from(history_tokens: int, overhead_tokens: int) -> str:
    """:func:`not_compactable_hint` from the history and system+tools estimates."""
    total = history_tokens + overhead_tokens
    if dominant_part_from(history_tokens, overhead_tokens) == "history":
        share = round(100 * history_tokens / total)
        return (
            f"the conversation history is {share}% of the request ({history_tokens:,} of {total:,} estimated "
            "tokens); start a new session or remove large tool outputs"
        )
    share = round(100 * overhead_tokens / total) if total else 100
    return (
        f"the system prompt and tool definitions are {share}% of the request ({overhead_tokens:,} of {total:,} "
        "estimated tokens); shorten the system prompt or offer fewer tools"
    )


def not_compactable_hint(
    system: str | None, tools: Sequence[Mapping[str, object]], messages: Sequence[Mapping[str, object]]
) -> str:
    """One line telling the user what fills the request and what to do about it."""
    return not_compactable_hint_from(messages_tokens(messages), request_overhead_tokens(system, tools))
