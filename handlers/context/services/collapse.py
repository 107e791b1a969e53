"""Tool-result collapse: large old results staged for a stub, then replaced by it at no API cost.

Pure functions; messages are never mutated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from ...messages import Message, ResultBlock, is_tool_result, with_content
from .rounds import api_round_groups, content_blocks

__all__ = ["COLLAPSE_STUB_PREFIX", "StagedCollapse", "collapse_stub", "commit_collapses", "stage_collapses"]


def _result_text_chars(content: object) -> int:
    """Characters of text in a tool_result's content (a string, or its text blocks)."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return 0


def _first_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                return str(b.get("text", ""))
    return ""


COLLAPSE_STUB_PREFIX = "[tool result collapsed to save context"
"""Every collapsed tool_result's content starts with this; test for it to detect stubs."""


def collapse_stub(chars: int) -> str:
    """The text that replaces a collapsed tool result of ``chars`` characters."""
    return f"{COLLAPSE_STUB_PREFIX}: {chars:,} characters; run the tool again if you need it]"


@attrs.frozen(kw_only=True)
class StagedCollapse:
    """A large old tool result that can be replaced by a stub at no API cost."""

    message_index: int = attrs.field(validator=attrs.validators.ge(0))
    block_index: int = attrs.field(validator=attrs.validators.ge(0))
    chars: int = attrs.field(validator=attrs.validators.ge(0))
    """Characters of text in the result's content."""
    tokens_freed: int = attrs.field(validator=attrs.validators.ge(0))
    """Estimated tokens saved, a lower bound: a quarter of the text characters removed
    (``chars`` minus the stub's), rounded down. JSON escapes and block wrappers only add
    to what is really removed; not encoding the content keeps staging cheap."""


def _collapsed_content(content: object, chars: int) -> str | list[ResultBlock]:
    stub = collapse_stub(chars)
    if isinstance(content, list):
        # Images and other non-text blocks are not counted in ``chars`` and are kept.
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") == "text")]
        return [{"type": "text", "text": stub}, *kept] if kept else stub
    return stub


def stage_collapses(
    messages: Sequence[Mapping[str, object]], *, keep_recent_groups: int = 2, min_chars: int = 4000
) -> tuple[StagedCollapse, ...]:
    """The tool results worth collapsing: at least ``min_chars`` characters of text (and
    longer than their stub), in groups older than the most recent ``keep_recent_groups``,
    not already stubs; in transcript order."""
    if keep_recent_groups < 0 or min_chars < 1:
        raise ValueError(
            f"keep_recent_groups must be >= 0 and min_chars >= 1, got {keep_recent_groups} and {min_chars}"
        )
    groups = api_round_groups(messages)
    if len(groups) <= keep_recent_groups:
        return ()
    end = groups[len(groups) - keep_recent_groups].start if keep_recent_groups else len(messages)
    staged: list[StagedCollapse] = []
    for i in range(end):
        message = messages[i]
        if message.get("role") != "user":
            continue
        for j, block in enumerate(content_blocks(message)):
            if not is_tool_result(block):
                continue
            content = block.get("content")
            chars = _result_text_chars(content)
            if chars < min_chars or _first_text(content).startswith(COLLAPSE_STUB_PREFIX):
                continue
            freed = (chars - len(collapse_stub(chars))) // 4
            if freed <= 0:
                continue  # the stub would be as long as the result
            staged.append(StagedCollapse(message_index=i, block_index=j, chars=chars, tokens_freed=freed))
    return tuple(staged)


def commit_collapses(messages: Sequence[Message], staged: Sequence[StagedCollapse]) -> list[Message]:
    """``messages`` with the staged tool results replaced by :func:`collapse_stub` text.

    ``tool_use_id`` and ``is_error`` are kept. Only the changed messages are new dicts;
    the others are the same objects. Raises ``ValueError`` when an entry no longer
    points at a tool_result (staged against another transcript).
    """
    by_message: dict[int, list[StagedCollapse]] = {}
    for entry in staged:
        by_message.setdefault(entry.message_index, []).append(entry)
    result = list(messages)
    for index, entries in by_message.items():
        if index >= len(messages):
            raise ValueError(f"staged collapse points at message {index}, but there are only {len(messages)} messages")
        blocks = list(content_blocks(messages[index]))
        for entry in entries:
            old = blocks[entry.block_index] if entry.block_index < len(blocks) else None
            if not is_tool_result(old):
                raise ValueError(
                    f"staged collapse points at block {entry.block_index} of message {index}, which is not a "
                    "tool_result; stage the collapses again on this transcript"
                )
            blocks[entry.block_index] = {**old, "content": _collapsed_content(old.get("content"), entry.chars)}
        result[index] = with_content(messages[index], blocks)
    return result
