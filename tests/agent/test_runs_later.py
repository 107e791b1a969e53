"""Issue 49, part 2: one list of what runs later, and every writer asks before planting a file on it.

Claude Code 2.1.235, probed against the embedded server (``claude -p``, 2026-12-05): in
``acceptEdits``, with ``--allowedTools Write,Edit``, with ``Write(./<file>)`` and, for ``echo x >
<file>``, with ``--allowedTools Bash``, a write to ``.git/config``, ``.git/hooks/pre-commit``,
``.git/commondir``, a ``.git`` file (at the top or in a sub-folder), ``.mcp.json``, ``.bashrc``,
``.profile``, ``.gitmodules``, ``.vscode/settings.json`` or ``.husky/pre-commit`` asks ("… which
is a sensitive file"; headless: listed in ``permission_denials``), and one to ``.claude/…`` asks
("… but you haven't granted it yet"). It writes ``CLAUDE.md``, ``QUERYLOOP.md``,
``QUERYLOOP.local.md`` and ``.queryloop/settings.json`` without asking, and a folder a configured
``core.hooksPath`` names (``.githooks/``); with the working directory the home directory, ``bin/git``,
``.local/bin/git`` and ``.config/autostart/x.desktop`` too; and in ``bypassPermissions`` (run as root
with ``IS_SANDBOX=1``) it writes every one of them. queryloop asks for all of these, in every mode:
the differences are in docs/security.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.tools.services.names import EDIT_TOOLS
from queryloop.handlers.tools.services.permissions import decide, suggest_rules
from queryloop.handlers.tools.services.rules import PermissionMode, PermissionRules, parse_rule
from queryloop.handlers.tools.services.runs_later import find_runs_later, runs_later
from queryloop.handlers.tools.services.sandbox import SandboxPolicy

RUNS_LATER = [
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/agents/helper.md",
    ".queryloop/settings.json",
    ".mcp.json",
    "CLAUDE.md",
    "docs/CLAUDE.md",
    "CLAUDE.local.md",
    "QUERYLOOP.md",
    "QUERYLOOP.local.md",
    ".git/config",
    ".git/config.worktree",
    ".git/hooks/pre-commit",
    ".git/commondir",
    ".git",
    "vendor/lib/.git",
    ".gitmodules",
    ".husky/pre-commit",
    ".bashrc",
    ".profile",
    ".zshenv",
]
ORDINARY = ["src/app.py", "README.md", ".gitignore", ".git/HEAD", "bin/tool", "config/app.yaml", "docs/hooks.md"]


def _decide(
    tool: str,
    tool_input: dict[str, Any],
    cwd: Path,
    *,
    mode: PermissionMode = "acceptEdits",
    allow: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    interactive: bool = False,
    home: Path | None = None,
    sandbox: SandboxPolicy | None = None,
) -> Any:
    rules = PermissionRules(allow=tuple(map(parse_rule, allow)), deny=tuple(map(parse_rule, deny)))
    return decide(
        tool,
        tool_input,
        mode=mode,
        rules=rules,
        cwd=cwd,
        interactive=interactive,
        home=home or cwd.parent / "home",
        sandbox=sandbox,
    )


def _write(path: str) -> dict[str, str]:
    return {"file_path": path, "content": "x\n"}


@pytest.mark.parametrize("path", RUNS_LATER)
@pytest.mark.parametrize("tool", ["Write", "Edit"])
def test_accept_edits_never_lets_a_file_tool_write_what_runs_later_unasked(
    tmp_path: Path, tool: str, path: str
) -> None:
    tool_input = _write(path) if tool == "Write" else {"file_path": path, "old_string": "a", "new_string": "b"}
    asked = _decide(tool, tool_input, tmp_path, interactive=True)
    assert asked.behavior == "ask", asked.reason
    headless = _decide(tool, tool_input, tmp_path)
    assert headless.behavior == "deny" and headless.listed
    assert str(tmp_path / path) in headless.reason and "runs later" in headless.reason


@pytest.mark.parametrize(
    "path", [".Git/Config", ".GIT/hooks/pre-commit", "claude.md", ".Claude/settings.json", ".BASHRC"]
)
def test_names_are_matched_whatever_their_case_as_a_file_system_that_ignores_case_would(
    tmp_path: Path, path: str
) -> None:
    assert _decide("Write", _write(path), tmp_path).behavior == "deny"


@pytest.mark.parametrize("path", ORDINARY)
def test_accept_edits_still_writes_ordinary_files_without_asking(tmp_path: Path, path: str) -> None:
    assert _decide("Write", _write(path), tmp_path).behavior == "allow"


@pytest.mark.parametrize(
    ("mode", "allow"),
    [
        ("default", ("Write", "Edit")),
        ("default", ("Write(./.git/hooks/pre-commit)", "Write(./.bashrc)", "Write(./CLAUDE.md)")),
        ("default", ("Edit(./**)",)),
        ("bypassPermissions", ()),
        ("dontAsk", ("Write",)),
    ],
)
@pytest.mark.parametrize("path", [".git/hooks/pre-commit", ".bashrc", "CLAUDE.md"])
def test_no_allow_rule_and_no_mode_lets_a_file_tool_plant_one(
    tmp_path: Path, mode: PermissionMode, allow: tuple[str, ...], path: str
) -> None:
    decision = _decide("Write", _write(path), tmp_path, mode=mode, allow=allow, interactive=True)
    expected = "deny" if mode == "dontAsk" else "ask"
    assert decision.behavior == expected and decision.rule is None, decision.reason


def test_a_deny_rule_still_denies_first_and_plan_mode_still_denies(tmp_path: Path) -> None:
    denied = _decide("Write", _write(".bashrc"), tmp_path, deny=("Write(./.bashrc)",), interactive=True)
    assert (denied.behavior, denied.rule) == ("deny", "Write(./.bashrc)")
    planned = _decide("Write", _write(".bashrc"), tmp_path, mode="plan", interactive=True)
    assert planned.behavior == "deny" and "plan mode" in planned.reason


def test_every_file_changing_tool_is_held_to_the_list(tmp_path: Path) -> None:
    for tool in sorted(EDIT_TOOLS):
        field = "notebook_path" if tool.startswith("Notebook") else "file_path"
        decision = _decide(tool, {field: ".mcp.json"}, tmp_path, mode="bypassPermissions", interactive=True)
        assert decision.behavior == "ask", tool


def test_a_symlink_leading_to_a_file_that_runs_later_is_held_to_it(tmp_path: Path) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "notes").symlink_to(".git/hooks")
    decision = _decide("Write", _write("notes/pre-commit"), tmp_path)
    assert decision.behavior == "deny" and str(tmp_path / ".git" / "hooks" / "pre-commit") in decision.reason


def test_an_answer_of_always_is_not_offered_for_a_file_that_runs_later(tmp_path: Path) -> None:
    assert suggest_rules("Write", _write(".bashrc"), cwd=tmp_path) == ()
    assert suggest_rules("Write", _write("src/a.py"), cwd=tmp_path) == ("Write(./src/a.py)",)


# ---- git, however it finds its configuration and hooks ------------------------------------------


def test_a_configured_hooks_path_is_where_git_hooks_are(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    assert _decide("Write", _write(".githooks/pre-commit"), tmp_path).behavior == "allow"
    (tmp_path / ".git" / "config").write_text('[core]\n\tbare = false\n[CORE "x"]\n\thooksPath = ".githooks" ; hooks\n')
    decision = _decide("Write", _write(".githooks/pre-commit"), tmp_path)
    assert decision.behavior == "deny" and "core.hooksPath" in decision.reason


def test_a_hooks_path_in_an_included_or_the_users_configuration_counts_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    project = tmp_path / "p"
    (project / ".git").mkdir(parents=True)
    home.mkdir()
    (project / ".git" / "config").write_text("[include]\n\tpath = extra.conf\n")
    (project / ".git" / "extra.conf").write_text("[core]\nhookspath = tools/hooks\n")
    (home / ".gitconfig").write_text("[core]\n\thooksPath = .shared-hooks\n")
    later = find_runs_later(project, home=home)
    assert later.why(("tools", "hooks", "pre-push")) is not None
    assert later.why((".shared-hooks", "x")) is not None
    assert later.why(("tools", "build.sh")) is None


def test_a_git_file_and_commondir_lead_git_to_folders_whose_config_and_hooks_run_later(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / ".git").write_text("gitdir: store\n")
    (tmp_path / "store" / "commondir").write_text("../common\n")
    assert _decide("Write", _write("store/config"), tmp_path).behavior == "deny"
    assert _decide("Write", _write("common/hooks/post-checkout"), tmp_path).behavior == "deny"
    assert _decide("Write", _write("store/description"), tmp_path).behavior == "allow"


def test_a_repository_above_the_working_directory_is_read_for_its_hooks_path(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n\thooksPath = sub/hooks\n")
    (tmp_path / "sub").mkdir()
    assert _decide("Write", _write("hooks/pre-commit"), tmp_path / "sub").behavior == "deny"


def test_a_file_an_instruction_file_imports_is_instructions_too(tmp_path: Path) -> None:
    assert _decide("Write", _write("AGENTS.md"), tmp_path).behavior == "allow"
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "CLAUDE.md").write_text("Read @../AGENTS.md first. Not `@code.md`.\n")
    (tmp_path / "AGENTS.md").write_text("See @docs/style.md\n")
    for path in ("AGENTS.md", "docs/style.md"):
        decision = _decide("Write", _write(path), tmp_path)
        assert decision.behavior == "deny" and "imports" in decision.reason, path
    assert _decide("Write", _write("code.md"), tmp_path).behavior == "allow", "an import in code is none"


# ---- the home directory and PATH -----------------------------------------------------------------


@pytest.mark.parametrize("path", ["bin/git", ".local/bin/git", ".config/autostart/x.desktop", ".ssh/config"])
def test_with_the_home_directory_as_working_directory_its_path_folders_and_dotfiles_run_later(
    tmp_path: Path, path: str
) -> None:
    assert _decide("Write", _write(path), tmp_path, home=tmp_path).behavior == "deny"
    assert _decide("Write", _write(f"home/{path}"), tmp_path, home=tmp_path / "home").behavior == "deny"
    assert _decide("Write", _write("notes.txt"), tmp_path, home=tmp_path).behavior == "allow"
    assert _decide("Write", _write(path), tmp_path, home=tmp_path.parent / "elsewhere").behavior == (
        "deny" if path.startswith(".ssh") else "allow"
    )


def test_a_folder_on_the_runs_path_inside_the_working_directory_runs_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path / 'tools'}:relative/bin:{os.environ['PATH']}")
    assert _decide("Write", _write("tools/git"), tmp_path).behavior == "deny"
    assert _decide("Write", _write("relative/bin/git"), tmp_path).behavior == "allow", "a relative entry is no folder"


def test_a_run_with_no_home_directory_still_judges_what_runs_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOME")
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # as where no passwd entry names one
    with pytest.raises(RuntimeError):
        Path.home()
    later = find_runs_later(tmp_path)
    assert later.home is None and later.why((".bashrc",)) is not None


def test_outside_every_working_directory_the_whole_path_is_judged(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert runs_later(home / ".bashrc", roots=(tmp_path / "p",), home=home) is not None
    assert runs_later(tmp_path / "elsewhere" / ".git" / "config", roots=(tmp_path / "p",), home=home) is not None
    assert runs_later(tmp_path / "elsewhere" / "notes.txt", roots=(tmp_path / "p",), home=home) is None


# ---- redirections --------------------------------------------------------------------------------

SANDBOXED = SandboxPolicy(enabled=True)


@pytest.mark.parametrize(
    ("mode", "allow", "sandbox"),
    [
        ("acceptEdits", (), None),
        ("default", ("Bash",), None),
        ("bypassPermissions", (), None),
        ("default", (), SANDBOXED),
        ("default", ("Bash(echo:*)", "Write"), None),
    ],
)
@pytest.mark.parametrize("target", [".git/hooks/pre-commit", ".bashrc", "CLAUDE.md", ".claude/settings.json"])
def test_a_redirection_to_a_file_that_runs_later_asks_whatever_allows_the_line(
    tmp_path: Path, mode: PermissionMode, allow: tuple[str, ...], sandbox: SandboxPolicy | None, target: str
) -> None:
    command = {"command": f"echo 'touch pwned' >> {target}"}
    asked = _decide("Bash", command, tmp_path, mode=mode, allow=allow, sandbox=sandbox, interactive=True)
    assert asked.behavior == "ask", asked.reason
    headless = _decide("Bash", command, tmp_path, mode=mode, allow=allow, sandbox=sandbox)
    assert headless.behavior == "deny" and headless.reason.startswith(f"Output redirection to '{tmp_path / target}'")
    assert "runs later" in headless.reason


@pytest.mark.parametrize(
    "command",
    [
        "cd .git && echo x > config",
        "cd .git/hooks; echo x > pre-commit",
        "cd ~ && echo x > bin/git",
        "cd && echo x > .xsessionrc",
        "cd $D && echo x > hooks/pre-commit",
        "cd - && echo x > config.worktree",
        "cd .. && echo x > .local/bin/ls",
    ],
)
def test_a_redirection_after_cd_is_judged_wherever_the_cd_may_lead(tmp_path: Path, command: str) -> None:
    decision = _decide("Bash", {"command": command}, tmp_path / "home" / "me", mode="bypassPermissions")
    assert decision.behavior == "deny" and "changes directory" in decision.reason, decision.reason


@pytest.mark.parametrize(
    "command", ["cd sub && echo x > out.txt", "cd web && echo K=1 > .env", "cd b; make > config.log"]
)
def test_a_redirection_after_a_cd_that_leads_nowhere_on_the_list_is_allowed(tmp_path: Path, command: str) -> None:
    assert _decide("Bash", {"command": command}, tmp_path, allow=("Bash",)).behavior == "allow"


def test_a_redirection_to_an_ordinary_file_is_allowed_as_before(tmp_path: Path) -> None:
    assert _decide("Bash", {"command": "echo x > out.txt"}, tmp_path).behavior == "allow"
    assert _decide("Bash", {"command": "echo x > /dev/null"}, tmp_path, mode="default").behavior == "allow"


def test_a_deny_rule_on_the_file_still_denies_the_redirection_first(tmp_path: Path) -> None:
    decision = _decide("Bash", {"command": "echo x > .bashrc"}, tmp_path, deny=("Edit(./.bashrc)",), interactive=True)
    assert (decision.behavior, decision.rule) == ("deny", "Edit(./.bashrc)")


# ---- the readers' files are on the list ----------------------------------------------------------

_LOOKED_AT: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _LOOKED_AT is not None and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _LOOKED_AT.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@contextmanager
def _looked_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path opened, statted or listed meanwhile (the real calls, recorded on their way)."""
    global _LOOKED_AT
    seen: list[str] = []

    def spy(real: Any) -> Any:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(path, str | bytes | os.PathLike):
                seen.append(os.fsdecode(path))
            return real(path, *args, **kwargs)

        return call

    for name in ("stat", "lstat", "scandir", "listdir"):
        monkeypatch.setattr(os, name, spy(getattr(os, name)))
    _LOOKED_AT = seen
    try:
        yield seen
    finally:
        _LOOKED_AT = None
        monkeypatch.undo()


