"""Stored sessions from the command line: which one a run continues, ``queryloop sessions``, ``queryloop rewind``.

Claude Code 2.1.235's rules for ``--resume`` and its kin. ``rewind`` writes only inside the working directory;
session ids are UUIDs, never paths.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import attrs

from queryloop.fsm import inert
from queryloop.handlers.session import (
    MAX_CHECKPOINTS,
    CheckpointEntry,
    CheckpointStore,
    SessionPaths,
    encode_cwd,
    is_blob_digest,
    is_session_id,
    load_ledger,
    queryloop_home,
    read_jsonl,
)

__all__ = [
    "PROMPT_REASONS",
    "SessionChoice",
    "SessionChoiceError",
    "add_session_commands",
    "choose_session",
    "list_project_sessions",
    "list_sessions",
    "plan_rewind",
    "print_rewind",
    "rewind_diff",
    "summarize",
]


class SessionChoiceError(Exception):
    """The session flags name no session to continue, or contradict each other: the message, exit 1."""


@attrs.frozen(kw_only=True)
class SessionChoice:
    """The run's session: its id, where it is kept, the history it continues, what SessionStart hooks are told."""

    session_id: str
    stored_as: SessionPaths
    resume_from: SessionPaths | None = None
    start_source: str = "startup"


def _canonical_hint(text: str) -> str:
    """For a UUID written another way (upper case, braces, no hyphens): the one spelling a session id has."""
    try:
        canonical = str(uuid.UUID(text))
    except ValueError:
        return ""  # not a UUID at all: Claude Code's message says it all
    return f" Session IDs are written in lowercase 8-4-4-4-12 form: {canonical}"


def _find(home: Path, cwd: Path, session_id: str) -> SessionPaths | None:
    """The stored session ``session_id``: in this directory's folder first, else in any project's."""
    here = SessionPaths(home=home, cwd=cwd, session_id=session_id)
    if here.exists():
        return here
    projects = home / "projects"
    for folder in sorted(projects.iterdir()) if projects.is_dir() else ():
        if (folder / f"{session_id}.jsonl").is_file():
            return SessionPaths(home=home, cwd=cwd, session_id=session_id, project_name=folder.name)
    return None


def _newest(home: Path, cwd: Path) -> SessionPaths | None:
    stored = sorted(_transcripts(home / "projects" / encode_cwd(cwd)), key=lambda p: p.stat().st_mtime)
    return SessionPaths(home=home, cwd=cwd, session_id=stored[-1].stem) if stored else None


def _transcripts(folder: Path) -> list[Path]:
    """The session transcripts in a project folder: ``<id>.jsonl`` files whose name is a session id (others ignored)."""
    return [p for p in folder.glob("*.jsonl") if is_session_id(p.stem)] if folder.is_dir() else []


def choose_session(
    *,
    cwd: Path,
    resume: str | None = None,
    continue_: bool = False,
    fork: bool = False,
    session_id: str | None = None,
    home: Path | None = None,
    printing: bool = True,
) -> SessionChoice:
    """The run's session from the flags, as Claude Code 2.1.235 decides it; SessionChoiceError with its message.

    ``printing``: the run was started with ``-p``/``--print``. Claude Code names ``--print``
    in its message for a malformed ``--resume`` id whether it was given or not; ours names
    it only when it was, so the message never points at a flag the user did not type.
    """
    home = home if home is not None else queryloop_home()
    cwd = cwd.resolve()
    if session_id is not None and not is_session_id(session_id):
        raise SessionChoiceError("Error: Invalid session ID. Must be a valid UUID." + _canonical_hint(session_id))
    continuing = resume is not None or continue_
    if continuing and session_id is not None and not fork:
        raise SessionChoiceError(
            "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified."
        )
    source: SessionPaths | None = None
    if resume is not None:
        if not is_session_id(resume):
            raise SessionChoiceError(
                "Error: --resume requires a valid session ID"
                + (" when used with --print. " if printing else ". ")
                + f'Provided value "{resume}" is not a UUID.'
                + _canonical_hint(resume)
            )
        source = _find(home, cwd, resume)
        if source is None:
            raise SessionChoiceError(f"No conversation found with session ID: {resume}")
    elif continue_:
        source = _newest(home, cwd)  # none yet: a new session, as Claude Code starts one
    if source is not None and not fork:
        return SessionChoice(session_id=source.session_id, stored_as=source, resume_from=source, start_source="resume")
    new_id = session_id or str(uuid.uuid4())
    stored_as = SessionPaths(home=home, cwd=cwd, session_id=new_id)
    if source is None and stored_as.exists():
        raise SessionChoiceError(f"Error: Session ID {new_id} is already in use.")
    if source is not None:
        return SessionChoice(session_id=new_id, stored_as=stored_as, resume_from=source, start_source="fork")
    return SessionChoice(session_id=new_id, stored_as=stored_as)


