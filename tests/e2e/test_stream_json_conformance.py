"""End-to-end: the result object and stream-json lines have Claude Code 2.1.235's shapes (issues 11 and 27).

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
import re
from pathlib import Path
from typing import Any

import pytest

from .harness import MockApi, run_cli
from .test_hooks_and_permissions import script, settings
from .test_request_layer import scenario

pytestmark = pytest.mark.slow  # ~40 s in all: tools/test.sh --fast leaves the module out

ARGS = ["-p", "go", "--model", "mock-primary"]
OURS = {"transition", "api_request"}  # our extra system lines (docs/differences.md)


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
    assert "alpha" in ok["message"]["content"][0]["content"]
    assert ok["tool_use_result"]["file"]["content"] == "alpha\n", "Read's record, as Claude Code's"
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
    for empty in ("mcp_servers", "slash_commands", "skills", "plugins"):
        assert init[empty] == [], empty
    # the built-in ones, by name, case aside (Claude Code 2.1.235 lists statusline-setup too)
    assert init["agents"] == ["claude", "Explore", "general-purpose", "Plan"]
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


# ---- issue 27: the budget, a refused resume, the newer keys, an unlisted model, the Stop hook ------------------

BASH_THEN_DONE = """  mock-primary:
    - reply:
        content: [{{tool_use: {{name: Bash, input: {{command: "echo ran > ran.txt", description: mark}}}}}}]
        usage: {{input_tokens: {first}, output_tokens: 10}}
    - reply:
        content: [{{tool_use: {{name: Bash, input: {{command: "echo again >> ran.txt", description: mark}}}}}}]
        usage: {{input_tokens: {second}, output_tokens: 10}}
    - reply: {{content: [{{text: "done"}}]}}
