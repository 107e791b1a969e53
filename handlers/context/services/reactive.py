"""What a reactive compaction summarises and what it keeps, as Claude Code 2.1.235 does it.

The oldest API-round groups are summarised, the newest kept; the split moves when the summary is itself too long
(docs/graph.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...messages import Message, message_tokens
from .compaction import CompactionPlan
from .rounds import api_round_groups

__all__ = ["reactive_plan", "shrunk_plan", "token_gap"]

_GAP = re.compile(r"(\d[\d,]*)\s+tokens?\s*>\s*(\d[\d,]*)")


def token_gap(message: str) -> int | None:
    """By how many tokens a prompt-too-long answer says the request was over (``N tokens > M``), if it says."""
    match = _GAP.search(message)
    if match is None:
        return None
    sent, limit = (int(part.replace(",", "")) for part in match.groups())
    return sent - limit if sent > limit else None


def _groups_covering(costs: Sequence[int], count: int, gap: int) -> int:
    """How many of the newest of ``costs[:count]`` add up to ``gap``; half of them when that is all but one."""
    covered, taken = 0, 0
    for cost in reversed(costs[:count]):
        covered += cost
        taken += 1
        if covered >= gap:
            break
    if taken >= count - 1:
        return max(1, count // 2)
    return taken


def _split(messages: Sequence[Message], groups: Sequence[range], kept: int) -> CompactionPlan | None:
    """The plan keeping the newest ``kept`` groups, or ``None`` when the rest holds no assistant message."""
    if kept >= len(groups):
        return None
    cut = groups[len(groups) - kept].start
    older = tuple(messages[:cut])
    if not any(m.get("role") == "assistant" for m in older):
        return None
    return CompactionPlan(older=older, recent=tuple(messages[cut:]), older_groups=len(groups) - kept)


def _costs(messages: Sequence[Message], groups: Sequence[range]) -> list[int]:
    return [sum(message_tokens(messages[i]) for i in group) for group in groups]


def reactive_plan(messages: Sequence[Message], *, gap: int | None) -> CompactionPlan | None:
    """The first split after a prompt-too-long answer over by ``gap`` tokens (``None``: not said).

    ``None`` when there is nothing older than what is kept to summarise.
    """
    groups = api_round_groups(messages)
    if len(groups) < 2:
        return None
    kept = 1
    if gap is not None and len(groups) > 3:
        costs = _costs(messages, groups)
        rest = gap - costs[-1]
        if rest > 0:
            kept += _groups_covering(costs, len(groups) - 1, rest)
    return _split(messages, groups, kept)


def shrunk_plan(plan: CompactionPlan, *, gap: int | None) -> CompactionPlan | None:
    """``plan`` after its summary request was itself too long by ``gap`` tokens: more newest groups kept.

    ``None`` when the summarised part would no longer hold an assistant message.
    """
    older = plan.older
    groups = api_round_groups(older)
    step = 1 if gap is None else _groups_covering(_costs(older, groups), len(groups), gap)
    if step >= len(groups):
        return None
    cut = groups[len(groups) - step].start
    shrunk = tuple(older[:cut])
    if not any(m.get("role") == "assistant" for m in shrunk):
        return None
    return CompactionPlan(older=shrunk, recent=(*older[cut:], *plan.recent), older_groups=len(groups) - step)
