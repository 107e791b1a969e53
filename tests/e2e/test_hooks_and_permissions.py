"""End-to-end: Claude Code settings, hooks as real subprocesses and permission rules, through the
real SDK against the embedded server."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from .harness import HANG_GUARD_S, CliRun, MockApi, assert_group_gone, cli_command, run_cli, signal_when_running
from .test_request_layer import scenario

SIDE_EFFECT = '{tool_use: {name: Bash, input: {command: "echo ran >> side_effect.log"}}}'


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def settings(**hooks: list[dict[str, object]]) -> str:
    return json.dumps({"hooks": hooks})


def test_a_stop_hook_block_feeds_its_reason_into_the_next_request(tmp_path: Path) -> None:
    hook = script(
        tmp_path,
        "stop.sh",
        'input=$(cat)\nif echo "$input" | grep -q \'"stop_hook_active": *true\'; then exit 0; fi\necho "run '
        'the tests first" >&2\nexit 2\n',
    )
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "done"}]}
    - reply: {content: [{text: "tests pass, done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "fix it",
                "--model",
                "mock-primary",
                "--settings",
                settings(Stop=[{"hooks": [{"type": "command", "command": hook}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert run.reasons == ["answer_recorded", "stop_hook_continue", "answer_recorded"]
    assert len(api.requests) == 2
    assert api.requests[1].messages[-1] == {"role": "user", "content": "Stop hook feedback:\nrun the tests first"}
    assert run.result["result"] == "tests pass, done"


def test_a_stop_hook_that_always_blocks_ends_after_8_blocks(tmp_path: Path) -> None:
    hook = script(tmp_path, "stop.sh", 'echo \'{"decision": "block", "reason": "not yet"}\'\n')
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "done"}]}
      repeat: 20
""")
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "go",
                "--model",
                "mock-primary",
                "--settings",
                settings(Stop=[{"hooks": [{"type": "command", "command": hook}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, "no error: Claude Code ends a run its Stop hooks keep blocking as a success"
    assert run.reasons.count("stop_hook_continue") == 8
    assert run.reasons[-1] == "stop_hook_blocks_exhausted"
    assert len(api.requests) == 9
    result = run.result
    assert (result["subtype"], result["is_error"], result["terminal_reason"]) == (
        "success",
        False,
        "stop_hook_block_limit",
    )
    assert result["result"] == "done" and result["num_turns"] == 9, "the last answer; 1 + 8 feedback messages"


def test_pre_tool_use_exit_2_and_json_deny_keep_a_side_effect_from_running(tmp_path: Path) -> None:
    exit2 = script(tmp_path, "exit2.sh", 'cat > /dev/null\necho "no side effects today" >&2\nexit 2\n')
    deny = script(
        tmp_path,
        "deny.sh",
        'cat > /dev/null\necho \'{"hookSpecificOutput": {"hookEventName": "PreToolUse", '
        '"permissionDecision": "deny", "permissionDecisionReason": "policy says no"}}\'\n',
    )
    for hook, reason in ((exit2, "no side effects today"), (deny, "policy says no")):
        text = scenario(f"""  mock-primary:
    - reply: {{content: [{SIDE_EFFECT}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
        with MockApi(text) as api:
            run = run_cli(
                [
                    "-p",
                    "go",
                    "--model",
                    "mock-primary",
                    "--settings",
                    settings(PreToolUse=[{"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}]),
                ],
                api=api,
                cwd=tmp_path,
            )
        assert run.returncode == 0, run.stderr
        assert not (tmp_path / "side_effect.log").exists()
        assert "permission_denied" in run.reasons
        result = api.requests[1].messages[-1]["content"][0]
        assert result["is_error"] is True and reason in result["content"]
        assert run.result["permission_denials"][0]["tool_name"] == "Bash"


def test_deny_beats_allow(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{SIDE_EFFECT}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
    rules = json.dumps({"permissions": {"allow": ["Bash(echo:*)"], "deny": ["Bash(echo ran:*)"]}})
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--permission-mode", "default", "--settings", rules],
            api=api,
            cwd=tmp_path,
        )
    assert not (tmp_path / "side_effect.log").exists()
    assert run.reasons[:2] == ["tools_requested", "permission_denied"]
    assert "Bash" in api.requests[0].tools, "a deny rule with a specifier does not hide the tool"


def test_headless_default_mode_denies_write_and_records_it(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply:
        content:
          - {tool_use: {name: Write, input: {file_path: x.txt, content: "hi"}}}
          - {tool_use: {name: Read, input: {file_path: r.txt}}}
    - reply: {content: [{text: "ok"}]}
""")
    (tmp_path / "r.txt").write_text("readable\n")
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--permission-mode", "default"], api=api, cwd=tmp_path)
    assert run.returncode == 0
    assert not (tmp_path / "x.txt").exists()
    denials = run.result["permission_denials"]
    assert [d["tool_name"] for d in denials] == ["Write"] and denials[0]["tool_input"] == {
        "file_path": str(tmp_path / "x.txt"),  # listed absolute, as Claude Code 2.1.235 lists it
        "content": "hi",
    }
    results = api.requests[1].messages[-1]["content"]
    assert [r["is_error"] for r in results] == [True, False], (
        "the read-only Read still ran, results in the model's order"
    )
    assert "cannot ask" in results[0]["content"]
    [line] = run.of("system", "permission_denied")
    assert (line["tool_name"], line["tool_use_id"], line["message"]) == (
        "Write",
        denials[0]["tool_use_id"],
        results[0]["content"],
    )
    assert "decision_reason_type" not in line, "a mode's plain ask names no decider, as in Claude Code"


def test_a_refusal_prints_its_permission_denied_line_before_its_tool_result(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "rm -f x"}}}]}
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--permission-mode", "default", "--disallowed-tools", "Bash(rm:*)"],
            api=api,
            cwd=tmp_path,
        )
    kinds = [(line["type"], line.get("subtype")) for line in run.lines if line.get("subtype") != "transition"]
    start = kinds.index(("assistant", None))
    assert kinds[start : start + 3] == [("assistant", None), ("system", "permission_denied"), ("user", None)]
    [line] = run.of("system", "permission_denied")
    assert line["decision_reason_type"] == "subcommandResults"
    [result] = [user for user in run.of("user") if "tool_result_meta" in user]
    assert result["tool_result_meta"] == [{"id": line["tool_use_id"], "non_execution_kind": "permission-rule"}]


