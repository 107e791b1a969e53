"""Session layer's slice of the run data, what its effects use, and the records of the ledger.

Owns :class:`SessionData` (the user turn, the prompt, the session resumed, its ledger), :class:`LedgerEntry`,
:func:`input_hash`, the layer's protocols and its event payloads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any, Protocol, TypeVar, cast

import attrs
from attrs import evolve

from ..hooks import HooksData
from ..messages import Message, ToolResultBlock
from ..outcome import SharedData
from .services.store import MAX_CHECKPOINTS, CheckpointStore, JsonlLog, SessionPaths

__all__ = [
    "HasSession",
    "LedgerEntry",
    "Restored",
    "SessionData",
    "SessionRun",
    "SessionServices",
    "SessionStore",
    "input_hash",
    "with_session",
]


def input_hash(name: str, tool_input: Mapping[str, object], ignore: Collection[str] = ()) -> str:
    """What makes two calls the same call: the tool's name and its input but ``ignore``, canonical JSON, sha256.

    ``ignore``: the tool's fields that name one attempt (an idempotency key): a call proposed
    again with a fresh key is still the same action.
    """
    kept = {k: v for k, v in tool_input.items() if k not in ignore} if ignore else tool_input
    canonical = json.dumps([name, kept], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@attrs.frozen(kw_only=True, slots=True)
class LedgerEntry:
    """A completed call of a tool that is not idempotent, recorded the moment it completed."""

    tool_use_id: str
    name: str
    input_hash: str
    input: dict[str, Any]
    result: ToolResultBlock
    prompt_id: str  # the user turn it belongs to (from one user prompt to the next)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LedgerEntry | None:
        try:
            return cls(
                tool_use_id=str(raw["tool_use_id"]),
                name=str(raw["name"]),
                input_hash=str(raw["input_hash"]),
                input=dict(raw.get("input") or {}),
                result=cast(ToolResultBlock, dict(raw["result"])),  # read back from the session file
                prompt_id=str(raw["prompt_id"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


@attrs.frozen(kw_only=True, slots=True)
class SessionData:
    """What the session layer keeps between steps."""

    prompt: str = ""  # this run's prompt, appended once the session is open
    prompt_id: str = ""  # the uuid of this run's user prompt: its checkpoint group and its ledger turn
    resume: bool = False  # the run continues a stored session (its history is read when the session opens)
    ledger: tuple[LedgerEntry, ...] = ()  # completed non-idempotent calls of the whole session, in order
    restored_leaf: str | None = None  # the transcript entry the resumed history ends with
    restored: int = 0  # messages read back from the stored session (they are in its transcript already)
    # calls the process died before recording in the transcript, answered on resume from the ledger:
    # the model lost sight of them, so this run treats them as its own hidden calls
    recovered: frozenset[str] = frozenset()


class HasSession(SharedData, Protocol):
    """Run data with a session slice (every layer above this one may evolve it)."""

    @property
    def session(self) -> SessionData: ...


class SessionRun(HasSession, Protocol):
    """The run data as session handlers see it."""

    @property
    def user_turns(self) -> int: ...

    @property
    def hooks(self) -> HooksData: ...


S = TypeVar("S", bound=SessionRun)
W = TypeVar("W", bound=HasSession)


def with_session(data: W, **changes: Any) -> W:
    """The run data with its session slice changed as given."""
    return data.evolve(session=evolve(data.session, **changes))


class SessionStore:
    """One session's durable files: the ledger written per call, the checkpoints, the transcript's place.

    ``source``: the session a resumed run reads its history from (itself, or the one it forks).
    ``writes`` off (``--no-session-persistence``): a stored history is still read, nothing is written.
    """

    def __init__(
        self,
        paths: SessionPaths,
        *,
        source: SessionPaths | None = None,
        max_checkpoints: int = MAX_CHECKPOINTS,
        writes: bool = True,
    ) -> None:
        self.paths = paths
        self.source = source
        self.writes = writes
        self.checkpoints = CheckpointStore(paths, limit=max_checkpoints)
        self._ledger = JsonlLog(paths.ledger, durable=True)

    def record(self, entry: LedgerEntry) -> None:
        """Append one completed call to the ledger, on disk before anything else happens."""
        if self.writes:
            self._ledger.append(entry.to_json())

    def close(self) -> None:
        self._ledger.close()


@attrs.frozen(kw_only=True, slots=True)
class Restored:
    """``history_restored`` / ``dangling_calls_found``: the history a resumed session continues, and what was repaired.

    ``answers``: the tool_result blocks given to the tool_use blocks the history left
    without one (the ledger's recorded result when it has the call, else an interrupted error).
    """

    messages: tuple[Message, ...] = ()
    meta: tuple[bool, ...] = ()
    ledger: tuple[LedgerEntry, ...] = ()
    leaf: str | None = None
    answers: tuple[ToolResultBlock, ...] = ()
    recovered: tuple[str, ...] = ()  # the calls answered with their recorded result (the ledger had them)
    warnings: tuple[str, ...] = ()


class SessionServices(Protocol):
    """What session effects use: the session's store (None when nothing is kept)."""

    @property
    def session(self) -> SessionStore | None: ...
