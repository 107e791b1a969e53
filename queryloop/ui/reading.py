"""What ``queryloop ui`` shows, read from the files the CLI writes: sessions, transcripts, ledgers, checkpoints, paths.

Returns JSON-ready values. Every string is data anyone may have written: the page shows it as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from queryloop.fsm import MachineSpec, Trace, TraceError, TraceStep, check_trace, read_trace
from queryloop.handlers.session import CheckpointStore, SessionPaths, is_session_id, load_ledger, read_jsonl
from queryloop.run.sessions import (
    PROMPT_REASONS,
    SessionChoiceError,
    SessionSummary,
    list_project_sessions,
    plan_rewind,
    rewind_diff,
)
from queryloop.run.tracing import SESSION_STEPS

__all__ = [
    "SessionFiles",
    "SessionPath",
    "UnknownSession",
    "find_session",
    "ledger_row",
    "list_all_sessions",
    "prompt_rows",
    "read_path",
    "session_row",
    "transcript_rows",
]

_TEXT_LIMIT = 20_000  # characters of one block shown; the rest is cut with a note (a file read is not a page)


class UnknownSession(LookupError):
    """No stored session has this id (or the id is not a session id at all)."""


def list_all_sessions(home: Path) -> list[dict[str, object]]:
    """Every project's sessions under ``home``, newest first, as the rows of the list page."""
    projects = home / "projects"
    rows: list[tuple[float, dict[str, object]]] = []
    for folder in sorted(projects.iterdir()) if projects.is_dir() else ():
        for s in list_project_sessions(folder) if folder.is_dir() else ():
            rows.append((s.modified, session_row(s, folder.name)))
    return [row for _, row in sorted(rows, key=lambda r: r[0], reverse=True)]


def session_row(s: SessionSummary, project: str) -> dict[str, object]:
    """One row of the list page."""
    return {
        "session_id": s.session_id,
        "project": project,
        "started": s.started,
        "runs": s.prompts,
        "turns": s.turns,
        "ended": s.terminal_reason,
        "cost_usd": s.cost_usd,
    }


def find_session(home: Path, session_id: str) -> SessionFiles:
    """The stored session ``session_id`` in any project folder; UnknownSession when there is none."""
    if not is_session_id(session_id):
        raise UnknownSession(session_id)
    projects = home / "projects"
    for folder in sorted(projects.iterdir()) if projects.is_dir() else ():
        transcript = folder / f"{session_id}.jsonl"
        if transcript.is_file():
            entries, warnings = read_jsonl(transcript)
            cwd = next((e["cwd"] for e in entries if isinstance(e.get("cwd"), str)), str(folder))
            paths = SessionPaths(home=home, cwd=Path(cwd), session_id=session_id, project_name=folder.name)
            return SessionFiles(paths=paths, entries=tuple(entries), warnings=tuple(warnings))
    raise UnknownSession(session_id)


def transcript_rows(entries: Iterable[Mapping[str, object]]) -> list[dict[str, object]]:
    """Every entry in order, as the page shows it: user and assistant messages, boundaries, tombstones, each
    run's end."""
    out = []
    for e in entries:
        raw = e.get("message")
        message: dict[str, object] = raw if isinstance(raw, dict) else {}
        kind = str(e.get("type", "?"))
        if kind == "system" and e.get("subtype") == "result":
            text = f"run ended: {e.get('terminal_reason')} after {e.get('num_turns')} turn(s)"
            blocks = [{"kind": "result", "text": text}]
        elif kind == "system":
            blocks = [{"kind": str(e.get("subtype", "system")), "text": str(e.get("content", ""))}]
        else:
            blocks = _blocks(message.get("content") if message else None)
        out.append(
            {
                "uuid": str(e.get("uuid", "")),
                "type": kind,
                "role": str(message.get("role", kind)) if message else kind,
                "reason": str(e.get("reason", "")),
                "timestamp": str(e.get("timestamp", "")),
                "meta": bool(e.get("isMeta")),
                "prompt": kind == "user" and e.get("reason") in PROMPT_REASONS,
                "blocks": blocks,
            }
        )
    return out


def prompt_rows(entries: Iterable[Mapping[str, object]]) -> list[dict[str, str]]:
    """The user prompts a rewind can go back before: uuid and the prompt's first words."""
    out = []
    for e in entries:
        if e.get("type") == "user" and e.get("reason") in PROMPT_REASONS:
            message = e.get("message")
            text = " ".join(b["text"] for b in _blocks(message.get("content") if isinstance(message, dict) else None))
            out.append({"uuid": str(e.get("uuid")), "text": text[:120]})
    return out