def test_an_ask_a_headless_run_cannot_put_is_stamped_user_rejected(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: x.txt, content: "hi"}}}]}
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--permission-mode", "default"], api=api, cwd=tmp_path)
    [user] = run.of("user")
    call_id = run.result["permission_denials"][0]["tool_use_id"]
    assert user["tool_result_meta"] == [{"id": call_id, "non_execution_kind": "user-rejected"}], "as Claude Code"


def test_a_hooks_deny_prints_no_permission_denied_line(tmp_path: Path) -> None:
    said = '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}'
    settings = {
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": f"echo '{said}'"}]}]}
    }
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo hi"}}}]}
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--settings", json.dumps(settings)], api=api, cwd=tmp_path
        )
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Bash"]
    assert run.of("system", "permission_denied") == [], "as in Claude Code: a hook's deny is the hook's to report"


def test_a_call_refused_by_the_mode_gets_a_permission_denied_line_before_its_result(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Write, input: {file_path: x.txt, content: "hi"}}}]}
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--permission-mode", "default"], api=api, cwd=tmp_path)
    kinds = [(line["type"], line.get("subtype")) for line in run.lines if line.get("subtype") != "transition"]
    kinds = [kind for kind in kinds if kind[1] != "api_request"]
    assert kinds[1:4] == [("assistant", None), ("system", "permission_denied"), ("user", None)]
    (denied,) = run.of("system", "permission_denied")
    call = run.of("assistant")[0]["message"]["content"][0]
    assert (denied["tool_name"], denied["tool_use_id"]) == ("Write", call["id"])
    assert "cannot ask" in denied["message"]


