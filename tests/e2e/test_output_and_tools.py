"""End-to-end: output-layer recovery, tool turns, limits and aborts, through the real SDK."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from queryloop.handlers.output import CONTINUE_PROMPT, NUDGE_PROMPT

from .harness import HANG_GUARD_S, ROOT, MockApi, assert_ledger_closed, cli_command, cli_env, run_cli
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~25 s in all: tools/test.sh --fast leaves the module out

TOOL = '{tool_use: {name: Bash, input: {command: "echo hello >> out.txt"}}}'


def test_max_turns_1_runs_the_tool_and_sends_no_second_request(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{TOOL}]}}
    - reply: {{content: [{{text: "never"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-turns", "1"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert len(api.requests) == 1
    assert (tmp_path / "out.txt").read_text() == "hello\n", "the tools of the last turn still run"
    assert run.reasons == ["tools_requested", "file_checkpoint_taken", "max_turns_reached"]  # out.txt kept first
    result = run.result
    assert (
        result["subtype"] == "error_max_turns"
        and result["terminal_reason"] == "max_turns"
        and result["is_error"] is True
    )
    assert "result" not in result and result["errors"] == ["Reached maximum number of turns (1)"]
    assert result["num_turns"] == 2, "Claude Code reports the turn it refused to start"
    assert len(run.of("user")) == 1


def test_tool_turns_continue_until_the_answer_and_keep_the_ledger_closed(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{{text: "step 1"}}, {TOOL}, {{tool_use: {{name: Read, input: {{file_path: missing.txt}}}}}}]}}
    - reply: {{content: [{{tool_use: {{name: Nope, input: {{}}}}}}]}}
    - reply: {{content: [{{text: "all done"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-turns", "3"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.reasons == [
        "tools_requested",
        "file_checkpoint_taken",  # the file the Bash redirection appends to, kept for rewind
        "next_turn",
        "tools_requested",
        "next_turn",
        "answer_recorded",
    ]
    results = [line["message"]["content"][0] for line in run.of("user")]
    assert [r["is_error"] for r in results] == [False, True, True]
    assert results[2]["content"] == "<tool_use_error>Error: No such tool available: Nope</tool_use_error>"
    assert_ledger_closed(api.requests)
    assert run.result["num_turns"] == 4, "Claude Code counts each tool result: 1 + 3"


def test_three_truncations_are_continued_with_hidden_messages_then_answered(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "one "}], stop_reason: max_tokens}
      repeat: 3
    - reply: {content: [{text: "end"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0
    assert len(api.requests) == 4
    assert run.reasons == ["max_output_tokens_recovery"] * 3 + ["answer_recorded"]
    last = api.requests[-1].messages
    assert [m["content"] for m in last if m["role"] == "user"][1:] == [CONTINUE_PROMPT] * 3
    assert CONTINUE_PROMPT not in run.stdout, "continuation messages are never shown"
    assert run.result["result"] == "end", "the last reply's text, as Claude Code reports it"


def test_a_fourth_truncation_surfaces_the_withheld_error(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "more "}], stop_reason: max_tokens}
      repeat: 4
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-output-tokens", "100"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert len(api.requests) == 4
    assert run.reasons[-1] == "max_output_tokens_exhausted"
    result = run.result
    assert result["is_error"] is True and result["terminal_reason"] == "max_output_tokens"
    assert "output limit of 100 tokens 4 times" in result["result"]


def test_an_escalation_cap_retries_the_truncated_request_once_with_more_tokens(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "cut"}], stop_reason: max_tokens}
    - reply: {content: [{text: "whole answer"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            [
                "-p",
                "hi",
                "--model",
                "mock-primary",
                "--max-output-tokens",
                "100",
                "--escalated-max-output-tokens",
                "4000",
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.reasons == ["max_output_tokens_escalate", "answer_recorded"]
    assert [r.max_tokens for r in api.requests] == [100, 4000]
    assert api.requests[1].messages == api.requests[0].messages, "the truncated reply is discarded, not continued"
    assert run.result["result"] == "whole answer"


def test_a_tool_use_stop_without_a_block_is_asked_again_exactly_once(tmp_path: Path) -> None:
    bad = '- reply: {content: [{text: "let me"}], stop_reason: tool_use}'
    text = scenario(f"""  mock-primary:
    {bad}
    - reply: {{content: [{{text: "answer"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0 and len(api.requests) == 2
    assert run.reasons == ["malformed_tool_use_retry", "answer_recorded"]
    assert api.requests[1].messages[:-2] == api.requests[0].messages, "its text and a note to the model are added"
    text = scenario(f"""  mock-primary:
    {bad}
      repeat: 2
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert len(api.requests) == 2 and run.returncode == 1
    assert run.reasons == ["malformed_tool_use_retry", "malformed_tool_use_retries_exhausted"]
    assert run.result["terminal_reason"] == "malformed_tool_use_exhausted"


def test_a_thinking_only_answer_gets_one_hidden_nudge(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{thinking: "hmm"}]}
    - reply: {content: [{thinking: "still"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.reasons == ["thinking_only_nudge", "thinking_only_accepted"]
    assert api.requests[1].messages[-1]["content"] == NUDGE_PROMPT
    assert run.returncode == 0 and NUDGE_PROMPT not in run.stdout


def test_pause_turn_is_continued_and_refusal_ends_typed(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "working "}], stop_reason: pause_turn}
    - reply: {content: [{text: "I won't help with that."}], stop_reason: refusal}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.reasons == ["pause_turn_continue", "refusal_recorded"]
    assert api.requests[1].messages[-1]["role"] == "assistant"
    assert run.result["terminal_reason"] == "refusal" and run.result["stop_reason"] == "refusal"


def test_context_window_exceeded_stop_reason_is_continued_like_max_tokens(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "partial"}], stop_reason: model_context_window_exceeded}
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.reasons == ["context_window_recovery", "answer_recorded"]
    assert run.result["terminal_reason"] == "completed" and run.returncode == 0


def test_the_budget_stops_the_run_and_answers_its_tool_calls(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{TOOL}], usage: {{input_tokens: 1000000, output_tokens: 10}}}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-budget-usd", "0.5"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert run.reasons == ["max_budget_reached"]
    result = run.result
    assert result["subtype"] == "error_max_budget_usd" and result["total_cost_usd"] >= 0.5
    assert not (tmp_path / "out.txt").exists(), "tools of an over-budget reply do not run"
    # answered for the ledger, hidden as Claude Code 2.1.235 shows none: no user line, one turn (issue 27, item 2)
    assert run.of("user") == [] and result["num_turns"] == 1


def test_the_seed_chain_falls_back_edits_runs_bash_and_finishes(tmp_path: Path) -> None:
    env = cli_env(None, QUERYLOOP_RETRY_BASE_DELAY_MS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "queryloop",
            "run",
            "--scenario",
            "machines/scenarios/fallback_chain.yaml",
            "--cwd",
            str(tmp_path),
            "-p",
            "bump the checkpoint",
            "--output-format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=HANG_GUARD_S,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["terminal_reason"] == "completed" and result["num_turns"] == 3
    assert "step=1" in (tmp_path / "checkpoint.txt").read_text()
    assert len((tmp_path / "side_effect.log").read_text().splitlines()) == 1, "the side effect ran exactly once"


def _interrupted_once(cmd: list[str], api: MockApi, ready: Callable[[], bool]) -> tuple[int, str, str]:
    """Run the CLI ``cmd`` against ``api`` and send it SIGINT once ``ready()`` holds: its exit code, stdout and
    stderr. It is reaped and its pipes closed on every path, a failed wait's included."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(api), cwd=ROOT)
    try:
        deadline = time.monotonic() + HANG_GUARD_S  # bounds a hang only: ready() is the event
        while not ready():
            assert time.monotonic() < deadline and proc.poll() is None, "the point to interrupt at never came"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    return proc.returncode, out, err


def test_sigint_during_a_slow_tool_ends_in_aborted_tools_with_every_tool_use_answered(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply:
        content:
          - {tool_use: {name: Read, input: {file_path: a.txt}}}
          - {tool_use: {name: Bash, input: {command: "touch started; sleep 30"}}}
    - reply: {content: [{text: "never"}]}
""")
    (tmp_path / "a.txt").write_text("a\n")
    with MockApi(text) as api:
        cmd = [*cli_command(tmp_path), "-p", "hi", "--model", "mock-primary"]
        cmd += ["--permission-mode", "bypassPermissions"]
        code, out, err = _interrupted_once(cmd, api, (tmp_path / "started").exists)  # the slow tool started
    lines = [json.loads(line) for line in out.splitlines()]
    result = lines[-1]
    assert code == 130, err  # 128 + SIGINT, like a shell
    assert result["terminal_reason"] == "aborted_tools" and result["is_error"] is True
    transitions = [line["reason"] for line in lines if line.get("subtype") == "transition"]
    assert transitions == [
        "session_started",
        "prompt_submitted",
        "tool_catalog_current",
        "context_ok",
        "reply_received",
        "tools_requested",
        "permission_granted",
        "tool_calls_admitted",
        "tools_aborted",
    ]
    users = [line for line in lines if line["type"] == "user"]
    # the interrupt's marker comes last, as in Claude Code 2.1.235
    assert users[-1]["message"]["content"] == [{"type": "text", "text": "[Request interrupted by user for tool use]"}]
    results_lines = users[:-1]
    answered = [line["message"]["content"][0]["tool_use_id"] for line in results_lines]
    tool_uses = [
        b["id"]
        for line in lines
        if line["type"] == "assistant"
        for b in line["message"]["content"]
        if b["type"] == "tool_use"
    ]
    assert sorted(answered) == sorted(tool_uses) and len(tool_uses) == 2
    results = {line["message"]["content"][0]["tool_use_id"]: line["message"]["content"][0] for line in results_lines}
    read, bash = (results[i] for i in tool_uses)
    assert read["is_error"] is False and "a" in read["content"], "the Read that completed keeps its real result"
    assert bash["is_error"] is True and "Interrupted" in bash["content"], "only the unfinished call is interrupted"
    assert len(api.requests) == 1


def test_sigint_while_waiting_on_the_model_ends_in_aborted_streaming(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "late"}]}
      delay_ms: 20000
""")
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
            "hi",
            "--model",
            "mock-primary",
            "--permission-mode",
            "bypassPermissions",
        ]
        code, out, err = _interrupted_once(cmd, api, lambda: bool(api.requests))  # the request is out
    result = json.loads(out)
    assert result["terminal_reason"] == "aborted_streaming" and code == 130, err


def test_a_user_lines_tool_use_result_is_the_tools_own_record(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    read = "{tool_use: {name: Read, input: {file_path: a.txt}}}"
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{read}]}}
    - reply: {{content: [{{text: "done"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (line,) = run.of("user")
    file = {"filePath": "a.txt", "content": "one\ntwo\n", "numLines": 3, "startLine": 1, "totalLines": 3}
    assert line["tool_use_result"] == {"type": "text", "file": file}, "Claude Code 2.1.235's record, not the text"
