"""End-to-end: where queryloop now does what Claude Code 2.1.235 does (issue 11, items 1, 3, 6, 11).

Each expectation was observed by running the real Claude Code against the embedded
server with the same scenario: an unknown tool is answered before the permission gate
and is no denial; a malformed tool_use keeps the reply's text and tells the model; the
``result`` is the last reply's text alone; a Stop hook reads ``last_assistant_message``.
Every run goes through ``queryloop run`` in a subprocess, hooks are real subprocesses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from queryloop.handlers.output import MALFORMED_TOOL_USE_PROMPT

from .harness import CliRun, MockApi, assert_ledger_closed, run_cli
from .test_hooks_and_permissions import script, settings
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~40 s in all: tools/test.sh --fast leaves the module out

NOPE = "{tool_use: {name: Nope, input: {x: 1}}}"
GLOB = '{tool_use: {name: Glob, input: {pattern: "*.txt"}}}'
NO_SUCH_TOOL = "<tool_use_error>Error: No such tool available: Nope</tool_use_error>"


def dump_hook(tmp_path: Path, name: str) -> tuple[str, Path]:
    """A hook that appends its stdin, one JSON document a line, to ``name``.jsonl."""
    out = tmp_path / f"{name}.jsonl"
    return script(tmp_path, f"{name}.sh", f"cat >> {out}\necho >> {out}\n"), out


def dumped(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def tool_results(run: CliRun) -> list[dict[str, Any]]:
    return [block for line in run.of("user") for block in line["message"]["content"]]


# ---- item 1: an unknown tool is looked up before the gate, and is no denial -----------------------


def test_an_unknown_tool_gets_claude_codes_error_before_any_hook_and_is_no_denial(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    pre, pre_log = dump_hook(tmp_path, "pre")
    post, post_log = dump_hook(tmp_path, "post")
    hooks = settings(
        PreToolUse=[{"matcher": "*", "hooks": [{"type": "command", "command": pre}]}],
        PostToolUse=[{"matcher": "*", "hooks": [{"type": "command", "command": post}]}],
    )
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{{text: "Let me try."}}, {NOPE}, {GLOB}]}}
    - reply: {{content: [{{text: "done"}}]}}
""")
    with MockApi(text) as api:
        # the default mode: an unknown tool would "ask" there, and headless be denied, were the gate first
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--permission-mode", "default", "--settings", hooks],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert len(api.requests) == 2
    sent = api.requests[1].messages[-1]["content"]
    assert sent[0] == {
        "type": "tool_result",
        "tool_use_id": sent[0]["tool_use_id"],
        "content": NO_SUCH_TOOL,
        "is_error": True,
    }
    assert sent[1]["is_error"] is False and "a.txt" in sent[1]["content"], "the known tool beside it runs"
    assert run.result["permission_denials"] == []
    assert run.reasons == ["tools_requested", "next_turn", "answer_recorded"]
    assert [d["tool_name"] for d in dumped(pre_log)] == ["Glob"], "no PreToolUse hook for a tool that does not exist"
    assert [d["tool_name"] for d in dumped(post_log)] == ["Glob"]
    assert NO_SUCH_TOOL in [r["content"] for r in tool_results(run)], "a stream-json user line shows it as sent"


def test_a_tool_a_bare_deny_rule_removed_is_unknown_and_says_why(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{tool_use: {name: Bash, input: {command: "echo hi"}}}]}
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--permission-mode", "default", "--disallowed-tools", "Bash"],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert "Bash" not in api.requests[0].tools
    (result,) = api.requests[1].messages[-1]["content"]
    assert result["is_error"] is True
    assert result["content"].startswith("<tool_use_error>Error: No such tool available: Bash. ")
    assert result["content"].endswith("</tool_use_error>") and "deny rule" in result["content"]
    assert run.result["permission_denials"] == []