def test_a_bare_deny_rule_hides_the_tool_from_the_model(tmp_path: Path) -> None:
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "ok"}]}\n')) as api:
        run_cli(["-p", "go", "--model", "mock-primary", "--disallowed-tools", "Bash"], api=api, cwd=tmp_path)
    assert "Bash" not in api.requests[0].tools and "Read" in api.requests[0].tools


def test_no_stop_hook_runs_after_prompt_too_long_exhaustion(tmp_path: Path) -> None:
    marker = tmp_path / "stop-hook-ran"
    hook = script(tmp_path, "stop.sh", f'touch {marker}\necho "keep going" >&2\nexit 2\n')
    text = scenario("""  mock-primary:
    - error: {status: 400, message: "prompt is too long: 210000 tokens > 200000 maximum"}
      repeat: 3
""")
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "go",
                "--model",
                "mock-primary",
                "--settings",
                settings(Stop=[{"hooks": [{"type": "command", "command": hook}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.result["terminal_reason"] == "prompt_too_long"
    assert not marker.exists(), "no error → hook block → retry death spiral"
    assert len(api.requests) == 1


def test_continue_false_ends_the_run_with_hook_stopped(tmp_path: Path) -> None:
    hook = script(tmp_path, "post.sh", 'cat > /dev/null\necho \'{"continue": false, "stopReason": "budget freeze"}\'\n')
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{SIDE_EFFECT}]}}
    - reply: {{content: [{{text: "never"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "go",
                "--model",
                "mock-primary",
                "--settings",
                settings(PostToolUse=[{"matcher": "*", "hooks": [{"type": "command", "command": hook}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, "a hook's stop is no error (Claude Code: success, is_error false)"
    assert run.reasons[-1] == "post_tool_hook_stopped"
    assert run.result["terminal_reason"] == "hook_stopped" and run.result["result"] == "budget freeze"
    assert run.result["is_error"] is False
    assert len(api.requests) == 1 and (tmp_path / "side_effect.log").read_text() == "ran\n"


def test_a_hook_that_sleeps_past_its_timeout_does_not_hang_the_run(tmp_path: Path) -> None:
    hook = script(tmp_path, "slow.sh", "sleep 3600\n")  # only its 1 s timeout ends it; the run's guard is a hang's
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "ok"}]}\n')
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "go",
                "--model",
                "mock-primary",
                "--verbose",
                "--settings",
                settings(Stop=[{"hooks": [{"type": "command", "command": hook, "timeout": 1}]}]),
            ],
            api=api,
            cwd=tmp_path,
            fmt="text",
            timeout=HANG_GUARD_S,
        )
    assert run.returncode == 0
    assert "Stop hook error" in run.stderr


def test_ctrl_c_during_a_pre_tool_use_hook_kills_the_hooks_process_group_and_the_tool_never_runs(
    tmp_path: Path,
) -> None:
    # The hook records its process group (its own session, led by the /bin/sh that started the script)
    # atomically, then sleeps past any wait of the test: only Ctrl-C's kill ends it.
    body = "ps -o pgid= -p $$ | tr -d ' ' > pgid.tmp && mv pgid.tmp pgid\nsleep 3600\necho late > late.txt\n"
    hook = script(tmp_path, "slow.sh", body)
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{SIDE_EFFECT}]}}
    - reply: {{content: [{{text: "never"}}]}}
""")
    hooks = settings(PreToolUse=[{"matcher": "Bash", "hooks": [{"type": "command", "command": hook}]}])
    with MockApi(text) as api:
        cmd = cli_command(tmp_path)
        cmd += ["--permission-mode", "bypassPermissions", "-p", "go", "--model", "mock-primary", "--settings", hooks]
        run = signal_when_running(cmd, api, tmp_path / "pgid")
    assert run.returncode == 130, run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["type"] == "result" and result["is_error"] is True, run.stdout
    assert_group_gone(run.pgid, "the hook's group after Ctrl-C")
    assert not (tmp_path / "late.txt").exists()
    assert not (tmp_path / "side_effect.log").exists()
    assert len(api.requests) == 1


def test_user_prompt_submit_context_reaches_the_model_and_a_block_stops_the_run(tmp_path: Path) -> None:
    context = script(tmp_path, "ctx.sh", 'cat > /dev/null\necho "The repo uses tabs."\n')
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "ok"}]}\n')
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "go",
                "--model",
                "mock-primary",
                "--settings",
                settings(UserPromptSubmit=[{"hooks": [{"type": "command", "command": context}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0
    # labelled as the hook's, in a system-reminder block after the prompt: not as if the user wrote it
    told = api.requests[0].messages[-1]["content"]
    assert told == [
        {
            "type": "text",
            "text": "<system-reminder>\nUserPromptSubmit hook output: The repo uses tabs.\n</system-reminder>",
        }
    ]
    block = script(tmp_path, "block.sh", 'cat > /dev/null\necho "secrets in prompt" >&2\nexit 2\n')
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "go",
                "--model",
                "mock-primary",
                "--settings",
                settings(UserPromptSubmit=[{"hooks": [{"type": "command", "command": block}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0 and api.requests == [], "a blocked prompt is no error (Claude Code)"
    assert run.reasons == ["prompt_hook_blocked"] and "secrets in prompt" in run.result["result"]
    assert run.result["num_turns"] == 0, "nothing reached the loop"


def test_a_malformed_settings_file_is_one_clear_error_and_nothing_runs(tmp_path: Path) -> None:
    (tmp_path / ".queryloop").mkdir()
    (tmp_path / ".queryloop" / "settings.json").write_text('{"permissions": {"allow": ["Read", 3]}}')
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "ok"}]}\n')) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary"], api=api, cwd=tmp_path, fmt="text")
    assert run.returncode == 1 and api.requests == []
    assert run.stderr.strip().count("\n") == 0
    assert ".queryloop/settings.json" in run.stderr and "$.permissions.allow[1]" in run.stderr


def test_a_pre_compact_hook_can_block_a_compaction(tmp_path: Path) -> None:
    from .test_context_layer import PTL_OVER_5000, SMALL, SUMMARY_RULE, summaries, turns
    from .test_context_layer import scenario as ctx_scenario

    payload = tmp_path / "pre-compact.json"
    hook = script(tmp_path, "precompact.sh", f'cat > {payload}\necho "not now" >&2\nexit 2\n')
    with MockApi(ctx_scenario(SUMMARY_RULE + PTL_OVER_5000, turns(12000, 6000))) as api:
        run = run_cli(
            [
                *SMALL,
                "-p",
                "go",
                "--auto-compact-threshold",
                "100",
                "--settings",
                settings(PreCompact=[{"hooks": [{"type": "command", "command": hook}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert summaries(api.requests) == []
    assert run.reasons[-2:] == ["reactive_compact_retry", "reactive_summary_failed_surfaced"]
    assert "automatic compaction failed: not now" in run.result["result"]
    assert json.loads(payload.read_text())["trigger"] == "reactive"


def test_in_a_terminal_the_user_is_asked_and_always_holds_for_the_run(tmp_path: Path) -> None:
    import os
    import select

    from .harness import ROOT, cli_env

    # A pipe into tee, not a redirection: only a bare Bash rule covers a redirection, so "always" offers none for it.
    teed = '{tool_use: {name: Bash, input: {command: "echo ran | tee -a side_effect.log"}}}'
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{teed}]}}
    - reply: {{content: [{teed}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
    master, slave = os.openpty()
    with MockApi(text) as api:
        cmd = [
            sys.executable,
            "-m",
            "queryloop",
            "run",
            "--output-format",
            "json",
            "--cwd",
            str(tmp_path),
            "-p",
            "go",
            "--model",
            "mock-primary",
        ]
        proc = subprocess.Popen(cmd, stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=cli_env(api), cwd=ROOT)
        os.close(slave)
        seen = b""
        try:
            while b"[y/n/always" not in seen:
                ready, _, _ = select.select([master], [], [], 30)
                assert ready, f"no permission prompt: {seen[-500:]!r}"
                seen += os.read(master, 4096)
            os.write(master, b"always\n")
            assert proc.stdout is not None
            out = proc.stdout.read()
            proc.wait(30)
            while select.select([master], [], [], 0.1)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
        finally:
            os.close(master)
            if proc.stdout:
                proc.stdout.close()
    result = json.loads(out)
    assert result["is_error"] is False and result["permission_denials"] == []
    assert (tmp_path / "side_effect.log").read_text() == "ran\nran\n"
    assert seen.count(b"[y/n/always") == 1, "'always' holds for the rest of the run"
    assert b"[y/n/always: Bash(echo ran:*), Bash(tee:*)]" in seen, "the prompt names the rules it creates"


def test_the_gate_records_that_the_permission_callback_decided_a_call(tmp_path: Path) -> None:
    """In process: two Bash calls that would ask; the callback allows one and refuses the other. The gate
    records who decided each (Claude Code's user_temporary and user_reject), which telemetry reports."""
    import asyncio

    import anthropic

    from queryloop.handlers.messages import ToolCall
    from queryloop.handlers.request import AnthropicBackend
    from queryloop.handlers.tools.services.permissions import PermissionAnswer
    from queryloop.run.agent import AgentRun
    from queryloop.run.config import AgentOptions, PermissionSettings, RequestSettings

    async def ask(call: ToolCall, reason: str) -> PermissionAnswer:
        return PermissionAnswer(allow="allowed" in str(call.input), message="not that one")

    text = scenario("""  mock-primary:
    - reply:
        content:
          - tool_use: {name: Bash, input: {command: "python3 -c 'print(1)' allowed"}}
          - tool_use: {name: Bash, input: {command: "python3 -c 'print(2)' refused"}}
    - reply: {content: [{text: "done"}]}
""")

    async def play(api: MockApi) -> dict[str, str]:
        options = AgentOptions(
            prompt="go",
            cwd=tmp_path,
            request=RequestSettings(model="mock-primary"),
            permissions=PermissionSettings(can_use_tool=ask),
        )
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key="test-key", max_retries=0)
        try:
            run = AgentRun(options, AnthropicBackend(client))
            while run.runner.final.state != "running_tools":
                await run.runner.step_once()
            return dict(run.runner.final.data.tools.decision_sources)
        finally:
            await client.close()

    with MockApi(text) as api:
        sources = asyncio.run(play(api))
    assert sorted(sources.values()) == ["user_reject", "user_temporary"]


WRITE_AND_BASH = (
    '{tool_use: {name: Write, input: {file_path: w.txt, content: "x"}}}',
    '{tool_use: {name: Bash, input: {command: "touch made"}}}',
)


def pre_tool_use(tmp_path: Path, decision: str, reason: str | None = None) -> list[dict[str, object]]:
    """A PreToolUse hook answering ``decision`` (with ``reason``) for every tool."""
    specific: dict[str, object] = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    if reason is not None:
        specific["permissionDecisionReason"] = reason
    body = f"cat > /dev/null\necho '{json.dumps({'hookSpecificOutput': specific})}'\n"
    return [{"hooks": [{"type": "command", "command": script(tmp_path, f"pre-{decision}.sh", body)}]}]


def run_both_tools(tmp_path: Path, config: dict[str, object]) -> tuple[MockApi, CliRun]:
    """Write then Bash, headless in default mode, with ``config`` as the settings."""
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{", ".join(WRITE_AND_BASH)}]}}
    - reply: {{content: [{{text: "ok"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--permission-mode", "default", "--settings", json.dumps(config)],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    return api, run


def test_a_pre_tool_use_allow_runs_write_and_bash_in_a_headless_run(tmp_path: Path) -> None:
    api, run = run_both_tools(tmp_path, {"hooks": {"PreToolUse": pre_tool_use(tmp_path, "allow")}})
    assert (tmp_path / "w.txt").read_text() == "x" and (tmp_path / "made").exists()
    assert run.result["permission_denials"] == []
    assert [r["is_error"] for r in api.requests[1].messages[-1]["content"]] == [False, False]


def test_a_pre_tool_use_allow_lifts_neither_a_deny_rule_nor_an_ask_rule(tmp_path: Path) -> None:
    rules = {"permissions": {"deny": ["Write(w.txt)"], "ask": ["Bash(touch:*)"]}}
    api, run = run_both_tools(tmp_path, {"hooks": {"PreToolUse": pre_tool_use(tmp_path, "allow")}, **rules})
    assert not (tmp_path / "w.txt").exists() and not (tmp_path / "made").exists()
    assert [r["is_error"] for r in api.requests[1].messages[-1]["content"]] == [True, True]
    denials = [d["tool_name"] for d in run.result["permission_denials"]]
    assert denials == ["Bash"], "a path deny rule's refusal is an input error, unlisted (as in Claude Code)"


def test_a_pre_tool_use_ask_in_a_headless_run_denies_with_the_hooks_reason(tmp_path: Path) -> None:
    config = {"hooks": {"PreToolUse": pre_tool_use(tmp_path, "ask", "a human must look at this")}}
    api, _ = run_both_tools(tmp_path, {**config, "permissions": {"allow": ["Bash(touch:*)"]}})
    assert not (tmp_path / "w.txt").exists() and not (tmp_path / "made").exists(), "ask beats an allow rule"
    results = api.requests[1].messages[-1]["content"]
    assert [r["is_error"] for r in results] == [True, True]
    assert all(f"PreToolUse:{name} hook" in r["content"] for name, r in zip(("Write", "Bash"), results, strict=True))
    assert all("a human must look at this" in r["content"] for r in results)


def hook_saying(tmp_path: Path, name: str, output: dict[str, object] | str) -> list[dict[str, object]]:
    text = output if isinstance(output, str) else json.dumps(output)
    body = f"cat > /dev/null\necho '{text}'\n"
    return [{"hooks": [{"type": "command", "command": script(tmp_path, name, body)}]}]


def test_prompt_hook_context_reaches_the_model_labelled_in_a_system_reminder_not_as_the_users_words(
    tmp_path: Path,
) -> None:
    hooks = {
        "SessionStart": hook_saying(tmp_path, "start.sh", "started fine"),
        "UserPromptSubmit": hook_saying(
            tmp_path,
            "submit.sh",
            {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "branch is main"}},
        ),
    }
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "ok"}]}\n')) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--settings", json.dumps({"hooks": hooks})], api=api, cwd=tmp_path
        )
    assert run.returncode == 0, run.stderr
    prompt, told = api.requests[0].messages
    assert prompt == {"role": "user", "content": "go"}
    assert told["role"] == "user" and len(told["content"]) == 1
    text = told["content"][0]["text"]
    assert text.startswith("<system-reminder>\n") and text.endswith("\n</system-reminder>")
    assert "SessionStart:startup hook output: started fine" in text
    assert "UserPromptSubmit hook additional context: branch is main" in text


