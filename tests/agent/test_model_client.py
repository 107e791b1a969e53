"""send_request against the embedded server through the real anthropic SDK (max_retries=0)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import anthropic
import pytest

from queryloop.handlers.request.services.attempt import (
    FAILURE_KINDS,
    ModelFailure,
    ModelReply,
    ModelRequest,
    RequestLog,
    classify_error,
)
from queryloop.handlers.request.services.client import send_request
from queryloop.handlers.request.services.pricing import cost_usd
from queryloop.handlers.request.services.usage import UsageTotals
from queryloop.mockapi.scenario import parse_scenario
from queryloop.mockapi.server import MockServer, estimate_input_tokens

USER: tuple[dict[str, Any], ...] = ({"role": "user", "content": "hi"},)


def one_step(step_yaml: str, model: str = "m") -> str:
    """A scenario whose model ``m`` answers the single step ``step_yaml`` (indented YAML)."""
    return (
        f"schema_version: 1\nscenario: t\nmodel: {model}\nmodels:\n  {model}:\n    - "
        + step_yaml.strip().replace("\n", "\n      ")
        + "\n"
    )


def request(**overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "m",
        "messages": USER,
        "system": None,
        "tools": (),
        "max_tokens": 64,
        "idle_timeout_s": 90.0,
    }
    fields.update(overrides)
    return ModelRequest(**fields)


def run(
    scenario_yaml: str, *requests: ModelRequest, on_text: Any = None
) -> tuple[list[ModelReply | ModelFailure], MockServer]:
    """Send ``requests`` in order to a server playing ``scenario_yaml``; return outcomes and the server."""
    scenario = parse_scenario(scenario_yaml)

    async def main() -> tuple[list[ModelReply | ModelFailure], MockServer]:
        async with MockServer(scenario) as server:
            client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
            try:
                outcomes = [await send_request(client, r, on_text=on_text) for r in requests]
            finally:
                await client.close()
            return outcomes, server

    return asyncio.run(main())


def failure(outcome: ModelReply | ModelFailure) -> ModelFailure:
    assert isinstance(outcome, ModelFailure), outcome
    return outcome


def reply(outcome: ModelReply | ModelFailure) -> ModelReply:
    assert isinstance(outcome, ModelReply), outcome
    return outcome


TEXT = one_step('reply: {content: [{text: "Hello there, this is a streamed answer."}]}')


# ---- replies ---------------------------------------------------------------------------


def test_streamed_text_reply_arrives_in_deltas_and_is_assembled() -> None:
    seen: list[str] = []
    (out,), server = run(TEXT, request(), on_text=seen.append)
    r = reply(out)
    assert r.content == ({"type": "text", "text": "Hello there, this is a streamed answer."},)
    assert len(seen) >= 2 and "".join(seen) == "Hello there, this is a streamed answer."
    assert r.stop_reason == "end_turn" and r.model == "m"
    assert r.usage["input_tokens"] == server.requests[0].input_tokens
    assert r.usage["output_tokens"] >= 1
    assert r.log.ttft_ms is not None and r.log.ttft_ms <= r.log.duration_ms
    assert r.request_id == server.requests[0].request_id


def test_non_streamed_text_reply_is_parsed_from_json() -> None:
    (out,), server = run(TEXT, request(stream=False))
    r = reply(out)
    assert r.content[0]["text"] == "Hello there, this is a streamed answer."
    assert r.log.stream is False and r.log.ttft_ms is None and r.log.status == 200
    assert server.requests[0].stream is False


def test_tool_use_input_is_assembled_from_json_chunks_and_thinking_keeps_its_signature() -> None:
    scenario = one_step(
        """
reply:
  content:
    - thinking: "Considering which file to change."
    - tool_use: {name: Edit, input: {file_path: checkpoint.txt, old_string: "step=0", new_string: "step=1"}}
"""
    )
    (out,), _ = run(scenario, request())
    r = reply(out)
    thinking, tool = r.content
    assert thinking["type"] == "thinking" and thinking["thinking"] == "Considering which file to change."
    assert thinking["signature"].startswith("sig_mock_")
    assert tool["type"] == "tool_use" and tool["name"] == "Edit" and tool["id"].startswith("toolu_mock")
    assert tool["input"] == {"file_path": "checkpoint.txt", "old_string": "step=0", "new_string": "step=1"}
    assert r.stop_reason == "tool_use"


def test_streamed_and_non_streamed_replies_carry_the_same_content() -> None:
    scenario = one_step(
        """
reply:
  content:
    - text: "Editing now."
    - tool_use: {name: Bash, input: {command: "echo done >> side_effect.log"}, id: toolu_fixed}
