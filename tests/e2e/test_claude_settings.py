"""End-to-end: Claude Code's own settings files (``~/.claude``, ``.claude/``) and what hooks are told,
through the real CLI and SDK against the embedded server, the hooks real subprocesses.

The expected values were observed running Claude Code 2.1.235 on the same files against the
same server (docs/configuration.md, "Settings files").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from queryloop.run.trust import set_trust

from .harness import MockApi, run_cli


def _trusting(home: Path, cwd: Path) -> str:
    """``home`` (made), whose user trusts ``cwd``: its settings apply in full (untrusted: test_workspace_trust.py)."""
    set_trust(cwd.resolve(), home=home)
    return str(home)


def _write(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


def _logging_hook(log: Path) -> dict[str, Any]:
    return {"hooks": [{"type": "command", "command": f"cat >> {log}; echo >> {log}"}]}


def _inputs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def _scenario(*calls: tuple[str, dict[str, Any]]) -> str:
    """A scenario (JSON is YAML) whose model makes ``calls`` one per turn, then answers "done"."""
    steps = [{"reply": {"content": [{"tool_use": {"name": name, "input": args}}]}} for name, args in calls]
    steps.append({"reply": {"content": [{"text": "done"}]}})
    return json.dumps({"schema_version": 1, "scenario": "t", "model": "mock-primary", "default": steps})


BASH_THEN_DONE = """schema_version: 1
scenario: t
model: mock-primary
default:
  - reply: {content: [{tool_use: {name: Bash, input: {command: "echo hi"}}}]}
  - reply: {content: [{text: "done"}]}