def ledger_row(entry: Mapping[str, object]) -> dict[str, object]:
    """One completed side effect as the page shows it."""
    return {
        "tool_use_id": str(entry.get("tool_use_id", "")),
        "name": str(entry.get("name", "")),
        "input": _cut(json.dumps(entry.get("input"), ensure_ascii=False)),
        "result": " ".join(b["text"] for b in _blocks([entry.get("result")])),
        "prompt_id": str(entry.get("prompt_id", "")),
    }


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT_LIMIT else text[:_TEXT_LIMIT] + f" … ({len(text) - _TEXT_LIMIT} more characters)"


def _blocks(content: object) -> list[dict[str, str]]:
    """A message's content as (kind, text) blocks: text, thinking, a tool call, a tool result."""
    if isinstance(content, str):
        return [{"kind": "text", "text": _cut(content)}]
    out: list[dict[str, str]] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = str(block.get("type", "?"))
        if kind == "text":
            text = str(block.get("text", ""))
        elif kind == "thinking":
            text = str(block.get("thinking", ""))
        elif kind == "tool_use":
            text = f"{block.get('name')} {json.dumps(block.get('input'), ensure_ascii=False)}"
        elif kind == "tool_result":
            inner = block.get("content")
            text = inner if isinstance(inner, str) else " ".join(b["text"] for b in _blocks(inner))
            kind = "tool_result (error)" if block.get("is_error") else kind
        else:
            text = json.dumps(block, ensure_ascii=False)
        out.append({"kind": kind, "text": _cut(text)})
    return out


