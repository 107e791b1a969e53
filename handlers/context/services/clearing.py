"""Microcompaction: which old results of the clearable tools a turn clears, and the transcript with them cleared.

Pure functions, but for the memos they keep in a history (what each result frees, the fold of the oldest ones),
so a turn looks only at the calls that aged out since the last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from ...messages import Block, Message, MessageView, compact_json, is_tool_result, with_content
from ...tools import CLEARABLE_TOOLS
from .rounds import content_blocks

__all__ = [
    "CLEARED_RESULT",
    "Clearing",
    "MICROCOMPACT_KEEP_RECENT",
    "MICROCOMPACT_MIN_TOKENS",
    "clear_results",
    "plan_clearing",
]


CLEARED_RESULT = "[Old tool result content cleared]"
"""What a cleared tool result's content becomes (Claude Code's own marker)."""

_CLEARED_JSON = compact_json(CLEARED_RESULT)

MICROCOMPACT_KEEP_RECENT = 4
"""The newest results of those tools that stay as they are."""

MICROCOMPACT_MIN_TOKENS = 10_000
"""A microcompaction is made only when it frees at least this many (estimated) tokens."""


@attrs.frozen(kw_only=True)
class Clearing:
    """Old tool results a microcompaction replaces by :data:`CLEARED_RESULT`."""

    tool_use_ids: frozenset[str]
    tokens_freed: int = attrs.field(validator=attrs.validators.ge(0))
    """Estimated tokens removed: a quarter of the text characters cleared, an image or a
    document 2,000 (as Claude Code estimates it; the marker left in their place is not
    taken off)."""
    tokens_rewritten: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Estimated tokens the next request writes to the cache again: the history from the first
    cleared result on, once cleared."""

    @property
    def pays(self) -> bool:
        """Worth making: it frees at least :data:`MICROCOMPACT_MIN_TOKENS`, and at least what it
        makes the next request write again (a write costs 1.25x input, a read 0.1x: a clearing
        that frees F and rewrites R pays for itself after about 11.5 R / F requests)."""
        return self.tokens_freed >= max(MICROCOMPACT_MIN_TOKENS, self.tokens_rewritten)


def _result_tokens(content: object) -> int:
    if isinstance(content, str):
        return math.ceil(len(content) / 4)
    if isinstance(content, list):
        total = 0
        for b in content:
            if isinstance(b, dict):
                kind = b.get("type")
                if kind == "text":
                    total += math.ceil(len(str(b.get("text", ""))) / 4)
                elif kind in ("image", "document"):
                    total += 2000
        return total
    return 0


# The key, in a history's memos (MessageView.memos: its messages never change), of what clearing each result
# would free: its message's index and tokens (None: nothing to clear). Read again on every turn, worked out once.
_CLEARABLE = f"{__name__}.clearable"


def _freed_by(message: Mapping[str, object], call_id: str) -> int | None:
    """The tokens clearing ``call_id``'s result in ``message`` frees (None: cleared, or no longer than the marker)."""
    for block in content_blocks(message):
        if is_tool_result(block) and block.get("tool_use_id") == call_id:
            content = block.get("content")
            if content != CLEARED_RESULT and len(compact_json(content)) > len(_CLEARED_JSON):
                return _result_tokens(content)
            return None
    return None


@attrs.define(slots=True)
class _Fold:
    """What one store's oldest clearable results add up to, kept as its transcript grows (a cache entry).

    ``clearable``: the ids of the store's calls of the tools, oldest first, from its first
    ``scanned`` calls. The first ``folded`` of them are summed: the ids worth clearing, the tokens
    that frees, the first of their results' positions, and one past the last (``reach``).
    """

    scanned: int = 0
    clearable: list[str] = attrs.Factory(list)
    folded: int = 0
    ids: list[str] = attrs.Factory(list)
    freed: int = 0
    first: int | None = None
    reach: int = 0


# The key, in a history's memos, of its folds per (keep_recent, tools), so a turn adds only its new calls.
_FOLDS = f"{__name__}.folds"


