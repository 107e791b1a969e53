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

from queryloop.handlers.hooks.services.calling import HookRunner
from queryloop.handlers.hooks.services.config import (
    HookConfig,
    HookConfigError,
    HookFunction,
    HookMatcher,
    parse_hook_config,
)
from queryloop.handlers.hooks.services.results import HookOutcome
from queryloop.handlers.hooks.services.runner import run_hooks

HANG_GUARD_S = 300
"""Bounds a wait for an event that never comes (a hang), never a slow pass: the event decides."""


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
    event: str,
    payload: dict[str, Any],
    config: HookConfig,
    cwd: Path,
    *,
    permission_mode: str = "default",
    env: dict[str, str] | None = None,
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
            env=env,
        )
    )


_TOOL = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "toolu_1"}


def _pre_tool_use_input(cwd: Path, permission_mode: str) -> dict[str, Any]:
    """What a PreToolUse hook for ``_TOOL`` is given (on stdin, or as a Python hook's ``input_data``)."""
    return {
        "session_id": "sess-1",
        "transcript_path": str(cwd / "t.jsonl"),
        "cwd": str(cwd),
        "permission_mode": permission_mode,
        "hook_event_name": "PreToolUse",
        **_TOOL,
    }


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


def test_a_runner_configures_an_event_only_where_a_matcher_group_names_it(tmp_path: Path) -> None:
    config = parse_hook_config(
        {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}], "Stop": []}
    )
    runner = HookRunner(config=config, cwd=tmp_path)
    assert runner.configures("PreToolUse"), "a group for one tool still configures the event"
    assert not runner.configures("PostToolUse")
    assert not runner.configures("Stop"), "an empty list is no matcher group"
    assert not HookRunner(cwd=tmp_path).configures("PreToolUse")


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
        **_pre_tool_use_input(tmp_path, "plan"),
        "env_project_dir": str(tmp_path),
        "process_cwd": str(tmp_path),
    }


def test_a_hook_gets_this_process_environment_as_it_is_at_the_call_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "env.bin"
    config = _config("Stop", (None, [f"cat >/dev/null; env -0 > {dump}"]))
    monkeypatch.setenv("QUERYLOOP_TEST_LATE", "set just before the call")
    monkeypatch.setitem(os.environb, b"QUERYLOOP_TEST_RAW", b"caf\xe9 \xff")  # not UTF-8: passed on as it is
    monkeypatch.delenv("QUERYLOOP_TEST_GONE", raising=False)
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", "/somewhere/else")  # the hook's own value wins
    _run("Stop", {}, config, tmp_path)
    seen = dict(entry.split(b"=", 1) for entry in dump.read_bytes().split(b"\0") if entry)
    expected = {**os.environb, b"CLAUDE_PROJECT_DIR": os.fsencode(tmp_path)}
    assert {k: v for k, v in seen.items() if k not in (b"PWD", b"SHLVL", b"_")} == {
        k: v for k, v in expected.items() if k not in (b"PWD", b"SHLVL", b"_")
    }
    assert seen[b"QUERYLOOP_TEST_RAW"] == b"caf\xe9 \xff"
    assert seen[b"QUERYLOOP_TEST_LATE"] == b"set just before the call"


def test_a_hook_given_an_environment_gets_it_and_not_this_process_one(tmp_path: Path) -> None:
    dump = tmp_path / "env.bin"
    config = _config("Stop", (None, [f"cat >/dev/null; env -0 > {dump}"]))
    _run("Stop", {}, config, tmp_path, env={"PATH": os.environ["PATH"], "ONLY_THIS": "1"})
    seen = dict(entry.split(b"=", 1) for entry in dump.read_bytes().split(b"\0") if entry)
    assert {k: v for k, v in seen.items() if k not in (b"PWD", b"SHLVL", b"_")} == {
        b"PATH": os.environb[b"PATH"],
        b"ONLY_THIS": b"1",
        b"CLAUDE_PROJECT_DIR": os.fsencode(tmp_path),
    }


def test_a_hook_command_runs_in_bin_sh_as_claude_code_runs_it(tmp_path: Path) -> None:
    """Claude Code 2.1.235 starts a hook as ``/bin/sh -c COMMAND`` whatever ``$SHELL`` says (seen with a
    hook reading its own command line); ``$0`` is what it was started as."""
    dump = tmp_path / "shell.txt"
    _run("Stop", {}, _config("Stop", (None, [f'cat >/dev/null; printf %s "$0" > {dump}'])), tmp_path)
    assert dump.read_text() == "/bin/sh"


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