repeat: 2
"""
    )
    (streamed, plain), _ = run(scenario, request(), request(stream=False))
    assert reply(streamed).content == reply(plain).content


# ---- HTTP errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_yaml", "kind"),
    [
        ("{status: 529}", "overloaded"),
        ("{status: 500}", "retryable"),
        ("{status: 502, type: api_error}", "retryable"),
        ("{status: 503, type: api_error}", "retryable"),
        ("{status: 408}", "retryable"),
        ("{status: 409, type: conflict_error}", "retryable"),
        ("{status: 429}", "retryable"),
        ('{status: 400, message: "prompt is too long: 200251 tokens > 200000 maximum"}', "prompt_too_long"),
        ("{status: 413}", "prompt_too_long"),
        (
            '{status: 400, message: "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum"}',
            "media_too_large",
        ),
        ('{status: 404, message: "model: claude-nope"}', "model_unavailable"),
        ("{status: 400}", "fatal"),
        ("{status: 401}", "unauthorized"),
        ("{status: 402, type: billing_error}", "fatal"),
        ("{status: 403}", "fatal"),
        ('{status: 500, headers: {x-should-retry: "false"}}', "fatal"),
        ('{status: 401, headers: {x-should-retry: "true"}}', "retryable"),
    ],
)
def test_each_error_status_is_classified_into_its_kind(error_yaml: str, kind: str) -> None:
    for stream in (True, False):
        (out,), server = run(one_step(f"error: {error_yaml}"), request(stream=stream))
        f = failure(out)
        assert f.kind == kind, (error_yaml, stream, f)
        assert f.status == server.requests[0].response_status
        assert f.log.status == f.status and f.log.error_kind == kind
        assert f.log.request_id == server.requests[0].request_id


def test_error_carries_type_message_retry_after_and_should_retry() -> None:
    scenario = one_step(
        'error: {status: 529, message: "Overloaded now", headers: {retry-after: 7, x-should-retry: "true"}}'
    )
    (out,), _ = run(scenario, request())
    f = failure(out)
    assert (f.kind, f.status, f.error_type, f.message) == ("overloaded", 529, "overloaded_error", "Overloaded now")
    assert f.retry_after_s == 7.0 and f.should_retry is True


def test_retry_after_ms_wins_over_retry_after() -> None:
    scenario = one_step('error: {status: 429, headers: {retry-after: 7, retry-after-ms: "250"}}')
    (out,), _ = run(scenario, request())
    f = failure(out)
    assert f.kind == "retryable" and f.retry_after_s == 0.25 and f.should_retry is None


def test_connection_refused_is_retryable_not_an_exception() -> None:
    async def main() -> ModelReply | ModelFailure:
        client = anthropic.AsyncAnthropic(api_key="x", base_url="http://127.0.0.1:9", max_retries=0)
        try:
            return await send_request(client, request())
        finally:
            await client.close()

    f = failure(asyncio.run(main()))
    assert f.kind == "retryable" and f.status is None and f.error_type == "connection_error"


def test_exhausted_scenario_is_a_retryable_500_with_the_clear_message() -> None:
    (_, out), _ = run(TEXT, request(), request())
    f = failure(out)
    assert f.kind == "retryable" and f.status == 500
    assert f.message.startswith("scenario exhausted for model m after 1 requests")


# ---- stream faults ---------------------------------------------------------------------


def test_error_event_after_a_200_is_overloaded_with_completed_blocks_kept() -> None:
    scenario = one_step('reply: {content: [{text: "half"}, {text: "never"}]}\nerror_event_after_block: 1')
    (out,), _ = run(scenario, request())
    f = failure(out)
    assert (f.kind, f.status, f.error_type) == ("overloaded", 200, "overloaded_error")
    assert f.partial_content == ({"type": "text", "text": "half"},)


def test_api_error_event_after_a_200_is_retryable() -> None:
    scenario = one_step('reply: {content: [{text: "x"}]}\nerror_event_after_block: {after_block: 0, type: api_error}')
    (out,), _ = run(scenario, request())
    assert failure(out).kind == "retryable"


def test_cut_after_a_complete_tool_use_keeps_it_and_drops_the_unfinished_next_block() -> None:
    scenario = one_step(
        """
reply:
  content:
    - tool_use: {name: Write, input: {file_path: notes.txt, content: "first line"}}
    - tool_use: {name: Bash, input: {command: "echo this block is cut in the middle of its input"}}
