"""Hook events beside Claude Code 2.1.235: which of its events fire in a plain headless run, in both programs.

One probe configures a hook on every event Claude Code 2.1.235 knows (each appends its
event's name to a file) and runs a tool call that is allowed and one that is refused; each
row reads whether its event fired. ``same``: both fire it (or neither does, in this run),
by design: an event queryloop does not have, with the reason (docs/configuration.md,
"Hooks"). Every event has a row here or in test_hooks.py:
:func:`test_every_hook_event_of_claude_code_has_a_row` fails when one is added.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import reference, test_hooks
from .reference import Observed, Probe, Row, observe

pytestmark = pytest.mark.slow  # two programs per probe

#: Claude Code 2.1.235's hook events, in its order (the list in its program; a test compares them).
CLAUDE_CODE_EVENTS = tuple(
    """
PreToolUse PostToolUse PostToolUseFailure PostToolBatch Notification UserPromptSubmit UserPromptExpansion
SessionStart SessionEnd Stop StopFailure SubagentStart SubagentStop PreCompact PostCompact PermissionRequest
PermissionDenied Setup TeammateIdle TaskCreated TaskCompleted Elicitation ElicitationResult ConfigChange
WorktreeCreate WorktreeRemove InstructionsLoaded CwdChanged FileChanged DirectoryAdded MessageDisplay
""".split()
)

FIRED = "fired.txt"
HOOKS = "configuration.md#hooks"


def _every_event() -> dict[str, Any]:
    """Settings with one hook per event, appending the event's name to :data:`FIRED` in the working folder."""
    return {
        "hooks": {
            event: [{"hooks": [{"type": "command", "command": f"cat > /dev/null; echo {event} >> {FIRED}"}]}]
            for event in CLAUDE_CODE_EVENTS
        }
    }


# An allowed Bash call, then a Write no rule allows (refused: headless, nothing can ask).
RUN = Probe(
    calls=(("Bash", {"command": "touch made"}), ("Write", {"file_path": "w.txt", "content": "x"})),
    files={"CLAUDE.md": "Be brief.\n"},
    args=("--allowedTools", "Bash", "--settings", json.dumps(_every_event())),
)

FIRES = {"fired": True}
QUIET = {"fired": False}


def _missing(event: str, why: str) -> Row:
    """An event Claude Code fires in this run and queryloop does not have."""
    return Row(probe=RUN, queryloop=QUIET, reference=FIRES, design=f"no {event} hook: {why} ([hooks]({HOOKS}))")


ROWS: dict[str, Row] = {
    "PreToolUse": Row(probe=RUN, queryloop=FIRES),
    "PostToolUse": Row(probe=RUN, queryloop=FIRES),
    "Stop": Row(probe=RUN, queryloop=FIRES),
    "UserPromptSubmit": Row(probe=RUN, queryloop=FIRES),
    "SessionStart": Row(probe=RUN, queryloop=FIRES),
    "SessionEnd": Row(probe=RUN, queryloop=FIRES),
    # events no plain headless run fires, in either program
    **{
        event: Row(probe=RUN, queryloop=QUIET)
        for event in (
            "PostToolUseFailure",
            "Notification",
            "UserPromptExpansion",
            "StopFailure",
            "SubagentStart",
            "SubagentStop",
            "PreCompact",
            "PostCompact",
            "PermissionRequest",
            "Setup",
            "TeammateIdle",
            "TaskCreated",
            "TaskCompleted",
            "Elicitation",
            "ElicitationResult",
            "ConfigChange",
            "WorktreeCreate",
            "WorktreeRemove",
            "CwdChanged",
            "FileChanged",
            "DirectoryAdded",
            "PermissionDenied",
        )
    },
    "PostToolBatch": _missing("PostToolBatch", "PostToolUse hooks run after each call of a batch"),
    "MessageDisplay": _missing(
        "MessageDisplay", "what a run shows is its output format's lines, for a program to read"
    ),
    "InstructionsLoaded": _missing("InstructionsLoaded", "the init line's memory_paths names the files read"),
}


def _fired(observed: Observed, base: Path) -> set[str]:
    del observed  # what fired is in the file the hooks wrote
    path = base / "project" / FIRED
    return set(path.read_text().split()) if path.is_file() else set()


def test_each_hook_event_fires_alike_in_both_programs_or_differs_by_design(tmp_path: Path) -> None:
    """The one probe runs once per program; each row's event is looked up in what fired."""
    fired = {}
    for program in ("queryloop", "claude"):
        (tmp_path / program).mkdir()
        fired[program] = _fired(observe(program, RUN, tmp_path / program), tmp_path / program)
    wrong = [
        (event, program)
        for event, row in ROWS.items()
        for program, expected in (("queryloop", row.queryloop), ("claude", row.expected))
        if (event in fired[program]) != expected["fired"]
    ]
    assert wrong == [], f"fired: {fired}"


def _events_in(value: Any) -> Iterator[str]:
    """The hook events a settings document (or a file of a probe) configures."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        value = json.loads(value)
    if isinstance(value, dict) and isinstance(value.get("hooks"), dict):
        yield from value["hooks"]


def _configured(probe: Probe) -> set[str]:
    found: set[str] = set()
    for value in (*probe.args, *probe.files.values(), *probe.home_files.values()):
        found.update(_events_in(value))
    return found


def test_every_hook_event_of_claude_code_has_a_row() -> None:
    """Each event has a row here, or a probe of test_hooks.py configures it."""
    covered = set(ROWS)
    for row in test_hooks.ROWS.values():
        covered |= _configured(row.probe)
    assert [e for e in CLAUDE_CODE_EVENTS if e not in covered] == []


def test_the_event_list_is_claude_codes() -> None:
    """:data:`CLAUDE_CODE_EVENTS` is the list of hook events in Claude Code 2.1.235's program."""
    program = reference.reference().resolve().read_bytes()
    lists = {m.group(0) for m in re.finditer(rb'\["PreToolUse","PostToolUse"(?:,"[A-Za-z]+")*\]', program)}
    assert max((json.loads(m) for m in lists), key=len) == list(CLAUDE_CODE_EVENTS)