def test_exit_zero_plain_stdout_is_context_for_user_prompt_submit_kept_apart_from_additional_context(
    tmp_path: Path,
) -> None:
    config = _config("UserPromptSubmit", (None, ["echo 'Current branch: main'"]))
    outcome = _run("UserPromptSubmit", {"prompt": "hi"}, config, tmp_path)
    assert outcome.output == ("Current branch: main",) and outcome.additional_context == ()
    assert outcome.errors == ()


def test_exit_zero_plain_stdout_is_not_context_for_tool_events(tmp_path: Path) -> None:
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", (None, ["echo just logging"])), tmp_path)
    assert outcome.additional_context == () and outcome.output == ()
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
    # Each hook says it started, then waits for the other to say so: in parallel both meet, however slow the
    # machine; one after the other, the first waits alone until its guard ends the wait (a fail, never a pass).
    def meeting(i: int) -> str:
        mine, theirs, met = (str(tmp_path / name) for name in (f"started{i}", f"started{1 - i}", f"met{i}"))
        return (
            f"import pathlib, time\npathlib.Path({mine!r}).touch()\ndeadline = time.monotonic() + {HANG_GUARD_S}\n"
            f"while not pathlib.Path({theirs!r}).exists() and time.monotonic() < deadline:\n    time.sleep(0.01)\n"
            f"pathlib.Path({met!r}).write_text(str(pathlib.Path({theirs!r}).exists()))\n"
        )

    commands = [
        {"type": "command", "command": _script(tmp_path, f"meet{i}.py", meeting(i)), "timeout": 2 * HANG_GUARD_S}
        for i in range(2)
    ]
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", (None, commands)), tmp_path)
    assert outcome.errors == ()
    assert [(tmp_path / f"met{i}").read_text() for i in range(2)] == ["True", "True"], "each saw the other running"


