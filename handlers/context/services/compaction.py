"""Context governance: token estimates, tool-result collapse, compaction plans.

Pure functions: the local estimate, API-round groups, collapses, the compaction plan, its summary request and the
compacted transcript. Messages are never mutated; nothing is sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ...messages import (
    Block,
    Message,
    MessageView,
    ResultBlock,
    compact_json,
    is_tool_result,
    is_tool_use,
    message_tokens,
    messages_tokens,
    user_message,
    with_content,
)
from ...tools import CLEARABLE_TOOLS

if TYPE_CHECKING:
    from anthropic.types import TextBlockParam

__all__ = [
    "CLEARED_RESULT",
    "COLLAPSE_STUB_PREFIX",
    "Clearing",
    "CompactBoundary",
    "CompactTrigger",
    "CompactionPlan",
    "DominantPart",
    "MICROCOMPACT_KEEP_RECENT",
    "MICROCOMPACT_MIN_TOKENS",
    "SUMMARY_MARKER",
    "SUMMARY_PROMPT",
    "StagedCollapse",
    "api_round_groups",
    "clear_results",
    "collapse_stub",
    "commit_collapses",
    "compacted_messages",
    "dominant_part",
    "dominant_part_from",
    "drop_oldest_group",
    "not_compactable_hint",
    "not_compactable_hint_from",
    "plan_clearing",
    "plan_compaction",
    "regenerate_attachments",
    "request_overhead_tokens",
    "request_tokens",
    "stage_collapses",
    "summary_request_messages",
]


# ----------------------------------------------------------------------------- estimates


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


# ------------------------------------------------------------------------------- blocks


def _blocks(message: Mapping[str, object]) -> list[Block]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _tool_use_ids(message: Mapping[str, object]) -> list[str]:
    return [b["id"] for b in _blocks(message) if is_tool_use(b)]


def _tool_result_ids(message: Mapping[str, object]) -> list[str]:
    return [b["tool_use_id"] for b in _blocks(message) if is_tool_result(b)]


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


# ------------------------------------------------------------------------------- groups


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
            for tool_id in _tool_use_ids(message):
                group_of_tool_use[tool_id] = len(starts) - 1
        else:
            for tool_id in _tool_result_ids(message):
                owner = group_of_tool_use.get(tool_id)
                if owner is not None and owner < len(starts) - 1:
                    del starts[owner + 1 :]
                    for key, value in group_of_tool_use.items():
                        if value > owner:
                            group_of_tool_use[key] = owner
    bounds = [*starts, len(messages)]
    return [range(bounds[k], bounds[k + 1]) for k in range(len(starts))]


# ----------------------------------------------------------------------------- collapse

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
        for j, block in enumerate(_blocks(message)):
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
        blocks = list(_blocks(messages[index]))
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


# ----------------------------------------------------------------------- microcompaction

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
    for block in _blocks(message):
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
        blocks = _blocks(message)
        if not any(is_tool_result(b) and b.get("tool_use_id") in ids for b in blocks):
            continue
        cleared: list[Block] = [
            {**b, "content": CLEARED_RESULT} if is_tool_result(b) and b.get("tool_use_id") in ids else b for b in blocks
        ]
        result[index] = with_content(message, cleared)
    return result


# --------------------------------------------------------------------------- compaction


@attrs.frozen(kw_only=True)
class CompactionPlan:
    """Which messages a compaction summarises (``older``) and which it keeps (``recent``)."""

    older: tuple[Message, ...]
    recent: tuple[Message, ...]
    older_groups: int = attrs.field(validator=attrs.validators.ge(1))
    """How many API-round groups ``older`` holds."""


def plan_compaction(
    messages: Sequence[Message], *, keep_recent_tokens: int, min_recent_groups: int = 1
) -> CompactionPlan | None:
    """Split ``messages`` at a group boundary for a compaction, or ``None`` when it cannot help.

    ``recent`` is the longest run of most recent whole groups whose estimate fits
    ``keep_recent_tokens`` — but at least ``min_recent_groups`` groups however large —
    and ``older`` the rest, which always holds at least one group (so ``recent`` is
    capped at all groups but the first). ``None`` when there are fewer than 2 groups:
    there is nothing to summarise that would leave a valid transcript.
    """
    if keep_recent_tokens < 0 or min_recent_groups < 0:
        raise ValueError(
            f"keep_recent_tokens and min_recent_groups must be >= 0, got {keep_recent_tokens} and {min_recent_groups}"
        )
    groups = api_round_groups(messages)
    if len(groups) < 2:
        return None
    kept = 0
    total = 0
    for group in reversed(groups[1:]):
        cost = sum(message_tokens(messages[i]) for i in group)
        if kept >= min_recent_groups and total + cost > keep_recent_tokens:
            break
        kept += 1
        total += cost
    cut = groups[len(groups) - kept].start if kept else len(messages)
    older = tuple(messages[:cut])
    recent = tuple(messages[cut:])
    # Cutting at a group boundary means ``recent`` opens with an assistant message and
    # answers no tool_use of ``older``: it can follow the summary's user message.
    assert not recent or recent[0].get("role") == "assistant", "compaction cut inside an API-round group"
    older_tool_uses = {tool_id for m in older for tool_id in _tool_use_ids(m)}
    assert not any(tool_id in older_tool_uses for m in recent for tool_id in _tool_result_ids(m)), (
        "compaction separated a tool_use from its tool_result"
    )
    return CompactionPlan(older=older, recent=recent, older_groups=len(groups) - kept)


SUMMARY_MARKER = "[queryloop context summary]"
"""Opens :data:`SUMMARY_PROMPT`, so a scenario rule (``last_user_contains``) can tell
summary requests from ordinary turns."""

SUMMARY_PROMPT = f"""{SUMMARY_MARKER}
Stop here and summarise the conversation above so that the agent can carry on from your
summary alone: these messages will be removed from its context. Do not call a tool.
Write for the agent, not for the user. Keep, concretely:

