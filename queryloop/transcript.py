"""Writing a session's transcript as the run goes: Claude Code's JSON Lines, one entry per message, flushed.

Owns :class:`TranscriptWriter`, which the agent run tells every step it takes (and every
item its effects publish). After each step it appends the messages the step added —
``user`` / ``assistant`` entries chained by ``parentUuid``, with ``uuid``, ``sessionId``,
``timestamp``, ``cwd``, ``version``, ``isMeta`` for hidden messages, and ``reason``, the
transition that added them (ours). A step that rebuilt the transcript (a compaction, a
collapse of old results) writes a ``system/compact_boundary`` entry first — ``parentUuid``
null, ``logicalParentUuid`` the leaf before, ``compactMetadata`` with what was summarised
and kept — and then the new transcript from it. An attempt whose streamed output a
fallback discarded leaves a ``tombstone`` entry (its partial content; no entry's parent,
so resume never follows it). The run's end is a ``system/result`` entry (terminal
reason, turns, cost) that ``queryloop sessions`` reads. The prompt's entry has the
run's ``prompt_id``: the user message checkpoints are grouped by.

Reading it back is the session layer's (``queryloop.handlers.session.transcript``).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import sys
import uuid
from typing import Any, Protocol

from queryloop.fsm import Step
from queryloop.handlers.context import ContextData
from queryloop.handlers.messages import Message, MessageView
from queryloop.handlers.request import RequestFailed
from queryloop.handlers.session import SessionData
from queryloop.handlers.session.store import JsonlLog, SessionPaths, read_jsonl

__all__ = ["TranscriptWriter", "now"]


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
    def context(self) -> ContextData: ...

    @property
    def session(self) -> SessionData: ...


def now() -> str:
    """An entry's timestamp: UTC, milliseconds, ``Z`` (Claude Code's form)."""
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class TranscriptWriter:
    """Appends one session's transcript entries as the run takes its steps.

    ``in_place``: the run resumes this very session, whose history is in the file already
    (it appends after the restored leaf); a fork, and a new session, write every message.
    """

    def __init__(self, paths: SessionPaths, *, in_place: bool = False) -> None:
        self.paths = paths
        self.version = _version()
        self.in_place = in_place
        self.log = JsonlLog(paths.transcript)
        self.view: MessageView | None = None
        self.leaf: str | None = None
        self.boundaries = 0
        self.failed = False  # a write failed: nothing more is written (a gap would break the chain)
        self.discarded: tuple[dict[str, Any], ...] = ()

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

    def _append(self, entry: dict[str, Any]) -> None:
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

    def _entry(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {
            "parentUuid": self.leaf,
            "isSidechain": False,
            "userType": "external",
            "cwd": str(self.paths.cwd),
            "sessionId": self.paths.session_id,
            "version": self.version,
            "type": kind,
            "uuid": str(uuid.uuid4()),
            "timestamp": now(),
            **fields,
        }

    def observe(self, item: Any) -> None:
        """A published item: an attempt that failed after streaming output may be a discarded branch."""
        if isinstance(item, RequestFailed) and item.failure.partial_content:
            self.discarded = tuple(item.failure.partial_content)

    def record(self, step: Step, data: RunData) -> None:
        """Append what ``step`` added to the transcript (and a tombstone for a discarded branch)."""
        if self.discarded and step.source == "calling_model":
            message = {"role": "assistant", "content": list(self.discarded)}
            self._append(self._entry("tombstone", reason=step.reason, message=message))
            self.discarded = ()
        messages = data.messages
        if self.view is None:
            added = messages.entries()
            if self.in_place:
                added = added[data.session.restored :]
                self.leaf = data.session.restored_leaf
        else:
            extension = messages.added_since(self.view)
            if extension is None:  # rebuilt: a compaction or a collapse of old tool results
                self._boundary(step, data)
                extension = messages.entries()
            added = extension
        for index, (message, meta) in enumerate(added):
            prompt = step.source == "opening_session" and index == len(added) - 1
            self._message(message, meta, step.reason, data.session.prompt_id if prompt else None)
        self.view = messages

    def _message(self, message: Message, meta: bool, reason: str, entry_id: str | None) -> None:
        role = str(message.get("role"))
        fields: dict[str, Any] = {"message": {"role": role, "content": message.get("content")}, "reason": reason}
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
        else:  # old tool results collapsed to stubs: no summary, the transcript is written anew
            metadata = {"trigger": "collapse", "preTokens": self.view.tokens if self.view is not None else 0}
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

    def finish(self, result: dict[str, Any]) -> None:
        """The run's end: what ``queryloop sessions`` lists (not part of the message chain)."""
        fields = {k: result.get(k) for k in ("is_error", "num_turns", "terminal_reason", "total_cost_usd")}
        self._append(self._entry("system", subtype="result", result_subtype=result.get("subtype"), **fields))
        self.log.close()
