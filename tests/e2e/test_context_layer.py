"""End-to-end: the context layer — reactive compaction, collapses, auto-compaction breakers —
through the real SDK against the embedded server, whose prompt-too-long answers depend on the
real size of each request (``input_tokens_over``), not on its position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.handlers.context.services.compaction import CLEARED_RESULT, SUMMARY_MARKER
from queryloop.mockapi.server import RecordedRequest

from .harness import MockApi, assert_ledger_closed, run_cli

pytestmark = pytest.mark.slow  # ~35 s in all: tools/test.sh --fast leaves the module out

# an 8k window, 7000 effective; the six built-in tools only: the sizes below count their definitions (the Agent
# tool's would add ~450 tokens)
SMALL = ["--model", "mock-small-context", "--max-output-tokens", "1000", "--tools", "Read,Write,Edit,Bash,Glob,Grep"]
SUMMARY_RULE = f"""  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}
    reply: {{content: [{{text: "Summary: the user asked for outputs; they were printed."}}]}}
"""


def bash(chars: int, turn: int = 0) -> str:
    """A command printing ``chars`` digits; each turn's differs (the same one after a compaction is a ledger hit)."""
    return f'{{tool_use: {{name: Bash, input: {{command: "printf %0{chars}d {turn}"}}}}}}'


def turns(*sizes: int, final: str = "done") -> str:
    steps = "".join(f"    - reply: {{content: [{bash(n, i)}]}}\n" for i, n in enumerate(sizes))
    return steps + f'    - reply: {{content: [{{text: "{final}"}}]}}\n'


def scenario(rules: str, steps: str) -> str:
    head = "schema_version: 1\nscenario: ctx\nmodel: mock-small-context\n"
    return f"{head}rules:\n{rules}models:\n  mock-small-context:\n{steps}"


def summaries(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if SUMMARY_MARKER in json.dumps(r.messages[-1:])]


def main_requests(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if SUMMARY_MARKER not in json.dumps(r.messages[-1:])]


PTL_OVER_5000 = """  - when: {input_tokens_over: 5000}
    error: {status: 400, message: "prompt is too long: {n} tokens > {limit} maximum"}
"""