cut_after_block: 1
"""
    )
    (out,), _ = run(scenario, request())
    f = failure(out)
    assert f.kind == "stream_broken" and f.status == 200
    assert len(f.partial_content) == 1
    (block,) = f.partial_content
    assert block["name"] == "Write" and block["input"] == {"file_path": "notes.txt", "content": "first line"}


def test_cut_before_any_block_completes_leaves_no_partial_content() -> None:
    scenario = one_step('reply: {content: [{text: "this text is interrupted halfway"}]}\ncut_after_block: 0')
    (out,), _ = run(scenario, request())
    f = failure(out)
    assert f.kind == "stream_broken" and f.partial_content == ()


def test_stall_longer_than_the_idle_timeout_breaks_the_stream() -> None:
    scenario = one_step('reply: {content: [{text: "done"}, {text: "late"}]}\nstall: {after_block: 1, seconds: 10}')

    async def send() -> ModelReply | ModelFailure:
        async with MockServer(parse_scenario(scenario)) as server:
            client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
            try:
                return await send_request(client, request(idle_timeout_s=0.3))
            finally:
                await client.close()

    f = failure(asyncio.run(send()))  # the stall outlasting the timeout: a reply would have come whole at 10 s
    assert f.kind == "stream_broken" and "idle timeout" in f.message
    assert f.partial_content == ({"type": "text", "text": "done"},)


def test_malformed_sse_breaks_the_stream() -> None:
    (out,), _ = run(one_step('reply: {content: [{text: "x"}]}\nmalformed: sse'), request())
    f = failure(out)
    assert f.kind == "stream_broken" and f.status == 200


def test_malformed_json_body_is_a_malformed_response() -> None:
    (out,), _ = run(one_step('reply: {content: [{text: "x"}]}\nmalformed: json'), request(stream=False))
    f = failure(out)
    assert f.kind == "malformed_response" and "not JSON" in f.message


def test_stop_reason_tool_use_without_a_tool_block_is_returned_as_is() -> None:
    (out,), _ = run(one_step('reply: {content: [{text: "Let me look."}], stop_reason: tool_use}'), request())
    r = reply(out)
    assert r.stop_reason == "tool_use" and all(b["type"] != "tool_use" for b in r.content)


# ---- request log -----------------------------------------------------------------------


def test_request_log_matches_what_the_server_saw() -> None:
    tools = ({"name": "Edit", "description": "edit a file", "input_schema": {"type": "object"}},)
    req = request(system="be brief", tools=tools, attempt=3, max_tokens=99)
    (out,), server = run(TEXT, req)
    r = reply(out)
    (seen,) = server.requests
    log = r.log
    assert seen.headers["x-client-request-id"] == log.client_request_id
    assert log.request_id == seen.request_id and log.attempt == 3 and log.model == "m"
    assert log.stream is True and log.status == 200 and log.stop_reason == "end_turn"
    assert log.usage == r.usage and log.error_kind is None and log.duration_ms > 0
    assert seen.system == "be brief" and seen.tools == ("Edit",) and seen.max_tokens == 99
    assert r.usage["input_tokens"] == estimate_input_tokens("be brief", list(USER), list(tools))


def test_every_attempt_gets_its_own_client_request_id() -> None:
    scenario = one_step("error: {status: 529}\nrepeat: 2")
    (a, b), server = run(scenario, request(), request(attempt=2))
    assert failure(a).log.client_request_id != failure(b).log.client_request_id
    assert [r.headers["x-client-request-id"] for r in server.requests] == [
        failure(a).log.client_request_id,
        failure(b).log.client_request_id,
    ]


# ---- classification and usage ----------------------------------------------------------


def test_classification_recognises_recoverable_errors_before_should_retry() -> None:
    assert classify_error(529, "overloaded_error", "Overloaded", should_retry=True) == "overloaded"
    assert classify_error(529, "overloaded_error", "Overloaded", should_retry=False) == "fatal"
    assert classify_error(200, "overloaded_error", "Overloaded") == "overloaded"
    assert classify_error(200, "invalid_request_error", "bad") == "fatal"
    assert classify_error(400, "invalid_request_error", "image too large for this model") == "media_too_large"
    assert classify_error(404, "not_found_error", "no such route") == "fatal"


def test_every_kind_of_failure_is_an_event_the_model_call_emits() -> None:
    """The one list of failure kinds, each turned into an event of the machine's ``calling_model``."""
    from queryloop.fsm import load_machine
    from queryloop.handlers.request import classify_failure
    from queryloop.machines import MACHINES_DIR

    emits = load_machine(MACHINES_DIR / "query_loop.yaml").spec.state_map["calling_model"].emits
    log = RequestLog(
        client_request_id="id", request_id=None, attempt=1, model="m", stream=True, status=None,
        stop_reason=None, ttft_ms=None, duration_ms=0.0, usage={},
    )  # fmt: skip
    events = {
        kind: classify_failure(ModelFailure(kind=kind, status=None, error_type=None, message="", log=log))
        for kind in FAILURE_KINDS
    }
    assert set(events) == {
        "retryable", "overloaded", "model_unavailable", "unauthorized", "prompt_too_long", "media_too_large", "fatal",
        "stream_broken", "malformed_response",
    }  # fmt: skip
    assert all(event in emits for event in events.values()), events


