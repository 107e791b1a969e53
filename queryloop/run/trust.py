"""Workspace trust: whether a folder's own settings may widen what runs.

Owns reading and writing Claude Code's trust record (:func:`is_trusted`, :func:`set_trust`) and :func:`restrict`,
what an untrusted folder's settings lose. The rules: docs/security.md (workspace trust).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

__all__ = [
    "NARROWING_MODES",
    "TrustError",
    "Widening",
    "add_trust_command",
    "cmd_trust",
    "is_trusted",
    "restrict",
    "set_trust",
    "trust_folders",
    "trust_record",
]

NARROWING_MODES: Final = frozenset({"default", "plan", "dontAsk"})
"""The permission modes an untrusted folder may choose: none of them allows more than ``default``."""

_MAX_RECORD_BYTES: Final = 64 * 1024 * 1024  # Claude Code's record grows with every project; a bound, not a limit


class TrustError(ValueError):
    """The trust record cannot be read as a JSON object, or cannot be written."""


@attrs.frozen(kw_only=True)
class Widening:
    """One key of an untrusted folder's settings file that was left out (or, ``taken``, set narrower)."""

    key: str  # its JSON path, ``permissions.allow``
    value: Any  # what the file said
    taken: Any = None  # set: the value used instead

    def text(self, label: str) -> str:
        if self.taken is not None:
            said = f"{self.key} is taken as {json.dumps(self.taken)} for {label}"
            return f"{said}: this folder is not trusted, and what runs in a sandbox it turns on still asks"
        if isinstance(self.value, list | dict):
            noun = "entry" if len(self.value) == 1 else "entries"
            said = f"{len(self.value)} {self.key} {noun}"
        else:
            said = f"{self.key} {json.dumps(self.value)}"
        return f"ignoring {said} from {label}: this folder is not trusted"


def trust_record(home: Path | None = None) -> Path:
    """The trust record: ``$CLAUDE_CONFIG_DIR/.claude.json`` (unless ``home`` is given), else ``~/.claude.json``."""
    if home is None and (configured := os.environ.get("CLAUDE_CONFIG_DIR")):
        return Path(configured).expanduser() / ".claude.json"
    return (home if home is not None else Path.home()) / ".claude.json"


def trust_folders(cwd: Path) -> tuple[Path, ...]:
    """The folders whose entry trusts ``cwd``: itself, then the git work tree it is in (Claude Code 2.1.235)."""
    folder = Path(os.path.abspath(cwd))
    found = [folder]
    for parent in (folder, *folder.parents):
        if (parent / ".git").exists():
            found.append(parent)
            break
    resolved = [f.resolve() for f in found]
    return tuple(dict.fromkeys((*found, *resolved)))


def _read(record: Path) -> dict[str, object]:
    """The record as a JSON object; an absent one is empty. Raises :class:`TrustError` for anything else."""
    try:
        with record.open("rb") as file:
            data = file.read(_MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise TrustError(f"{record}: cannot read the trust record: {exc.strerror or exc}") from None
    if len(data) > _MAX_RECORD_BYTES:
        raise TrustError(f"{record}: larger than {_MAX_RECORD_BYTES // 2**20} MiB; not read as the trust record")
    try:
        document = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrustError(f"{record}: not a JSON object ({exc}); fix or remove it") from None
    if not isinstance(document, dict):
        raise TrustError(f"{record}: not a JSON object; fix or remove it")
    return document


def is_trusted(cwd: Path, *, home: Path | None = None) -> bool:
    """Does the trust record say ``cwd`` (or its git work tree) is trusted? An unreadable record trusts nothing."""
    try:
        projects = _read(trust_record(home)).get("projects")
    except TrustError:
        return False
    if not isinstance(projects, dict):
        return False
    for folder in trust_folders(cwd):
        entry = projects.get(str(folder))
        if isinstance(entry, dict) and entry.get("hasTrustDialogAccepted") is True:
            return True
    return False


def set_trust(folder: Path, *, trusted: bool = True, home: Path | None = None) -> Path:
    """Record ``folder`` as trusted (or not) and return the record's path; every other key is kept as it was.

    The record is replaced whole (a temporary file renamed over it), so a reader never sees
    half of it; one that is not a JSON object is left alone (:class:`TrustError`).
    """
    record = trust_record(home)
    document = _read(record)
    projects = document.get("projects")
    if not isinstance(projects, dict):
        projects = document["projects"] = {}
    entry = projects.get(str(folder))
    if not isinstance(entry, dict):
        entry = projects[str(folder)] = {}
    entry["hasTrustDialogAccepted"] = trusted
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".claude.json.", dir=record.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=2)
        if record.exists():
            os.chmod(temporary, record.stat().st_mode & 0o777)
        os.replace(temporary, record)
    except OSError as exc:
        raise TrustError(f"{record}: cannot write the trust record: {exc.strerror or exc}") from None
    return record


# ------------------------------------------------------------- what an untrusted folder keeps


_NARROWING_SANDBOX: Final = {
    "enabled": True,
    "failIfUnavailable": True,
    "allowUnsandboxedCommands": False,
    "autoAllowBashIfSandboxed": False,
}
"""The ``sandbox`` values that only narrow: on, required, no leaving it, no running without asking in it."""


