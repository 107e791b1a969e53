"""Session layer, a session's transcript: written as the run goes, and read back to resume it.

Owns :class:`TranscriptWriter` (Claude Code's JSON Lines entries, plus our ``reason`` and ``system/result``) and
:func:`load_history`, which walks ``parentUuid`` back to the compact boundary. The format: docs/sessions.md.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from queryloop.fsm import uses

from ...messages import Block, Message, MessageView, ToolResultBlock, assistant_message, tool_result_block
from ..data import LedgerEntry, SessionData
from .store import JsonlLog, SessionPaths, read_jsonl

if TYPE_CHECKING:
    from queryloop.fsm import Step

__all__ = [
    "History",
    "INTERRUPTED_BEFORE_RECORDED",
    "TranscriptSink",
    "TranscriptWriter",
    "answer_dangling",
    "load_history",
    "load_ledger",
    "now",
]

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
    chain: list[dict[str, object]] = []
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
    messages: Sequence[Mapping[str, object]], ledger: Sequence[LedgerEntry]
) -> tuple[list[ToolResultBlock], tuple[str, ...]]:
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
    answers: list[ToolResultBlock] = []
    found: list[str] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        entry = recorded.get(str(block.get("id")))
        if entry is not None:
            answers.append({**entry.result, "tool_use_id": entry.tool_use_id})
            found.append(entry.tool_use_id)
        else:
            answers.append(tool_result_block(str(block.get("id")), INTERRUPTED_BEFORE_RECORDED, is_error=True))
    return answers, tuple(found)


# ---- writing ------------------------------------------------------------------------------------------


class _Boundary(Protocol):
    @property
    def trigger(self) -> str: ...

    @property
    def pre_tokens(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


class Compactions(Protocol):
    """What the writer reads of the context layer's slice: the compactions so far (the session layer is below it)."""

    @property
    def boundaries(self) -> Sequence[_Boundary]: ...


def _version() -> str:
    try:
        return importlib.metadata.version("queryloop")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class RunData(Protocol):
    """The run data the writer reads: the message graph, the compactions, the session."""

    @property
    def messages(self) -> MessageView: ...

    @property
    def context(self) -> Compactions: ...

    @property
    def session(self) -> SessionData: ...


class TranscriptSink(Protocol):
    """Where a run's transcript goes as it runs: :class:`TranscriptWriter` (a file), or the fleet's database."""

    def continue_after(self, written: MessageView) -> None: ...

    def observe(self, item: Any) -> None: ...

    def record(self, step: Step, data: RunData) -> None: ...

    def finish(self, result: dict[str, Any]) -> None: ...