# ---- queryloop sessions -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SessionSummary:
    """One line of ``queryloop sessions``."""

    session_id: str
    started: str
    prompts: int  # runs (user prompts) in the session
    turns: int  # num_turns summed over its runs
    terminal_reason: str  # how its last run ended ("—" when it never wrote its end: killed)
    cost_usd: float | None
    modified: float
    agents: int = 0  # sub-agents its runs started (their sidechain transcripts in the session's folder)


def _summary(path: Path) -> SessionSummary:
    entries, _ = read_jsonl(path)
    agents = sum(1 for _ in (path.parent / path.stem / "subagents").glob("agent-*.jsonl"))
    return summarize(path.stem, entries, modified=path.stat().st_mtime, agents=agents)


def summarize(session_id: str, entries: list[dict[str, Any]], *, modified: float, agents: int = 0) -> SessionSummary:
    """A session's line from its transcript's entries (a file's, or the fleet database's)."""
    ends = [e for e in entries if e.get("type") == "system" and e.get("subtype") == "result"]
    costs = [e.get("total_cost_usd") for e in ends]
    known = [float(c) for c in costs if isinstance(c, (int, float))]
    prompts = sum(1 for e in entries if e.get("type") == "user" and e.get("reason") in PROMPT_REASONS)
    return SessionSummary(
        session_id=session_id,
        started=str(entries[0].get("timestamp", "")) if entries else "",
        prompts=prompts,
        turns=sum(int(e.get("num_turns") or 0) for e in ends),
        terminal_reason=str(ends[-1].get("terminal_reason")) if ends else "— (no end recorded: killed?)",
        cost_usd=sum(known) if known else None,
        modified=modified,
        agents=agents,
    )


PROMPT_REASONS = ("session_started", "session_resumed", "dangling_calls_answered")


def list_sessions(cwd: Path, home: Path | None = None) -> list[SessionSummary]:
    """This directory's sessions, newest first."""
    return list_project_sessions(
        (home if home is not None else queryloop_home()) / "projects" / encode_cwd(cwd.resolve())
    )


def list_project_sessions(folder: Path) -> list[SessionSummary]:
    """The sessions of one project folder under ``$QUERYLOOP_HOME/projects``, newest first."""
    found = [_summary(p) for p in _transcripts(folder)]
    return sorted(found, key=lambda s: s.modified, reverse=True)


def cmd_sessions(args: argparse.Namespace) -> int:
    cwd = Path(args.cwd or ".").resolve()
    rows = list_sessions(cwd)
    if not rows:
        print(f"queryloop: no sessions for {cwd} under {queryloop_home() / 'projects'}", file=sys.stderr)
        return 0
    print(f"{'SESSION':36}  {'STARTED':24}  {'RUNS':>4}  {'TURNS':>5}  {'COST':>9}  {'AGENTS':>6}  ENDED")
    for row in rows:
        cost = "—" if row.cost_usd is None else f"${row.cost_usd:.4f}"
        counts = f"{row.prompts:>4}  {row.turns:>5}  {cost:>9}  {row.agents:>6}"
        print(inert(f"{row.session_id:36}  {row.started:24}  {counts}  {row.terminal_reason}"))  # from the transcript
    return 0


# ---- queryloop rewind ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class FileRestore:
    """One file put back: its path, the bytes it gets (None: it is removed) and the bytes it has now."""

    path: Path
    before: bytes | None
    now: bytes | None
    missing_blob: bool = False  # the checkpoint's bytes are gone (the blob was removed by hand)