#: The top-level keys an untrusted folder's settings may not set at all: each makes a program run (a
#: hook, an MCP server), changes what every command runs with (``env``: ``PATH``, ``LD_PRELOAD``…) or
#: switches off the user's own hooks, which may guard what runs (``disableAllHooks``).
_DROPPED: Final = (
    "hooks",
    "env",
    "mcpServers",
    "enableAllProjectMcpServers",
    "enabledMcpjsonServers",
    "disableAllHooks",
)

#: Under ``permissions``: the keys that only widen; ``deny`` and ``ask`` always stay.
_DROPPED_PERMISSIONS: Final = ("allow", "additionalDirectories")


def _restrict_permissions(permissions: dict[str, Any], ignored: list[Widening]) -> None:
    for key in _DROPPED_PERMISSIONS:
        if key in permissions:
            ignored.append(Widening(key=f"permissions.{key}", value=permissions.pop(key)))
    mode = permissions.get("defaultMode")
    if mode is not None and mode not in NARROWING_MODES:
        ignored.append(Widening(key="permissions.defaultMode", value=permissions.pop("defaultMode")))


#: Under ``sandbox.filesystem``: the keys that only narrow (more hidden, fewer writable places).
_NARROWING_FILESYSTEM: Final = ("denyRead", "denyWrite")


def _restrict_filesystem(filesystem: dict[str, Any], ignored: list[Widening]) -> None:
    for name in list(filesystem):
        if name not in _NARROWING_FILESYSTEM:
            ignored.append(Widening(key=f"sandbox.filesystem.{name}", value=filesystem.pop(name)))


def _restrict_sandbox(sandbox: dict[str, Any], ignored: list[Widening], *, trusted: Mapping[str, Any]) -> None:
    if isinstance(sandbox.get("filesystem"), dict):
        _restrict_filesystem(sandbox["filesystem"], ignored)
    for name in list(sandbox):
        value = sandbox[name]
        if name == "filesystem" and isinstance(value, dict):
            continue
        if not (isinstance(value, bool) and _NARROWING_SANDBOX.get(name) is value):
            ignored.append(Widening(key=f"sandbox.{name}", value=sandbox.pop(name)))
    trusted_sandbox = trusted.get("sandbox") or {}
    if sandbox.get("enabled") is True and "autoAllowBashIfSandboxed" not in trusted_sandbox:
        # turned on here, not by the user: what runs in it still asks (auto-allow would let more run)
        if "autoAllowBashIfSandboxed" not in sandbox:
            sandbox["autoAllowBashIfSandboxed"] = False
            ignored.append(Widening(key="sandbox.autoAllowBashIfSandboxed", value=None, taken=False))


def restrict(
    document: Mapping[str, object], *, trusted: Mapping[str, object]
) -> tuple[dict[str, object], list[Widening]]:
    """An untrusted folder's settings ``document`` without what would widen what runs, and what was left out.

    ``trusted``: the user's own settings merged (the user files and ``--settings``), which
    say whether the sandbox's auto-allow was the user's choice.
    """
    kept = copy.deepcopy(dict(document))
    ignored: list[Widening] = []
    for key in _DROPPED:
        if key in kept:
            ignored.append(Widening(key=key, value=kept.pop(key)))
    steps: tuple[tuple[str, Callable[[dict[str, object]], None]], ...] = (
        ("permissions", lambda block: _restrict_permissions(block, ignored)),
        ("sandbox", lambda block: _restrict_sandbox(block, ignored, trusted=trusted)),
    )
    for key, step in steps:
        block = kept.get(key)
        if isinstance(block, dict):
            step(block)
    return kept, ignored


# ------------------------------------------------------------------------------ the command


def add_trust_command(sub: Any) -> None:
    """``trust`` on the commands' parser."""
    parser = sub.add_parser(
        "trust",
        help="trust a folder: its own settings may then allow tools, choose a mode, run hooks and MCP servers",
        description=(
            "Record FOLDER as trusted in the trust record Claude Code keeps ($CLAUDE_CONFIG_DIR/.claude.json, "
            "else ~/.claude.json), so its .claude/ and .queryloop/ settings apply in full, in queryloop and in "
            "Claude Code. Until then, nothing in them may widen what runs."
        ),
    )
    parser.add_argument("folder", metavar="FOLDER", nargs="?", type=Path, help="the folder (default: current)")
    parser.add_argument("--revoke", action="store_true", help="record it as not trusted")
    parser.set_defaults(func=cmd_trust)


def cmd_trust(args: Any) -> int:
    folder = (args.folder if args.folder is not None else Path.cwd()).expanduser()
    if not folder.is_dir():
        print(f"queryloop trust: {folder}: no such folder", file=sys.stderr)
        return 1
    folder = folder.resolve()
    try:
        record = set_trust(folder, trusted=not args.revoke)
    except TrustError as exc:
        print(f"queryloop trust: {exc}", file=sys.stderr)
        return 1
    state = "not trusted" if args.revoke else "trusted"
    print(f"{folder}: {state} (recorded in {record})")
    return 0