"""


def test_a_budget_the_first_reply_spends_runs_none_of_its_tools_and_counts_one_turn(tmp_path: Path) -> None:
    # Claude Code 2.1.235: assistant lines, then the result; no user line, num_turns 1
    with MockApi(scenario(BASH_THEN_DONE.format(first=100_000, second=10))) as api:
        run = run_cli([*ARGS, "--max-budget-usd", "0.01"], api=api, cwd=tmp_path)
    result = run.result
    assert _claude_code_lines(run.lines) == [
        ("system", "init"),
        ("assistant", None),
        ("result", "error_max_budget_usd"),
    ]
    assert (result["num_turns"], result["stop_reason"], result["terminal_reason"]) == (
        1,
        "tool_use",
        "budget_exhausted",
    )
    assert result["errors"] == ["Reached maximum budget ($0.01)"] and len(api.requests) == 1
    assert not (tmp_path / "ran.txt").exists()


def test_a_budget_spent_after_one_tool_round_counts_two_turns(tmp_path: Path) -> None:
    # Claude Code 2.1.235: the round's result is shown and counted, the second reply's calls are not
    with MockApi(scenario(BASH_THEN_DONE.format(first=10, second=100_000))) as api:
        run = run_cli([*ARGS, "--max-budget-usd", "0.2"], api=api, cwd=tmp_path)
    assert [kind for kind, _ in _claude_code_lines(run.lines)] == ["system", "assistant", "user", "assistant", "result"]
    assert run.result["num_turns"] == 2 and run.result["subtype"] == "error_max_budget_usd"
    assert (tmp_path / "ran.txt").read_text() == "ran\n"


def test_an_unknown_resume_id_in_stream_json_ends_with_a_runs_result_keys(tmp_path: Path) -> None:
    missing = "123e4567-e89b-12d3-a456-426614174000"
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')) as api:
        run = run_cli([*ARGS, "--resume", missing], api=api, cwd=tmp_path)
    (result,) = run.lines
    assert run.returncode == 1 and api.requests == []
    assert (result["subtype"], result["is_error"], result["num_turns"]) == ("error_during_execution", True, 0)
    assert result["stop_reason"] is None and result["session_id"] == missing and result["total_cost_usd"] == 0
    split = result["usage"].pop("cache_creation")  # Claude Code 2.1.235: both lifetimes 0 here too
    assert set(split.values()) == set(result["usage"].values()) == {0}
    assert result["modelUsage"] == {} and result["permission_denials"] == []
    assert result["errors"] == [f"No conversation found with session ID: {missing}"]
    assert "terminal_reason" not in result


def test_assistant_and_user_lines_carry_a_timestamp_and_api_retry_lines_a_uuid(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n")
    text = scenario(
        f"  mock-primary:\n    - error: {{status: 529}}\n    - reply: {{content: [{_read('a.txt')}]}}\n"
        '    - reply: {content: [{text: "done"}]}\n'
    )
    with MockApi(text) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    stamped = run.of("assistant") + run.of("user")
    assert len(stamped) == 3
    for line in stamped:  # Claude Code's form: UTC, milliseconds, Z
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["timestamp"]), line
    (retry,) = run.of("system", "api_retry")
    assert re.fullmatch(r"[0-9a-f-]{36}", retry["uuid"])


def test_the_init_line_has_claude_code_2_1_235s_newer_keys(tmp_path: Path) -> None:
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path)
    init = run.lines[0]
    assert init["claude_code_version"] == "2.1.235"
    assert init["analytics_disabled"] is True and init["product_feedback_disabled"] is True
    assert init["capabilities"] == [] and init["terminal_slash_commands"] == []  # docs/differences.md
    assert (init["fast_mode_state"], init["fast_mode_disabled_reason"]) == ("off", "disabled_by_env")


def test_a_success_reports_when_the_first_request_left_and_the_first_token_came(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n      delay_ms: 300\n')
    with MockApi(text) as api:
        run = run_cli(ARGS, api=api, cwd=tmp_path, fmt="json")
    result = run.result
    assert result["ttft_stream_ms"] == result["ttft_ms"] >= 300
    assert 0 <= result["time_to_request_ms"] <= result["ttft_ms"] - 300
    assert (result["fast_mode_state"], result["fast_mode_disabled_reason"]) == ("off", "disabled_by_env")


def test_a_model_the_price_table_does_not_list_is_priced_as_claude_code_prices_it(tmp_path: Path) -> None:
    usage = "{input_tokens: 4000, output_tokens: 6000, cache_creation_input_tokens: 0, cache_read_input_tokens: 0}"
    text = scenario(
        f'  zz-unlisted-model:\n    - reply: {{content: [{{text: "hi"}}], usage: {usage}}}\n', model="zz-unlisted-model"
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "go", "--model", "zz-unlisted-model"], api=api, cwd=tmp_path, fmt="json")
    entry = run.result["modelUsage"]["zz-unlisted-model"]
    # Claude Code 2.1.235, the same model id: $5 / $25 / $6.25 / $0.50 per million tokens, a 200k window
    expected = 4000 * 5 + 6000 * 25 + entry["cacheCreationInputTokens"] * 6.25 + entry["cacheReadInputTokens"] * 0.5
    assert entry["costUSD"] == pytest.approx(expected / 1e6)
    assert run.result["total_cost_usd"] == pytest.approx(expected / 1e6) and entry["contextWindow"] == 200_000


def test_hooks_after_the_prompt_read_its_id_and_stop_reads_no_pending_work(tmp_path: Path) -> None:
    _files(tmp_path, a="alpha\n")
    log = tmp_path / "hook-input.jsonl"
    hook = script(tmp_path, "log.sh", f"cat >> {log}\necho >> {log}\n")
    each = [{"hooks": [{"type": "command", "command": hook}]}]
    hooks = settings(SessionStart=each, PreToolUse=[{"matcher": "*", **each[0]}], Stop=each)
    text = scenario(
        f'  mock-primary:\n    - reply: {{content: [{_read("a.txt")}]}}\n    - reply: {{content: [{{text: "done"}}]}}\n'
    )
    with MockApi(text) as api:
        run = run_cli([*ARGS, "--settings", hooks], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    start, pre, stop = (json.loads(line) for line in log.read_text().splitlines() if line.strip())
    # Claude Code 2.1.235: no prompt_id before the prompt, the same one on every hook after it
    assert (start["hook_event_name"], pre["hook_event_name"], stop["hook_event_name"]) == (
        "SessionStart",
        "PreToolUse",
        "Stop",
    )
    assert "prompt_id" not in start and re.fullmatch(r"[0-9a-f-]{36}", pre["prompt_id"])
    assert stop["prompt_id"] == pre["prompt_id"]
    assert stop["background_tasks"] == [] and stop["session_crons"] == []
    assert "effort" not in stop  # docs/differences.md (requests carry no effort level)
