"""Settings loading: sources, precedence, merge, validation messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.tools.services.permissions import decide
from queryloop.run.settings import Settings, SettingsError, load_settings, merge_settings
from queryloop.run.trust import set_trust


@pytest.fixture()
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A home and a project folder its user trusts (what an untrusted one loses: test_trust.py)."""
    home, cwd = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    cwd.mkdir()
    set_trust(cwd, home=home)
    return home, cwd


def _write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document, indent=2))
    return path


def _user(home: Path, document: Any) -> Path:
    return _write(home / ".queryloop" / "settings.json", document)


def _project(cwd: Path, document: Any) -> Path:
    return _write(cwd / ".queryloop" / "settings.json", document)


def _local(cwd: Path, document: Any) -> Path:
    return _write(cwd / ".queryloop" / "settings.local.json", document)


def test_no_settings_files_gives_empty_settings(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    settings = load_settings(cwd=cwd, home=home)
    assert settings == Settings()


def test_higher_precedence_scalars_override_and_sources_are_listed_low_to_high(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    user = _user(home, {"model": "user-model", "permissions": {"defaultMode": "plan"}})
    project = _project(cwd, {"model": "project-model"})
    local = _local(cwd, {"model": "local-model", "permissions": {"defaultMode": "acceptEdits"}})
    settings = load_settings(cwd=cwd, home=home, settings_arg='{"model": "flag-model"}')
    assert settings.model == "flag-model"
    assert settings.permissions.default_mode == "acceptEdits"
    assert settings.sources == (user, project, local, '{"model": "flag-model"}')


def test_permission_lists_concatenate_without_duplicates_in_precedence_order(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _user(home, {"permissions": {"allow": ["Read", "Bash(git status)"]}})
    _project(cwd, {"permissions": {"allow": ["Bash(git status)", "Bash(npm test:*)"], "deny": ["WebSearch"]}})
    _local(cwd, {"permissions": {"deny": ["Bash(rm:*)"]}})
    settings = load_settings(cwd=cwd, home=home)
    assert [r.text for r in settings.permissions.allow] == ["Read", "Bash(git status)", "Bash(npm test:*)"]
    assert [r.text for r in settings.permissions.deny] == ["WebSearch", "Bash(rm:*)"]


def test_deny_from_a_lower_source_wins_over_allow_from_a_higher_one(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _user(home, {"permissions": {"deny": ["Bash(curl:*)"]}})
    settings = load_settings(cwd=cwd, home=home, settings_arg='{"permissions": {"allow": ["Bash"]}}')
    rules = settings.permissions.to_rules(cwd=cwd, home=home)
    decision = decide("Bash", {"command": "curl x"}, mode="default", rules=rules, cwd=cwd, interactive=True)
    assert (decision.behavior, decision.rule) == ("deny", "Bash(curl:*)")


def test_hook_lists_per_event_concatenate_across_sources(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _user(home, {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "a"}]}]}})
    _project(
        cwd,
        {
            "hooks": {
                "PreToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "b"}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "c"}]}],
            }
        },
    )
    settings = load_settings(cwd=cwd, home=home)
    assert [(m.event, m.matcher, m.hooks[0].command) for m in settings.hooks.matchers] == [
        ("PreToolUse", "Bash", "a"),
        ("PreToolUse", "Edit", "b"),
        ("Stop", "", "c"),
    ]