def test_usage_totals_sum_per_model_and_price_unlisted_models() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 50}
    totals = UsageTotals().add("mock-primary", usage).add("mock-primary", usage)
    assert totals.by_model["mock-primary"].requests == 2
    assert totals.usage()["input_tokens"] == 2000
    assert totals.total_cost_usd == pytest.approx(2 * (cost_usd("mock-primary", usage) or 0))
    with_unknown = totals.add("mystery-model", usage)
    assert with_unknown.by_model["mystery-model"].cost_usd == pytest.approx(cost_usd("mystery-model", usage))
    assert with_unknown.total_cost_usd == pytest.approx(totals.known_cost_usd + cost_usd("mystery-model", usage))
    assert with_unknown.model_usage()["mock-primary"]["inputTokens"] == 2000


def test_cancelling_a_streamed_request_propagates_cancelled_error() -> None:
    scenario = one_step('reply: {content: [{text: "slow"}]}\nstall: {after_block: 0, seconds: 10}')

    async def main() -> None:
        async with MockServer(parse_scenario(scenario)) as server:
            client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
            try:
                task = asyncio.create_task(send_request(client, request(idle_timeout_s=5.0)))
                await asyncio.sleep(0.2)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            finally:
                await client.close()

    asyncio.run(main())


def test_thinking_deltas_are_not_reported_as_visible_text() -> None:
    seen: list[str] = []
    scenario = one_step('reply: {content: [{thinking: "private musing"}, {text: "public"}]}')
    (out,), _ = run(scenario, request(), on_text=seen.append)
    assert "".join(seen) == "public"
    assert [b["type"] for b in reply(out).content] == ["thinking", "text"]


@pytest.mark.parametrize(("retry_after_s", "slept"), [(1e6, 60.0), (50.0, 50.0), (None, None)])
def test_a_backoff_never_sleeps_past_the_longest_wait_its_effect_declares(
    monkeypatch: pytest.MonkeyPatch, retry_after_s: float | None, slept: float | None
) -> None:
    """The machine ends a run whose retry-after is over max_retry_after_s before this wait; should it not, the
    wait is still clamped to max(max_retry_after_s, max_backoff_s), the `each_s` check's worst case."""
    import random
    from types import SimpleNamespace

    from queryloop.handlers.request.recovery import back_off

    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    run = SimpleNamespace(
        count=lambda name: 9, cap=lambda name: 10, params={"max_backoff_s": 40, "max_retry_after_s": 60}
    )
    services = SimpleNamespace(retry_base_delay_s=0.5, retry_max_delay_s=32.0, rng=random.Random(0))
    ctx = SimpleNamespace(next_reason=lambda event: "api_retry", run=run, services=services, publish=lambda item: None)
    failure = SimpleNamespace(retry_after_s=retry_after_s, status=529, message="overloaded")
    asyncio.run(back_off(ctx, failure, counter="api_retries", retry_reasons=("api_retry",)))  # type: ignore[arg-type]
    assert len(sleeps) == 1
    if slept is None:
        assert 32.0 <= sleeps[0] <= 40.0, "the backoff alone: 32 s plus jitter, clamped to max_backoff_s"
    else:
        assert sleeps[0] == slept


@pytest.mark.parametrize("stream", [True, False])
def test_a_lone_surrogate_in_a_reply_is_the_replacement_character_and_a_pair_is_one_character(stream: bool) -> None:
    text = one_step(
        r'reply: {content: [{text: "a\ud800b \ud83d\ude00"}, '
        r'{tool_use: {name: "T\udfff", id: "toolu_1", input: {"k\ud800": ["v\udc00"]}}}]}'
    )
    (outcome,), _ = run(text, request(stream=stream))
    assert reply(outcome).content == (
        {"type": "text", "text": "a\ufffdb \U0001f600"},
        {"type": "tool_use", "id": "toolu_1", "name": "T\ufffd", "input": {"k\ufffd": ["v\ufffd"]}},
    )