def test_unknown_tools_asked_for_again_and_again_never_trip_the_repeated_denial_breaker(tmp_path: Path) -> None:
    write = '{tool_use: {name: Write, input: {file_path: w.txt, content: "x"}}}'
    text = scenario(f"""  mock-primary:
    - reply: {{content: [{NOPE}]}}
      repeat: 4
    - reply: {{content: [{NOPE}, {write}]}}
      repeat: 4
    - reply: {{content: [{{text: "giving up"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--permission-mode", "default"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(api.requests) == 9
    assert run.result["terminal_reason"] == "completed" and run.result["result"] == "giving up"
    assert "repeated_denial_accepted" not in run.reasons and "permission_denied" not in run.reasons
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Write"] * 4, "Write alone was denied"
    assert not (tmp_path / "w.txt").exists()
    assert_ledger_closed(api.requests)


# ---- item 3: a malformed tool_use keeps the text and tells the model ----------------------------------


def test_a_malformed_tool_use_keeps_the_text_drops_the_block_and_tells_the_model(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "Let me list the files."}], stop_reason: tool_use}
    - reply: {content: [{text: "There is nothing to list."}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "List the files.", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(api.requests) == 2
    first, second = (list(r.messages) for r in api.requests)
    assert second[: len(first)] == first
    assert second[len(first) :] == [
        {"role": "assistant", "content": [{"type": "text", "text": "Let me list the files."}]},
        {"role": "user", "content": MALFORMED_TOOL_USE_PROMPT},
    ]
    assert run.reasons == ["malformed_tool_use_retry", "answer_recorded"]
    assert run.result["result"] == "There is nothing to list."
    assert MALFORMED_TOOL_USE_PROMPT not in run.stdout, "the note to the model is hidden"


def test_a_malformed_tool_use_with_nothing_else_still_tells_the_model(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [], stop_reason: tool_use}
    - reply: {content: [{text: "answer"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    first, second = (list(r.messages) for r in api.requests)
    assert second == [*first, {"role": "user", "content": MALFORMED_TOOL_USE_PROMPT}]
    assert run.result["result"] == "answer"


def test_a_second_malformed_tool_use_ends_the_run_after_two_requests(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "first try"}], stop_reason: tool_use}
    - reply: {content: [{text: "second try"}], stop_reason: tool_use}
    - reply: {content: [{text: "never"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1 and len(api.requests) == 2
    assert list(api.requests[1].messages[-2:]) == [
        {"role": "assistant", "content": [{"type": "text", "text": "first try"}]},
        {"role": "user", "content": MALFORMED_TOOL_USE_PROMPT},
    ]
    assert run.result["terminal_reason"] == "malformed_tool_use_exhausted" and run.result["is_error"] is True


# ---- item 6: the result is the last reply's text ----------------------------------------------------


def result_of(tmp_path: Path, steps: str) -> tuple[dict[str, Any], int]:
    with MockApi(scenario(steps)) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    return run.result, len(api.requests)


def test_after_max_tokens_recoveries_the_result_is_the_last_piece_alone(tmp_path: Path) -> None:
    result, requests = result_of(
        tmp_path,
        """  mock-primary:
    - reply: {content: [{text: "Part one, cut off mid"}], stop_reason: max_tokens}
    - reply: {content: [{text: " sentence; part two"}], stop_reason: max_tokens}
    - reply: {content: [{text: " as well, and this is the end."}]}
""",
    )
    assert requests == 3
    assert result["result"] == " as well, and this is the end."
    assert result["stop_reason"] == "end_turn" and result["terminal_reason"] == "completed"


def test_the_result_is_the_text_of_the_replys_last_block_as_claude_code_reports_it(tmp_path: Path) -> None:
    two = '    - reply: {content: [{text: "Alpha."}, {thinking: "t", signature: s}, {text: "Beta."}]}\n'
    assert result_of(tmp_path, "  mock-primary:\n" + two)[0]["result"] == "Beta."
    last_thinking = '    - reply: {content: [{text: "Alpha."}, {thinking: "t", signature: s}]}\n'
    assert result_of(tmp_path, "  mock-primary:\n" + last_thinking)[0]["result"] == ""


def test_after_a_pause_turn_continuation_or_a_thinking_nudge_the_result_is_the_last_reply(tmp_path: Path) -> None:
    paused = """  mock-primary:
    - reply: {content: [{text: "paused part. "}], stop_reason: pause_turn}
    - reply: {content: [{text: "final part."}]}
"""
    result, requests = result_of(tmp_path, paused)
    assert requests == 2 and result["result"] == "final part."
    nudged = """  mock-primary:
    - reply: {content: [{thinking: "hmm", signature: s}]}
    - reply: {content: [{text: "visible."}]}
"""
    assert result_of(tmp_path, nudged)[0]["result"] == "visible."


# ---- item 11: the Stop hook reads last_assistant_message --------------------------------------------


def stop_inputs(tmp_path: Path, steps: str, *, block_once: bool = False) -> tuple[list[dict[str, Any]], CliRun]:
    out = tmp_path / "stop.jsonl"
    block = 'if echo "$input" | grep -q \'"stop_hook_active": *false\'; then echo "go on" >&2; exit 2; fi\n'
    hook = script(tmp_path, "stop.sh", f'input=$(cat)\necho "$input" >> {out}\n{block if block_once else ""}')
    with MockApi(scenario(steps)) as api:
        run = run_cli(
            [
                "-p",
                "hi",
                "--model",
                "mock-primary",
                "--settings",
                settings(Stop=[{"hooks": [{"type": "command", "command": hook}]}]),
            ],
            api=api,
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    return dumped(out), run


def test_the_stop_hook_reads_the_last_assistant_message_trimmed_after_each_answer(tmp_path: Path) -> None:
    inputs, run = stop_inputs(
        tmp_path,
        """  mock-primary:
    - reply: {content: [{text: "Alpha."}, {text: " Beta. "}]}
    - reply: {content: [{text: "Gamma."}, {text: "Delta.\\n"}]}
""",
        block_once=True,
    )
    assert [(i["stop_hook_active"], i["last_assistant_message"]) for i in inputs] == [
        (False, "Beta."),
        (True, "Delta."),
    ]
    # Claude Code 2.1.235's order, with its lists of pending work (always empty here: issue 27, item 8)
    assert list(inputs[0])[-4:] == ["stop_hook_active", "last_assistant_message", "background_tasks", "session_crons"]
    assert inputs[0]["hook_event_name"] == "Stop"
    transcript = Path(inputs[0]["transcript_path"])
    assert transcript.name == f"{run.result['session_id']}.jsonl" and transcript.is_file(), "the real transcript"
    assert run.result["result"] == "Delta.\n"


def test_the_stop_hook_reads_the_last_piece_after_max_tokens_and_nothing_after_thinking_only(tmp_path: Path) -> None:
    inputs, _ = stop_inputs(
        tmp_path,
        """  mock-primary:
    - reply: {content: [{text: "Part one, cut"}], stop_reason: max_tokens}
    - reply: {content: [{text: " and the end."}]}
""",
    )
    assert [i["last_assistant_message"] for i in inputs] == ["and the end."]
    (tmp_path / "stop.jsonl").unlink()
    inputs, run = stop_inputs(
        tmp_path,
        """  mock-primary:
    - reply: {content: [{thinking: "hmm", signature: s}]}
      repeat: 2
""",
    )
    assert run.reasons == ["thinking_only_nudge", "thinking_only_accepted"]
    assert len(inputs) == 1 and "last_assistant_message" not in inputs[0]