1. The user's goals and every explicit request or constraint, in their own words where it matters.
2. Decisions taken and why, including approaches that were rejected.
3. Files read, created or changed, with their current state (names, functions, key lines).
4. Commands run and their outcomes (exit status, the lines of output that mattered).
5. Errors met and how they were fixed, or that they are still open.
6. Work still pending, and the very next step the agent was about to take.

Quote exact paths, identifiers, values and error messages. Do not invent anything that
is not in the conversation. No greetings, apologies or commentary about summarising.
Reply with the summary only."""
"""The summary request's last user block. The request is otherwise the agent's own: its
system prompt, tools and the older messages as they were sent, so the prompt cache the
agent's requests wrote is read, not written again."""

_DROPPED_HEAD_NOTE = "[The start of this conversation was dropped to fit the summary request.]"


def summary_request_messages(older: Sequence[Message], instructions: str | None = None) -> list[Message]:
    """The messages of the summary request for ``older``: they, as stored, then :data:`SUMMARY_PROMPT`.

    The messages are the agent's own, unchanged, so the request shares its prefix (system
    prompt, tools, history) with the agent's requests and reads it from the prompt cache.
    The prompt is one more text block on the last message when that is a user message (a
    string content becomes its one text block, the same prompt), else a user message of
    its own; the user's ``instructions`` for a manual compaction follow it. A history that
    opens with the assistant (its head was dropped) gets a note in front.
    """
    request = SUMMARY_PROMPT
    if instructions and instructions.strip():
        request += f"\n\nThe user's instructions for this summary:\n{instructions.strip()}"
    block: TextBlockParam = {"type": "text", "text": request}
    messages = list(older)
    if messages and messages[0].get("role") != "user":
        messages.insert(0, user_message(_DROPPED_HEAD_NOTE))
    last = messages[-1] if messages else None
    if last is None or last.get("role") != "user":
        return [*messages, user_message([block])]
    content = last.get("content")
    blocks: list[Block] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return [*messages[:-1], with_content(last, [*blocks, block])]


def drop_oldest_group(older: Sequence[Message]) -> tuple[list[Message], int] | None:
    """``older`` without its oldest API-round group, and how many messages that dropped.

    The lossy last resort when the summary request itself is too long (head
    truncation). ``None`` when a single group is left: dropping it leaves nothing.
    """
    groups = api_round_groups(older)
    if len(groups) < 2:
        return None
    cut = groups[1].start
    return list(older[cut:]), cut


