"""Hooks beside Claude Code 2.1.235: a PreToolUse hook's permission answer, and what hooks tell the model.

Each probe runs in both programs with its hooks in ``--settings`` (no trust needed): real
hook commands printing a fixed answer. ``same``: queryloop observes what Claude Code does.
By design, with the reason: the reference's value is pinned too (docs/configuration.md,
"Hooks"; docs/differences.md). What is compared is read from the request after the tool
call: the tool_result's error flag, whether a marker or the hook's reason is in its text,
and the hook notes the model is told, each as (marker, what the hook said).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from . import reference
from .reference import Observed, Probe, observe

pytestmark = pytest.mark.slow  # two programs per probe

WRITE = (("Write", {"file_path": "w.txt", "content": "x"}),)
TOUCH = (("Bash", {"command": "touch made"}),)
READ = (("Read", {"file_path": "f.txt"}),)
F = {"f.txt": "hello\n"}
REASON = "a reason from the hook"


def _hooks(event: str, output: dict[str, Any] | str, *, code: int = 0, stderr: str = "") -> dict[str, Any]:
    """A settings block with one hook for ``event`` that prints ``output`` (and ``stderr``) and exits ``code``."""
    text = output if isinstance(output, str) else json.dumps(output)
    command = f"cat > /dev/null; printf %s {json.dumps(text)}"
    if stderr:
        command += f"; echo {json.dumps(stderr)} >&2"
    return {"hooks": {event: [{"hooks": [{"type": "command", "command": f"{command}; exit {code}"}]}]}}


def _pre(decision: str, reason: str | None = None) -> dict[str, Any]:
    specific = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    return {"hookSpecificOutput": specific | ({"permissionDecisionReason": reason} if reason else {})}


def _context(event: str, text: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def _probe(calls: tuple[tuple[str, dict[str, Any]], ...], settings: dict[str, Any], *args: str, **kw: Any) -> Probe:
    return Probe(calls=calls, args=(*args, "--settings", json.dumps(settings)), **kw)


@attrs.frozen(kw_only=True)
class Row(reference.Row):
    """A row of a hook probe; ``marker``: the text the tool_result must hold ("marked")."""

    marker: str = ""


def _tool_result(observed: Observed) -> dict[str, Any]:
    for message in reversed(observed.requests[-1].messages if observed.requests else ()):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return block
    return {}


def _text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, dict) and block.get("type") == "text":
        return str(block.get("text", ""))
    return ""


_NOTE = re.compile(r"^([A-Za-z]+(?::[\w.-]+)? hook) ")


def _notes(observed: Observed) -> tuple[tuple[tuple[str, str], ...], frozenset[str]]:
    """The hook notes the model is told in the last request, as (marker, what the hook said), and where."""
    notes: list[tuple[str, str]] = []
    where: set[str] = set()
    for message in observed.requests[-1].messages if observed.requests else ():
        content = message.get("content")
        for block in content if isinstance(content, list) else [content]:
            text = _text(block)
            wrapped = message.get("role") == "user" and text.startswith("<system-reminder>\n")
            if message.get("role") != "system" and not wrapped:
                continue
            inner = text.removeprefix("<system-reminder>\n").removesuffix("\n</system-reminder>")
            for part in inner.split("\n\n"):
                found = _NOTE.match(part)
                if found:
                    notes.append((found.group(1), part.rpartition(": ")[2].strip()))
                    where.add("a system message" if message.get("role") == "system" else "a system-reminder block")
    return tuple(notes), frozenset(where)


def _view(observed: Observed, row: Row) -> dict[str, object]:
    result = _tool_result(observed)
    content = str(result.get("content", ""))
    notes, where = _notes(observed)
    return {
        "denied": observed.denied,
        "made": observed.made,
        "is_error": bool(result.get("is_error")) if result else None,
        "marked": bool(row.marker) and row.marker in content,
        "notes": notes,
        "where": where,
        "in_result": any(said and said in content for _, said in notes),
    }


PERMISSION_ROWS: dict[str, Row] = {
    "allow: Write in default mode": Row(
        probe=_probe(WRITE, _hooks("PreToolUse", _pre("allow"))),
        queryloop={"denied": (), "made": frozenset({"project/w.txt"}), "is_error": False},
    ),
    "allow with a reason: Bash in default mode": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", _pre("allow", REASON))),
        queryloop={"denied": (), "made": frozenset({"project/made"}), "is_error": False},
    ),
    "allow: Bash in acceptEdits mode": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", _pre("allow")), "--permission-mode", "acceptEdits"),
        queryloop={"denied": (), "made": frozenset({"project/made"})},
    ),
    "allow: Bash in dontAsk mode": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", _pre("allow")), "--permission-mode", "dontAsk"),
        queryloop={"denied": (), "made": frozenset({"project/made"})},
    ),
    "allow against a deny rule": Row(
        probe=_probe(TOUCH, {**_hooks("PreToolUse", _pre("allow")), "permissions": {"deny": ["Bash(touch:*)"]}}),
        queryloop={"denied": ("Bash",), "made": frozenset(), "is_error": True},
    ),
    "allow against an ask rule": Row(
        probe=_probe(TOUCH, {**_hooks("PreToolUse", _pre("allow")), "permissions": {"ask": ["Bash(touch:*)"]}}),
        queryloop={"denied": ("Bash",), "made": frozenset(), "is_error": True},
    ),
    "allow: Write to a settings file that runs later": Row(
        probe=_probe(
            (("Write", {"file_path": ".claude/settings.json", "content": "{}"}),), _hooks("PreToolUse", _pre("allow"))
        ),
        queryloop={"denied": ("Write",), "made": frozenset()},
    ),
    "allow: Bash writing a shell start-up file": Row(
        probe=_probe((("Bash", {"command": "echo x > .bashrc"}),), _hooks("PreToolUse", _pre("allow"))),
        queryloop={"denied": ("Bash",), "made": frozenset()},
    ),
    "allow in plan mode": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", _pre("allow")), "--permission-mode", "plan"),
        queryloop={"denied": ("Bash",), "made": frozenset()},
        reference={"denied": (), "made": frozenset({"project/made"})},
        design="plan mode promises that nothing changes; a hook's allow does not break that promise "
        "([hooks](configuration.md#a-pretooluse-hooks-answer))",
    ),
    "allow: Write outside the working directory": Row(
        probe=_probe(
            (("Write", {"file_path": "../outside.txt", "content": "x"}),), _hooks("PreToolUse", _pre("allow"))
        ),
        queryloop={"denied": (), "made": frozenset(), "is_error": True},
        reference={"denied": (), "made": frozenset({"outside.txt"}), "is_error": False},
        design="the file tools write only inside the working directories, whoever allowed the call "
        "([hooks](configuration.md#a-pretooluse-hooks-answer))",
    ),
    "deny: Write, no reason": Row(
        probe=_probe(WRITE, _hooks("PreToolUse", _pre("deny"))),
        queryloop={"denied": ("Write",), "made": frozenset(), "is_error": True, "marked": True},
        marker="PreToolUse:Write",
    ),
    "deny with a reason: Bash": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", _pre("deny", REASON))),
        queryloop={"denied": ("Bash",), "made": frozenset(), "is_error": True, "marked": True},
        marker=REASON,
    ),
    "deny: Write in acceptEdits mode": Row(
        probe=_probe(WRITE, _hooks("PreToolUse", _pre("deny")), "--permission-mode", "acceptEdits"),
        queryloop={"denied": ("Write",), "made": frozenset(), "marked": True},
        marker="PreToolUse:Write",
    ),
    "ask: Bash, no reason": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", _pre("ask"))),
        queryloop={"denied": ("Bash",), "made": frozenset(), "is_error": True, "marked": True},
        marker="PreToolUse:Bash",
    ),
    "ask with a reason: Write": Row(
        probe=_probe(WRITE, _hooks("PreToolUse", _pre("ask", REASON))),
        queryloop={"denied": ("Write",), "made": frozenset(), "is_error": True, "marked": True},
        marker=REASON,
    ),
    "ask with a reason: Write in acceptEdits mode": Row(
        probe=_probe(WRITE, _hooks("PreToolUse", _pre("ask", REASON)), "--permission-mode", "acceptEdits"),
        queryloop={"denied": ("Write",), "made": frozenset(), "marked": True},
        marker=REASON,
    ),
    "ask against an allow rule": Row(
        probe=_probe(TOUCH, {**_hooks("PreToolUse", _pre("ask", REASON)), "permissions": {"allow": ["Bash(touch:*)"]}}),
        queryloop={"denied": ("Bash",), "made": frozenset(), "marked": True},
        marker=REASON,
    ),
    "exit code 2": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", "", code=2, stderr=REASON)),
        queryloop={"denied": ("Bash",), "made": frozenset(), "is_error": True, "marked": True},
        marker=REASON,
    ),
    "the older decision approve": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", {"decision": "approve"})),
        queryloop={"denied": (), "made": frozenset({"project/made"})},
    ),
    "the older decision block": Row(
        probe=_probe(TOUCH, _hooks("PreToolUse", {"decision": "block", "reason": REASON})),
        queryloop={"denied": ("Bash",), "made": frozenset(), "marked": True},
        marker=REASON,
    ),
}

WHERE = "a system message", "a system-reminder block"
WHY = "queryloop's transcript keeps to user and assistant turns (compaction, resume, caching rely on it)"


def _told(probe: Probe, notes: tuple[tuple[str, str], ...]) -> Row:
    """A row where both programs tell the model ``notes``, never inside a tool's output; only where differs."""
    seen = {"notes": notes, "in_result": False}
    return Row(
        probe=probe,
        queryloop={**seen, "where": frozenset({WHERE[1]})},
        reference={**seen, "where": frozenset({WHERE[0]})},
        design=f"the notes go in a <system-reminder> block of the user turn, not a system message: {WHY} "
        "([hooks](configuration.md#what-hooks-tell-the-model))",
    )


