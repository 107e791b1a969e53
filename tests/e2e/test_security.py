"""End-to-end: hostile commands, Read deny rules and credentials, through the real SDK and the real CLI.

Each test first states the attack a model could make, then checks nothing ran or leaked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .harness import MockApi, run_cli
from .test_request_layer import scenario


def _tool(name: str, **tool_input: str) -> str:
    return "{tool_use: {name: " + name + ", input: " + json.dumps(tool_input) + "}}"


BYPASSES = [
    "ls <(touch p)",
    "ls >(touch p)",
    "ls $'\\'' ; touch p ; echo $'\\''",
    "ls #'\ntouch p\n#'",
    "ls; /usr/bin/touch p",
]


@pytest.mark.parametrize("command", BYPASSES)
def test_an_allowed_prefix_cannot_smuggle_another_command_through_the_cli(tmp_path: Path, command: str) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{_tool("Bash", command=command)}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
    with MockApi(text) as api:
        args = ["-p", "hi", "--model", "mock-primary", "--permission-mode", "default", "--allowed-tools", "Bash(ls:*)"]
        run = run_cli(args, api=api, cwd=tmp_path, fmt="json")
    assert not (tmp_path / "p").exists(), f"{command!r} ran touch"
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Bash"]


GLOB_ALL = _tool("Glob", pattern="**/*.txt")


def test_a_read_deny_rule_covers_what_grep_opens_and_glob_lists(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("TOPSECRET-42\n")
    (tmp_path / "notes.txt").write_text("nothing here\n")
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{_tool("Grep", pattern="TOPSECRET", output_mode="content")}, {GLOB_ALL}]}}
    - reply: {{content: [{_tool("Grep", pattern="TOPSECRET", path="secrets", output_mode="content")}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
    settings = json.dumps({"permissions": {"deny": ["Read(./secrets/**)"]}})
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--settings", settings], api=api, cwd=tmp_path)
    sent = json.dumps([r.messages for r in api.requests])
    assert "TOPSECRET-42" not in sent, "the denied file's content reached the model"
    assert "key.txt" not in sent, "the denied file was listed to the model"
    assert "notes.txt" in sent, "other files are still listed"
    assert run.returncode == 0


def test_the_model_s_commands_never_see_the_api_key_but_see_what_settings_pass(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{_tool("Bash", command="env > seen.txt")}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
    settings = json.dumps({"env": {"PASSED_ON_PURPOSE": "yes"}})
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--settings", settings],
            api=api,
            cwd=tmp_path,
            ANTHROPIC_AUTH_TOKEN="tok-9",
        )
    assert run.returncode == 0, run.stderr
    seen = (tmp_path / "seen.txt").read_text()
    assert "test-key" not in seen and "ANTHROPIC_API_KEY" not in seen and "tok-9" not in seen
    assert "PASSED_ON_PURPOSE=yes" in seen


def test_accept_edits_and_a_bare_bash_rule_never_plant_a_file_that_runs_later(tmp_path: Path) -> None:
    """Issue 49: a model in acceptEdits writes a git hook, Claude Code's settings and the shell's start-up file,
    by Write and by a redirection a bare ``Bash`` rule allows. Headless, each is denied and listed, naming the
    file and why it runs later; the ordinary file beside them is written."""
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    calls = [
        _tool("Write", file_path=".git/hooks/pre-commit", content="touch pwned"),
        _tool("Write", file_path=".claude/settings.json", content='{"hooks": {}}'),
        _tool("Bash", command="echo 'touch pwned' >> .bashrc"),
        _tool("Write", file_path="notes.txt", content="fine"),
    ]
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{", ".join(calls)}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
    args = ["-p", "hi", "--model", "mock-primary", "--permission-mode", "acceptEdits", "--allowed-tools", "Bash"]
    with MockApi(text) as api:
        run = run_cli(args, api=api, cwd=tmp_path, fmt="json")
        results = [b for m in api.requests[-1].messages if m["role"] == "user" for b in m["content"] if "content" in b]
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Write", "Write", "Bash"]
    for block, name in zip(results, (".git/hooks/pre-commit", ".claude/settings.json", ".bashrc"), strict=False):
        assert str(tmp_path / name) in str(block["content"]) and "runs later" in str(block["content"]), block
    assert not (tmp_path / ".git" / "hooks" / "pre-commit").exists() and not (tmp_path / ".claude").exists()
    assert not (tmp_path / ".bashrc").exists()
    assert (tmp_path / "notes.txt").read_text() == "fine"
