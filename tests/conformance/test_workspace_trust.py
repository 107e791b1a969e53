"""Workspace trust beside Claude Code 2.1.235: what an untrusted folder's settings may do, in both programs.

Each probe runs in both. ``same``: queryloop observes what Claude Code does. By design, with
the reason: queryloop is stricter where Claude Code trusts something a hostile repository can
use to run a program, and the test pins what each does (docs/security.md, "Workspace trust").
(``bypassPermissions`` is not probed: Claude Code refuses it as root, as CI runs.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .reference import Probe, Row, held_to_its_row, observe

pytestmark = pytest.mark.slow  # two programs per probe

TOUCH = (("Bash", {"command": "touch made"}),)
SETTINGS = ".claude/settings.json"


ROWS: dict[str, Row] = {
    "untrusted project allow rule": Row(
        probe=Probe(calls=TOUCH, files={SETTINGS: {"permissions": {"allow": ["Bash(touch:*)"]}}}),
        queryloop={"denied": ("Bash",), "made": frozenset()},
    ),
    "trusted project allow rule": Row(
        probe=Probe(calls=TOUCH, files={SETTINGS: {"permissions": {"allow": ["Bash(touch:*)"]}}}, trusted=("project",)),
        queryloop={"denied": (), "made": frozenset({"project/made"})},
    ),
    "trusted by the git work tree": Row(
        probe=Probe(
            calls=TOUCH,
            files={".git/HEAD": "ref: refs/heads/main\n", f"sub/{SETTINGS}": {"permissions": {"allow": ["Bash"]}}},
            trusted=("project",),
            cwd="project/sub",
        ),
        queryloop={"denied": (), "made": frozenset({"project/sub/made"})},
    ),
    "a trusted parent that is no git work tree": Row(
        probe=Probe(calls=TOUCH, files={f"sub/{SETTINGS}": {"permissions": {"allow": ["Bash"]}}}, trusted=("project",)),
        queryloop={"denied": ("Bash",), "made": frozenset()},
        # not its own entry, not its git work tree's: untrusted in both
    ),
    "untrusted extra directory": Row(
        probe=Probe(
            calls=(("Read", {"file_path": "../outside.txt"}),),
            files={SETTINGS: {"permissions": {"additionalDirectories": [".."]}}, "../outside.txt": "x"},
        ),
        queryloop={"denied": ("Read",)},
    ),
    "untrusted deny rule": Row(
        probe=Probe(
            calls=TOUCH, files={SETTINGS: {"permissions": {"deny": ["Bash(touch:*)"]}}}, args=("--allowedTools", "Bash")
        ),
        queryloop={"denied": ("Bash",), "made": frozenset()},
    ),
    "untrusted plan mode": Row(
        probe=Probe(calls=TOUCH, files={SETTINGS: {"permissions": {"defaultMode": "plan"}}}),
        queryloop={"mode": "plan", "denied": ("Bash",)},
    ),
    "untrusted local allow rule": Row(
        probe=Probe(calls=TOUCH, files={".claude/settings.local.json": {"permissions": {"allow": ["Bash(touch:*)"]}}}),
        queryloop={"denied": ("Bash",), "made": frozenset()},
        reference={"denied": (), "made": frozenset({"project/made"})},
        design="a cloned repository can ship a settings.local.json as easily as a settings.json "
        "([workspace trust](security.md#workspace-trust))",
    ),
    "untrusted acceptEdits": Row(
        probe=Probe(
            calls=(("Write", {"file_path": "w.txt", "content": "x"}),),
            files={SETTINGS: {"permissions": {"defaultMode": "acceptEdits"}}},
        ),
        queryloop={"mode": "default", "denied": ("Write",), "made": frozenset()},
        reference={"mode": "acceptEdits", "denied": (), "made": frozenset({"project/w.txt"})},
        design="acceptEdits lets the model write files that run later without asking "
        "([workspace trust](security.md#workspace-trust))",
    ),
    "untrusted env": Row(
        probe=Probe(
            calls=(("Bash", {"command": 'echo "$PLANTED" > env.txt'}),),
            files={SETTINGS: {"env": {"PLANTED": "1"}}},
            args=("--allowedTools", "Bash"),
        ),
        queryloop={"made": frozenset({"project/env.txt"})},
        reference={"made": frozenset({"project/env.txt"})},  # made by both; what it holds differs (read below)
        design="env from an untrusted folder changes what every command runs with (PATH, LD_PRELOAD) "
        "([workspace trust](security.md#workspace-trust))",
    ),
    "untrusted hook": Row(
        probe=Probe(
            calls=(("Bash", {"command": "echo hi"}),),
            files={SETTINGS: {"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "touch hooked"}]}]}}},
            args=("--allowedTools", "Bash"),
        ),
        queryloop={"made": frozenset()},
        reference={"made": frozenset({"project/hooked"})},
        design="a hook is a program the repository names; it would run on the first tool call "
        "([workspace trust](security.md#workspace-trust))",
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_trust_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    held_to_its_row(ROWS[name], getattr, tmp_path)
    if name == "untrusted env":
        texts = [(tmp_path / who / "project" / "env.txt").read_text() for who in ("queryloop", "claude")]
        assert texts == ["\n", "1\n"], "by design: env from an untrusted folder changes what every command runs with"


def test_both_programs_name_the_ignored_allow_entries_on_stderr(tmp_path: Path) -> None:
    probe = Probe(calls=TOUCH, files={SETTINGS: {"permissions": {"allow": ["Bash(touch:*)", "Read"]}}})
    ours = observe("queryloop", probe, tmp_path / "queryloop")
    theirs = observe("claude", probe, tmp_path / "claude")
    assert "2 permissions.allow entries from .claude/settings.json" in theirs.stderr
    assert "ignoring 2 permissions.allow entries from .claude/settings.json" in ours.stderr
