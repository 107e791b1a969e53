"""What a reactive compaction summarises and what it keeps, as Claude Code 2.1.235 does it.

Owns the pure split of a transcript that was too long for the model into the oldest
API-round groups (summarised) and the newest ones (kept verbatim), and how that split
moves when the summary request is itself too long. It sends nothing and decides no
transition: the guards and edge handlers of ``compacting`` call it, and
``machines/query_loop.yaml`` chooses the path. Auto-compaction plans by a token budget
instead (``compaction.plan_compaction``).

The rules, observed against Claude Code 2.1.235 on the embedded server:

* the transcript's groups are :func:`~.compaction.api_round_groups` (the first holds the
  prompt; each later one opens with an assistant message); only the newest group is kept
  at first — or more when the prompt-too-long answer says by how many tokens the request
  was over (``N tokens > M``), there are more than three groups, and the gap is larger
  than the newest group: then as many newest groups as cover the rest of the gap;
* the summarised part must hold an assistant message (a round older than the ones
  kept); otherwise there is nothing to compact and the prompt-too-long error stands;
* a summary request that is itself too long is sent again with fewer groups: the newest
  summarised groups move to the kept part — as many as cover the summary's own gap, or
  half of them when that would take all but one, or one when the answer gives no gap.
  Nothing is dropped unsummarised.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...messages import Message, message_tokens
from .compaction import CompactionPlan, api_round_groups

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