CONTEXT_ROWS: dict[str, Row] = {
    "UserPromptSubmit additionalContext": _told(
        _probe((), _hooks("UserPromptSubmit", _context("UserPromptSubmit", "ctx-1"))),
        (("UserPromptSubmit hook", "ctx-1"),),
    ),
    "UserPromptSubmit plain stdout": _told(
        _probe((), _hooks("UserPromptSubmit", "plain-1")), (("UserPromptSubmit hook", "plain-1"),)
    ),
    "SessionStart additionalContext": _told(
        _probe((), _hooks("SessionStart", _context("SessionStart", "ctx-2"))), (("SessionStart hook", "ctx-2"),)
    ),
    "SessionStart plain stdout": _told(
        _probe((), _hooks("SessionStart", "plain-2")), (("SessionStart:startup hook", "plain-2"),)
    ),
    "PreToolUse additionalContext": _told(
        _probe(READ, _hooks("PreToolUse", _context("PreToolUse", "ctx-3")), files=F),
        (("PreToolUse:Read hook", "ctx-3"),),
    ),
    "PostToolUse additionalContext": _told(
        _probe(READ, _hooks("PostToolUse", _context("PostToolUse", "ctx-4")), files=F),
        (("PostToolUse:Read hook", "ctx-4"),),
    ),
    "PostToolUse decision block": _told(
        _probe(READ, _hooks("PostToolUse", {"decision": "block", "reason": "why-5"}), files=F),
        (("PostToolUse:Read hook", "why-5"),),
    ),
    "PostToolUse exit code 2": _told(
        _probe(READ, _hooks("PostToolUse", "", code=2, stderr="why-6"), files=F), (("PostToolUse:Read hook", "why-6"),)
    ),
    "PostToolUse plain stdout": Row(
        probe=_probe(READ, _hooks("PostToolUse", "plain-7"), files=F),
        queryloop={"notes": (), "is_error": False},
    ),
}

_SHELL_HOOK = {"type": "command", "command": 'cat > /dev/null; touch "shell-$(basename "$0")"'}

SHELL_ROWS: dict[str, Row] = {
    # Claude Code starts a command hook as `/bin/sh -c COMMAND` whatever $SHELL is: `$0` names it.
    "the shell a command hook runs in": Row(
        probe=_probe(READ, {"hooks": {"PreToolUse": [{"hooks": [_SHELL_HOOK]}]}}, files=F),
        queryloop={"made": frozenset({"project/shell-sh"})},
    ),
}

ROWS = {**PERMISSION_ROWS, **CONTEXT_ROWS, **SHELL_ROWS}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_hook_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    for program in ("queryloop", "claude"):
        (tmp_path / program).mkdir()
    ours = observe("queryloop", row.probe, tmp_path / "queryloop")
    theirs = observe("claude", row.probe, tmp_path / "claude")
    seen = {key: _view(ours, row)[key] for key in row.queryloop}
    assert seen == row.queryloop, ours.stderr
    expected = row.expected
    seen = {key: _view(theirs, row)[key] for key in expected}
    assert seen == expected, f"Claude Code 2.1.235 ({row.verdict}): {theirs.stderr}"
