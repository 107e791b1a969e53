"""A fleet session's store: its transcript, ledger and file checkpoints in the database every worker reaches.

A recovered workflow writes everything again, so each write is keyed and a second one changes nothing.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from queryloop.handlers.session import (
    CheckpointEntry,
    CheckpointStore,
    LedgerEntry,
    SessionPaths,
    SessionStore,
    TranscriptWriter,
)

from .database import FleetDatabase

__all__ = ["FleetCheckpoints", "FleetSessionStore", "FleetTranscript", "entry_uuid"]

_NAMESPACE = uuid.UUID("6f1c7a52-3c1e-4f43-9d4e-2f6d8a0b9c11")


def entry_uuid(session_id: str, seq: int) -> str:
    """The uuid of a session's transcript entry ``seq``: the same in every run of the workflow."""
    return str(uuid.uuid5(_NAMESPACE, f"{session_id}/{seq}"))


class FleetCheckpoints(CheckpointStore):
    """File checkpoints in the database, keyed by the tool_use id (taken once per call, whatever replays)."""

    def __init__(self, db: FleetDatabase, paths: SessionPaths) -> None:
        super().__init__(paths)
        self.db = db

    def entries(self) -> tuple[list[CheckpointEntry], int, list[str]]:
        rows = self.db.checkpoints(self.paths.session_id)
        return [_entry(row) for row in rows], 0, []

    def save(
        self, *, prompt_id: str, tool_use_id: str, files: Iterable[Path], partial: bool = False
    ) -> list[CheckpointEntry]:
        # ``partial`` is not kept: no rewind reads the fleet's checkpoints, only `queryloop rewind`'s files do.
        done = self.db.checkpoints(self.paths.session_id, tool_use_id)
        if done:  # taken before this workflow was recovered: the file may have changed since
            return [_entry(row) for row in done]
        for path in files:
            data = _read(path)
            digest = hashlib.sha256(data).hexdigest() if data is not None else None
            self.db.save_checkpoint(
                self.paths.session_id,
                tool_use_id=tool_use_id,
                prompt_id=prompt_id,
                path=str(path),
                data=data,
                digest=digest,
            )
        return [_entry(row) for row in self.db.checkpoints(self.paths.session_id, tool_use_id)]

    def blob(self, digest: str) -> bytes | None:
        return self.db.blob(digest)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise OSError(f"{path} is a directory; nothing to checkpoint") from None


def _entry(row: Mapping[str, Any]) -> CheckpointEntry:
    return CheckpointEntry(
        seq=int(row["seq"]),
        prompt_id=str(row["prompt_id"]),
        path=str(row["path"]),
        blob=row["blob"],
        tool_use_id=str(row["tool_use_id"]),
    )


class FleetSessionStore(SessionStore):
    """The session layer's store for a fleet session: nothing on the worker's disk."""

    def __init__(self, db: FleetDatabase, paths: SessionPaths) -> None:
        super().__init__(paths)
        self.db = db
        self.checkpoints = FleetCheckpoints(db, paths)

    def record(self, entry: LedgerEntry) -> None:
        """The completed call in the database's ledger before anything else happens (once per tool_use id)."""
        self.db.record_ledger(self.paths.session_id, entry.tool_use_id, entry.to_json())

    def close(self) -> None:
        pass  # the database outlives the run


class _DatabaseLog:
    """The transcript writer's log: each entry a row at its position, its uuid derived from it."""

    def __init__(self, db: FleetDatabase, session_id: str) -> None:
        self.db = db
        self.session_id = session_id
        self.seq = 0

    def append(self, entry: Mapping[str, object]) -> None:
        self.seq += 1
        self.db.append_transcript(self.session_id, self.seq, entry)

    def close(self) -> None:
        pass


class FleetTranscript(TranscriptWriter):
    """Claude Code's transcript entries, written to the database; replaying a run writes the same rows."""

    def __init__(self, db: FleetDatabase, paths: SessionPaths) -> None:
        super().__init__(paths)
        self.rows = _DatabaseLog(db, paths.session_id)
        self.log = self.rows  # type: ignore[assignment]  # the same two methods as JsonlLog

    def _entry(self, kind: str, **fields: object) -> dict[str, Any]:
        entry = super()._entry(kind, **fields)
        entry["uuid"] = entry_uuid(self.paths.session_id, self.rows.seq + 1)  # the position it is written at
        return entry