@attrs.frozen(kw_only=True)
class RewindPlan:
    """What a rewind does: the files it restores, the side effects it cannot undo, what it no longer has."""

    target: str  # the user message the files go back to before ("" = the session's first change)
    files: tuple[FileRestore, ...]
    irreversible: tuple[dict[str, Any], ...]  # ledger entries of calls no checkpoint covers (Bash, MCP…)
    dropped: int  # checkpoints the session no longer keeps (over the limit)
    incomplete: bool  # the rewind reaches past checkpoints that were dropped
    warnings: tuple[str, ...] = ()


def _prompt_order(paths: SessionPaths) -> list[str]:
    """The session's user prompts (their uuids), in the order they were written."""
    entries, _ = read_jsonl(paths.transcript)
    return [str(e["uuid"]) for e in entries if e.get("type") == "user" and e.get("reason") in PROMPT_REASONS]


def plan_rewind(paths: SessionPaths, to: str | None = None) -> RewindPlan:
    """Which files go back to which bytes to undo every change made from user message ``to`` on."""
    store = CheckpointStore(paths)
    entries, dropped, warnings = store.entries()
    prompts = _prompt_order(paths)
    if to is not None and to not in prompts:
        raise SessionChoiceError(
            f"no user message {to} in session {paths.session_id}; its user messages: {', '.join(prompts) or 'none'}"
        )
    start = prompts.index(to) if to is not None else 0
    later = set(prompts[start:]) if prompts else {e.prompt_id for e in entries}
    chosen: dict[str, CheckpointEntry] = {}
    for entry in entries:  # the earliest checkpoint of each file from that message on: its bytes before
        if entry.prompt_id in later or not prompts:
            chosen.setdefault(entry.path, entry)
    root = paths.cwd.resolve()
    files = []
    for entry in chosen.values():
        path = _restorable(entry, root, paths)
        before = None if entry.blob is None else store.blob(entry.blob)
        try:
            now: bytes | None = path.read_bytes()
        except FileNotFoundError:
            now = None
        files.append(
            FileRestore(path=path, before=before, now=now, missing_blob=entry.blob is not None and before is None)
        )
    from queryloop.handlers.tools import default_tools  # here: only a rewind loads the tools

    ledger, ledger_warnings = load_ledger(paths.ledger)
    covered = {e.tool_use_id for e in entries if not e.partial}  # a partial capture leaves the call listed
    checkpointed = {tool.name for tool in default_tools() if tool.changes_file}  # Write, Edit: their files go back
    irreversible = tuple(
        e.to_json()
        for e in ledger
        if e.prompt_id in later and e.tool_use_id not in covered and e.name not in checkpointed
    )
    # dropped checkpoints are older than every kept one: they matter when the oldest kept one is in range
    incomplete = dropped > 0 and (not entries or entries[0].prompt_id in later)
    return RewindPlan(
        target=to or "",
        files=tuple(files),
        irreversible=irreversible,
        dropped=dropped,
        incomplete=incomplete,
        warnings=(*warnings, *ledger_warnings),
    )


def _restorable(entry: CheckpointEntry, root: Path, paths: SessionPaths) -> Path:
    """The file ``entry`` restores, resolved; SessionChoiceError when it is not one a rewind from ``root`` may write.

    The checkpoint index is a file on disk: anything may have written it. Its paths are
    absolute and inside the working directory when queryloop writes them, so a path
    outside it (after ``..`` and symlinks, including ones made since), or a blob that is
    no sha256 (it would be read as a path), refuses the whole rewind before any file changes.
    """
    problem = None
    if entry.blob is not None and not is_blob_digest(entry.blob):
        problem = f"names the blob {entry.blob!r}, which is not a sha256 digest"
    elif "\x00" in entry.path or not Path(entry.path).is_absolute():
        problem = f"names {entry.path!r}, which is not an absolute path"
    else:
        try:
            resolved = Path(entry.path).resolve()
        except (OSError, RuntimeError):  # a symlink loop (3.11: RuntimeError)
            resolved = None
        if resolved is None:
            problem = f"names {entry.path!r}, which cannot be resolved (a symlink loop)"
        elif not resolved.is_relative_to(root):
            shown = entry.path if str(resolved) == entry.path else f"{entry.path} (resolving to {resolved})"
            problem = f"names {shown}, outside the working directory {root}"
        else:
            return resolved
    raise SessionChoiceError(
        inert(f"rewind refused: checkpoint {entry.seq} in {paths.checkpoints} {problem}; no file was changed")
    )


