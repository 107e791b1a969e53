"""Hooks: matcher kinds, real subprocess runs, exit-code and JSON semantics, timeouts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.hooks.runner import HookConfig, HookConfigError, HookOutcome, parse_hook_config, run_hooks


def _config(event: str, *groups: tuple[str | None, Sequence[str | dict[str, Any]]]) -> HookConfig:
    built = []
    for matcher, hooks in groups:
        group: dict[str, Any] = {
            "hooks": [h if isinstance(h, dict) else {"type": "command", "command": h} for h in hooks]
        }
        if matcher is not None:
            group["matcher"] = matcher
        built.append(group)
    return parse_hook_config({event: built})


def _script(tmp_path: Path, name: str, body: str) -> str:
    """Write a python3 hook script and return the command line that runs it."""
    path = tmp_path / name
    path.write_text(body)
    return f"{sys.executable} {path}"


def _run(
    event: str, payload: dict[str, Any], config: HookConfig, cwd: Path, *, permission_mode: str = "default"
) -> HookOutcome:
    return asyncio.run(
        run_hooks(
            event,
            payload,
            config,
            cwd=cwd,
            session_id="sess-1",
            transcript_path=cwd / "t.jsonl",
            permission_mode=permission_mode,
        )
    )


_TOOL = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "toolu_1"}


# ------------------------------------------------------------------------ matcher


def _matches(event: str, matcher: str | None, value: str | None) -> bool:
    config = _config(event, (matcher, ["true"]))
    field = {"PreToolUse": "tool_name", "PreCompact": "trigger", "SessionStart": "source"}.get(event, "x")
    payload = {field: value} if value is not None else {}
    return bool(config.commands_for(event, payload))


@pytest.mark.parametrize("matcher", [None, "", "*"])
def test_absent_empty_or_star_matcher_matches_every_tool(matcher: str | None) -> None:
    assert _matches("PreToolUse", matcher, "AnyTool")


def test_plain_names_matcher_matches_exact_tool_names_only() -> None:
    assert _matches("PreToolUse", "Edit|Write", "Write")
    assert _matches("PreToolUse", "Edit, Write", "Edit")
    assert not _matches("PreToolUse", "Edit|Write", "MultiEdit")
    assert not _matches("PreToolUse", "Edit", "edit")


def test_matcher_with_regex_characters_is_an_unanchored_search() -> None:
    assert _matches("PreToolUse", "mcp__.*__write", "mcp__fs__write_file")
    assert _matches("PreToolUse", "Notebook.*", "NotebookEdit")
    assert not _matches("PreToolUse", "^Web.*", "mcp__WebFetch")


def test_precompact_and_session_start_match_on_trigger_and_source() -> None:
    assert _matches("PreCompact", "auto", "auto")
    assert not _matches("PreCompact", "manual", "auto")
    assert _matches("SessionStart", "startup|resume", "resume")


def test_events_without_a_match_field_run_every_hook() -> None:
    assert _matches("Stop", "Bash", None)


def test_identical_commands_in_two_groups_run_once() -> None:
    config = _config("PreToolUse", ("Bash", ["echo hi"]), ("*", ["echo hi"]))
    assert len(config.commands_for("PreToolUse", {"tool_name": "Bash"})) == 1


def test_bad_config_reports_the_json_path() -> None:
    with pytest.raises(
        HookConfigError, match=r"^\$\.hooks\.Stop\[0\]\.hooks\[0\]\.timeout: expected a positive number"
    ):
        parse_hook_config({"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]})


def test_non_command_hook_types_are_kept_but_not_run(tmp_path: Path) -> None:
    config = parse_hook_config({"Stop": [{"hooks": [{"type": "prompt", "prompt": "judge"}]}]})
    assert config.commands_for("Stop", {}) == ()
    assert _run("Stop", {}, config, tmp_path) == HookOutcome(event="Stop")


# ---------------------------------------------------------------------- processes


def test_stdin_json_and_environment_seen_by_the_hook(tmp_path: Path) -> None:
    dump = tmp_path / "stdin.json"
    command = _script(
        tmp_path,
        "dump.py",
        f"import json, os, sys\n"
        f"doc = json.load(sys.stdin)\n"
        f"doc['env_project_dir'] = os.environ['CLAUDE_PROJECT_DIR']\n"
        f"doc['process_cwd'] = os.getcwd()\n"
        f"open({str(dump)!r}, 'w').write(json.dumps(doc))\n",
    )
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", ("Bash", [command])), tmp_path, permission_mode="plan")
    assert outcome.errors == ()
    seen = json.loads(dump.read_text())
    assert seen == {
        "session_id": "sess-1",
        "transcript_path": str(tmp_path / "t.jsonl"),
        "cwd": str(tmp_path),
        "permission_mode": "plan",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "toolu_1",
        "env_project_dir": str(tmp_path),
        "process_cwd": str(tmp_path),
    }


def test_stop_hook_payload_carries_stop_hook_active(tmp_path: Path) -> None:
    dump = tmp_path / "stop.json"
    config = _config("Stop", (None, [f"cat > {dump}"]))
    _run("Stop", {"stop_hook_active": True}, config, tmp_path)
    assert json.loads(dump.read_text())["stop_hook_active"] is True


def test_exit_zero_json_output_is_parsed(tmp_path: Path) -> None:
    out = {
        "systemMessage": "checked",
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "safe",
            "updatedInput": {"command": "ls -la"},
            "additionalContext": "note",
        },
    }
    command = f"echo '{json.dumps(out)}'"
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", ("Bash", [command])), tmp_path)
    assert outcome.permission_decision == "allow"
    assert outcome.permission_decision_reason == "safe"
    assert outcome.updated_input == {"command": "ls -la"}
    assert outcome.additional_context == ("note",)
    assert outcome.system_messages == ("checked",)
    assert not outcome.blocked and outcome.continue_
    assert outcome.results[0].exit_code == 0


def test_exit_zero_plain_stdout_is_context_for_user_prompt_submit(tmp_path: Path) -> None:
    config = _config("UserPromptSubmit", (None, ["echo 'Current branch: main'"]))
    outcome = _run("UserPromptSubmit", {"prompt": "hi"}, config, tmp_path)
    assert outcome.additional_context == ("Current branch: main",)
    assert outcome.errors == ()


def test_exit_zero_plain_stdout_is_not_context_for_tool_events(tmp_path: Path) -> None:
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", (None, ["echo just logging"])), tmp_path)
    assert outcome.additional_context == ()
    assert outcome.results[0].stdout == "just logging\n"


def test_invalid_json_on_exit_zero_is_a_non_blocking_error(tmp_path: Path) -> None:
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", (None, ["echo '{not json'"])), tmp_path)
    assert not outcome.blocked
    assert len(outcome.errors) == 1
    assert "not valid JSON" in outcome.errors[0].message
    assert outcome.errors[0].command == "echo '{not json'"


def test_exit_two_blocks_with_stderr_as_the_reason(tmp_path: Path) -> None:
    command = "echo 'rm is not allowed here' >&2; exit 2"
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", ("Bash", [command])), tmp_path)
    assert outcome.blocked
    assert outcome.block_reasons == ("rm is not allowed here",)
    assert outcome.permission_decision == "deny"
    assert outcome.errors == ()


def test_exit_two_on_user_prompt_submit_blocks_the_prompt(tmp_path: Path) -> None:
    config = _config("UserPromptSubmit", (None, ["echo 'contains a secret' >&2; exit 2"]))
    outcome = _run("UserPromptSubmit", {"prompt": "my key is sk-123"}, config, tmp_path)
    assert outcome.blocked and outcome.block_reasons == ("contains a secret",)


def test_stop_hook_decision_block_keeps_the_model_going_with_the_reason(tmp_path: Path) -> None:
    command = """echo '{"decision": "block", "reason": "tests still fail"}'"""
    outcome = _run("Stop", {"stop_hook_active": False}, _config("Stop", (None, [command])), tmp_path)
    assert outcome.blocked and outcome.decision == "block"
    assert outcome.block_reasons == ("tests still fail",)


def test_exit_two_on_session_start_is_only_a_non_blocking_error(tmp_path: Path) -> None:
    config = _config("SessionStart", (None, ["echo nope >&2; exit 2"]))
    outcome = _run("SessionStart", {"source": "startup"}, config, tmp_path)
    assert not outcome.blocked
    assert outcome.errors[0].message == "exited with code 2: nope"


def test_other_exit_codes_are_non_blocking_errors_with_stderr(tmp_path: Path) -> None:
    config = _config("PostToolUse", (None, ["echo 'lint crashed' >&2; exit 1", "no-such-command-xyz"]))
    outcome = _run("PostToolUse", {**_TOOL, "tool_response": {"stdout": ""}}, config, tmp_path)
    assert not outcome.blocked
    messages = [e.message for e in outcome.errors]  # config order, whatever finished first
    assert messages[0] == "exited with code 1: lint crashed"
    assert messages[1].startswith("exited with code 127") and "not found" in messages[1]


def test_hook_killed_by_a_signal_is_a_non_blocking_error(tmp_path: Path) -> None:
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", (None, ["kill -9 $$"])), tmp_path)
    assert not outcome.blocked
    assert outcome.errors[0].message == "was killed by signal SIGKILL"
    assert outcome.results[0].exit_code == -9


def test_post_tool_use_exit_two_reason_goes_to_the_model(tmp_path: Path) -> None:
    config = _config("PostToolUse", ("Write", ["echo 'format the file first' >&2; exit 2"]))
    outcome = _run("PostToolUse", {**_TOOL, "tool_name": "Write", "tool_response": {"ok": True}}, config, tmp_path)
    assert outcome.blocked and outcome.block_reasons == ("format the file first",)


def test_continue_false_stops_with_the_stop_reason(tmp_path: Path) -> None:
    command = """echo '{"continue": false, "stopReason": "budget exhausted"}'"""
    outcome = _run("PostToolUse", _TOOL, _config("PostToolUse", (None, [command, "true"])), tmp_path)
    assert outcome.continue_ is False
    assert outcome.stop_reason == "budget exhausted"


def _decision_hook(decision: str) -> str:
    out = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": f"says {decision}",
        }
    }
    return f"echo '{json.dumps(out)}'"


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [(["allow", "ask"], "ask"), (["allow", "deny", "ask"], "deny"), (["allow", "allow"], "allow")],
)
def test_permission_decisions_combine_deny_over_ask_over_allow(
    tmp_path: Path, decisions: list[str], expected: str
) -> None:
    # Distinct command lines (a trailing comment) so identical hooks are not merged.
    commands = [f"{_decision_hook(d)} # {i}" for i, d in enumerate(decisions)]
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", (None, commands)), tmp_path)
    assert outcome.permission_decision == expected
    assert outcome.permission_decision_reason == f"says {expected}"


def test_hooks_run_in_parallel(tmp_path: Path) -> None:
    # Each hook records when it started and finished; in parallel, both start
    # before either finishes.
    commands = [
        _script(
            tmp_path,
            f"sleep{i}.py",
            f"import time\nstart = time.time()\ntime.sleep(1)\n"
            f"open({str(tmp_path / f'times{i}')!r}, 'w').write(f'{{start}} {{time.time()}}')\n",
        )
        for i in range(2)
    ]
    started = time.monotonic()
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", (None, commands)), tmp_path)
    wall = time.monotonic() - started
    assert outcome.errors == ()
    (s0, e0), (s1, e1) = (map(float, (tmp_path / f"times{i}").read_text().split()) for i in range(2))
    assert s0 < e1 and s1 < e0
    assert wall < 1.95


def test_hook_past_its_timeout_is_killed_and_reported(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    command = f"sleep 30; touch {marker}"
    config = _config("PreToolUse", (None, [{"type": "command", "command": command, "timeout": 1}, "echo fast"]))
    started = time.monotonic()
    outcome = _run("PreToolUse", _TOOL, config, tmp_path)
    assert time.monotonic() - started < 10
    assert not outcome.blocked
    assert [e.command for e in outcome.errors] == [command]
    assert "timed out after 1 s" in outcome.errors[0].message
    slow = next(r for r in outcome.results if r.command == command)
    assert slow.timed_out and slow.exit_code is None
    assert not marker.exists()


def test_cancelling_run_hooks_kills_the_hook_processes(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    config = _config("Stop", (None, [f"echo $$ > {pid_file}; exec sleep 30"]))

    async def scenario() -> None:
        task = asyncio.ensure_future(
            run_hooks("Stop", {}, config, cwd=tmp_path, session_id="s", transcript_path="t", permission_mode="default")
        )
        for _ in range(200):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_no_matching_hooks_gives_a_neutral_outcome(tmp_path: Path) -> None:
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", ("Edit", ["exit 2"])), tmp_path)
    assert outcome == HookOutcome(event="PreToolUse")