"""


def test_claude_code_settings_files_choose_the_model_and_all_their_hooks_run(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "project"
    cwd.mkdir()
    _write(
        home / ".claude" / "settings.json",
        {"model": "from-user", "hooks": {"PreToolUse": [_logging_hook(tmp_path / "user.log")]}},
    )
    _write(
        cwd / ".claude" / "settings.json",
        {"model": "from-project", "hooks": {"PreToolUse": [_logging_hook(tmp_path / "project.log")]}},
    )
    with MockApi(BASH_THEN_DONE) as api:
        run = run_cli(["-p", "go"], api=api, cwd=cwd, HOME=_trusting(home, cwd))
    assert run.returncode == 0, run.stderr
    # Claude Code 2.1.235: the project's model over the user's; every file's hooks run, the user's too.
    assert [r.model for r in api.requests] == ["from-project", "from-project"]
    assert [i["tool_input"] for i in _inputs(tmp_path / "user.log")] == [{"command": "echo hi"}]
    assert [i["tool_input"] for i in _inputs(tmp_path / "project.log")] == [{"command": "echo hi"}]


def test_local_claude_settings_rank_above_the_projects_and_a_malformed_one_is_refused(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "project"
    _write(cwd / ".claude" / "settings.json", {"model": "from-project"})
    _write(cwd / ".claude" / "settings.local.json", {"model": "from-local"})
    with MockApi(BASH_THEN_DONE) as api:
        run = run_cli(["-p", "go"], api=api, cwd=cwd, HOME=str(home))
    assert run.returncode == 0, run.stderr
    assert {r.model for r in api.requests} == {"from-local"}
    (cwd / ".claude" / "settings.local.json").write_text('{"model": "from-local",}')
    with MockApi(BASH_THEN_DONE) as api:
        run = run_cli(["-p", "go"], api=api, cwd=cwd, HOME=str(home))
    assert run.returncode != 0
    assert "queryloop: .claude/settings.local.json:1:24: invalid JSON" in run.stderr
    assert api.requests == [], "nothing runs on settings that cannot be read"


def test_file_tools_work_in_the_settings_additional_directories(tmp_path: Path) -> None:
    cwd, extra = tmp_path / "project", tmp_path / "extra"
    cwd.mkdir()
    extra.mkdir()
    (extra / "e.txt").write_text("x1\nx2\n")
    text = _scenario(
        ("Read", {"file_path": str(extra / "e.txt")}),
        ("Write", {"file_path": str(extra / "new.txt"), "content": "n"}),
        ("Edit", {"file_path": str(extra / "e.txt"), "old_string": "x2", "new_string": "y2"}),
    )
    permissions = {"permissions": {"additionalDirectories": [str(extra)]}}
    _write(cwd / ".claude" / "settings.json", permissions)
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--permission-mode", "acceptEdits"],
            api=api,
            cwd=cwd,
            HOME=_trusting(tmp_path / "home", cwd),
        )
    assert run.returncode == 0, run.stderr
    results = [m["content"][0] for r in api.requests[1:] for m in r.messages[-1:]]
    # Claude Code 2.1.235 in acceptEdits mode: all three run, none is refused, Read's text as here.
    assert [r["is_error"] for r in results] == [False, False, False]
    assert results[0]["content"] == "1\tx1\n2\tx2\n3\t"
    assert run.result["permission_denials"] == []
    assert ((extra / "e.txt").read_text(), (extra / "new.txt").read_text()) == ("x1\ny2\n", "n")


ALWAYS_500 = "schema_version: 1\nscenario: t\nmodel: mock-primary\notherwise: {error: {status: 500}}\n"


def test_claude_code_max_retries_from_the_environment_or_the_settings_env_bounds_the_retries(tmp_path: Path) -> None:
    counts = []
    for env, settings in (({"CLAUDE_CODE_MAX_RETRIES": "1"}, {}), ({}, {"env": {"CLAUDE_CODE_MAX_RETRIES": "2"}})):
        with MockApi(ALWAYS_500) as api:
            run = run_cli(
                ["-p", "hi", "--model", "mock-primary", "--settings", json.dumps(settings)],
                api=api,
                cwd=tmp_path,
                **env,
            )
        assert run.result["is_error"] is True
        counts.append(len(api.requests))
    # Claude Code 2.1.235 against a server that always answers 500: 1 retry, 2 requests; 2 in its settings' env, 3
    assert counts == [2, 3]


def test_a_claude_code_max_retries_that_is_no_count_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with MockApi(ALWAYS_500) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, CLAUDE_CODE_MAX_RETRIES="3x")
    assert run.returncode != 0
    assert "CLAUDE_CODE_MAX_RETRIES='3x': expected a whole number of 0 or more" in run.stderr
    assert api.requests == []


def test_post_tool_use_hooks_get_each_file_tools_record_as_tool_response(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "ten.txt").write_text("".join(f"{n}\n" for n in range(1, 13)))
    (cwd / "w.txt").write_text("a\nb\n")
    ten, w, log = str(cwd / "ten.txt"), str(cwd / "w.txt"), tmp_path / "post.log"
    text = _scenario(
        ("Read", {"file_path": ten, "offset": 3, "limit": 2}),
        ("Write", {"file_path": w, "content": "a\nc\nd"}),
        ("Edit", {"file_path": ten, "old_string": "6\n", "new_string": "six\nsix2\n"}),
        ("Write", {"file_path": str(cwd / "new.txt"), "content": "n\n"}),
    )
    _write(cwd / ".claude" / "settings.json", {"hooks": {"PostToolUse": [_logging_hook(log)]}})
    with MockApi(text) as api:
        run = run_cli(["-p", "go"], api=api, cwd=cwd, HOME=_trusting(tmp_path / "home", cwd))
    assert run.returncode == 0, run.stderr
    # Claude Code 2.1.235's tool_response for the same calls, paths aside
    twelve = "".join(f"{n}\n" for n in range(1, 13))
    assert [i["tool_response"] for i in _inputs(log)] == [
        {
            "type": "text",
            "file": {"filePath": ten, "content": "3\n4", "numLines": 2, "startLine": 3, "totalLines": 13},
        },
        {
            "type": "update",
            "filePath": w,
            "content": "a\nc\nd",
            "structuredPatch": [
                {
                    "oldStart": 1,
                    "oldLines": 2,
                    "newStart": 1,
                    "newLines": 3,
                    "lines": [" a", "-b", "+c", "+d", "\\ No newline at end of file"],
                }
            ],
            "originalFile": "a\nb\n",
            "userModified": False,
        },
        {
            "filePath": ten,
            "oldString": "6\n",
            "newString": "six\nsix2\n",
            "originalFile": twelve,
            "structuredPatch": [
                {
                    "oldStart": 3,
                    "oldLines": 7,
                    "newStart": 3,
                    "newLines": 8,
                    "lines": [" 3", " 4", " 5", "-6", "+six", "+six2", " 7", " 8", " 9"],
                }
            ],
            "userModified": False,
            "replaceAll": False,
        },
        {
            "type": "create",
            "filePath": str(cwd / "new.txt"),
            "content": "n\n",
            "structuredPatch": [],
            "originalFile": None,
            "userModified": False,
        },
    ]


RESOURCE_SERVER = """
from mcp.server.mcpserver import MCPServer

app = MCPServer("res")


@app.resource("note://hello", name="hello", description="a note", mime_type="text/plain")
def hello() -> str:
    return "Hello resource\\nline2"


@app.resource("data://cfg", name="cfg", mime_type="application/json")
def cfg() -> str:
    return '{"a": 1}'