def test_hook_past_its_timeout_is_killed_and_reported(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    command = f"sleep 30; touch {marker}"
    config = _config("PreToolUse", (None, [{"type": "command", "command": command, "timeout": 1}, "echo fast"]))
    outcome = _run("PreToolUse", _TOOL, config, tmp_path)  # a hook not killed would leave the marker
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
        deadline = time.monotonic() + HANG_GUARD_S  # the hook's shell wrote its pid: the event the cancel waits for
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _running(pid: int) -> bool:
    """Whether process ``pid`` is alive (a zombie waiting to be reaped by init counts as gone)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_cancelling_run_hooks_kills_what_the_hook_started_and_reaps_its_shell(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    marker = tmp_path / "survived"
    command = f"(sleep 30; touch {marker}) & echo $$ $! > {pids}.tmp && mv {pids}.tmp {pids}; wait"
    config = _config("PreToolUse", (None, [command]))

    async def scenario() -> None:
        task = asyncio.ensure_future(
            run_hooks(
                "PreToolUse",
                _TOOL,
                config,
                cwd=tmp_path,
                session_id="s",
                transcript_path="t",
                permission_mode="default",
            )
        )
        deadline = time.monotonic() + HANG_GUARD_S  # the hook started its child: the event the cancel waits for
        while not pids.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    shell, child = map(int, pids.read_text().split())
    with pytest.raises(ProcessLookupError):
        os.kill(shell, 0)  # killed and reaped: not even a zombie is left
    deadline = time.monotonic() + HANG_GUARD_S  # a survivor touches the marker at 30 s: it fails, never passes
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _running(child), "the hook's background child survived the cancellation"
    assert not marker.exists()


def test_a_hook_that_closes_its_output_is_still_waited_for_and_its_exit_code_read(tmp_path: Path) -> None:
    config = _config("PreToolUse", (None, ["exec >&- 2>&-; sleep 0.3; exit 3"]))
    outcome = _run("PreToolUse", _TOOL, config, tmp_path)
    assert [r.exit_code for r in outcome.results] == [3]
    assert outcome.results[0].duration_ms >= 300
    assert outcome.errors[0].message == "exited with code 3"


def test_a_hook_that_closes_its_output_and_hangs_is_killed_at_its_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}; exec >&- 2>&-; sleep 30"
    config = _config("PreToolUse", (None, [{"type": "command", "command": command, "timeout": 1}]))
    outcome = _run("PreToolUse", _TOOL, config, tmp_path)
    assert outcome.results[0].timed_out and "timed out after 1 s" in outcome.errors[0].message
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_a_stdin_larger_than_a_pipe_reaches_a_slow_reader_whole_and_a_hook_may_ignore_it(tmp_path: Path) -> None:
    dump = tmp_path / "stdin.json"
    payload = {**_TOOL, "tool_input": {"command": "x" * 300_000}}  # past the 64 KiB a pipe holds
    config = _config("PreToolUse", (None, [f"sleep 0.2; cat > {dump}", "exit 0"]))
    outcome = _run("PreToolUse", payload, config, tmp_path)
    assert outcome.errors == ()
    assert json.loads(dump.read_text())["tool_input"] == payload["tool_input"]


def test_no_matching_hooks_gives_a_neutral_outcome(tmp_path: Path) -> None:
    outcome = _run("PreToolUse", _TOOL, _config("PreToolUse", ("Edit", ["exit 2"])), tmp_path)
    assert outcome == HookOutcome(event="PreToolUse")


# ------------------------------------------------------------------ Python hooks


def _python(event: str, matcher: str, *callbacks: Any, timeout_s: float | None = None) -> HookConfig:
    hooks = tuple(HookFunction(callback=c, timeout_s=timeout_s) for c in callbacks)
    return HookConfig(matchers=(HookMatcher(event=event, matcher=matcher, hooks=hooks),))


def test_a_python_hook_gets_the_command_hooks_input_and_its_answer_folds_like_their_json(tmp_path: Path) -> None:
    seen: list[tuple[dict[str, Any], str | None, dict[str, Any]]] = []

    async def deny_rm(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> dict[str, Any]:
        seen.append((input_data, tool_use_id, context))
        return {
            "systemMessage": "checked",
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "no rm",
            },
        }

    outcome = _run("PreToolUse", _TOOL, _python("PreToolUse", "Bash", deny_rm), tmp_path)
    ((input_data, tool_use_id, context),) = seen
    assert input_data == _pre_tool_use_input(tmp_path, "default")
    assert (tool_use_id, context) == ("toolu_1", {"signal": None})
    assert (outcome.permission_decision, outcome.permission_decision_reason) == ("deny", "no rm")
    assert outcome.system_messages == ("checked",) and outcome.errors == ()
    assert outcome.results[0].command.startswith("python:") and outcome.results[0].command.endswith("deny_rm")


def test_a_python_hook_says_continue_with_the_sdks_continue_underscore(tmp_path: Path) -> None:
    async def stop(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> dict[str, Any]:
        return {"continue_": False, "stopReason": "budget review"}

    def block(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> dict[str, Any]:
        return {"decision": "block", "reason": "tests first"}  # a plain function works too

    outcome = _run("Stop", {"stop_hook_active": False}, _python("Stop", "", stop, block), tmp_path)
    assert (outcome.continue_, outcome.stop_reason) == (False, "budget review")
    assert outcome.blocked and outcome.block_reasons == ("tests first",)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (RuntimeError("bug"), "raised RuntimeError: bug"),
        (["not", "a", "dict"], "returned output that was ignored: expected a dict, found list"),
        ({"continue_": "no"}, "returned output that was ignored: 'continue' has the wrong type"),
        ({"async_": True}, "asynchronous hook output (async_) is not supported"),
        (
            {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "Deny"}},
            "'hookSpecificOutput.permissionDecision' must be allow, deny or ask",
        ),
    ],
)
def test_a_python_hook_that_raises_or_answers_badly_is_a_hook_error_and_decides_nothing(
    answer: object, message: str, tmp_path: Path
) -> None:
    async def hook(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    outcome = _run("PreToolUse", _TOOL, _python("PreToolUse", "", hook), tmp_path)
    assert outcome.permission_decision is None and not outcome.blocked and outcome.continue_
    (error,) = outcome.errors
    assert message in error.message and error.command.endswith("hook")


def test_a_python_hook_past_its_timeout_is_cancelled_while_the_others_answer(tmp_path: Path) -> None:
    cancelled: list[bool] = []

    async def slow(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return {}

    async def fine(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> None:
        return None  # no opinion

    outcome = _run("PreToolUse", _TOOL, _python("PreToolUse", "", slow, fine, timeout_s=0.2), tmp_path)
    assert cancelled == [True], "the slow hook was cancelled at its timeout, not run to its end"
    (error,) = outcome.errors
    assert "timed out after 0.2 s" in error.message and error.command.endswith("slow")
    assert [r.timed_out for r in outcome.results] == [True, False]


def test_python_and_command_hooks_run_together_and_one_callback_listed_twice_runs_once(tmp_path: Path) -> None:
    calls: list[str] = []

    async def note(input_data: dict[str, Any], tool_use_id: str | None, context: dict[str, Any]) -> None:
        calls.append(input_data["tool_name"])

    config = _config("PreToolUse", ("Bash", ["exit 2"])).merged(_python("PreToolUse", "*", note, note))
    outcome = _run("PreToolUse", _TOOL, config, tmp_path)
    assert calls == ["Bash"]
    assert outcome.blocked and len(outcome.results) == 2
