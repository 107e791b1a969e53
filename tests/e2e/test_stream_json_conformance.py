"""End-to-end: the result object and stream-json lines have Claude Code 2.1.235's shapes (issue 11: 4, 5, 8, 9).

Every expectation here was observed running Claude Code 2.1.235 headless against the
embedded server on the same scenarios: which errors are ``subtype: success`` with
``is_error: true``, how it counts ``num_turns``, one ``assistant`` line per content
block with the API's message id, ``tool_use_result`` on ``user`` lines, the
``system/model_fallback`` line, the ``init`` fields, ``modelUsage``, ``errors`` and
``ttft_ms``. Our ``system/transition`` and ``system/api_request`` lines are a
deliberate addition and are left out of the line-order comparisons.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .harness import MockApi, run_cli
from .test_hooks_and_permissions import script, settings
from .test_request_layer import scenario

ARGS = ["-p", "go", "--model", "mock-primary"]
OURS = {"transition", "api_request"}  # our extra system lines (README, differences)


def _claude_code_lines(lines: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """The kinds of the lines Claude Code also writes, in order."""
    return [(line["type"], line.get("subtype")) for line in lines if line.get("subtype") not in OURS]


def _read(name: str) -> str:
    return f"{{tool_use: {{name: Read, input: {{file_path: {name}}}}}}}"


def _files(tmp_path: Path, **contents: str) -> None:
    for name, text in contents.items():
        (tmp_path / f"{name}.txt").write_text(text)


# ---- item 4: which ends are `success` with `is_error: true` ---------------------------------------------------

ERROR_ENDS = {
    "api_error": '    - error: {status: 400, message: "bad request thing"}\n',
    "prompt_too_long": '    - error: {status: 400, message: "prompt is too long: 250000 tokens > 200000 maximum"}\n',
    "malformed_tool_use_exhausted": '    - reply: {content: [{text: "x"}], stop_reason: tool_use}\n      repeat: 2\n',
    "max_output_tokens": '    - reply: {content: [{text: "more "}], stop_reason: max_tokens}\n      repeat: 4\n',
}


@pytest.mark.parametrize("terminal", list(ERROR_ENDS))
def test_errors_the_loop_surfaces_are_success_with_is_error_and_keep_their_result(
    tmp_path: Path, terminal: str
) -> None:
    with MockApi(scenario("  mock-primary:\n" + ERROR_ENDS[terminal])) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    result = run.result
    assert run.returncode == 1
    assert (result["subtype"], result["is_error"], result["terminal_reason"]) == ("success", True, terminal)
    assert result["result"] and "errors" not in result and "api_error_status" in result
    assert "ttft_ms" not in result, "Claude Code gives ttft_ms only to a result that is no error"
    assert result["num_turns"] == (2 if terminal == "malformed_tool_use_exhausted" else 1)


def test_a_pre_tool_use_hook_that_stops_the_run_is_no_error(tmp_path: Path) -> None:
    hook = script(tmp_path, "stop.sh", 'cat > /dev/null\necho \'{"continue": false, "stopReason": "freeze"}\'\n')
    _files(tmp_path, a="alpha\n")
    text = scenario(f'  mock-primary:\n    - reply: {{content: [{{text: "reading"}}, {_read("a.txt")}]}}\n')
    hooks = settings(PreToolUse=[{"matcher": "*", "hooks": [{"type": "command", "command": hook}]}])
    with MockApi(text) as api:
        run = run_cli([*ARGS, "--settings", hooks], api=api, cwd=tmp_path)
    result = run.result
    assert run.returncode == 0
    assert (result["subtype"], result["is_error"], result["terminal_reason"]) == ("success", False, "hook_stopped")
    assert result["num_turns"] == 2 and isinstance(result["ttft_ms"], int)


# ---- item 5: num_turns --------------------------------------------------------------------------------------


def test_max_turns_1_with_one_tool_reports_two_turns(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n")
    text = scenario(
        f"  mock-primary:\n    - reply: {{content: [{_read('a.txt')}]}}\n"
        '    - reply: {content: [{text: "never"}]}\n'
    )
    with MockApi(text) as api:
        run = run_cli([*ARGS, "--max-turns", "1"], api=api, cwd=tmp_path)
    assert len(api.requests) == 1 and run.result["num_turns"] == 2


def test_max_turns_reports_the_refused_turn_however_many_tool_results_came_before(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n", b="beta\n")
    both = f"{{content: [{_read('a.txt')}, {_read('b.txt')}]}}"
    text = scenario(
        f"  mock-primary:\n    - reply: {both}\n      repeat: 2\n    - reply: {{content: [{{text: 'x'}}]}}\n"
    )
    with MockApi(text) as api:
        limited = run_cli([*ARGS, "--max-turns", "2"], api=api, cwd=tmp_path)
    with MockApi(text) as api:
        unlimited = run_cli(ARGS, api=api, cwd=tmp_path)
    assert limited.result["num_turns"] == 3, "--max-turns 2: the third turn was refused"
    assert unlimited.result["num_turns"] == 5, "1 + four tool results"


def test_two_malformed_replies_count_two_turns(tmp_path: Path) -> None:
    with MockApi(scenario("  mock-primary:\n" + ERROR_ENDS["malformed_tool_use_exhausted"])) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    assert len(api.requests) == 2 and run.result["num_turns"] == 2


def test_a_stop_hook_re_entry_counts_its_feedback_as_a_turn(tmp_path: Path) -> None:
    hook = script(
        tmp_path,
        "stop.sh",
        'input=$(cat)\nif echo "$input" | grep -q \'"stop_hook_active": *true\'; then exit 0; fi\n'
        'echo "keep going" >&2\nexit 2\n',
    )
    text = scenario(
        '  mock-primary:\n    - reply: {content: [{text: "first"}]}\n    - reply: {content: [{text: "second"}]}\n'
    )
    with MockApi(text) as api:
        run = run_cli(
            [*ARGS, "--settings", settings(Stop=[{"hooks": [{"type": "command", "command": hook}]}])],
            api=api,
            cwd=tmp_path,
        )
    assert len(api.requests) == 2 and run.result["num_turns"] == 2 and run.result["result"] == "second"


def test_two_parallel_reads_then_an_answer_count_three_turns(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n", b="beta\n")
    text = scenario(
        f"  mock-primary:\n    - reply: {{content: [{_read('a.txt')}, {_read('b.txt')}]}}\n"
        '    - reply: {content: [{text: "all done"}]}\n'
    )
    with MockApi(text) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    assert len(api.requests) == 2 and run.result["num_turns"] == 3


def test_three_rounds_and_a_reactive_compaction_count_five_turns(tmp_path: Path) -> None:
    filler = "".join(f"{{c}} line {i:05d} of filler text for the probe\n" for i in range(450))
    _files(tmp_path, f1=filler.format(c="a"), f2=filler.format(c="b"), f3=filler.format(c="c"))
    rules = (
        "rules:\n  - when: {last_user_contains: 'c line 00449'}\n    times: 1\n"
        "    error: {status: 400, message: 'prompt is too long: 250000 tokens > 200000 maximum'}\n"
        "otherwise: {reply: {content: [{text: 'final answer'}]}}\n"
    )
    steps = "".join(f"    - reply: {{content: [{_read(f'f{i}.txt')}]}}\n" for i in (1, 2, 3))
    with MockApi(scenario("  mock-primary:\n" + steps, extra=rules)) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(api.requests) == 6, "three rounds, the refused request, the summary, the rebuilt request"
    assert len(run.of("system", "compact_boundary")) == 1
    assert run.result["num_turns"] == 5, "1 + three tool results + the summary"


def test_hidden_continuations_of_a_truncated_answer_are_no_turns(tmp_path: Path) -> None:
    text = scenario(
        '  mock-primary:\n    - reply: {content: [{text: "one "}], stop_reason: max_tokens}\n      repeat: 3\n'
        '    - reply: {content: [{text: "end"}]}\n'
    )
    with MockApi(text) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    assert len(api.requests) == 4 and run.result["num_turns"] == 1


# ---- item 8: stream-json lines ------------------------------------------------------------------------------


def test_each_content_block_is_an_assistant_line_with_the_api_message_id(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n", b="beta\n")
    text = scenario(
        "  mock-primary:\n"
        f"    - reply: {{content: [{{text: 'reading both'}}, {_read('a.txt')}, {_read('b.txt')}]}}\n"
        "    - reply: {content: [{text: 'part one'}, {text: 'part two'}]}\n"
    )
    with MockApi(text) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    kinds = _claude_code_lines(run.lines)
    assert kinds == [
        ("system", "init"),
        ("assistant", None),
        ("assistant", None),
        ("assistant", None),
        ("user", None),
        ("user", None),
        ("assistant", None),
        ("assistant", None),
        ("result", "success"),
    ]
    assistants = run.of("assistant")
    assert [len(a["message"]["content"]) for a in assistants] == [1] * 5
    assert [a["message"]["content"][0]["type"] for a in assistants] == ["text", "tool_use", "tool_use", "text", "text"]
    first, second = (r.request_id for r in api.requests)
    expected = [first] * 3 + [second] * 2
    assert [a["message"]["id"] for a in assistants] == [r.replace("req_", "msg_", 1) for r in expected]
    assert [a["request_id"] for a in assistants] == expected
    assert all(line["parent_tool_use_id"] is None for line in [*assistants, *run.of("user")])
    assert run.result["result"] == "part two" and run.result["num_turns"] == 3


def test_user_lines_carry_the_tool_use_result_and_errors_read_error(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n")
    text = scenario(
        f"  mock-primary:\n    - reply: {{content: [{_read('a.txt')}, {_read('missing.txt')}]}}\n"
        "    - reply: {content: [{text: 'done'}]}\n"
    )
    with MockApi(text) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    by_id = {line["message"]["content"][0]["tool_use_id"]: line for line in run.of("user")}
    ok, missing = (
        by_id[b["id"]] for a in run.of("assistant") for b in a["message"]["content"] if b["type"] == "tool_use"
    )
    assert "alpha" in ok["tool_use_result"] and ok["tool_use_result"] == ok["message"]["content"][0]["content"]
    assert missing["message"]["content"][0]["is_error"] is True
    assert missing["tool_use_result"].startswith("Error: ")


@pytest.mark.parametrize(
    ("failure", "trigger"),
    [
        ("    - error: {status: 529}\n      repeat: 3\n", "overloaded"),
        ("    - error: {status: 404, message: 'model: mock-primary'}\n", "model_not_found"),
    ],
    ids=["overloaded", "not-found"],
)
def test_a_model_fallback_writes_a_system_line_before_the_fallback_request(
    tmp_path: Path, failure: str, trigger: str
) -> None:
    text = scenario(
        "  mock-primary:\n" + failure + '  mock-fallback:\n    - reply: {content: [{text: "from fallback"}]}\n'
    )
    with MockApi(text) as api:
        run = run_cli([*ARGS, "--fallback-model", "mock-fallback"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (line,) = run.of("system", "model_fallback")
    assert (line["trigger"], line["original_model"], line["fallback_model"]) == (
        trigger,
        "mock-primary",
        "mock-fallback",
    )
    assert line["content"] and line["session_id"] == run.result["session_id"]
    at = run.lines.index(line)
    requests = [i for i, item in enumerate(run.lines) if item.get("subtype") == "api_request"]
    assert run.lines[at - 1]["reason"].endswith("model_fallback"), "right after the transition that switched"
    assert run.lines[requests[-1]]["model"] == "mock-fallback" and requests[-1] > at


def test_the_init_line_has_claude_codes_fields(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')
    with MockApi(text) as api:
        run = run_cli([*ARGS, "--permission-mode", "acceptEdits"], api=api, cwd=tmp_path)
    init = run.lines[0]
    assert (init["type"], init["subtype"]) == ("system", "init")
    assert init["session_id"] == run.result["session_id"] and init["cwd"] == str(tmp_path)
    assert init["permissionMode"] == "acceptEdits" and init["apiKeySource"] == "ANTHROPIC_API_KEY"
    assert init["output_style"] == "default"
    for empty in ("mcp_servers", "slash_commands", "agents", "skills", "plugins"):
        assert init[empty] == [], empty
    assert isinstance(init["memory_paths"], dict) and init["machine"] == "query_loop"


# ---- item 9: result keys ------------------------------------------------------------------------------------


def test_a_success_has_model_usage_in_camel_case_and_a_time_to_first_token(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n      delay_ms: 300\n')
    with MockApi(text) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path, fmt="json")
    result = run.result
    assert "model_usage" not in result
    usage = result["modelUsage"]["mock-primary"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0 and usage["costUSD"] > 0
    assert usage["contextWindow"] == 200_000 and usage["maxOutputTokens"] == 32_000
    assert 300 <= result["ttft_ms"] <= result["duration_ms"], "from the run's start to the first token"


def test_error_max_turns_lists_its_error_and_has_no_result(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n")
    text = scenario(f"  mock-primary:\n    - reply: {{content: [{_read('a.txt')}]}}\n")
    with MockApi(text) as api:
        run = run_cli([*ARGS, "--max-turns", "1"], api=api, cwd=tmp_path, fmt="json")
    result = run.result
    assert run.returncode == 1 and result["subtype"] == "error_max_turns" and result["is_error"] is True
    assert result["errors"] == ["Reached maximum number of turns (1)"]
    assert not {"result", "api_error_status", "ttft_ms"} & set(result)
    assert json.dumps(result)  # still one plain JSON object


def test_error_max_budget_lists_its_error_and_has_no_result(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')
    with MockApi(text) as api:
        run = run_cli([*ARGS, "--max-budget-usd", "0.0001"], api=api, cwd=tmp_path, fmt="json")
    result = run.result
    assert result["subtype"] == "error_max_budget_usd" and result["errors"] == ["Reached maximum budget ($0.0001)"]
    assert "result" not in result
