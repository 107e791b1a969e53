"""Workspace trust: the record Claude Code keeps, and what an untrusted folder's settings keep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.run.settings import load_settings
from queryloop.run.trust import TrustError, is_trusted, restrict, set_trust, trust_record


def test_a_folder_is_trusted_by_its_own_entry_or_its_git_work_trees_and_not_by_any_other_parent(
    tmp_path: Path,
) -> None:
    home, repo, plain = tmp_path / "home", tmp_path / "repo", tmp_path / "plain"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    (plain / "sub").mkdir(parents=True)
    set_trust(repo, home=home)
    set_trust(plain, home=home)
    assert is_trusted(repo / "sub", home=home)
    assert not is_trusted(plain / "sub", home=home), "Claude Code 2.1.235 trusts no parent but the git work tree"
    assert is_trusted(plain, home=home)
    set_trust(plain, trusted=False, home=home)
    assert not is_trusted(plain, home=home)


def test_setting_trust_keeps_every_other_key_of_claude_codes_record(tmp_path: Path) -> None:
    record = tmp_path / ".claude.json"
    record.write_text(json.dumps({"userID": "u", "projects": {"/x": {"allowedTools": ["Bash"], "mcpServers": {}}}}))
    set_trust(Path("/x"), home=tmp_path)
    set_trust(Path("/y"), home=tmp_path)
    assert json.loads(record.read_text()) == {
        "userID": "u",
        "projects": {
            "/x": {"allowedTools": ["Bash"], "mcpServers": {}, "hasTrustDialogAccepted": True},
            "/y": {"hasTrustDialogAccepted": True},
        },
    }
    assert [p.name for p in tmp_path.iterdir()] == [".claude.json"], "no temporary file left behind"


@pytest.mark.parametrize("text", ['{"projects": ', "[]", '{"projects": []}', "\xff"])
def test_a_record_that_is_not_a_json_object_trusts_nothing_and_is_not_rewritten(tmp_path: Path, text: str) -> None:
    record = tmp_path / ".claude.json"
    record.write_bytes(text.encode("latin-1"))
    assert not is_trusted(tmp_path, home=tmp_path)
    if text.startswith('{"projects": ['):
        set_trust(tmp_path, home=tmp_path)  # a JSON object: its odd projects value is replaced
        assert is_trusted(tmp_path, home=tmp_path)
        return
    with pytest.raises(TrustError, match="not a JSON object"):
        set_trust(tmp_path, home=tmp_path)
    assert record.read_bytes() == text.encode("latin-1")


def test_the_record_is_in_claude_config_dir_when_that_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    assert trust_record() == tmp_path / "config" / ".claude.json"
    assert trust_record(tmp_path) == tmp_path / ".claude.json"  # a given home is read as given


def test_an_untrusted_folder_keeps_what_narrows_and_names_what_widens() -> None:
    document = {
        "model": "m",
        "permissions": {"allow": ["Bash"], "deny": ["Read(.env)"], "ask": ["Bash(git push:*)"], "defaultMode": "plan"},
        "hooks": {"Stop": []},
        "env": {"PATH": "/evil"},
        "sandbox": {"enabled": True, "allowUnsandboxedCommands": False, "excludedCommands": ["git"]},
    }
    kept, ignored = restrict(document, trusted={})
    assert kept == {
        "model": "m",
        "permissions": {"deny": ["Read(.env)"], "ask": ["Bash(git push:*)"], "defaultMode": "plan"},
        "sandbox": {"enabled": True, "allowUnsandboxedCommands": False, "autoAllowBashIfSandboxed": False},
    }
    assert [w.key for w in ignored] == [
        "hooks",
        "env",
        "permissions.allow",
        "sandbox.excludedCommands",
        "sandbox.autoAllowBashIfSandboxed",
    ]
    assert document["permissions"]["allow"] == ["Bash"], "the document itself is not changed"


def test_an_untrusted_folder_keeps_the_sandbox_paths_it_closes_and_not_those_it_opens() -> None:
    filesystem = {"allowWrite": ["~"], "denyWrite": ["/etc"], "denyRead": ["~/.ssh"], "later": 1}
    kept, ignored = restrict({"sandbox": {"filesystem": filesystem}}, trusted={})
    assert kept == {"sandbox": {"filesystem": {"denyWrite": ["/etc"], "denyRead": ["~/.ssh"]}}}
    assert [w.key for w in ignored] == ["sandbox.filesystem.allowWrite", "sandbox.filesystem.later"]


def test_an_untrusted_folder_cannot_switch_off_the_users_hooks() -> None:
    kept, ignored = restrict({"disableAllHooks": True, "model": "m"}, trusted={})
    assert kept == {"model": "m"}
    assert [w.key for w in ignored] == ["disableAllHooks"]


def test_a_sandbox_the_user_lets_auto_allow_is_not_made_to_ask_by_the_folder_turning_it_on() -> None:
    kept, ignored = restrict({"sandbox": {"enabled": True}}, trusted={"sandbox": {"autoAllowBashIfSandboxed": True}})
    assert kept == {"sandbox": {"enabled": True}} and ignored == []


@pytest.mark.parametrize("mode", ["acceptEdits", "bypassPermissions"])
def test_an_untrusted_folder_cannot_choose_a_mode_that_allows_more(mode: str) -> None:
    kept, ignored = restrict({"permissions": {"defaultMode": mode}}, trusted={})
    assert kept == {"permissions": {}}
    assert ignored[0].text(".claude/settings.json") == (
        f'ignoring permissions.defaultMode "{mode}" from .claude/settings.json: this folder is not trusted'
    )


def test_a_user_settings_file_read_as_the_project_of_the_home_folder_is_not_restricted(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(touch:*)"]}}))
    loaded = load_settings(cwd=tmp_path, home=tmp_path)  # cwd == home: the file is the user's own
    assert [r.text for r in loaded.permissions.allow] == ["Bash(touch:*)"] and loaded.ignored == ()
    assert load_settings(cwd=tmp_path, home=tmp_path / "elsewhere").permissions.allow == ()
