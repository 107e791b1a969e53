"""A transcript's API-round groups: an assistant reply and the user messages that answer it.

Also the blocks a message holds and the tool ids they name, which collapse, clearing and compaction read alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...messages import Block, is_tool_result, is_tool_use

__all__ = ["api_round_groups", "content_blocks", "tool_result_ids", "tool_use_ids"]


def content_blocks(message: Mapping[str, object]) -> list[Block]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def tool_use_ids(message: Mapping[str, object]) -> list[str]:
    return [b["id"] for b in content_blocks(message) if is_tool_use(b)]


def tool_result_ids(message: Mapping[str, object]) -> list[str]:
    return [b["tool_use_id"] for b in content_blocks(message) if is_tool_result(b)]


def api_round_groups(messages: Sequence[Mapping[str, object]]) -> list[range]:
    """Split ``messages`` into API-round groups, in order, partitioning the indices.

    A group starts at each assistant message and runs up to the next one, so it holds
    the assistant's reply and the user message(s) that answer it (tool_results, meta
    messages, the next prompt); messages before the first assistant message form the
    first group. A tool_use and its tool_result are never split: should a tool_result
    answer a tool_use of an earlier group (not a valid transcript, but cheap to guard
    against), the groups between them are merged.
    """
    starts: list[int] = []
    group_of_tool_use: dict[str, int] = {}
    for i, message in enumerate(messages):
        if not starts or message.get("role") == "assistant":
            starts.append(i)
        if message.get("role") == "assistant":
            for tool_id in tool_use_ids(message):
                group_of_tool_use[tool_id] = len(starts) - 1
        else:
            for tool_id in tool_result_ids(message):
                owner = group_of_tool_use.get(tool_id)
                if owner is not None and owner < len(starts) - 1:
                    del starts[owner + 1 :]
                    for key, value in group_of_tool_use.items():
                        if value > owner:
                            group_of_tool_use[key] = owner
    bounds = [*starts, len(messages)]
    return [range(bounds[k], bounds[k + 1]) for k in range(len(starts))]