def now() -> str:
    """An entry's timestamp: UTC, milliseconds, ``Z`` (Claude Code's form)."""
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@uses(states=("calling_model", "opening_session"), reasons=("microcompact",))
class TranscriptWriter:
    """Appends one session's transcript entries as the run takes its steps.

    ``in_place``: the run resumes this very session, whose history is in the file already
    (it appends after the restored leaf); a fork, and a new session, write every message.
    """

    def __init__(self, paths: SessionPaths, *, in_place: bool = False) -> None:
        from ...request import RequestFailed  # here: reading a transcript (queryloop sessions) loads no request layer

        self._request_failed = RequestFailed
        self.paths = paths
        self.version = _version()
        self.in_place = in_place
        self.log = JsonlLog(paths.transcript)
        self.view: MessageView | None = None
        self.leaf: str | None = None
        self.boundaries = 0
        self.failed = False  # a write failed: nothing more is written (a gap would break the chain)
        self.discarded: tuple[Block, ...] = ()

    def continue_after(self, written: MessageView) -> None:
        """The run goes on from a run state whose messages (``written``) the transcript holds already."""
        self.view = written
        self.leaf = next(
            (
                str(e["uuid"])
                for e in reversed(read_jsonl(self.paths.transcript)[0])
                if e.get("type") in ("user", "assistant", "system") and e.get("uuid") and e.get("subtype") != "result"
            ),
            None,
        )

    def _append(self, entry: Mapping[str, object]) -> None:
        """Write one entry; a disk that refuses it is said once on stderr and never ends the run."""
        if self.failed:
            return
        try:
            self.log.append(entry)
        except OSError as exc:
            self.failed = True
            print(
                f"queryloop: warning: cannot write the transcript {self.paths.transcript} ({exc.strerror or exc}); "
                "the run goes on, but this session cannot be resumed past this point",
                file=sys.stderr,
            )

    def _entry(self, kind: str, **fields: object) -> dict[str, Any]:
        agent = {} if self.paths.agent_id is None else {"agentId": self.paths.agent_id}
        return {
            "parentUuid": self.leaf,
            "isSidechain": self.paths.agent_id is not None,
            "userType": "external",
            "cwd": str(self.paths.cwd),
            "sessionId": self.paths.session_id,
            "version": self.version,
            **agent,
            "type": kind,
            "uuid": str(uuid.uuid4()),
            "timestamp": now(),
            **fields,
        }

    def observe(self, item: object) -> None:
        """A published item: an attempt that failed after streaming output may be a discarded branch."""
        if isinstance(item, self._request_failed) and item.failure.partial_content:
            self.discarded = tuple(item.failure.partial_content)

    def record(self, step: Step, data: RunData) -> None:
        """Append what ``step`` added to the transcript (and a tombstone for a discarded branch)."""
        if self.discarded and step.source == "calling_model":
            self._append(self._entry("tombstone", reason=step.reason, message=assistant_message(list(self.discarded))))
            self.discarded = ()
        messages = data.messages
        if self.view is None:
            added = messages.entries()
            if self.in_place:
                added = added[data.session.restored :]
                self.leaf = data.session.restored_leaf
        else:
            extension = messages.added_since(self.view)
            if extension is None:  # rebuilt: a compaction, a collapse or a microcompaction of old tool results
                self._boundary(step, data)
                extension = messages.entries()
            added = extension
        for index, (message, meta) in enumerate(added):
            prompt = step.source == "opening_session" and index == len(added) - 1
            self._message(message, meta, step.reason, data.session.prompt_id if prompt else None)
        self.view = messages

    def _message(self, message: Message, meta: bool, reason: str, entry_id: str | None) -> None:
        role = str(message.get("role"))
        fields: dict[str, object] = {"message": {"role": role, "content": message.get("content")}, "reason": reason}
        if meta:
            fields["isMeta"] = True
        entry = self._entry("assistant" if role == "assistant" else "user", **fields)
        if entry_id:
            entry["uuid"] = entry_id
        self._append(entry)
        self.leaf = entry["uuid"]

    def _boundary(self, step: Step, data: RunData) -> None:
        boundaries = data.context.boundaries
        if len(boundaries) > self.boundaries:
            b = boundaries[-1]
            metadata = {"trigger": b.trigger, "preTokens": b.pre_tokens, **b.to_json()}
        else:  # old tool results collapsed to stubs or cleared: no summary, the transcript is written anew
            trigger = "microcompact" if step.reason == "microcompact" else "collapse"
            metadata = {"trigger": trigger, "preTokens": self.view.tokens if self.view is not None else 0}
        self.boundaries = len(boundaries)
        entry = self._entry(
            "system",
            subtype="compact_boundary",
            content="Conversation compacted",
            logicalParentUuid=self.leaf,
            compactMetadata=metadata,
            reason=step.reason,
        )
        entry["parentUuid"] = None
        self._append(entry)
        self.leaf = entry["uuid"]

    def finish(self, result: Mapping[str, object]) -> None:
        """The run's end: what ``queryloop sessions`` lists (not part of the message chain)."""
        fields = {k: result.get(k) for k in ("is_error", "num_turns", "terminal_reason", "total_cost_usd")}
        self._append(self._entry("system", subtype="result", result_subtype=result.get("subtype"), **fields))
        self.log.close()
