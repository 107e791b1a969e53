"""The request body: built from the transcript's stored bytes, the same JSON the SDK would send, with
prompt-cache breakpoints where Claude Code puts them; and the same request on the wire as ``messages.create``."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import attrs
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from queryloop.handlers.messages import MessageView, compact_json
from queryloop.handlers.request.data import RequestData, cache_lifetime
from queryloop.handlers.request.services.attempt import ModelReply, ModelRequest, api_headers
from queryloop.handlers.request.services.backends import AnthropicBackend, ModelCall
from queryloop.handlers.request.services.body import (
    CACHE_CONTROL,
    MAX_BREAKPOINTS,
    encode_params,
    encode_request,
    prompt_caching_disabled,
    with_breakpoint,
)
from queryloop.handlers.request.services.client import send_request
from queryloop.handlers.request.services.pricing import cost_usd, known_models, model_info
from queryloop.mockapi.prompt_cache import breakpoint_problem

TOOLS: tuple[dict[str, Any], ...] = (
    {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {}}},
    {"name": "Bash", "description": "Run a command — ünïcode.", "input_schema": {"type": "object"}},
)
SYSTEM = "You are a careful agent."


def call(messages: MessageView, **fields: Any) -> ModelCall:
    values: dict[str, Any] = {
        "model": "mock-primary",
        "messages": messages,
        "system": SYSTEM,
        "tools": TOOLS,
        "max_tokens": 1000,
        "stream": True,
        "attempt": 1,
        "idle_timeout_s": 30.0,
    }
    values.update(fields)
    return ModelCall(**values)


def sdk_params(c: ModelCall, *, stream: bool) -> dict[str, Any]:
    """What ``messages.create(**params)`` puts in its body for this call (omitted values dropped)."""
    params: dict[str, Any] = {"max_tokens": c.max_tokens, "messages": c.messages.to_list(), "model": c.model}
    if c.system is not None:
        params["system"] = c.system
    if c.tools:
        params["tools"] = list(c.tools)
    if stream:
        params["stream"] = True
    return params


def tool_turn(view: MessageView, i: int) -> MessageView:
    """One tool round: the assistant's call and the user's result."""
    use = {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": f"echo {i}"}}
    view = view.append({"role": "assistant", "content": [{"type": "text", "text": "running"}, use]})
    result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"{i}\n", "is_error": False}
    return view.append({"role": "user", "content": [result]})


def transcript(turns: int) -> MessageView:
    view = MessageView().append({"role": "user", "content": "go, and say « done »"})
    for i in range(turns):
        view = tool_turn(view, i)
    return view


def markers(value: Any) -> Iterator[str]:
    """The path of every ``cache_control`` in a parsed body."""
    if isinstance(value, dict):
        if "cache_control" in value:
            yield "here"
        for v in value.values():
            yield from markers(v)
    elif isinstance(value, list):
        for v in value:
            yield from markers(v)


def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


# ---- the same JSON as the SDK's params ------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_without_caching_the_body_is_the_sdk_params_as_json(stream: bool) -> None:
    c = call(transcript(3), stream=stream)
    assert json.loads(encode_request(c, stream=stream, prompt_cache=False)) == sdk_params(c, stream=stream)


@pytest.mark.parametrize("system", [None, "", SYSTEM])
@pytest.mark.parametrize("tools", [(), TOOLS])
def test_every_optional_part_is_sent_as_the_sdk_sends_it(system: str | None, tools: tuple[dict[str, Any], ...]) -> None:
    c = call(transcript(1), system=system, tools=tools)
    assert json.loads(encode_request(c, stream=True, prompt_cache=False)) == sdk_params(c, stream=True)
    params = sdk_params(c, stream=True)
    assert json.loads(encode_params(**{**params, "tools": tools, "system": system})) == params


def test_with_caching_the_body_differs_from_the_sdk_params_only_by_its_breakpoints() -> None:
    c = call(transcript(3))
    body = json.loads(encode_request(c, stream=True))
    expected = sdk_params(c, stream=True)
    expected["system"] = [{"type": "text", "text": SYSTEM}]  # one text block carries the system breakpoint
    assert strip(body) == expected


def test_a_message_appended_is_serialised_once_as_compact_json() -> None:
    view = transcript(2)
    for i, message in enumerate(view):
        assert view.encoded(i) == compact_json(message).encode()


def test_a_branch_after_a_tombstone_leaves_the_earlier_view_s_bytes_unchanged() -> None:
    fork = transcript(1)  # three messages: the point a tombstone returns to
    trunk = tool_turn(fork, 1)
    before = encode_request(call(trunk), stream=True)
    branch = fork.append({"role": "assistant", "content": "other"})  # not the newest view: copies its prefix
    assert encode_request(call(trunk), stream=True) == before
    assert json.loads(encode_request(call(branch), stream=True, prompt_cache=False)) == sdk_params(
        call(branch), stream=True
    )
    assert len(trunk) == 5 and len(branch) == 4


# ---- breakpoints --------------------------------------------------------------------------------


def test_the_system_prompt_and_the_last_message_s_last_block_carry_the_breakpoints() -> None:
    body = json.loads(encode_request(call(transcript(2)), stream=True))
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": dict(CACHE_CONTROL)}]
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in tool for tool in body["tools"]), "the system breakpoint covers the tools"
    assert len(list(markers(body))) == 2


def test_the_breakpoint_is_ephemeral_with_the_default_five_minute_ttl() -> None:
    assert dict(CACHE_CONTROL) == {"type": "ephemeral"}


def test_without_a_system_prompt_the_last_tool_carries_the_prefix_breakpoint() -> None:
    body = json.loads(encode_request(call(transcript(1), system=None), stream=True))
    assert "cache_control" in body["tools"][-1] and "cache_control" not in body["tools"][0]
    assert "system" not in body and len(list(markers(body))) == 2


def test_a_prompt_sent_as_a_string_is_sent_as_stored_and_the_user_turn_before_it_carries_the_breakpoint() -> None:
    alone = json.loads(encode_request(call(MessageView().append({"role": "user", "content": "hi"})), stream=True))
    assert alone["messages"] == [{"role": "user", "content": "hi"}]
    assert len(list(markers(alone))) == 1, "the system prompt's breakpoint only"
    answered = transcript(1).append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    body = json.loads(encode_request(call(answered.append({"role": "user", "content": "and now?"})), stream=True))
    assert body["messages"][-1] == {"role": "user", "content": "and now?"}
    assert body["messages"][-2] == answered.at(-1), "the model's reply is not marked"
    assert body["messages"][-3]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert len(list(markers(body))) == 2
    before = json.loads(encode_request(call(transcript(1)), stream=True))
    assert body["messages"][-3] == before["messages"][-1], "the previous request's breakpoint, exactly"


def test_thinking_and_empty_text_blocks_pass_the_breakpoint_to_the_block_before() -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "a"},
            {"type": "text", "text": ""},
            {"type": "thinking", "thinking": "t", "signature": "s"},
        ],
    }
    marked = with_breakpoint(message)
    assert marked is not None and [("cache_control" in b) for b in marked["content"]] == [True, False, False]
    assert "cache_control" not in message["content"][0], "the stored message is never changed"
    assert with_breakpoint({"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]}) is None
    assert with_breakpoint({"role": "user", "content": "a string"}) is None


def test_a_call_that_asks_for_an_hour_marks_both_breakpoints_with_the_hour_ttl() -> None:
    body = json.loads(encode_request(call(transcript(2), cache_ttl="1h"), stream=True))
    hour = {"type": "ephemeral", "ttl": "1h"}
    assert body["system"][0]["cache_control"] == hour and body["messages"][-1]["content"][-1]["cache_control"] == hour
    assert breakpoint_problem(body["system"], body["messages"], body.get("tools")) is None, "the API takes it"
    five = json.loads(encode_request(call(transcript(2)), stream=True))
    assert strip(five) == strip(body), "only the markers differ"


def test_the_hour_ttl_is_asked_for_once_a_request_wrote_again_all_the_previous_one_cached() -> None:
    fresh = RequestData(model="m", max_tokens=10)
    first = cache_lifetime(fresh, {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 5000})
    assert first == {"cached_tokens": 5000}, "the first request of a run has nothing to compare with"
    warm = attrs.evolve(fresh, cached_tokens=5000)
    grown = cache_lifetime(warm, {"cache_read_input_tokens": 5000, "cache_creation_input_tokens": 8000})
    assert grown == {"cached_tokens": 13000}, "everything cached was read; a large new tool result is no sign"
    compacted = cache_lifetime(warm, {"cache_read_input_tokens": 1200, "cache_creation_input_tokens": 2100})
    assert compacted == {"cached_tokens": 3300}, "the system prompt was read, then a compaction's shorter history"
    expired = cache_lifetime(warm, {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 5100})
    assert expired == {"cached_tokens": 5100, "cache_ttl": "1h"}


def test_caching_off_sends_a_string_system_prompt_and_no_marker() -> None:
    body = json.loads(encode_request(call(transcript(2), prompt_cache=False), stream=True))
    assert body["system"] == SYSTEM and list(markers(body)) == []


def test_the_prefix_is_byte_stable_across_turns() -> None:
    view = transcript(1)
    bodies = []
    for i in range(1, 6):
        bodies.append(encode_request(call(view), stream=True))
        view = tool_turn(view, i)
    for earlier, later in itertools.pairwise(bodies):
        marked_last = json.loads(earlier)["messages"][-1]
        cut = earlier.rindex(compact_json(marked_last).encode())  # where the previous request's breakpoint was
        assert later[:cut] == earlier[:cut]
        assert cut > len(earlier) // 2


def test_the_prefix_survives_a_change_of_model_stream_flag_or_output_cap() -> None:
    view = transcript(3)
    one = encode_request(call(view), stream=True)
    other = encode_request(call(view, model="mock-fallback", max_tokens=64000), stream=False)
    cut = one.index(b'],"model":')
    assert other[:cut] == one[:cut]


def test_a_compacted_transcript_gets_its_own_breakpoints() -> None:
    compacted = MessageView.of(
        [
            {"role": "user", "content": "Summary: the user asked for outputs."},
            {"role": "assistant", "content": [{"type": "text", "text": "Understood."}]},
            {"role": "user", "content": [{"type": "text", "text": "carry on"}]},
        ]
    )
    body = json.loads(encode_request(call(compacted), stream=True))
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" in body["system"][0] and len(list(markers(body))) == 2


_TEXT = st.text(max_size=8)
_BLOCK = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _TEXT),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, _TEXT),
    st.builds(lambda t: {"type": "tool_result", "tool_use_id": "x", "content": t}, _TEXT),
)
_MESSAGE = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "assistant"]),
    st.one_of(_TEXT, st.lists(_BLOCK, max_size=4)),
)


@settings(max_examples=150, deadline=None)
@given(
    messages=st.lists(_MESSAGE, max_size=6),
    system=st.one_of(st.none(), _TEXT),
    tools=st.sampled_from([(), TOOLS[:1], TOOLS]),
    stream=st.booleans(),
)
def test_any_request_carries_at_most_two_breakpoints_and_otherwise_the_sdk_params(
    messages: list[dict[str, Any]], system: str | None, tools: tuple[dict[str, Any], ...], stream: bool
) -> None:
    c = call(MessageView.of(messages), system=system, tools=tools)
    body = json.loads(encode_request(c, stream=stream))
    assert len(list(markers(body))) <= 2 <= MAX_BREAKPOINTS
    expected = sdk_params(c, stream=stream)
    if system:
        expected["system"] = [{"type": "text", "text": system}]
    assert strip(body) == expected, "every message is sent as stored, but for its marker"


# ---- switching caching off ----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "off"), [("1", True), ("true", True), ("YES", True), ("0", False), ("", False)])
def test_disable_prompt_caching_is_read_as_claude_code_reads_it(value: str, off: bool) -> None:
    assert prompt_caching_disabled({"DISABLE_PROMPT_CACHING": value}) is off
    assert prompt_caching_disabled({}) is False


def test_the_backend_reads_disable_prompt_caching_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    client = anthropic.AsyncAnthropic(api_key="x", base_url="http://127.0.0.1:9", max_retries=0)
    monkeypatch.setenv("DISABLE_PROMPT_CACHING", "1")
    assert AnthropicBackend(client).prompt_caching is False
    monkeypatch.delenv("DISABLE_PROMPT_CACHING")
    assert AnthropicBackend(client).prompt_caching is True
    assert AnthropicBackend(client, prompt_caching=False).prompt_caching is False


# ---- prices -------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", known_models())
def test_cache_writes_cost_one_and_a_quarter_and_reads_a_tenth_of_the_input_price(model: str) -> None:
    info = model_info(model)
    assert info is not None
    assert info.cache_write == pytest.approx(info.input * 1.25) and info.cache_read == pytest.approx(info.input * 0.1)


def test_an_hour_write_costs_twice_the_input_price() -> None:
    split = {"ephemeral_5m_input_tokens": 400_000, "ephemeral_1h_input_tokens": 600_000}
    usage = {"cache_creation_input_tokens": 1_000_000, "cache_creation": split}
    assert cost_usd("claude-sonnet-4-5", usage) == pytest.approx(0.4 * 3.75 + 0.6 * 6.0)


# ---- the same request on the wire ---------------------------------------------------------------

_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "mock-primary",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def _capture_both(c: ModelCall) -> list[tuple[dict[str, str], bytes]]:
    """What a server receives from ``messages.create`` and from a prepared body for the same call."""
    seen: list[tuple[dict[str, str], bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(({k.lower(): v for k, v in request.headers.items()}, await request.read()))
        return web.json_response(_REPLY, headers={"request-id": "req_1"})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        client = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)
        try:
            params = sdk_params(c, stream=False)
            await client.messages.with_raw_response.create(
                # with the headers queryloop sends as Claude Code does, over the SDK's defaults
                **params,
                extra_headers={"x-client-request-id": "fixed", **api_headers(client)},
                timeout=30,
            )
            body = encode_request(c, stream=False, prompt_cache=False)
            req = ModelRequest(model=c.model, max_tokens=c.max_tokens, stream=False, idle_timeout_s=30.0, body=body)
            assert isinstance(await send_request(client, req), ModelReply)
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(main())
    return seen


def test_a_prepared_body_reaches_the_server_as_messages_create_s_request_would() -> None:
    (sdk_headers, sdk_body), (our_headers, our_body) = _capture_both(call(transcript(2), stream=False))
    assert json.loads(our_body) == json.loads(sdk_body)
    assert len(our_body) == len(sdk_body), "the same compact JSON, keys in another order"
    varying = {"idempotency-key", "x-client-request-id"}
    assert set(our_headers) == set(sdk_headers)
    assert {k: v for k, v in our_headers.items() if k not in varying} == {
        k: v for k, v in sdk_headers.items() if k not in varying
    }
    assert our_headers["anthropic-version"] == "2023-06-01" and our_headers["content-type"] == "application/json"
