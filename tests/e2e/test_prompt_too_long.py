"""End-to-end: a prompt too long as Claude Code 2.1.235 handles it — what a reactive compaction
summarises and keeps, when it does not compact at all, and the result each path ends with.

Observed against Claude Code 2.1.235 offline on the same embedded server (request counts
below leave out the one identical re-send Claude Code makes after any 400, which it does
to strip its own beta headers): one tool round then a 400 → no summary request, 2
requests, ``Prompt is too long`` (400); three rounds → the summary covers the prompt and
the two older rounds, the retry keeps the newest round verbatim; six rounds and a summary
request itself too long by 1½ rounds → it is sent again covering three rounds, the retry
keeps rounds 4–6; every summary too long → summaries of 5, 2 and 1 rounds, then
``Prompt is too long`` (400); a summary request that fails → ``Prompt is too long``
and why compaction failed; a 413 nothing can shrink → "request too large", status 413;
a reply stopped at the context window → continued like one cut by max_tokens (3 times),
then an API error without a status.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.handlers.context.services.compaction import SUMMARY_MARKER
from queryloop.handlers.session.services.ledger import HIDDEN_CALLS_HEADER
from queryloop.mockapi.server import RecordedRequest

from .harness import MockApi, assert_ledger_closed, run_cli

# the six built-in tools only: the sizes below count their definitions (the Agent tool's would add ~450 tokens)
BUILT_INS = ["--tools", "Read,Write,Edit,Bash,Glob,Grep"]

pytestmark = pytest.mark.slow  # ~25 s in all: tools/test.sh --fast leaves the module out

ROUND_CHARS = 12_000  # a Bash output of ~3 000 tokens: the main requests grow 1 300, 4 379, 7 458, … tokens
PTL = 'error: {status: 400, message: "prompt is too long: {n} tokens > {limit} maximum"}'


def scenario(rounds: int, *, main_limit: int, summary: str, final: str = "done") -> str:
    """``rounds`` Bash rounds then ``final``; requests over ``main_limit`` are too long; ``summary`` rules first."""
    steps = "".join(
        f'    - reply: {{content: [{{text: "r{i}"}}, {{tool_use: {{name: Bash, input: {{command: '
        f'"printf %0{ROUND_CHARS}d {i}"}}}}}}]}}\n'
        for i in range(1, rounds + 1)
    )
    return (
        f"schema_version: 1\nscenario: ptl\nmodel: mock-primary\nrules:\n{summary}"
        f"  - when: {{input_tokens_over: {main_limit}}}\n    {PTL}\n"
        f'models:\n  mock-primary:\n{steps}    - reply: {{content: [{{text: "{final}"}}]}}\n'
    )


def summary_too_long(limit: int) -> str:
    return f'  - when: {{last_user_contains: "{SUMMARY_MARKER}", input_tokens_over: {limit}}}\n    {PTL}\n'


SUMMARY_OK = (
    f'  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}\n    reply: {{content: [{{text: "Summary: printed."}}]}}\n'
)


def summaries(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if SUMMARY_MARKER in json.dumps(r.messages[-1:])]


def main_requests(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if SUMMARY_MARKER not in json.dumps(r.messages[-1:])]


def rounds_in(request: RecordedRequest) -> list[int]:
    """Which rounds' outputs a request carries (its text names the commands ``printf %0…d N``).

    The summary's list of completed calls it summarised away (the ledger's note) names the
    commands too: it is left out.
    """
    kept = [
        [b for b in m["content"] if not (b.get("type") == "text" and b.get("text", "").startswith(HIDDEN_CALLS_HEADER))]
        if isinstance(m["content"], list)
        else m["content"]
        for m in request.messages
    ]
    text = json.dumps(kept)
    return [i for i in range(1, 10) if f"printf %0{ROUND_CHARS}d {i}" in text]


def test_one_tool_round_too_long_is_not_compacted_and_ends_prompt_too_long(tmp_path: Path) -> None:
    with MockApi(scenario(1, main_limit=3000, summary=SUMMARY_OK)) as api:
        run = run_cli([*BUILT_INS, "-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert [r.response_status for r in api.requests] == [200, 400], "no summary request: nothing older to summarise"
    assert run.reasons == ["tools_requested", "next_turn", "nothing_to_compact_surfaced"]
    result = run.result
    assert result["terminal_reason"] == "prompt_too_long" and result["is_error"] is True
    assert result["result"] == "Prompt is too long" and result["api_error_status"] == 400


def test_a_reactive_compaction_summarises_the_older_rounds_and_keeps_the_newest_verbatim(tmp_path: Path) -> None:
    with MockApi(scenario(3, main_limit=9000, summary=SUMMARY_OK)) as api:
        run = run_cli([*BUILT_INS, "-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    assert [r.response_status for r in api.requests] == [200, 200, 200, 400, 200, 200]
    (summary,) = summaries(api.requests)
    assert rounds_in(summary) == [1, 2] and "print things" in json.dumps(summary.messages)
    failed, retried = main_requests(api.requests)[-2:]
    assert retried.messages[1:] == failed.messages[-2:], "the newest round, verbatim, after the summary"
    assert "Summary: printed." in json.dumps(retried.messages[0]) and rounds_in(retried) == [3]
    assert run.result["result"] == "done"
    assert_ledger_closed(main_requests(api.requests))


def test_a_summary_request_too_long_is_sent_again_keeping_as_many_more_rounds_as_cover_its_gap(
    tmp_path: Path,
) -> None:
    # rounds 1–5 summarised come to ~15 600 tokens: 4 600 over, the size of 1½ rounds → 2 more rounds kept
    text = scenario(6, main_limit=18_000, summary=summary_too_long(11_000) + SUMMARY_OK)
    with MockApi(text) as api:
        run = run_cli([*BUILT_INS, "-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.reasons
    assert len(api.requests) == 10, "6 rounds, the 400, two summary requests, the retry"
    assert [rounds_in(s) for s in summaries(api.requests)] == [[1, 2, 3, 4, 5], [1, 2, 3]]
    assert [s.response_status for s in summaries(api.requests)] == [400, 200]
    assert rounds_in(main_requests(api.requests)[-1]) == [4, 5, 6], (
        "nothing dropped: the rounds not summarised are kept"
    )
    assert run.reasons[-4:] == [
        "reactive_compact_retry",
        "reactive_summary_shrink_retry",
        "reactive_compact_succeeded",
        "answer_recorded",
    ]
    boundary = run.of("system", "compact_boundary")[0]
    assert boundary["lossy"] is False and boundary["dropped_messages"] == 0
    assert_ledger_closed(main_requests(api.requests))


def test_summary_requests_that_stay_too_long_halve_then_shrink_by_one_and_end_prompt_too_long(
    tmp_path: Path,
) -> None:
    text = scenario(6, main_limit=18_000, summary=summary_too_long(100) + SUMMARY_OK)
    with MockApi(text) as api:
        run = run_cli([*BUILT_INS, "-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert [rounds_in(s) for s in summaries(api.requests)] == [[1, 2, 3, 4, 5], [1, 2], [1]]
    assert len(api.requests) == 10
    assert run.reasons[-1] == "reactive_summary_too_long_surfaced"
    assert run.result["result"] == "Prompt is too long" and run.result["api_error_status"] == 400


def test_a_summary_request_that_fails_ends_prompt_too_long_saying_why_compaction_failed(tmp_path: Path) -> None:
    failing = (
        f'  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}\n    error: {{status: 403, message: "no summaries"}}\n'
    )
    with MockApi(scenario(3, main_limit=9000, summary=failing)) as api:
        run = run_cli([*BUILT_INS, "-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert run.reasons[-1] == "reactive_summary_failed_surfaced"
    result = run.result
    assert result["api_error_status"] == 400 and result["terminal_reason"] == "prompt_too_long"
    assert (
        result["result"].startswith("Prompt is too long; automatic compaction failed: ") and "403" in result["result"]
    )
    assert "tokens >" not in result["result"], "never the API's own message"


def test_a_413_that_nothing_can_shrink_ends_request_too_large_with_status_413(tmp_path: Path) -> None:
    text = (
        "schema_version: 1\nscenario: big\nmodel: mock-primary\nmodels:\n  mock-primary:\n"
        '    - reply: {content: [{tool_use: {name: Bash, input: {command: "printf %04000d 0"}}}]}\n'
        "    - error: {status: 413}\n"
    )
    with MockApi(text) as api:
        run = run_cli([*BUILT_INS, "-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1 and len(api.requests) == 2
    assert run.reasons[-1] == "nothing_to_compact_surfaced"
    result = run.result
    assert result["api_error_status"] == 413 and result["result"].startswith("Request too large")


def test_a_reply_stopped_at_the_context_window_is_continued_like_max_tokens_then_surfaced(tmp_path: Path) -> None:
    text = (
        "schema_version: 1\nscenario: window\nmodel: mock-primary\nmodels:\n  mock-primary:\n"
        "    steps: []\n"
        '    otherwise: {reply: {content: [{text: "partial"}], stop_reason: model_context_window_exceeded}}\n'
    )
    with MockApi(text) as api:
        run = run_cli([*BUILT_INS, "-p", "print things", "--model", "mock-primary"], api=api, cwd=tmp_path)
    assert run.returncode == 1
    assert len(api.requests) == 4, "the reply and 3 continuations, no compaction"
    assert run.reasons == ["context_window_recovery"] * 3 + ["context_window_exhausted"]
    second = api.requests[1].messages
    assert second[-2] == {"role": "assistant", "content": [{"type": "text", "text": "partial"}]}
    assert second[-1]["role"] == "user", "a hidden message asks to continue"
    result = run.result
    assert result["terminal_reason"] == "api_error" and result["api_error_status"] is None
    assert result["result"].startswith("API Error:") and "context window" in result["result"]