def _fact(
    messages: MessageView, known: dict[str, tuple[int, int | None]], call_id: str
) -> tuple[int, int | None] | None:
    """Where ``call_id``'s result is and what clearing it frees (None: the view holds no result yet)."""
    fact = known.get(call_id)
    if fact is None:
        position = messages.result_position(call_id)
        if position is None:
            return None
        fact = known[call_id] = (position, _freed_by(messages.at(position), call_id))
    return fact


def _fold_for(messages: MessageView, keep_recent: int, tools: frozenset[str]) -> _Fold:
    """The store's fold, its newly appended calls scanned; a fresh one for a view it does not fit (a
    shorter view of the same store, whose calls or results it has not all reached)."""
    calls = messages.tool_calls()
    folds: dict[tuple[int, frozenset[str]], _Fold] = messages.memos.setdefault(_FOLDS, {})
    fold = folds.get((keep_recent, tools))
    if fold is None or fold.scanned > len(calls) or fold.reach > len(messages):
        fold = folds[(keep_recent, tools)] = _Fold()
    fold.clearable.extend(call_id for _, call_id, name in calls[fold.scanned :] if name in tools)
    fold.scanned = len(calls)
    return fold


def plan_clearing(
    messages: MessageView,
    *,
    keep_recent: int = MICROCOMPACT_KEEP_RECENT,
    tools: frozenset[str] = CLEARABLE_TOOLS,
) -> Clearing:
    """The results of ``tools`` to clear: all but the newest ``keep_recent`` (at least 1) of
    their calls, those not cleared already and longer than the marker; the tokens that frees,
    and the tokens from the first of them to the end that the next request writes to the
    cache again. O(new calls of ``tools``) per turn as the transcript grows: what each result
    would free is worked out once per store, and the sums over the old results are kept per
    store and extended by the calls that aged out since (a result the view does not hold yet is
    looked at again each time, as before)."""
    fold = _fold_for(messages, keep_recent, tools)
    known: dict[str, tuple[int, int | None]] = messages.memos.setdefault(_CLEARABLE, {})
    old = fold.clearable[: max(0, len(fold.clearable) - max(1, keep_recent))]
    while fold.folded < len(old):  # fold the calls that aged out, until one whose result is not in view
        fact = _fact(messages, known, old[fold.folded])
        if fact is None or fact[0] >= len(messages):
            break
        position, tokens = fact
        if tokens is not None:
            fold.ids.append(old[fold.folded])
            fold.freed += tokens
            fold.first = position if fold.first is None else min(fold.first, position)
            fold.reach = max(fold.reach, position + 1)
        fold.folded += 1
    cleared, freed, first = list(fold.ids), fold.freed, len(messages) if fold.first is None else fold.first
    for call_id in old[fold.folded :]:  # the rest, summed afresh
        fact = _fact(messages, known, call_id)
        if fact is not None and fact[1] is not None and fact[0] < len(messages):
            cleared.append(call_id)
            freed += fact[1]
            first = min(first, fact[0])
    rewritten = max(0, messages.tokens - messages.tokens_before(first) - freed) if cleared else 0
    return Clearing(tool_use_ids=frozenset(cleared), tokens_freed=freed, tokens_rewritten=rewritten)


def clear_results(messages: Sequence[Message], clearing: Clearing) -> list[Message]:
    """``messages`` with the results ``clearing`` names replaced by :data:`CLEARED_RESULT`
    (``tool_use_id`` and ``is_error`` kept). Only the changed messages are new dicts."""
    ids = clearing.tool_use_ids
    result = list(messages)
    for index, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        blocks = content_blocks(message)
        if not any(is_tool_result(b) and b.get("tool_use_id") in ids for b in blocks):
            continue
        cleared: list[Block] = [
            {**b, "content": CLEARED_RESULT} if is_tool_result(b) and b.get("tool_use_id") in ids else b for b in blocks
        ]
        result[index] = with_content(message, cleared)
    return result