def test_tool_hook_context_and_a_post_tool_use_block_follow_the_tool_result_never_inside_it(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("hello\n")
    post = {"decision": "block", "reason": "looked odd"}
    post["hookSpecificOutput"] = {"hookEventName": "PostToolUse", "additionalContext": "after note"}  # type: ignore[assignment]
    pre = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "before note"}}
    hooks = {"PreToolUse": hook_saying(tmp_path, "pre.sh", pre), "PostToolUse": hook_saying(tmp_path, "post.sh", post)}
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Read, input: {file_path: f.txt}}}]}
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--settings", json.dumps({"hooks": hooks})], api=api, cwd=tmp_path
        )
    assert run.returncode == 0, run.stderr
    result, note = api.requests[1].messages[-1]["content"]
    assert result["type"] == "tool_result" and "hello" in result["content"]
    assert "note" not in result["content"] and "looked odd" not in result["content"]
    assert note["type"] == "text" and note["text"].startswith("<system-reminder>\n")
    lines = note["text"].removeprefix("<system-reminder>\n").removesuffix("\n</system-reminder>").split("\n\n")
    assert lines == [
        "PreToolUse:Read hook additional context: before note",
        "PostToolUse:Read hook blocked: looked odd",
        "PostToolUse:Read hook additional context: after note",
    ]


