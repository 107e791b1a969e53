"""Session layer, the side-effect ledger: which completed calls the model can no longer see, and replaying them.

A call of a tool that is not idempotent (Bash, Write, Edit — each tool declares it) is
recorded the moment it completes (``data.LedgerEntry``, written by the tool layer
through :class:`~.data.SessionStore`). The model may lose sight of such a call: a
compaction summarised it, a resume found the transcript without its result, a branch
was discarded. Those calls are :func:`hidden_calls` — entries of this user turn whose
tool_use id no message holds any more, and the calls a resume found completed in the
ledger but missing from the transcript (``SessionData.recovered``: the interrupted turn
goes on in the resumed run, whatever its new prompt). The model is told about them
(:func:`hidden_calls_note`, added where the calls disappeared), and an identical call
(same tool, same input) it proposes again within the same user turn is not run: the
gate answers it with :func:`replayed_result`, the recorded result marked as such.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from ..messages import ToolCall, ToolResultBlock, tool_result_block
from .data import LedgerEntry, SessionData, input_hash

__all__ = [
    "HIDDEN_CALLS_HEADER",
    "hidden_calls",
    "hidden_calls_note",
    "matching_entry",
    "replayed_result",
    "visible_result_ids",
]

HIDDEN_CALLS_HEADER = (
    "These tool calls already completed earlier in this turn; their effects are in place and they "
    "must not be repeated (an identical call is answered with its recorded result, not run):"
)
"""How :func:`hidden_calls_note` opens (the list of completed calls follows, one per line)."""

_NOTE_RESULT_CHARS = 200  # of each recorded result, in the note (the model needs its gist: an id, a status)


def visible_result_ids(messages: Iterable[Mapping[str, Any]]) -> set[str]:
    """The tool_use ids whose tool_result some message still holds."""
    ids: set[str] = set()
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            ids.update(
                str(b.get("tool_use_id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
            )
    return ids


def hidden_calls(session: SessionData, messages: Iterable[Mapping[str, Any]]) -> list[LedgerEntry]:
    """Completed calls the model lost sight of, in the order they ran.

    Those of this user turn whose result the messages no longer show, and those a resume
    recovered from the ledger (their result is shown now, but only because the ledger had it).
    """
    recovered = session.recovered
    mine = [e for e in session.ledger if e.prompt_id == session.prompt_id or e.tool_use_id in recovered]
    if not mine:
        return []
    visible = visible_result_ids(messages)
    return [e for e in mine if e.tool_use_id not in visible or e.tool_use_id in recovered]


def matching_entry(call: ToolCall, hidden: Sequence[LedgerEntry], ignore: Collection[str] = ()) -> LedgerEntry | None:
    """The hidden completed call ``call`` repeats (same tool, same input but the ``ignore`` fields), if any."""
    digest = input_hash(call.name, call.input, ignore)
    return next((e for e in hidden if e.name == call.name and e.input_hash == digest), None)


def _content_text(result: Mapping[str, Any]) -> str:
    content = result.get("content", "")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


def replayed_result(call: ToolCall, entry: LedgerEntry) -> ToolResultBlock:
    """The answer to a call that repeats a completed one: not run again, the recorded result instead."""
    text = (
        f"Not run again: this {call.name} call repeats one that already completed earlier in this turn "
        f"(as {entry.tool_use_id}); its effects are in place. Its recorded result:\n{_content_text(entry.result)}"
    )
    return tool_result_block(call.id, text, is_error=bool(entry.result.get("is_error")))


def hidden_calls_note(entries: Sequence[LedgerEntry]) -> str:
    """What the model is told about completed calls it can no longer see (empty when there are none)."""
    if not entries:
        return ""
    lines = [HIDDEN_CALLS_HEADER]
    for entry in entries:
        result = _content_text(entry.result)
        if len(result) > _NOTE_RESULT_CHARS:
            result = result[:_NOTE_RESULT_CHARS] + " …"
        status = "error" if entry.result.get("is_error") else "ok"
        lines.append(f"- {entry.name} {_compact(entry.input)} ({entry.tool_use_id}, {status}): {result}")
    return "\n".join(lines)


def _compact(value: Mapping[str, Any]) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= 200 else text[:200] + " …"