def _read_paths(messages: Sequence[Mapping[str, object]]) -> list[str]:
    """``file_path`` of every ``Read`` call, most recent first."""
    paths: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        for block in reversed(_blocks(message)):
            if is_tool_use(block) and block.get("name") == "Read":
                tool_input = block.get("input")
                raw = tool_input.get("file_path") if isinstance(tool_input, Mapping) else None
                if isinstance(raw, str) and raw and "\x00" not in raw:
                    paths.append(raw)
    return paths


def regenerate_attachments(
    removed: Sequence[Mapping[str, object]], cwd: Path, *, max_files: int = 3, max_chars_per_file: int = 8000
) -> list[str]:
    """The current text of files the model Read in ``removed``, to re-attach after compaction.

    Most recently read first, each file once, at most ``max_files``; only regular text
    files that still exist inside ``cwd`` (after resolving ``..`` and symlinks). A file
    longer than ``max_chars_per_file`` keeps its head and a marker saying how much was cut.
    """
    root = cwd.resolve()
    seen: set[Path] = set()
    attachments: list[str] = []
    for raw in _read_paths(removed):
        if len(attachments) >= max_files:
            break
        try:
            path = (root / raw).resolve()
        except (OSError, RuntimeError):  # a symlink loop (Python raises RuntimeError): nothing to re-attach
            continue
        if path in seen or not path.is_relative_to(root):
            continue
        seen.add(path)
        try:
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "\x00" in text:
            continue  # binary: Read refuses it too
        if len(text) > max_chars_per_file:
            cut = len(text) - max_chars_per_file
            text = (
                f"{text[:max_chars_per_file]}\n[... {cut:,} more characters not shown; Read the file to see the rest]"
            )
        shown = path.relative_to(root).as_posix()
        attachments.append(f"Contents of {shown} (re-attached after compaction):\n{text}")
    return attachments


_SUMMARY_INTRO = (
    "This session continues an earlier conversation that ran out of context. "
    "The earlier part is summarised below; the messages after this one are kept verbatim.\n\n"
)


def compacted_messages(summary: str, recent: Sequence[Message], attachments: Sequence[str]) -> list[Message]:
    """The transcript after a compaction: one user message (intro, ``summary``,
    ``attachments``) followed by ``recent``.

    When ``recent`` opens with a user message, it is merged into the summary message so
    roles alternate. Raises ``ValueError`` for an empty summary, or when that opening
    user message holds tool_results (their tool_use would have been summarised away).
    """
    if not summary.strip():
        raise ValueError("the compaction summary is empty; the summary request produced no text")
    blocks: list[Block] = [{"type": "text", "text": _SUMMARY_INTRO + summary.strip()}]
    blocks.extend({"type": "text", "text": a} for a in attachments if a.strip())
    rest = list(recent)
    if rest and rest[0].get("role") == "user":
        first = rest.pop(0)
        if _tool_result_ids(first):
            raise ValueError(
                "the kept messages open with tool_results whose tool_use was summarised; "
                "cut the transcript at an API-round group boundary (plan_compaction does)"
            )
        content = first.get("content")
        if isinstance(content, str):
            if content:
                blocks.append({"type": "text", "text": content})
        else:
            blocks.extend(content or [])
    return [user_message(blocks), *rest]


CompactTrigger = Literal["auto", "manual", "reactive"]
"""What started a compaction: the threshold before sending, ``/compact``, or a prompt-too-long reply."""


@attrs.frozen(kw_only=True)
class CompactBoundary:
    """What a compaction did, recorded in the transcript and published to the output."""

    trigger: CompactTrigger
    pre_tokens: int = attrs.field(validator=attrs.validators.ge(0))
    post_tokens: int = attrs.field(validator=attrs.validators.ge(0))
    lossy: bool
    """Whether head truncation dropped messages that the summary does not cover."""
    dropped_messages: int = attrs.field(validator=attrs.validators.ge(0))
    summarized_messages: int = attrs.field(validator=attrs.validators.ge(0))

    def to_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger,
            "pre_tokens": self.pre_tokens,
            "post_tokens": self.post_tokens,
            "lossy": self.lossy,
            "dropped_messages": self.dropped_messages,
            "summarized_messages": self.summarized_messages,
        }


# -------------------------------------------------------------------- not compactable


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