def test_a_request_over_the_limit_is_compacted_once_and_the_same_turn_succeeds(tmp_path: Path) -> None:
    text = scenario(SUMMARY_RULE + PTL_OVER_5000, turns(12000, 6000))
    with MockApi(text) as api:
        run = run_cli([*SMALL, "-p", "print things", "--auto-compact-threshold", "100"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    assert "reactive_compact_retry" in run.reasons and "reactive_compact_succeeded" in run.reasons
    assert len(summaries(api.requests)) == 1
    assert len(run.of("system", "api_request")) == len(api.requests), "summary requests are logged too"
    statuses = [r.response_status for r in api.requests]
    assert statuses.count(400) == 1
    assert "prompt is too long" not in run.stdout, "the withheld error never reaches the user"
    assert [r["withheld"] for r in run.of("system", "api_request") if r["status"] == 400] == [True]
    assert len(run.of("system", "compact_boundary")) == 1
    boundary = run.of("system", "compact_boundary")[0]
    assert (
        boundary["trigger"] == "reactive"
        and boundary["pre_tokens"] > boundary["post_tokens"]
        and boundary["lossy"] is False
    )
    retried, failed = main_requests(api.requests)[-1], next(r for r in api.requests if r.response_status == 400)
    assert retried.messages[0]["content"] != failed.messages[0]["content"], (
        "the retry is built on the compacted transcript"
    )
    assert run.result["result"] == "done"
    assert_ledger_closed(main_requests(api.requests))


def test_still_too_long_after_one_compaction_surfaces_the_error(tmp_path: Path) -> None:
    text = scenario(SUMMARY_RULE + PTL_OVER_5000, turns(400, 20000))
    with MockApi(text) as api:
        run = run_cli([*SMALL, "-p", "print things", "--auto-compact-threshold", "100"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert len(summaries(api.requests)) == 1, "exactly one compaction per turn"
    assert run.reasons[-3:] == ["reactive_compact_retry", "reactive_compact_succeeded", "prompt_too_long_surfaced"]
    result = run.result
    assert result["terminal_reason"] == "prompt_too_long" and result["result"] == "Prompt is too long"
    assert result["api_error_status"] == 400
    assert_ledger_closed(main_requests(api.requests))


def test_staged_collapses_free_enough_room_without_a_summary_request(tmp_path: Path) -> None:
    text = scenario(SUMMARY_RULE + PTL_OVER_5000, turns(12000, 300, 6000))
    with MockApi(text) as api:
        run = run_cli([*SMALL, "-p", "print things", "--auto-compact-threshold", "100"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    assert summaries(api.requests) == []
    assert "collapse_drain_retry" in run.reasons
    failed = next(i for i, r in enumerate(api.requests) if r.response_status == 400)
    retried = api.requests[failed + 1]
    assert len(retried.messages) == len(api.requests[failed].messages), "the same request, only smaller"
    stubbed = json.dumps(retried.messages[2])
    assert "tool result collapsed" in stubbed
    assert_ledger_closed(api.requests)


def test_three_auto_compaction_failures_open_the_breaker_for_the_fourth_turn(tmp_path: Path) -> None:
    failing = f"""  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}
    error: {{status: 403, message: "summariser forbidden"}}
"""
    text = scenario(failing, turns(2400, 2400, 2400, 2400))
    with MockApi(text) as api:
        run = run_cli(
            [*SMALL, "-p", "print things", "--auto-compact-threshold", "25", "--verbose"], api=api, cwd=tmp_path
        )
    assert run.returncode == 0, run.reasons
    assert len(summaries(api.requests)) == 3
    assert run.reasons.count("auto_compact_start") == 3 and run.reasons.count("auto_compact_failed") == 3
    assert "auto_compact_breaker" in run.reasons
    assert run.reasons.index("auto_compact_breaker") > max(
        i for i, r in enumerate(run.reasons) if r == "auto_compact_start"
    )


def test_compactions_every_two_turns_trip_the_rapid_refill_breaker(tmp_path: Path) -> None:
    text = scenario(SUMMARY_RULE, turns(*([4800] * 9)))
    with MockApi(text) as api:
        run = run_cli([*SMALL, "-p", "print things", "--auto-compact-threshold", "57"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert run.reasons[-1] == "rapid_refill_breaker"
    assert run.result["terminal_reason"] == "rapid_refill_breaker" and "thrashing" in run.result["result"]
    assert len(summaries(api.requests)) == run.reasons.count("auto_compact_succeeded") == 3
    assert_ledger_closed(main_requests(api.requests))


def test_without_compaction_prompt_too_long_surfaces_at_once(tmp_path: Path) -> None:
    text = scenario(PTL_OVER_5000, turns(24000))
    with MockApi(text) as api:
        run = run_cli([*SMALL, "-p", "print things", "--no-auto-compact"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert run.reasons[-1] == "prompt_too_long_surfaced" and "over_threshold_accepted" in run.reasons
    assert run.result["result"] == "Prompt is too long" and run.result["api_error_status"] == 400
    assert summaries(api.requests) == []


def test_a_413_is_recovered_like_prompt_too_long(tmp_path: Path) -> None:
    rules = (
        SUMMARY_RULE
        + """  - when: {input_tokens_over: 5000}
    error: {status: 413, message: "request entity too large"}
"""
    )
    with MockApi(scenario(rules, turns(12000, 6000))) as api:
        run = run_cli([*SMALL, "-p", "print things", "--auto-compact-threshold", "100"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    assert "reactive_compact_retry" in run.reasons


def test_the_estimate_is_checked_with_count_tokens_near_the_threshold(tmp_path: Path) -> None:
    with MockApi(scenario(SUMMARY_RULE, turns(2400, 2400))) as api:
        run = run_cli([*SMALL, "-p", "print things", "--auto-compact-threshold", "25"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    counted = [r for r in api.server.requests if r.path == "/v1/messages/count_tokens"]
    assert counted, "count_tokens is asked before paying for a compaction"
    assert "auto_compact_succeeded" in run.reasons


def test_a_summary_request_that_is_overloaded_backs_off_and_is_sent_again(tmp_path: Path) -> None:
    overloaded_once = f"""  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}
    times: 1
    error: {{status: 529}}
"""
    text = scenario(overloaded_once + SUMMARY_RULE, turns(2400, 2400))
    with MockApi(text) as api:
        run = run_cli([*SMALL, "-p", "print things", "--auto-compact-threshold", "25"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    ladder = ["auto_compact_start", "auto_summary_backoff", "auto_summary_retry", "auto_compact_succeeded"]
    start = run.reasons.index("auto_compact_start")
    assert run.reasons[start : start + 4] == ladder
    assert [r.response_status for r in summaries(api.requests)][:2] == [529, 200]
    retry = run.of("system", "api_retry")
    assert len(retry) == 1 and retry[0]["error_status"] == 529, "the summary's retry is announced like any retry"


def test_a_reactive_summary_that_keeps_failing_ends_prompt_too_long_after_its_retries(tmp_path: Path) -> None:
    down = f"""  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}
    error: {{status: 503, message: "summariser unavailable"}}
"""
    text = scenario(down + PTL_OVER_5000, turns(12000, 6000))
    with MockApi(text) as api:
        args = [*SMALL, "-p", "print things", "--auto-compact-threshold", "100", "--max-retries", "2"]
        run = run_cli(args, api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert run.reasons[-3:] == [
        "reactive_summary_retry",
        "reactive_summary_backoff",
        "reactive_summary_retries_exhausted",
    ]
    assert len(summaries(api.requests)) == 3, "the first summary request and its 2 retries"
    result = run.result
    assert result["terminal_reason"] == "prompt_too_long" and result["api_error_status"] == 400
    assert "the summary request kept failing" in result["result"] and "503" in result["result"]


MICRO = """schema_version: 1
scenario: microcompact
model: mock-primary
models:
  mock-primary:
{steps}"""


def bash_turns(*sizes: int) -> str:
    """Tool turns running Bash commands that print ``sizes`` digits, then an answer."""
    steps = "".join(
        f'    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "printf %0{n}d {i}"}}}}}}]}}\n'
        for i, n in enumerate(sizes)
    )
    return MICRO.format(steps=steps + '    - reply: {content: [{text: "done"}]}\n')


def results(request: RecordedRequest) -> list[str]:
    """The content of every tool_result the request sends, in order."""
    return [
        str(block["content"])
        for message in request.messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def test_old_tool_results_are_cleared_once_that_frees_enough_and_the_newest_four_stay(tmp_path: Path) -> None:
    # two large old results (~12,500 tokens), then four small ones: clearing the two frees more than the
    # request after them would write again, so the seventh request sends them cleared
    text = bash_turns(25_000, 25_000, 1_000, 1_000, 1_000, 1_000)
    with MockApi(text) as api:
        run = run_cli(["-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.reasons.count("microcompact") == 1
    before, after = api.requests[-2], api.requests[-1]
    assert [len(r) for r in results(before)][:2] == [25_000, 25_000], "nothing is cleared before it pays"
    assert results(after)[:2] == [CLEARED_RESULT, CLEARED_RESULT]
    assert results(after)[2:] == [f"{i:01000d}" for i in range(2, 6)], "the newest four are sent as they were"
    assert after.input_tokens < before.input_tokens - 10_000
    assert_ledger_closed(api.requests)
    # the transcript holds the cleared history: a resumed session sends it as the last request did
    answer = MICRO.format(steps='    - reply: {content: [{text: "again"}]}\n')
    with MockApi(answer) as api2:
        session = str(run.result["session_id"])
        again = run_cli(["--resume", session, "-p", "once more", "--model", "mock-primary"], api=api2, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    resumed = api2.requests[0].messages
    assert resumed[: len(after.messages)] == after.messages, "the cleared history, as the last request sent it"
    assert results(api2.requests[0])[:2] == [CLEARED_RESULT, CLEARED_RESULT]


def test_no_microcompact_keeps_every_tool_result(tmp_path: Path) -> None:
    text = bash_turns(25_000, 25_000, 1_000, 1_000, 1_000, 1_000)
    with MockApi(text) as api:
        run = run_cli(["-p", "print things", "--model", "mock-primary", "--no-microcompact"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "microcompact" not in run.reasons
    assert CLEARED_RESULT not in results(api.requests[-1])


@pytest.mark.parametrize(("model", "compacts"), [("claude-haiku-4-5-20251001", True), ("haiku[1m]", False)])
def test_a_model_named_with_1m_compacts_against_a_1m_token_window(tmp_path: Path, model: str, compacts: bool) -> None:
    # ~25k tokens of output: over 10 % of haiku's 200k window, under 10 % of the 1M one [1m] asks for
    steps = turns(20000, 20000, 20000, 20000, 20000)
    text = f"schema_version: 1\nscenario: ctx\nmodel: mock-primary\nrules:\n{SUMMARY_RULE}default:\n{steps}"
    args = ["--model", model, "--max-output-tokens", "1000", "--tools", "Bash"]
    with MockApi(text) as api:
        run = run_cli([*args, "-p", "print things", "--auto-compact-threshold", "10"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    assert ("auto_compact_succeeded" in run.reasons) is compacts
    assert {r.headers.get("anthropic-beta") for r in main_requests(api.requests)} == {
        None if compacts else "context-1m-2025-08-07"
    }