def test_a_pre_tool_use_ask_reaches_the_permission_callback_with_the_hooks_reason(tmp_path: Path) -> None:
    import asyncio

    import anthropic

    from queryloop.handlers.hooks import parse_hook_config
    from queryloop.handlers.messages import ToolCall
    from queryloop.handlers.request import AnthropicBackend
    from queryloop.handlers.tools.services.permissions import PermissionAnswer
    from queryloop.run.agent import AgentRun
    from queryloop.run.config import AgentOptions, PermissionSettings, RequestSettings

    reasons: list[str] = []

    async def ask(call: ToolCall, reason: str) -> PermissionAnswer:
        reasons.append(reason)
        return PermissionAnswer(allow=False, message="no")

    hooks = parse_hook_config({"PreToolUse": pre_tool_use(tmp_path, "ask", "a human must look at this")})
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Read, input: {file_path: f.txt}}}]}
    - reply: {content: [{text: "done"}]}
""")
    (tmp_path / "f.txt").write_text("x\n")

    async def play(api: MockApi) -> None:
        options = AgentOptions(
            prompt="go",
            cwd=tmp_path,
            request=RequestSettings(model="mock-primary"),
            permissions=PermissionSettings(can_use_tool=ask),
            hooks=hooks,
        )
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key="test-key", max_retries=0)
        try:
            run = AgentRun(options, AnthropicBackend(client))
            while run.runner.final.state != "running_tools":
                await run.runner.step_once()
        finally:
            await client.close()

    with MockApi(text) as api:
        asyncio.run(play(api))
    assert reasons == ["a human must look at this"], "the hook's ask asks even for a read-only Read, with its reason"


def test_each_session_start_hook_is_reported_as_a_started_and_a_response_line(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "ok"}]}\n')
    hooks = [{"type": "command", "command": "echo hello"}, {"type": "command", "command": "echo no >&2; exit 1"}]
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--settings", settings(SessionStart=[{"hooks": hooks}])],
            api=api,
            cwd=tmp_path,
        )
    started, answered = run.of("system", "hook_started"), run.of("system", "hook_response")
    assert [line["hook_name"] for line in started] == ["SessionStart:startup"] * 2
    assert {line["hook_id"] for line in started} == {line["hook_id"] for line in answered}
    said = sorted((line["stdout"], line["stderr"], line["exit_code"], line["outcome"]) for line in answered)
    assert said == [("", "no\n", 1, "error"), ("hello\n", "", 0, "success")]


def test_a_user_prompt_submit_hook_is_not_reported_as_lines(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "ok"}]}\n')
    hooks = settings(UserPromptSubmit=[{"hooks": [{"type": "command", "command": "echo hello"}]}])
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "mock-primary", "--settings", hooks], api=api, cwd=tmp_path)
    assert run.returncode == 0 and run.of("system", "hook_started") == []