@pytest.mark.parametrize(
    ("status", "error_type", "kind"),
    [
        (529, "overloaded_error", "overloaded"),
        (500, "overloaded_error", "overloaded"),
        (529, "api_error", "overloaded"),
        (429, "rate_limit_error", "rate_limit"),
        (401, "authentication_error", "authentication_failed"),
        (500, "api_error", "server_error"),
        (408, "timeout_error", "server_error"),
        (409, "api_error", "server_error"),
        (403, "permission_error", "authentication_failed"),
        (400, "invalid_request_error", "unknown"),
        (None, None, "unknown"),
    ],
)
def test_the_api_retry_line_names_claude_codes_kind_of_failure(
    status: int | None, error_type: str | None, kind: str
) -> None:
    from queryloop.handlers.request.recovery import retry_error

    log = RequestLog(
        client_request_id="c", request_id=None, attempt=1, model="m", stream=True, status=status,
        stop_reason=None, ttft_ms=None, duration_ms=0.0, usage={},
    )  # fmt: skip
    failure = ModelFailure(kind="retryable", status=status, error_type=error_type, message="the API's words", log=log)
    assert retry_error(failure) == kind


def test_the_current_models_cost_what_claude_code_counts() -> None:
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_read_input_tokens": 1_000}
    assert cost_usd("claude-sonnet-5", usage) == pytest.approx(3.0 + 1.5 + 0.0003)
    assert cost_usd("claude-fable-5", usage) == pytest.approx(10.0 + 5.0 + 0.001)
    assert cost_usd("claude-opus-5[1m]", usage) == pytest.approx(5.0 + 2.5 + 0.0005)


# ---- the idle timeout between stream events ---------------------------------------------


class _ScriptedStream:
    """A stream of events, each after its pause (seconds); ``None`` for an event: the stream raises TimeoutError."""

    def __init__(self, timed: list[tuple[float, dict[str, Any] | None]]) -> None:
        self.timed = copy.deepcopy(timed)  # the assembler changes the blocks it is given

    async def _events(self) -> Any:
        for pause, event in self.timed:
            await asyncio.sleep(pause)
            if event is None:
                raise TimeoutError("the transport's own")
            yield event

    def __aiter__(self) -> Any:
        return self._events()


_TEXT_EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 3}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "word "}},) * 4,
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}},
    {"type": "message_stop"},
]


def _read(timed: list[tuple[float, dict[str, Any] | None]], idle_timeout_s: float) -> tuple[Any, list[str]]:
    from queryloop.handlers.request.services.attempt import AttemptBookkeeping
    from queryloop.handlers.request.services.streaming import _Assembler, _read_stream

    req = request(idle_timeout_s=idle_timeout_s)
    seen: list[str] = []
    asm = _Assembler(None)
    outcome = asyncio.run(
        _read_stream(_ScriptedStream(timed), req, AttemptBookkeeping(req), asm, lambda e, _ms: seen.append(e["type"]))
    )
    return outcome, seen


def test_a_stream_whose_events_keep_coming_within_the_idle_timeout_outlasts_it() -> None:
    # 9 events an eighth of the timeout apart: the whole stream takes longer than the timeout, and each
    # wait has seven eighths of it to spare on a busy machine.
    outcome, seen = _read([(0.25, event) for event in _TEXT_EVENTS], idle_timeout_s=2.0)
    assert outcome is None
    assert seen == [event["type"] for event in _TEXT_EVENTS]


def test_a_pause_past_the_idle_timeout_after_some_events_breaks_the_stream_with_what_completed() -> None:
    timed: list[tuple[float, dict[str, Any] | None]] = [(0.05, event) for event in _TEXT_EVENTS[:7]]
    timed.append((HANG_GUARD_S, _TEXT_EVENTS[7]))
    outcome, seen = _read(timed, idle_timeout_s=0.5)
    f = failure(outcome)
    assert f.kind == "stream_broken"
    assert f.message == "stream idle timeout: no event for 0.5 s after 1 complete blocks"
    assert f.partial_content == ({"type": "text", "text": "word word word word "},)
    assert len(seen) == 7


def test_a_timeout_error_the_stream_raises_itself_reads_as_the_idle_timeout() -> None:
    outcome, seen = _read([(0.0, _TEXT_EVENTS[0]), (0.0, None)], idle_timeout_s=90.0)
    assert failure(outcome).message == "stream idle timeout: no event for 90 s after 0 complete blocks"
    assert seen == ["message_start"]


HANG_GUARD_S = 300.0
"""A pause no test waits out: the idle timeout ends the stream long before (a hang if it did not)."""