@attrs.frozen(kw_only=True)
class SessionFiles:
    """One stored session: where its files are and its transcript's entries, read once."""

    paths: SessionPaths
    entries: tuple[dict[str, Any], ...]
    warnings: tuple[str, ...] = ()

    @property
    def steps_folder(self) -> Path | None:
        """Where its runs record their paths when ``QUERYLOOP_TRACE_DIR`` is unset (``steps/`` under it)."""
        return self.paths.folder

    def transcript(self) -> list[dict[str, Any]]:
        return transcript_rows(self.entries)

    def ledger(self) -> tuple[list[dict[str, object]], list[str]]:
        entries, warnings = load_ledger(self.paths.ledger)
        return [ledger_row(e.to_json()) for e in entries], warnings

    def checkpoints(self) -> tuple[list[dict[str, Any]], int, list[str]]:
        entries, dropped, warnings = CheckpointStore(self.paths).entries()
        rows = [
            {"seq": e.seq, "prompt_id": e.prompt_id, "path": e.path, "created": e.blob is None, "tool": e.tool_use_id}
            for e in entries
        ]
        return rows, dropped, warnings

    def agents(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The session's sub-agents (their ``.meta.json`` beside each sidechain transcript), in id order: type,
        task, the call that started it, how its run ended (as its sidechain says) and its last answer."""
        folder = self.paths.folder / "subagents"
        rows: list[dict[str, object]] = []
        warnings: list[str] = []
        for meta_path in sorted(folder.glob("agent-*.meta.json")) if folder.is_dir() else ():
            agent_id = meta_path.name.removeprefix("agent-").removesuffix(".meta.json")
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                warnings.append(f"{meta_path}: cannot be read ({exc})")
                continue
            meta = meta if isinstance(meta, dict) else {}
            entries, unread = read_jsonl(meta_path.with_name(f"agent-{agent_id}.jsonl"))
            warnings.extend(unread)
            ends = [e for e in entries if e.get("type") == "system" and e.get("subtype") == "result"]
            answers = [
                " ".join(b["text"] for b in _blocks(e["message"].get("content")) if b["kind"] == "text")
                for e in entries
                if e.get("type") == "assistant" and isinstance(e.get("message"), dict)
            ]
            rows.append(
                {
                    "agent_id": agent_id,
                    "type": str(meta.get("agentType", "?")),
                    "description": str(meta.get("description", "")),
                    "tool_use_id": str(meta.get("toolUseId", "")),
                    "background": bool(meta.get("background", False)),
                    "ended": str(ends[-1].get("terminal_reason")) if ends else "— (no end recorded)",
                    "turns": sum(int(e.get("num_turns") or 0) for e in ends),
                    "answer": _cut(next((a for a in reversed(answers) if a), "")),
                }
            )
        return rows, warnings

    def to_json(self) -> dict[str, Any]:
        ledger, ledger_warnings = self.ledger()
        checkpoints, dropped, checkpoint_warnings = self.checkpoints()
        agents, agent_warnings = self.agents()
        return {
            "session_id": self.paths.session_id,
            "source": "files",
            "project": self.paths.project.name,
            "cwd": str(self.paths.cwd),
            "transcript": self.transcript(),
            "ledger": ledger,
            "checkpoints": checkpoints,
            "dropped_checkpoints": dropped,
            "prompts": prompt_rows(self.entries),
            "agents": agents,
            "warnings": [*self.warnings, *ledger_warnings, *checkpoint_warnings, *agent_warnings],
        }

    def rewind_dry_run(self, to: str | None) -> dict[str, object]:
        """What ``queryloop rewind --dry-run`` says: each file's diff, the side effects no rewind undoes."""
        try:
            plan = plan_rewind(self.paths, to or None)
        except SessionChoiceError as exc:
            return {"error": str(exc)}
        changed = [f for f in plan.files if f.before != f.now]
        return {
            "target": plan.target,
            "files": [
                {"path": str(f.path), "diff": rewind_diff(f) or "binary or empty change", "missing": f.missing_blob}
                for f in changed
            ],
            "irreversible": [
                {"name": str(e["name"]), "input": _cut(json.dumps(e["input"], ensure_ascii=False))}
                for e in plan.irreversible
            ],
            "incomplete": plan.incomplete,
            "dropped": plan.dropped,
            "warnings": list(plan.warnings),
        }


def _run_files(traces: Path | None, session_id: str, folder: Path | None = None) -> list[Path]:
    """The session's trace files, one per run, oldest first: in ``traces`` (``QUERYLOOP_TRACE_DIR``) and in
    the session's own folder (``folder``/steps, where a run records its path when the variable is unset)."""
    found: dict[str, Path] = {}
    for where in (traces, folder / SESSION_STEPS if folder is not None else None):
        if where is not None and where.is_dir():
            found.update((p.name, p) for p in where.glob(f"{session_id}-*.jsonl") if p.is_file())
    return sorted(found.values(), key=lambda p: (p.stat().st_mtime, p.name))


@attrs.frozen(kw_only=True)
class SessionPath:
    """A session's path: a trace of every step for the diagrams (None: none recorded), and the page's JSON."""

    trace: Trace | None
    running: bool
    json: dict[str, Any]


def read_path(spec: MachineSpec, traces: Path | None, session_id: str, folder: Path | None = None) -> SessionPath:
    """The path the session's runs took on ``spec``: its steps, counters after each, and where it is now.

    Runs are joined in the order their files were last written; a session is ``running``
    while its newest run's last step did not reach a terminal state (a killed run looks
    the same: the trace has no end).
    """
    steps: list[TraceStep] = []
    problems: list[str] = []
    for path in _run_files(traces, session_id, folder):
        try:
            run = read_trace(path)
            check_trace(spec, run)
        except TraceError as exc:
            problems.append(str(exc))
            continue
        steps += [attrs.evolve(s, number=len(steps) + i + 1) for i, s in enumerate(run.steps)]
    last = steps[-1].dest if steps else None
    terminal = last is not None and last in spec.state_map and spec.state(last).terminal
    ended = spec.state(last) if terminal and last is not None else None
    trace = None
    if steps:
        trace = Trace(
            path=f"session {session_id}",
            machine=spec.name,
            steps=tuple(steps),
            terminal_reason=None if ended is None else str(ended.result.get("terminal_reason", ended.name)),
            is_error=None if ended is None else bool(ended.result.get("is_error")),
        )
    running = bool(steps) and not terminal
    return SessionPath(
        trace=trace,
        running=running,
        json={
            "traced": bool(steps),
            "steps": [
                {"n": s.number, "from": s.source, "event": s.event, "reason": s.reason, "to": s.dest} for s in steps
            ],
            "counters": [dict(s.counters) for s in steps],
            "current": last,
            "layer": spec.state(last).layer if last is not None and last in spec.state_map else None,
            "running": running,
            "problems": problems,
        },
    )