def rewind_diff(item: FileRestore) -> str:
    """The unified diff a rewind makes to one file: its bytes now, then the bytes it gets back."""

    def lines(data: bytes | None) -> list[str]:
        return [] if data is None else data.decode("utf-8", errors="replace").splitlines(keepends=True)

    shown = str(item.path)
    old = f"{shown} (now)" if item.now is not None else "/dev/null"
    new = f"{shown} (restored)" if item.before is not None else "/dev/null"
    return "".join(difflib.unified_diff(lines(item.now), lines(item.before), old, new))


def apply_rewind(plan: RewindPlan) -> list[str]:
    """Put every file back exactly (atomically), remove the ones the session created; what was done, per file."""
    done = []
    for item in plan.files:
        if item.missing_blob:
            done.append(f"not restored: {item.path} (its checkpoint's bytes are missing)")
            continue
        if item.before == item.now:
            continue
        if item.before is None:
            item.path.unlink(missing_ok=True)
            done.append(f"removed {item.path}")
            continue
        item.path.parent.mkdir(parents=True, exist_ok=True)
        temp = item.path.with_name(f".{item.path.name}.queryloop-rewind-{uuid.uuid4().hex}")
        temp.write_bytes(item.before)
        os.replace(temp, item.path)
        done.append(f"restored {item.path}")
    return done


def cmd_rewind(args: argparse.Namespace) -> int:
    cwd = Path(args.cwd or ".").resolve()
    home = queryloop_home()
    paths = _find(home, cwd, args.session)
    if paths is None:
        print(f"No conversation found with session ID: {args.session}", file=sys.stderr)
        return 1
    try:
        plan = plan_rewind(paths, args.to)
    except SessionChoiceError as exc:
        print(f"queryloop: {exc}", file=sys.stderr)
        return 1
    for warning in plan.warnings:
        print(f"queryloop: warning: {warning}", file=sys.stderr)
    print_rewind(plan, dry_run=args.dry_run)
    if args.dry_run:
        print("dry run: nothing was changed")
        return 0
    for line in apply_rewind(plan):
        print(line)
    return 0


def print_rewind(plan: RewindPlan, *, dry_run: bool) -> None:
    where = f"before user message {plan.target}" if plan.target else "before the session's first change"
    changed = [f for f in plan.files if f.before != f.now]
    print(f"rewind {where}: {len(changed)} file(s) to restore" + (" (dry run)" if dry_run else ""))
    for item in changed:  # the files' bytes: anything may be in them
        sys.stdout.write(inert(rewind_diff(item) or f"{item.path}: binary or empty change\n"))
    if plan.incomplete:
        print(
            f"note: {plan.dropped} older checkpoint(s) were dropped (at most {MAX_CHECKPOINTS} are kept); "
            "files are restored to the oldest state still kept"
        )
    if plan.irreversible:
        print("cannot undo (side effects outside the checkpointed files):")
        for entry in plan.irreversible:
            print(inert(f"  - {entry['name']} {_short(entry['input'])} ({entry['tool_use_id']})"))


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:120] + " …"


def _session_id(text: str) -> str:
    """``rewind``'s SESSION: a canonical session id, else a usage error (exit 2) before any file is read."""
    if not is_session_id(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a session ID: give a UUID in lowercase 8-4-4-4-12 form, as `queryloop sessions` lists it"
        )
    return text


def add_session_commands(sub: Any) -> None:
    """``sessions`` and ``rewind`` on the commands' parser."""
    sessions = sub.add_parser("sessions", help="list this directory's stored sessions, newest first")
    sessions.add_argument("--cwd", type=Path, help="the directory whose sessions to list (default: current)")
    sessions.set_defaults(func=cmd_sessions)
    rewind = sub.add_parser(
        "rewind", help="put the files a session changed back as they were (no model request); show the diff"
    )
    rewind.add_argument("session", metavar="SESSION", type=_session_id, help="the session id")
    rewind.add_argument(
        "--to", metavar="USER_MESSAGE", help="the user message (uuid) to go back before (default: the first change)"
    )
    rewind.add_argument("--dry-run", action="store_true", help="show what would change; change nothing")
    rewind.add_argument("--cwd", type=Path, help="the directory the session ran in (default: current)")
    rewind.set_defaults(func=cmd_rewind)
