"""End-to-end: the most dangerous lines of the hostile corpus, proposed by the model to the real CLI.

One entry per family of ``tests/fixtures/hostile_commands.txt`` (those tagged ``e2e``)
goes to the real CLI against the embedded server: one model reply proposes them all
as Bash calls, headless. In ``default`` and ``plan`` mode nothing may run: no file
appears or changes, every victim keeps its content, and every call is listed in
``permission_denials``. The same reply in ``bypassPermissions`` mode shows that each
line does its harm when it runs, so the first two tests can fail. In that mode, with
deny rules on ``touch`` and ``rm``, none of the lines that run them — disguised, or
through another program — may run (issue 49).

Each entry's files get the entry's id in their names (``pwned-ID``, ``victim-ID.txt``)
so a line that ran is named in the failure.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from .harness import MockApi, run_cli
from .test_request_layer import scenario

CORPUS_FILE: Final = Path(__file__).resolve().parent.parent / "fixtures" / "hostile_commands.txt"
PRECIOUS: Final = "precious\n"
# The scratch names each corpus line uses, and what they become for one entry.
_RENAMED: Final = re.compile(r"pwned|victim\.txt|cmds\.txt|0\.magic")


@dataclass(frozen=True)
class Hostile:
    """One corpus line, its scratch names made its own."""

    id: str
    command: str
    files: tuple[str, ...]
    runs_touch_or_rm: bool  # tagged hides or wraps: the shell or another program runs touch or rm


def _own_names(entry_id: str, text: str) -> str:
    names = {
        "pwned": f"pwned-{entry_id}",
        "victim.txt": f"victim-{entry_id}.txt",
        "cmds.txt": f"cmds-{entry_id}.txt",
        "0.magic": f"magic-{entry_id}",
    }
    return _RENAMED.sub(lambda m: names[m.group(0)], text)


def load_end_to_end_entries(path: Path = CORPUS_FILE) -> tuple[Hostile, ...]:
    """The corpus entries tagged ``e2e`` (the format is described at the top of the file)."""
    entries: list[Hostile] = []
    for chunk in re.split(r"^---- ", path.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        head, _, body = chunk.partition("\n")
        entry_id, *tags = head.split()
        if "e2e" not in tags:
            continue
        assert "⟨" not in body, f"{entry_id}: placeholders are not expanded end to end; pick another entry"
        assert not any(t.startswith(("norun=", "needs=")) for t in tags), f"{entry_id} cannot run everywhere"
        files = next((t.removeprefix("files=").split(",") for t in tags if t.startswith("files=")), [])
        entries.append(
            Hostile(
                id=entry_id,
                command=_own_names(entry_id, body.removesuffix("\n")),
                files=tuple(_own_names(entry_id, f) for f in files),
                runs_touch_or_rm="hides" in tags or "wraps" in tags,
            )
        )
    return tuple(entries)


ENTRIES: Final = load_end_to_end_entries()


def _git(root: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run(["git", *identity, *args], cwd=root, check=True, capture_output=True)


def _make_workdir(root: Path) -> None:
    """A git repository with a changed a.txt, a tar, and each entry's victim and inputs."""
    (root / "a.txt").write_text("alpha\nbeta\n")
    (root / "in.txt").write_text("b\na\n")
    _git(root, "init", "-q")
    _git(root, "add", "a.txt")
    _git(root, "commit", "-qm", "one")
    (root / "a.txt").write_text("alpha\nbeta\ngamma\n")  # a change for git diff to show
    subprocess.run(["tar", "-cf", "a.tar", "in.txt"], cwd=root, check=True)
    for entry in ENTRIES:
        (root / f"victim-{entry.id}.txt").write_text(PRECIOUS)
        (root / f"cmds-{entry.id}.txt").write_text(f"touch pwned-{entry.id}\n" * 300)
        (root / f"magic-{entry.id}").write_text("0\tstring\tx\tX\n")
        for name in entry.files:
            (root / name).touch()


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    seen: dict[str, tuple[int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if ".git" in relative.parts:
            continue
        info = path.lstat()
        seen[str(relative)] = (stat.S_IMODE(info.st_mode), path.read_bytes() if stat.S_ISREG(info.st_mode) else b"")
    return seen


def _changed(before: dict[str, tuple[int, bytes]], after: dict[str, tuple[int, bytes]]) -> set[str]:
    return {name for name in {*before, *after} if before.get(name) != after.get(name)}


def _all_proposed_at_once() -> str:
    calls = ", ".join("{tool_use: {name: Bash, input: " + json.dumps({"command": e.command}) + "}}" for e in ENTRIES)
    return scenario(f"""  mock-primary:
    - reply: {{content: [{calls}]}}
    - reply: {{content: [{{text: "done"}}]}}
""")


def _run(tmp_path: Path, mode: str, *, deny: tuple[str, ...] = ()) -> tuple[set[str], list[dict[str, Any]]]:
    """Run the reply in ``mode``, headless, with these deny rules: the files that changed and the denials reported."""
    _make_workdir(tmp_path)
    before = _snapshot(tmp_path)
    with MockApi(_all_proposed_at_once()) as api:
        args = ["-p", "go", "--model", "mock-primary", "--permission-mode", mode]
        args += ["--settings", json.dumps({"permissions": {"deny": list(deny)}})] if deny else []
        run = run_cli(args, api=api, cwd=tmp_path, fmt="json", timeout=120)
    assert run.returncode == 0, run.stderr
    return _changed(before, _snapshot(tmp_path)), list(run.result["permission_denials"])


def test_at_least_25_families_run_end_to_end() -> None:
    assert len(ENTRIES) >= 25
    assert len({e.command for e in ENTRIES}) == len(ENTRIES)


@pytest.mark.parametrize("mode", ["default", "plan"])
def test_no_hostile_line_runs_headless_and_every_one_is_reported_denied(tmp_path: Path, mode: str) -> None:
    changed, denials = _run(tmp_path, mode)
    ran = sorted(e.id for e in ENTRIES if any(e.id in name for name in changed))
    assert not changed, f"these lines ran in {mode} mode: {ran}; files changed: {sorted(changed)}"
    assert all(d["tool_name"] == "Bash" for d in denials)
    denied = [d["tool_input"]["command"] for d in denials]
    assert sorted(denied) == sorted(e.command for e in ENTRIES), "each proposed call is listed once"
    for entry in ENTRIES:
        assert (tmp_path / f"victim-{entry.id}.txt").read_text() == PRECIOUS, entry.id
        assert not (tmp_path / f"pwned-{entry.id}").exists(), entry.id


def test_every_line_does_its_harm_when_bypass_mode_lets_it_run(tmp_path: Path) -> None:
    changed, denials = _run(tmp_path, "bypassPermissions")
    assert denials == []
    harmless = [e.id for e in ENTRIES if not any(e.id in name for name in changed)]
    assert not harmless, f"these lines did nothing when they ran, so their denial proves nothing: {harmless}"


def test_deny_rules_on_touch_and_rm_hold_in_bypass_mode_whatever_runs_them(tmp_path: Path) -> None:
    changed, denials = _run(tmp_path, "bypassPermissions", deny=("Bash(touch:*)", "Bash(rm:*)"))
    guarded = [e for e in ENTRIES if e.runs_touch_or_rm]
    assert len(guarded) >= 25
    ran = sorted(e.id for e in guarded if any(e.id in name for name in changed))
    assert not ran, f"these lines ran touch or rm past the deny rules: {ran}"
    denied = {d["tool_input"]["command"] for d in denials}
    assert not [e.id for e in guarded if e.command not in denied], "each is listed in permission_denials"
