"""Session layer, what survives the process: where a session lives on disk and how its files are written and read.

JSON Lines under ``$QUERYLOOP_HOME`` (docs/sessions.md); the ledger is ``fsync``-ed, and a torn or unreadable line
is skipped with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from queryloop.fsm import JsonLimitError, UnreadableFileError, loads_json, read_file_bytes

__all__ = [
    "MAX_CHECKPOINTS",
    "CheckpointEntry",
    "CheckpointStore",
    "JsonlLog",
    "SessionPaths",
    "encode_cwd",
    "is_blob_digest",
    "is_session_id",
    "machine_cache_dir",
    "queryloop_home",
    "read_jsonl",
]

MAX_CHECKPOINTS: Final = 100
"""File checkpoints kept per session (Claude Code's number); the oldest are dropped past it."""


def queryloop_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$QUERYLOOP_HOME``, else ``~/.queryloop``."""
    env = os.environ if environ is None else environ
    value = env.get("QUERYLOOP_HOME")
    return Path(value).expanduser() if value else Path.home() / ".queryloop"


def machine_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$QUERYLOOP_HOME/cache/machines``: the machines a run has read, kept by their YAML's hash
    (``queryloop.fsm.model.cache``). A run reads it, so no writer of a run may write there (``runs_later``)."""
    return queryloop_home(environ).absolute() / "cache" / "machines"


_SESSION_ID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_BLOB_DIGEST: Final = re.compile(r"[0-9a-f]{64}")


def is_session_id(text: str) -> bool:
    """Whether ``text`` is a session id as queryloop writes them: a UUID in canonical form (lowercase 8-4-4-4-12).

    A session id becomes a file name (``<id>.jsonl``) and a folder name; the canonical
    form alone is accepted, so no id reads as a path (``..``, ``/``), and one session has
    one spelling (``uuid.UUID`` would also take ``{…}``, ``urn:uuid:…``, upper case or no hyphens).
    """
    return _SESSION_ID.fullmatch(text) is not None


def is_blob_digest(text: str) -> bool:
    """Whether ``text`` names a checkpoint blob: a lowercase hex sha256 (never a path)."""
    return _BLOB_DIGEST.fullmatch(text) is not None


_MAX_FOLDER_CHARS: Final = 200


def encode_cwd(cwd: Path) -> str:
    """A working directory as one folder name, as Claude Code 2.1.235 names it.

    Every character but an ASCII letter or digit becomes ``-``; a name longer than 200
    characters is cut there and gets ``-`` and a base-36 hash of the whole path, so two
    long paths with the same start do not share a folder.
    """
    raw = str(cwd)
    name = re.sub(r"[^A-Za-z0-9]", "-", raw)
    if len(name) <= _MAX_FOLDER_CHARS:
        return name
    return f"{name[:_MAX_FOLDER_CHARS]}-{_base36(abs(_string_hash(raw)))}"


def _string_hash(text: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as a signed 32-bit integer."""
    value = 0
    units = text.encode("utf-16-le")
    for i in range(0, len(units), 2):
        value = (value * 31 + int.from_bytes(units[i : i + 2], "little")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
        if not value:
            return out


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The objects of a JSON Lines file and warnings for the lines skipped (a torn last line, unreadable ones)."""
    try:
        raw = read_file_bytes(path, limit=None)  # a FIFO or a device in its place is refused, not waited on
    except FileNotFoundError:
        return [], []
    except UnreadableFileError as exc:
        return [], [f"skipped {exc}"]
    entries: list[dict[str, object]] = []
    warnings: list[str] = []
    lines = raw.split(b"\n")
    torn = lines[-1] != b""  # a complete file ends with a newline: what follows the last one was cut off
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        refused: JsonLimitError | None = None
        try:
            value = loads_json(line)
        except JsonLimitError as exc:
            value, refused = None, exc
        except ValueError:  # not JSON, or not UTF-8
            value = None
        if isinstance(value, dict) and not (torn and number == len(lines)):
            entries.append(value)
        elif torn and number == len(lines):
            warnings.append(
                f"{path}: skipped a torn last line ({len(line)} bytes; the process stopped while writing it)"
            )
        elif refused is not None:
            warnings.append(f"{path}:{number}: skipped a line that cannot be read safely: {refused.msg}")
        else:
            warnings.append(f"{path}:{number}: skipped a line that is not a JSON object")
    return entries, warnings


class JsonlLog:
    """An append-only JSON Lines file: one ``os.write`` per entry (``O_APPEND``), flushed; ``durable`` also fsyncs."""

    def __init__(self, path: Path, *, durable: bool = False) -> None:
        self.path = path
        self.durable = durable
        self._fd: int | None = None

    def append(self, entry: Mapping[str, object]) -> None:
        line = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            _end_a_torn_line(self._fd, self.path)
        os.write(self._fd, line)
        if self.durable:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _end_a_torn_line(fd: int, path: Path) -> None:
    """A file a killed process left mid-line gets a newline first, so the next entry starts a line of its own."""
    size = os.fstat(fd).st_size
    if size:
        with path.open("rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                os.write(fd, b"\n")


@attrs.frozen(kw_only=True)
class SessionPaths:
    """Where one session's files are: the transcript, and its folder (ledger, checkpoints).

    A sub-agent's paths (``agent_id``) name its sidechain transcript, ``SESSION/subagents/agent-ID.jsonl``
    as Claude Code keeps them, and the session's own folder: its ledger and checkpoints are the session's.
    """

    home: Path
    cwd: Path  # the working directory of the run that writes (its entries' `cwd`)
    session_id: str
    project_name: str | None = None  # the project folder, when the session was started elsewhere
    agent_id: str | None = None  # a sub-agent of the session: its transcript is a sidechain in the session's folder

    @property
    def project(self) -> Path:
        return self.home / "projects" / (self.project_name or encode_cwd(self.cwd))

    @property
    def transcript(self) -> Path:
        if self.agent_id is not None:
            return self.folder / "subagents" / f"agent-{self.agent_id}.jsonl"
        return self.project / f"{self.session_id}.jsonl"

    @property
    def folder(self) -> Path:
        return self.project / self.session_id

    @property
    def ledger(self) -> Path:
        return self.folder / "ledger.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.folder / "checkpoints.jsonl"

    @property
    def blobs(self) -> Path:
        return self.folder / "blobs"

    def exists(self) -> bool:
        return self.transcript.is_file()


@attrs.frozen(kw_only=True)
class CheckpointEntry:
    """A file's bytes before one Write or Edit: ``blob`` (its sha256) or None when the file did not exist."""

    seq: int
    prompt_id: str  # the user message whose turn changed the file (Claude Code's checkpoint unit)
    path: str  # absolute
    blob: str | None
    tool_use_id: str
    # The call did more than change this file (an unsandboxed command's redirection target,
    # a sandboxed command that could reach the network): rewind still lists it as not undone.
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        raw = attrs.asdict(self)
        if not self.partial:
            del raw["partial"]  # the index as it was before the flag existed
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CheckpointEntry | None:
        try:
            blob = raw["blob"]
            return cls(
                seq=int(raw["seq"]),
                prompt_id=str(raw["prompt_id"]),
                path=str(raw["path"]),
                blob=None if blob is None else str(blob),
                tool_use_id=str(raw.get("tool_use_id", "")),
                partial=raw.get("partial") is True,
            )
        except (KeyError, TypeError, ValueError):
            return None


class CheckpointStore:
    """File checkpoints of one session: prior bytes content-addressed, an index in order, at most ``limit`` kept."""

    def __init__(self, paths: SessionPaths, *, limit: int = MAX_CHECKPOINTS) -> None:
        self.paths = paths
        self.limit = limit

    def entries(self) -> tuple[list[CheckpointEntry], int, list[str]]:
        """The kept entries in order, how many older ones were dropped, and warnings for unreadable lines."""
        raw, warnings = read_jsonl(self.paths.checkpoints)
        dropped = 0
        entries: list[CheckpointEntry] = []
        for item in raw:
            if "dropped" in item:
                dropped = max(dropped, int(item.get("dropped") or 0))
                continue
            entry = CheckpointEntry.from_json(item)
            if entry is None:
                warnings.append(f"{self.paths.checkpoints}: skipped a checkpoint entry without path/blob/seq")
            else:
                entries.append(entry)
        return entries, dropped, warnings

    def save(
        self, *, prompt_id: str, tool_use_id: str, files: Iterable[Path], partial: bool = False
    ) -> list[CheckpointEntry]:
        """Store each file's current bytes (or its absence) before a change; OSError when that cannot be done.

        ``partial``: the call does more than change these files (see :attr:`CheckpointEntry.partial`).
        """
        entries, dropped, _ = self.entries()
        seq = (entries[-1].seq + 1) if entries else dropped + 1
        saved: list[CheckpointEntry] = []
        log = JsonlLog(self.paths.checkpoints, durable=True)
        try:
            for path in files:
                blob = self._store_blob(path)
                entry = CheckpointEntry(
                    seq=seq, prompt_id=prompt_id, path=str(path), blob=blob, tool_use_id=tool_use_id, partial=partial
                )
                log.append(entry.to_json())
                saved.append(entry)
                seq += 1
        finally:
            log.close()
        if len(entries) + len(saved) > self.limit:
            self._drop_oldest()
        return saved

    def _store_blob(self, path: Path) -> str | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise OSError(f"{path} is a directory; nothing to checkpoint") from None
        digest = hashlib.sha256(data).hexdigest()
        target = self.paths.blobs / digest
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            temp = target.with_name(f".{digest}.{uuid.uuid4().hex}")
            temp.write_bytes(data)
            os.replace(temp, target)
        return digest

    def blob(self, digest: str) -> bytes | None:
        """The bytes stored under ``digest``; None when they are gone or ``digest`` is no sha256 (a crafted entry)."""
        if not is_blob_digest(digest):
            return None
        try:
            return (self.paths.blobs / digest).read_bytes()
        except OSError:
            return None

    def _drop_oldest(self) -> None:
        """Keep the newest ``limit`` entries (rewritten atomically) and the blobs they refer to."""
        entries, dropped, _ = self.entries()
        extra = len(entries) - self.limit
        if extra <= 0:
            return
        kept = entries[extra:]
        temp = self.paths.checkpoints.with_suffix(".jsonl.tmp")
        lines = [{"dropped": dropped + extra}, *(e.to_json() for e in kept)]
        temp.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), encoding="utf-8")
        os.replace(temp, self.paths.checkpoints)
        used = {e.blob for e in kept}
        for blob in _listdir(self.paths.blobs):
            if blob.name not in used and not blob.name.startswith("."):
                blob.unlink(missing_ok=True)


def _listdir(folder: Path) -> Iterator[Path]:
    try:
        yield from folder.iterdir()
    except FileNotFoundError:
        return
