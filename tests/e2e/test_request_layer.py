"""End-to-end: the request layer's transitions through the real SDK against the embedded server."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import MockApi, assert_ledger_closed, run_cli

pytestmark = pytest.mark.slow  # ~35 s in all: tools/test.sh --fast leaves the module out

FAST = '{retry-after-ms: "1"}'


def scenario(steps: str, *, model: str = "mock-primary", extra: str = "") -> str:
    return f"schema_version: 1\nscenario: t\nmodel: {model}\n{extra}models:\n{steps}"


def test_two_overloaded_answers_are_retried_and_the_third_request_succeeds(tmp_path: Path) -> None:
    text = scenario(
        f"""  mock-primary:
    - error: {{status: 529, headers: {FAST}}}
      repeat: 2
    - reply: {{content: [{{text: "fine"}}]}}
"""
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-retries", "2"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(api.requests) == 3
    assert run.reasons == ["overloaded_backoff", "api_retry", "overloaded_backoff", "api_retry", "answer_recorded"]
    retries = run.of("system", "api_retry")
    assert [r["attempt"] for r in retries] == [1, 2]
    assert all(r["error_status"] == 529 and r["max_retries"] == 2 for r in retries)
    assert [r["retry_delay_ms"] for r in retries] == [1, 2], "the backoff (base 1 ms here) beats retry-after-ms 1"
    assert run.result["result"] == "fine" and run.result["subtype"] == "success"


def test_a_400_is_not_retried_and_exits_1(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 400, message: "messages: bad role"}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-retries", "2"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert len(api.requests) == 1
    assert run.reasons == ["request_rejected_surfaced"]
    result = run.result
    assert result["is_error"] is True and result["terminal_reason"] == "api_error" and result["api_error_status"] == 400
    assert "messages: bad role" in result["result"]


def test_retries_exhausted_surfaces_the_last_error(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - error: {{status: 500, headers: {FAST}}}
      repeat: 5
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-retries", "2"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert len(api.requests) == 3
    assert run.reasons[-1] == "api_retries_exhausted"
    assert run.result["terminal_reason"] == "api_error" and "gave up after 2 retries" in run.result["result"]


def test_a_401_is_retried_within_max_retries_as_claude_code_retries_it(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 401}
    - reply: {content: [{text: "fine"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-retries", "2"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(api.requests) == 2
    assert run.reasons == ["auth_error_backoff", "api_retry", "answer_recorded"]
    (retry,) = run.of("system", "api_retry")
    assert (retry["attempt"], retry["max_retries"], retry["error_status"]) == (1, 2, 401)


def test_a_401_that_persists_ends_in_api_error_once_the_retries_are_spent(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 401}
      repeat: 5
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-retries", "2"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert len(api.requests) == 3
    assert run.reasons[-1] == "api_retries_exhausted"
    assert run.result["terminal_reason"] == "api_error" and run.result["api_error_status"] == 401


def test_x_should_retry_false_is_not_retried(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 503, headers: {x-should-retry: "false"}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert len(api.requests) == 1 and run.reasons == ["request_rejected_surfaced"] and run.returncode == 1


def test_retry_after_header_sets_the_delay(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 429, headers: {retry-after-ms: "40"}}
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0
    assert run.of("system", "api_retry")[0]["retry_delay_ms"] == 40
    assert run.reasons == ["transient_error_backoff", "api_retry", "answer_recorded"]


def test_third_overloaded_error_switches_to_fallback_model(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - error: {{status: 529, headers: {FAST}}}
      repeat: 3
  mock-fallback:
    - reply: {{content: [{{text: "from B"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--fallback-model", "mock-fallback"], api=api, cwd=tmp_path
        )
    assert run.returncode == 0, run.stderr
    assert [r.model for r in api.requests] == ["mock-primary"] * 3 + ["mock-fallback"]
    assert "model_fallback" in run.reasons
    assert run.reasons.count("api_retry") == 2
    assert run.result["result"] == "from B"
    assert set(run.result["modelUsage"]) == {"mock-fallback"}, "failed attempts have no usage"
    assert api.requests[3].messages == api.requests[0].messages, "the same logical turn is rerun"


def test_without_a_fallback_overload_is_retried_on_the_same_model(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - error: {{status: 529, headers: {FAST}}}
      repeat: 4
    - reply: {{content: [{{text: "finally"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0
    assert len(api.requests) == 5
    assert run.reasons.count("overloaded_no_fallback_backoff") == 2


def test_fallback_is_never_taken_for_rate_limits(tmp_path: Path) -> None:
    text = scenario(f"""  mock-primary:
    - error: {{status: 429, headers: {FAST}}}
      repeat: 3
    - reply: {{content: [{{text: "primary"}}]}}
  mock-fallback:
    - reply: {{content: [{{text: "B"}}]}}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--fallback-model", "mock-fallback"], api=api, cwd=tmp_path
        )
    assert {r.model for r in api.requests} == {"mock-primary"}
    assert run.result["result"] == "primary"


