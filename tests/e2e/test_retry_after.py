"""End-to-end: how long a retry waits, read from ``retry_delay_ms`` in ``system/api_retry`` (never wall time).

Observed against Claude Code 2.1.235 on the embedded server: without ``retry-after`` the
waits were 552, 1 106, 2 381, 4 292, 8 480 ms — ``500·2ⁿ`` ms plus up to a quarter of
it; with ``retry-after: 0`` three times, 510, 1 026, 2 116 ms (the backoff wins); with
``retry-after: 1`` three times, 1 000, 1 111, 2 232 ms (the larger of the two); with
``retry-after: 120`` no retry at all: one request, the run ends ``api_error`` with the
429's status (its cap is 60 s).
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

from queryloop.handlers.context.services.compaction import SUMMARY_MARKER

from .harness import MockApi, run_cli


def scenario(*errors: str, final: str = '- reply: {content: [{text: "ok"}]}') -> str:
    steps = "".join(f"    - error: {e}\n" for e in errors)
    return f"schema_version: 1\nscenario: wait\nmodel: mock-primary\nmodels:\n  mock-primary:\n{steps}    {final}\n"


def delays(run: object) -> list[int]:
    return [line["retry_delay_ms"] for line in run.of("system", "api_retry")]  # type: ignore[attr-defined]


def test_the_wait_is_the_larger_of_retry_after_and_the_backoff(tmp_path: Path) -> None:
    text = scenario('{status: 429, headers: {retry-after: "1"}}', '{status: 429, headers: {retry-after: "0"}}')
    with MockApi(text) as api:  # the default backoff base, 500 ms
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, QUERYLOOP_RETRY_BASE_DELAY_MS="500"
        )
    assert run.returncode == 0 and len(api.requests) == 3
    first, second = delays(run)
    assert first == 1000, "retry-after 1 s beats a backoff of 500–625 ms"
    assert 1000 <= second <= 1250, "a retry-after of 0 still waits the backoff of the second retry"


def test_without_retry_after_the_backoff_doubles_with_up_to_a_quarter_added(tmp_path: Path) -> None:
    text = scenario("{status: 500}", "{status: 500}", "{status: 503}")
    with MockApi(text) as api:
        run = run_cli(
            ["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path, QUERYLOOP_RETRY_BASE_DELAY_MS="20"
        )
    assert run.returncode == 0 and len(api.requests) == 4
    for waited, base in zip(delays(run), (20, 40, 80), strict=True):
        assert base <= waited <= base * 1.25


def test_a_retry_after_over_the_cap_is_not_waited_for_and_the_result_says_when(tmp_path: Path) -> None:
    text = scenario('{status: 429, headers: {retry-after: "120"}}')
    before = datetime.datetime.now(datetime.UTC)
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1 and len(api.requests) == 1
    assert run.reasons == ["transient_error_backoff", "retry_after_too_long_surfaced"]
    assert run.of("system", "api_retry") == [], "no retry is announced"
    result = run.result
    assert result["terminal_reason"] == "api_error" and result["api_error_status"] == 429
    assert "retried in 120 s" in result["result"] and "60 s" in result["result"]
    at = re.search(r" at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)", result["result"])
    assert at, result["result"]
    when = datetime.datetime.fromisoformat(at.group(1).replace("Z", "+00:00"))
    assert 115 <= (when - before).total_seconds() <= 180


def test_max_retry_after_lowers_the_cap(tmp_path: Path) -> None:
    text = scenario('{status: 529, headers: {retry-after: "2"}}')
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary", "--max-retry-after", "1.5"], api=api, cwd=tmp_path)
    assert run.returncode == 1 and len(api.requests) == 1
    assert run.reasons == ["overloaded_backoff", "retry_after_too_long_surfaced"]
    assert run.result["api_error_status"] == 529 and "longer than the 1.5 s" in run.result["result"]


def test_a_summary_request_asking_for_a_wait_over_the_cap_fails_the_compaction(tmp_path: Path) -> None:
    rounds = "".join(
        f'    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "printf %012000d {i}"}}}}}}]}}\n'
        for i in (1, 2, 3)
    )
    text = (
        "schema_version: 1\nscenario: wait\nmodel: mock-primary\nrules:\n"
        f'  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}\n'
        '    error: {status: 429, headers: {retry-after: "3600"}}\n'
        "  - when: {input_tokens_over: 9000}\n"
        '    error: {status: 400, message: "prompt is too long: {n} tokens > {limit} maximum"}\n'
        f"models:\n  mock-primary:\n{rounds}"
    )
    with MockApi(text) as api:
        run = run_cli(["-p", "hi", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    summaries = [r for r in api.requests if SUMMARY_MARKER in json.dumps(r.messages[-1:])]
    assert len(summaries) == 1, "the summary request is not retried in an hour"
    assert run.reasons[-2:] == ["reactive_compact_retry", "reactive_summary_failed_surfaced"]
    assert run.result["result"].startswith("Prompt is too long; automatic compaction failed: ")
    assert "3600 s" in run.result["result"] and run.result["api_error_status"] == 400
