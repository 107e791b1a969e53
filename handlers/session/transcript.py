"""Session layer, reading a transcript back: the message graph from the newest main-chain leaf.

A transcript is Claude Code's JSON Lines shape: ``user`` and ``assistant`` entries
chained by ``parentUuid``, ``system/compact_boundary`` entries that start a new chain
(``parentUuid`` null, ``logicalParentUuid`` the leaf before), ``tombstone`` entries for
provisional branches a fallback discarded (never anyone's parent), and our
``system/result`` line at the end of each run. :func:`load_history` walks ``parentUuid``
back from the newest ``user``/``assistant`` entry to the compact boundary or the root —
so a compacted session resumes from its summary and a discarded branch is never
resumed. The writer is above the layers (``queryloop.transcript``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..messages import Message, tool_result_block
from .data import LedgerEntry
from .store import read_jsonl

__all__ = ["History", "INTERRUPTED_BEFORE_RECORDED", "answer_dangling", "load_history", "load_ledger"]

INTERRUPTED_BEFORE_RECORDED = (
    "The session ended before this call's result was recorded; it may have partly run. "
    "Check its effects before running it again."
)

MAIN_TYPES = ("user", "assistant")


@attrs.frozen(kw_only=True)
class History:
    """The resumable history of a transcript: its messages in order and the entry they end with."""

    messages: tuple[Message, ...] = ()
    meta: tuple[bool, ...] = ()
    leaf: str | None = None
    warnings: tuple[str, ...] = ()
    entries: tuple[dict[str, Any], ...] = ()  # every readable entry, in file order


def load_history(path: Path) -> History:
    """The main chain ending at the newest ``user``/``assistant`` entry, through compact boundaries."""
    entries, warnings = read_jsonl(path)
    by_uuid = {str(e["uuid"]): e for e in entries if isinstance(e.get("uuid"), str)}
    leaf = next((e for e in reversed(entries) if e.get("type") in MAIN_TYPES and "uuid" in e), None)
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    node = leaf
    while node is not None and str(node.get("uuid")) not in seen:
        seen.add(str(node.get("uuid")))
        if node.get("type") in MAIN_TYPES:
            chain.append(node)
        elif node.get("type") == "system" and node.get("subtype") == "compact_boundary":
            break
        parent = node.get("parentUuid")
        node = by_uuid.get(str(parent)) if parent else None
        if parent and node is None:
            warnings.append(f"{path}: entry {parent} is missing; the history resumes after it")
    chain.reverse()
    messages: list[Message] = []
    meta: list[bool] = []
    for entry in chain:
        message = entry.get("message")
        if not isinstance(message, dict) or message.get("role") not in MAIN_TYPES:
            warnings.append(f"{path}: entry {entry.get('uuid')} has no message; skipped")
            continue
        messages.append({"role": message["role"], "content": message.get("content", "")})
        meta.append(bool(entry.get("isMeta")))
    return History(
        messages=tuple(messages),
        meta=tuple(meta),
        leaf=None if leaf is None else str(leaf["uuid"]),
        warnings=tuple(warnings),
        entries=tuple(entries),
    )


def load_ledger(path: Path) -> tuple[tuple[LedgerEntry, ...], list[str]]:
    """The ledger's entries (unreadable ones skipped with a warning)."""
    raw, warnings = read_jsonl(path)
    entries: list[LedgerEntry] = []
    for item in raw:
        entry = LedgerEntry.from_json(item)
        if entry is None:
            warnings.append(f"{path}: skipped a ledger entry without tool_use_id/name/result")
        else:
            entries.append(entry)
    return tuple(entries), warnings


def answer_dangling(
    messages: Sequence[Mapping[str, Any]], ledger: Sequence[LedgerEntry]
) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """tool_results for the tool_use blocks the history's last message left unanswered, and the ids the ledger had.

    A call the ledger shows completed gets its recorded result; any other one an error
    saying the session ended before its result was recorded.
    """
    if not messages or messages[-1].get("role") != "assistant":
        return [], ()
    content = messages[-1].get("content")
    if not isinstance(content, list):
        return [], ()
    recorded = {e.tool_use_id: e for e in ledger}
    answers: list[dict[str, Any]] = []
    found: list[str] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        entry = recorded.get(str(block.get("id")))
        if entry is not None:
            answers.append({**entry.result, "tool_use_id": entry.tool_use_id})
            found.append(entry.tool_use_id)
        else:
            answers.append(dict(tool_result_block(str(block.get("id")), INTERRUPTED_BEFORE_RECORDED, is_error=True)))
    return answers, tuple(found)