def test_unavailable_model_falls_back_or_surfaces(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 404, message: "model: mock-primary not found"}
  mock-fallback:
    - reply: {content: [{text: "B"}]}
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary", "--fallback-model", "mock-fallback"], api=api, cwd=tmp_path
        )
    assert run.reasons == ["unavailable_model_fallback", "answer_recorded"] and run.returncode == 0
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.reasons == ["model_unavailable_surfaced"]
    assert run.result["terminal_reason"] == "model_error" and run.returncode == 1


def test_stream_cut_after_a_text_block_is_retried_once_without_streaming(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "first part"}, {text: "second part"}]}
      cut_after_block: 1
      repeat: 2
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [r.stream for r in api.requests] == [True, False]
    assert run.reasons == ["stream_fallback", "answer_recorded"]
    assert run.result["result"] == "second part", "the text of the reply's last block, as Claude Code reports it"


def test_a_stalled_stream_times_out_and_falls_back(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "slow"}, {text: "er"}]}
      stall: {after_block: 1, seconds: 20}
      repeat: 2
""")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, QUERYLOOP_STREAM_IDLE_TIMEOUT_S="0.5"
        )
    assert [r.stream for r in api.requests] == [True, False]
    assert run.reasons == ["stream_fallback", "answer_recorded"]


def test_stream_cut_after_a_complete_tool_use_runs_that_tool_exactly_once(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply:
        content:
          - tool_use: {name: Bash, input: {command: "echo ran >> side_effect.log"}}
          - tool_use: {name: Bash, input: {command: "echo never >> side_effect.log"}}
      cut_after_block: 1
    - reply: {content: [{text: "done"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "side_effect.log").read_text() == "ran\n"
    assert len(api.requests) == 2
    assert run.reasons == ["partial_tool_use_kept", "file_checkpoint_taken", "next_turn", "answer_recorded"]
    second = api.requests[1].messages
    assert [b["type"] for b in second[1]["content"]] == ["tool_use"], "only the complete block is in the transcript"
    assert_ledger_closed(api.requests)


def test_an_error_event_after_200_is_treated_as_overloaded(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "a"}, {text: "b"}]}
      error_event_after_block: 1
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0
    assert run.reasons[0] == "overloaded_backoff"


def test_a_malformed_json_body_is_a_typed_event_and_retried(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - reply: {content: [{text: "a"}, {text: "b"}]}
      cut_after_block: 1
    - reply: {content: [{text: "x"}]}
      malformed: json
    - reply: {content: [{text: "ok"}]}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [r.stream for r in api.requests] == [True, False, False], "the stream fallback holds for the whole request"
    assert run.reasons == ["stream_fallback", "malformed_response_backoff", "api_retry", "answer_recorded"]
    assert run.result["result"] == "ok"


def test_prompt_too_long_and_media_errors_surface_with_typed_terminals(tmp_path: Path) -> None:
    text = scenario("""  mock-primary:
    - error: {status: 400, message: "prompt is too long: 200251 tokens > 200000 maximum"}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.reasons == ["nothing_to_compact_surfaced"] and run.result["terminal_reason"] == "prompt_too_long"
    assert run.result["result"] == "Prompt is too long" and run.result["api_error_status"] == 400
    text = scenario("""  mock-primary:
    - error: {status: 400, message: "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum"}
""")
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.reasons == ["media_too_large_surfaced"] and run.result["terminal_reason"] == "image_error"


def test_an_overload_streak_is_broken_by_any_other_outcome_so_no_fallback_happens(tmp_path: Path) -> None:
    # 529, a broken stream, 529, a malformed body, 529: never three overloads in a row
    text = scenario(
        """  mock-primary:
    - error: {status: 529}
    - reply: {content: [{text: "a"}, {text: "b"}]}
      cut_after_block: 1
    - error: {status: 529}
    - reply: {content: [{text: "x"}]}
      malformed: json
    - error: {status: 529}
    - reply: {content: [{text: "primary answer"}]}
  mock-fallback:
    - reply: {content: [{text: "fallback answer"}]}
"""
    )
    with MockApi(text) as api:
        args = ["-p", "hi", "--model", "mock-primary", "--fallback-model", "mock-fallback"]
        run = run_cli(args, api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "model_fallback" not in run.reasons
    assert run.reasons[:3] == ["overloaded_backoff", "api_retry", "stream_fallback"]
    assert run.result["result"] == "primary answer"
    streaks = [line["counters"]["overload_streak"] for line in run.of("system", "transition")]
    assert max(streaks) == 1, "each 529 starts a new streak"