def test_claude_code_keys_queryloop_does_not_act_on_are_kept_in_raw_without_a_word(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    home, cwd = dirs
    _project(cwd, {"includeCoAuthoredBy": False, "statusLine": {"type": "command", "command": "x"}, "env": {"A": "1"}})
    settings = load_settings(cwd=cwd, home=home)
    assert settings.raw["includeCoAuthoredBy"] is False
    assert settings.raw["statusLine"] == {"type": "command", "command": "x"}
    assert dict(settings.env) == {"A": "1"}
    assert capsys.readouterr().err == ""


def test_a_misspelt_key_is_a_warning_naming_the_file_and_the_nearest_key_once_per_file(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    home, cwd = dirs
    _project(cwd, {"permisions": {"allow": ["Bash"]}, "model": "m", "zzqx": 1})
    _user(home, {"hoks": {}})
    settings = load_settings(cwd=cwd, home=home)
    assert settings.model == "m" and settings.raw["permisions"] == {"allow": ["Bash"]}  # the run goes on
    assert capsys.readouterr().err.splitlines() == [
        "queryloop: ~/.queryloop/settings.json: unknown settings key 'hoks' (did you mean 'hooks'?); ignored",
        "queryloop: .queryloop/settings.json: unknown settings keys 'permisions' (did you mean 'permissions'?), "
        "'zzqx'; ignored",
    ]
    load_settings(cwd=cwd, home=home)
    assert capsys.readouterr().err == ""  # once per file
    load_settings(cwd=cwd, home=home, sources=(), settings_arg='{"modle": "m"}')
    said = capsys.readouterr().err
    assert said == "queryloop: --settings: unknown settings key 'modle' (did you mean 'model'?); ignored\n"


def test_settings_flag_accepts_a_file_path_relative_to_cwd(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    path = _write(cwd / "ci-settings.json", {"permissions": {"allow": ["Edit"]}})
    settings = load_settings(cwd=cwd, home=home, settings_arg="ci-settings.json")
    assert settings.sources == (path,)
    assert [r.text for r in settings.permissions.allow] == ["Edit"]


def test_settings_flag_naming_a_missing_file_is_an_error(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    with pytest.raises(SettingsError, match=r"^--settings: nope\.json: no such settings file"):
        load_settings(cwd=cwd, home=home, settings_arg="nope.json")


def test_additional_directories_resolve_against_cwd_and_home(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _project(cwd, {"permissions": {"additionalDirectories": ["../lib", "~/shared"]}})
    rules = load_settings(cwd=cwd, home=home).permissions.to_rules(cwd=cwd, home=home, allowed_tools="Bash(ls)")
    assert rules.additional_directories == (cwd / "../lib", home / "shared")
    assert [r.text for r in rules.allow] == ["Bash(ls)"]


# ------------------------------------------------------------------------- errors


def test_json_syntax_error_names_the_file_with_line_and_column(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _project(cwd, '{\n  "model": "x",\n  "permissions": {"allow": ["Read",]}\n}\n')
    with pytest.raises(SettingsError) as info:
        load_settings(cwd=cwd, home=home)
    message = str(info.value)
    assert message.startswith(".queryloop/settings.json:3:36: invalid JSON: ")
    assert "\n" not in message


def test_wrong_type_names_the_file_and_json_path(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _local(cwd, {"permissions": {"allow": ["Read", "Edit", 3]}})
    with pytest.raises(SettingsError) as info:
        load_settings(cwd=cwd, home=home)
    assert (
        str(info.value)
        == ".queryloop/settings.local.json:6: $.permissions.allow[2]: expected a string, found 3 (write a string here)"
    )


def test_user_file_errors_are_named_relative_to_home(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _user(home, {"permissions": {"defaultMode": "yolo"}})
    with pytest.raises(SettingsError) as info:
        load_settings(cwd=cwd, home=home)
    assert str(info.value).startswith(
        '~/.queryloop/settings.json:3: $.permissions.defaultMode: "yolo" is not allowed here (use one of: '
        "default, acceptEdits"
    )


def test_top_level_array_is_rejected(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _project(cwd, "[1, 2]")
    with pytest.raises(
        SettingsError,
        match=r"^\.queryloop/settings\.json:1: \$: expected an object, found an array \(write an object here\)$",
    ):
        load_settings(cwd=cwd, home=home)


def test_inline_json_syntax_error_is_reported_against_the_flag(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    with pytest.raises(SettingsError, match=r"^--settings:1:11: invalid JSON: "):
        load_settings(cwd=cwd, home=home, settings_arg='{"model": x}')


def test_bad_permission_rule_names_file_path_and_rule(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _project(cwd, {"permissions": {"deny": ["Read", "Bash(rm -rf"]}})
    with pytest.raises(SettingsError) as info:
        load_settings(cwd=cwd, home=home)
    assert str(info.value).startswith(
        ".queryloop/settings.json:5: $.permissions.deny[1]: invalid permission rule 'Bash(rm -rf'"
    )


def test_hook_without_command_is_reported_with_its_path(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _project(cwd, {"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}})
    with pytest.raises(SettingsError) as info:
        load_settings(cwd=cwd, home=home)
    assert (
        str(info.value)
        == '.queryloop/settings.json:6: $.hooks.Stop[0].hooks[0]: missing required key "command" (add it)'
    )


def test_hook_matcher_that_is_not_a_regex_is_reported(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _project(cwd, {"hooks": {"PreToolUse": [{"matcher": "Edit(", "hooks": [{"type": "command", "command": "x"}]}]}})
    with pytest.raises(
        SettingsError, match=r"\$\.hooks\.PreToolUse\[0\]\.matcher: 'Edit\(' is not a valid regular expression"
    ):
        load_settings(cwd=cwd, home=home)


def test_env_values_must_be_strings(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    with pytest.raises(
        SettingsError, match=r"^--settings:1: \$\.env\.DEBUG: expected a string, found true \(write a string here\)$"
    ):
        load_settings(cwd=cwd, home=home, settings_arg='{"env": {"DEBUG": true}}')


def test_merge_keeps_lower_values_and_does_not_mutate_inputs() -> None:
    lower = {"a": {"x": 1, "l": [1, {"k": 2}]}, "b": 1}
    higher = {"a": {"y": 2, "l": [{"k": 2}, 3]}, "b": 2}
    merged = merge_settings(lower, higher)
    assert merged == {"a": {"x": 1, "y": 2, "l": [1, {"k": 2}, 3]}, "b": 2}
    assert lower == {"a": {"x": 1, "l": [1, {"k": 2}]}, "b": 1}


def test_claude_code_settings_files_are_read_each_below_queryloops_own_at_its_level(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    cc_user = _write(home / ".claude" / "settings.json", {"model": "cc-user", "env": {"A": "cc-user"}})
    user = _user(home, {"env": {"A": "user"}})
    cc_project = _write(cwd / ".claude" / "settings.json", {"model": "cc-project"})
    cc_local = _write(cwd / ".claude" / "settings.local.json", {"permissions": {"allow": ["Read"]}})
    settings = load_settings(cwd=cwd, home=home)
    # Claude Code 2.1.235 with only its files: user < project < local < --settings (its model observed each time)
    assert settings.model == "cc-project"
    assert settings.env == {"A": "user"}
    assert [r.text for r in settings.permissions.allow] == ["Read"]
    assert settings.sources == (cc_user, user, cc_project, cc_local)
    _local(cwd, {"model": "local"})
    assert load_settings(cwd=cwd, home=home).model == "local"
    assert load_settings(cwd=cwd, home=home, settings_arg='{"model": "flag"}').model == "flag"
    assert load_settings(cwd=cwd, home=home, sources=("user",)).sources == (cc_user, user)


def test_a_subdirectory_of_a_git_work_tree_reads_the_trees_local_settings_above_its_own(
    dirs: tuple[Path, Path],
) -> None:
    home, root = dirs
    (root / ".git").mkdir()
    sub = root / "sub"
    _write(root / ".claude" / "settings.json", {"model": "root-project"})  # not read from a subdirectory
    _write(sub / ".claude" / "settings.local.json", {"model": "sub-local", "env": {"A": "sub"}})
    assert load_settings(cwd=sub, home=home).model == "sub-local"
    _write(root / ".claude" / "settings.local.json", {"env": {"A": "root"}})
    assert (load_settings(cwd=sub, home=home).model, load_settings(cwd=sub, home=home).env) == (
        "sub-local",
        {"A": "root"},
    )
    _write(root / ".claude" / "settings.local.json", {"model": "root-local"})
    assert load_settings(cwd=sub, home=home).model == "root-local"


def test_claude_config_dir_takes_the_place_of_the_users_claude_directory(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, cwd = dirs
    _write(home / ".claude" / "settings.json", {"model": "home-claude"})
    _write(home / "elsewhere" / "settings.json", {"model": "config-dir"})
    monkeypatch.setenv("HOME", str(home))
    assert load_settings(cwd=cwd).model == "home-claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / "elsewhere"))
    assert load_settings(cwd=cwd).model == "config-dir"


def test_a_malformed_claude_code_settings_file_is_an_error_naming_it_and_the_line(dirs: tuple[Path, Path]) -> None:
    home, cwd = dirs
    _write(cwd / ".claude" / "settings.local.json", '{\n  "model": "m",\n}\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(cwd=cwd, home=home)
    assert str(caught.value).startswith(".claude/settings.local.json:3:1: invalid JSON")


def test_a_settings_flag_naming_a_fifo_or_a_symlink_loop_says_what_it_is(dirs: tuple[Path, Path]) -> None:
    import os

    home, cwd = dirs
    os.mkfifo(cwd / "pipe.json")
    (cwd / "a.json").symlink_to(cwd / "b.json")
    (cwd / "b.json").symlink_to(cwd / "a.json")
    with pytest.raises(SettingsError, match="FIFO"):
        load_settings(cwd=cwd, home=home, settings_arg="pipe.json")
    with pytest.raises(SettingsError, match="symlink loop"):
        load_settings(cwd=cwd, home=home, settings_arg="a.json")