app.run()
"""


def test_mcp_resource_tools_answer_compact_json_as_claude_code_does(tmp_path: Path) -> None:
    cwd, log = tmp_path / "project", tmp_path / "post.log"
    cwd.mkdir()
    (tmp_path / "server.py").write_text(RESOURCE_SERVER)
    config = {
        "mcpServers": {"res": {"type": "stdio", "command": sys.executable, "args": [str(tmp_path / "server.py")]}}
    }
    _write(cwd / ".claude" / "settings.json", {"hooks": {"PostToolUse": [_logging_hook(log)]}})
    text = _scenario(
        ("ListMcpResourcesTool", {}),
        ("ReadMcpResourceTool", {"server": "res", "uri": "note://hello"}),
        ("ReadMcpResourceTool", {"server": "res", "uri": "data://cfg"}),
    )
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--mcp-config", json.dumps(config)], api=api, cwd=cwd, HOME=_trusting(tmp_path / "home", cwd)
        )
    assert run.returncode == 0, run.stderr
    results = [r.messages[-1]["content"][0]["content"] for r in api.requests[1:]]
    # Claude Code 2.1.235's tool_result texts for the same calls to the same server
    assert results == [
        '[{"name":"hello","uri":"note://hello","description":"a note","mimeType":"text/plain","server":"res"},'
        '{"name":"cfg","uri":"data://cfg","description":"","mimeType":"application/json","server":"res"}]',
        '{"contents":[{"uri":"note://hello","mimeType":"text/plain","text":"Hello resource\\nline2"}]}',
        '{"contents":[{"uri":"data://cfg","mimeType":"application/json","text":"{\\"a\\": 1}"}]}',
    ]
    # and its PostToolUse hooks' tool_response: the same values, as JSON
    assert [i["tool_response"] for i in _inputs(log)] == [json.loads(r) for r in results]


def test_refused_inputs_reach_the_model_in_claude_codes_tool_use_error_tags(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "e.txt").write_text("dup\ndup\nuniq\n")
    e = str(cwd / "e.txt")
    text = _scenario(
        ("Edit", {"file_path": e, "old_string": "zzz", "new_string": "y"}),
        ("Edit", {"file_path": e, "old_string": "dup", "new_string": "y"}),
        ("Edit", {"file_path": e, "old_string": "uniq", "new_string": "uniq"}),
        ("Read", {"path": e}),
        ("Edit", {"file_path": str(cwd / "nope.txt"), "old_string": "a", "new_string": "b"}),
        ("Read", {"file_path": str(cwd / "missing.txt")}),
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go"], api=api, cwd=cwd)
    assert run.returncode == 0, run.stderr
    results = [r.messages[-1]["content"][0] for r in api.requests[1:]]
    assert all(r["is_error"] for r in results)
    texts = [r["content"] for r in results]
    # Claude Code 2.1.235 tags an Edit's refused input and a schema mismatch (that one named
    # InputValidationError), and not a Read of a missing file; the words inside are ours
    tagged = [t.startswith("<tool_use_error>") and t.endswith("</tool_use_error>") for t in texts]
    assert tagged == [True, True, True, True, True, False]
    assert texts[3].startswith("<tool_use_error>InputValidationError: ")
    assert (cwd / "e.txt").read_text() == "dup\ndup\nuniq\n"


def test_disable_all_hooks_in_the_settings_runs_none_of_the_settings_hooks(tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    settings = {
        "disableAllHooks": True,
        "hooks": {"UserPromptSubmit": [_logging_hook(log)], "Stop": [_logging_hook(log)]},
    }
    with MockApi(BASH_THEN_DONE) as api:
        run = run_cli(["-p", "hi", "--settings", json.dumps(settings)], api=api, cwd=tmp_path)
    assert run.result["is_error"] is False
    assert not log.exists(), "Claude Code 2.1.235 runs none of them either"


def test_settings_that_disable_bypass_permissions_turn_that_mode_into_default_with_a_warning(tmp_path: Path) -> None:
    settings = {"permissions": {"disableBypassPermissionsMode": "disable"}}
    with MockApi(BASH_THEN_DONE) as api:
        run = run_cli(
            ["-p", "hi", "--permission-mode", "bypassPermissions", "--settings", json.dumps(settings)],
            api=api,
            cwd=tmp_path,
        )
    init = next(line for line in run.lines if line.get("subtype") == "init")
    assert init["permissionMode"] == "default"  # as Claude Code 2.1.235's, which says nothing
    assert "disableBypassPermissionsMode" in run.stderr
