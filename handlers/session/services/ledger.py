"""Session layer, the side-effect ledger: which completed calls the model can no longer see, and replaying them.

Such a call proposed again in the same user turn is answered with its recorded result, not run (docs/sessions.md).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from ...messages import MessageView, ToolCall, ToolResultBlock, tool_result_block
from ..data import LedgerEntry, SessionData, input_hash

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


def visible_result_ids(messages: Iterable[Mapping[str, object]]) -> set[str]:
    """The tool_use ids whose tool_result some message still holds."""
    ids: set[str] = set()
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            ids.update(
                str(b.get("tool_use_id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
            )
    return ids


@attrs.frozen
class _Checked:
    """What :func:`hidden_calls` found for a history: its answer, and what it looked at."""

    length: int  # of the history
    ledger: tuple[LedgerEntry, ...]  # the ledger it looked at
    prompt_id: str
    recovered: frozenset[str]
    hidden: tuple[LedgerEntry, ...]


# the key of the last check in a history's memos (MessageView.memos): a longer view of it extends the one
# checked, so only ledger entries recorded since, and the calls hidden then, need looking at (a tool turn costs
# O(1), not O(N))
_CHECKED = f"{__name__}.hidden_calls"


def _mine(session: SessionData, entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    recovered = session.recovered
    return [e for e in entries if e.prompt_id == session.prompt_id or e.tool_use_id in recovered]


def hidden_calls(session: SessionData, messages: Iterable[Mapping[str, object]]) -> list[LedgerEntry]:
    """Completed calls the model lost sight of, in the order they ran.

    Those of this user turn whose result the messages no longer show, and those a resume
    recovered from the ledger (their result is shown now, but only because the ledger had it).
    """
    recovered = session.recovered
    if not isinstance(messages, MessageView):
        mine = _mine(session, session.ledger)
        if not mine:
            return []
        visible = visible_result_ids(messages)
        return [e for e in mine if e.tool_use_id not in visible or e.tool_use_id in recovered]
    ledger = session.ledger
    memos = messages.memos
    checked: _Checked | None = memos.get(_CHECKED)
    if (
        checked is not None
        and checked.length <= len(messages)
        and len(checked.ledger) <= len(ledger)
        and (not checked.ledger or ledger[len(checked.ledger) - 1] is checked.ledger[-1])
        and checked.prompt_id == session.prompt_id
        and checked.recovered == recovered
    ):
        candidates = [*checked.hidden, *_mine(session, ledger[len(checked.ledger) :])]
    else:
        candidates = _mine(session, ledger)
    holds = messages.holds_result
    hidden = tuple(e for e in candidates if not holds(e.tool_use_id) or e.tool_use_id in recovered)
    memos[_CHECKED] = _Checked(
        length=len(messages), ledger=ledger, prompt_id=session.prompt_id, recovered=recovered, hidden=hidden
    )
    return list(hidden)


def matching_entry(call: ToolCall, hidden: Sequence[LedgerEntry], ignore: Collection[str] = ()) -> LedgerEntry | None:
    """The hidden completed call ``call`` repeats (same tool, same input but the ``ignore`` fields), if any."""
    digest = input_hash(call.name, call.input, ignore)
    return next((e for e in hidden if e.name == call.name and e.input_hash == digest), None)


def _content_text(result: Mapping[str, object]) -> str:
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


def _compact(value: Mapping[str, object]) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= 200 else text[:200] + " …"
