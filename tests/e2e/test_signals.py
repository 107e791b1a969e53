"""End-to-end: SIGINT and SIGTERM during a tool call — a typed result, the exit code, no process left.

The real CLI runs in a subprocess against the embedded server; the model asks for a
Bash command that records its process group, touches a marker and sleeps. The signal
is sent once the marker exists (polled, no fixed sleep).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from .harness import MockApi, assert_group_gone, cli_command, run_cli, signal_when_running
from .test_request_layer import scenario

# bash records its pid (its process group: Bash runs in a new session) atomically, then sleeps.
COMMAND = "echo $$ > pgid.tmp && mv pgid.tmp pgid; sleep 3600; echo late > late.txt"  # only a kill ends it
SLEEPER = scenario(f"""  mock-primary:
    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "{COMMAND}"}}}}}}]}}
    - reply: {{content: [{{text: "never"}}]}}
""")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_a_bash_call_prints_an_aborted_result_kills_the_group_and_exits_128_plus_n(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    with MockApi(SLEEPER) as api:
        cmd = cli_command(tmp_path)
        cmd += ["--permission-mode", "bypassPermissions", "-p", "sleep", "--model", "mock-primary"]
        run = signal_when_running(cmd, api, tmp_path / "pgid", signum)
    assert run.returncode == code, run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["type"] == "result" and result["is_error"] is True, run.stdout
    assert result["terminal_reason"] == "aborted_tools"
    assert_group_gone(run.pgid, "the Bash call's group")
    assert not (tmp_path / "late.txt").exists()
    assert len(api.requests) == 1


@pytest.mark.parametrize("fmt", ["text", "stream-json"])
def test_an_interrupted_resumed_prompt_shows_results_for_its_own_calls_only(tmp_path: Path, fmt: str) -> None:
    # Claude Code 2.1.235 after --resume: the interrupted prompt's stream holds one tool_result, for its
    # own call, none for the resumed session's earlier calls.
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "echo hi"}}, id: toolu_earlier}}}}]}}
    - reply: {{content: [{{text: "It said hi."}}]}}
    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "{COMMAND}"}}, id: toolu_now}}}}]}}
""")
    home = {"QUERYLOOP_HOME": str(tmp_path / "home")}
    with MockApi(text) as api:
        first = run_cli(["-p", "say hi", "--model", "mock-primary"], api=api, cwd=tmp_path, **home)
        cmd = cli_command(tmp_path, fmt)
        cmd += ["--permission-mode", "bypassPermissions", "--model", "mock-primary"]
        cmd += ["--resume", first.result["session_id"], "-p", "sleep"]
        run = signal_when_running(cmd, api, tmp_path / "pgid", **home)
    assert run.returncode == 130, run.stderr
    if fmt == "text":
        assert run.stderr.count("(synthetic)") == 1, run.stderr
    else:
        lines = [json.loads(line) for line in run.stdout.splitlines()]
        contents = [line["message"]["content"] for line in lines if line["type"] == "user"]
        results = [b["tool_use_id"] for content in contents for b in content if b["type"] == "tool_result"]
        assert results == ["toolu_now"]
        assert contents[-1] == [{"type": "text", "text": "[Request interrupted by user for tool use]"}]