def test_every_file_a_run_reads_at_its_start_from_the_project_or_home_is_on_the_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readers — settings, MCP servers, agents, instructions and what they import — are run, and every
    path they look at in the project (as working directory) or the home directory (as working directory)
    runs later."""
    from queryloop.run.config import ConfigSources, resolve_config
    from queryloop.run.memory import MEMORY_KINDS, load_instructions

    home, project = tmp_path / "home", tmp_path / "p"
    for folder in (home / ".claude" / "agents", project / ".claude" / "agents", project / ".claude" / "rules"):
        folder.mkdir(parents=True)
    (project / ".claude" / "rules" / "style.md").write_text("be brief")
    (project / "CLAUDE.md").write_text("hello, and see @AGENTS.md and @docs/guide.md")
    (project / "AGENTS.md").write_text("agents")
    (project / "docs").mkdir()
    (project / "docs" / "guide.md").write_text("the guide; more in @deeper/more.md")
    (project / "docs" / "deeper").mkdir()
    (project / "docs" / "deeper" / "more.md").write_text("more")
    (home / ".claude" / "CLAUDE.md").write_text("mine: @~/notes/personal.md")
    (home / "notes").mkdir()
    (home / "notes" / "personal.md").write_text("personal")
    monkeypatch.setenv("HOME", str(home))
    with _looked_at(monkeypatch) as seen:
        resolve_config(cwd=project, sources=ConfigSources(setting_sources=MEMORY_KINDS))
        load_instructions(project, home=home, sources=MEMORY_KINDS)
    for root in (project, home):
        inside = {Path(p) for p in seen if Path(p).is_relative_to(root) and Path(p) != root}
        assert inside, f"nothing under {root} was looked at: the spy saw nothing"
        # a folder looked at on the way to a file in it (resolving the file's path) is no file read
        read = sorted(p for p in inside if not any(q != p and q.is_relative_to(p) for q in inside))
        missing = [str(p) for p in read if runs_later(p, roots=(root,), home=home) is None]
        assert not missing, f"read at start but not on the list: {missing}"


def test_the_machine_cache_every_run_reads_is_written_by_no_file_tool_or_redirection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "elsewhere" / "ql-home"  # $QUERYLOOP_HOME away from any name on the list
    monkeypatch.setenv("QUERYLOOP_HOME", str(home))
    planted = home / "cache" / "machines" / "machine-v1-0.json"
    project = tmp_path / "p"
    project.mkdir()
    for mode in ("acceptEdits", "bypassPermissions"):
        verdict = _decide("Write", _write(str(planted)), project, mode=mode)
        assert verdict.behavior == "deny" and "compiled machines" in verdict.reason, verdict.reason
    line = _decide("Bash", {"command": f"echo '{{}}' > {planted}"}, project, mode="default", allow=("Bash",))
    assert line.behavior == "deny" and "compiled machines" in line.reason, line.reason
    assert runs_later(home / "cache" / "notes.txt", roots=(project,)) is None  # only the machines' folder
