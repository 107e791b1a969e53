"""Compaction: which rounds a summary replaces, its request, the files re-attached and the compacted transcript.

Pure functions; messages are never mutated and nothing is sent. Estimates, API-round groups, collapses and
clearing have their own modules; their names stay importable here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ...messages import Block, Message, is_tool_use, message_tokens, user_message, with_content
from .clearing import (
    CLEARED_RESULT,
    MICROCOMPACT_KEEP_RECENT,
    MICROCOMPACT_MIN_TOKENS,
    Clearing,
    clear_results,
    plan_clearing,
)
from .collapse import COLLAPSE_STUB_PREFIX, StagedCollapse, collapse_stub, commit_collapses, stage_collapses
from .estimates import (
    DominantPart,
    dominant_part,
    dominant_part_from,
    not_compactable_hint,
    not_compactable_hint_from,
    request_overhead_tokens,
    request_tokens,
)
from .rounds import api_round_groups, content_blocks, tool_result_ids, tool_use_ids

if TYPE_CHECKING:
    from anthropic.types import TextBlockParam

# The names of the other context services stay in this list: tests and tools/bench_context.py import them here.
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
    older_tool_uses = {tool_id for m in older for tool_id in tool_use_ids(m)}
    assert not any(tool_id in older_tool_uses for m in recent for tool_id in tool_result_ids(m)), (
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
        for block in reversed(content_blocks(message)):
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
        if tool_result_ids(first):
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
