"""The embedded fake Anthropic server and the scenario format, driven over loopback HTTP.

Requests go through the real ``anthropic`` SDK (``max_retries=0``) where the SDK can show
the behaviour, and through plain aiohttp where the raw wire format (SSE order, pings,
error bodies) is the point.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import anthropic
import pytest

from queryloop.handlers.request.services.pricing import context_window, cost_usd, model_info
from queryloop.mockapi.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from queryloop.mockapi.server import MockServer, estimate_input_tokens

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "machines" / "scenarios").glob("*.yaml"))
USER = [{"role": "user", "content": "hi"}]
HANG_GUARD_S = 300  # bounds a wait for an event that never comes (a hang), never a slow pass

T = TypeVar("T")


def serve(scenario: Scenario | str, body: Callable[[MockServer], Awaitable[T]]) -> T:
    """Run ``body`` against a fresh server for ``scenario`` (YAML text or a record)."""
    if isinstance(scenario, str):
        scenario = parse_scenario(scenario)
    sc = scenario

    async def main() -> T:
        async with MockServer(sc) as server:
            return await body(server)

    return asyncio.run(main())


async def post_raw(
    server: MockServer, payload: dict[str, Any], path: str = "/v1/messages"
) -> tuple[int, dict[str, str], str]:
    headers = {"x-api-key": "x", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url + path, data=json.dumps(payload), headers=headers) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, await resp.text()


def sse_events(text: str) -> list[tuple[str, Any]]:
    out = []
    for chunk in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def sdk(server: MockServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)


TOOL_REPLY = """
schema_version: 1
scenario: t
model: m
models:
  m:
    - reply:
        content:
          - thinking: "Let me think about the edit carefully."
          - text: "I will now edit the checkpoint file for you."
          - tool_use: {name: Edit, input: {file_path: checkpoint.txt, old_string: "step=0", new_string: "step=1"}}
"""


# ---- wire format -----------------------------------------------------------------------


def test_streamed_reply_follows_the_real_sse_event_order_with_pings() -> None:
    async def body(server: MockServer) -> tuple[int, dict[str, str], str]:
        return await post_raw(server, {"model": "m", "max_tokens": 50, "messages": USER, "stream": True})

    status, headers, text = serve(TOOL_REPLY, body)
    assert status == 200
    assert headers["request-id"].startswith("req_mock_")
    names = [name for name, _ in sse_events(text)]
    assert names[0] == "message_start"
    assert "ping" in names
    assert names[-2:] == ["message_delta", "message_stop"]
    blocks = [n for n in names if n not in ("ping", "message_start", "message_delta", "message_stop")]
    # three blocks, each start, one or more deltas, stop
    assert blocks.count("content_block_start") == 3 and blocks.count("content_block_stop") == 3
    for _ in range(3):
        start = blocks.index("content_block_start")
        stop = blocks.index("content_block_stop")
        assert start < stop and set(blocks[start + 1 : stop]) == {"content_block_delta"}
        blocks = blocks[stop + 1 :]
    deltas = [d["delta"]["type"] for n, d in sse_events(text) if n == "content_block_delta"]
    assert deltas.count("text_delta") >= 2
    assert deltas.count("input_json_delta") >= 3
    assert "thinking_delta" in deltas and "signature_delta" in deltas
    final = next(d for n, d in sse_events(text) if n == "message_delta")
    assert final["delta"]["stop_reason"] == "tool_use"
    assert final["usage"]["output_tokens"] >= 1


def test_non_streamed_reply_is_one_json_message_with_generated_ids() -> None:
    async def body(server: MockServer) -> tuple[int, dict[str, str], str]:
        return await post_raw(server, {"model": "m", "max_tokens": 50, "messages": USER})

    status, _, text = serve(TOOL_REPLY, body)
    message = json.loads(text)
    assert status == 200 and message["type"] == "message" and message["stop_reason"] == "tool_use"
    tool = message["content"][2]
    assert tool["id"].startswith("toolu_mock") and tool["input"]["new_string"] == "step=1"
    assert message["content"][0]["signature"].startswith("sig_mock_")
    assert message["usage"]["input_tokens"] == estimate_input_tokens(None, USER, None)


def test_error_step_answers_the_real_error_body_and_headers() -> None:
    scenario = """
schema_version: 1
scenario: e
model: m
models:
  m:
    - error: {status: 529, headers: {retry-after: 3, x-should-retry: "true"}}
"""

    async def body(server: MockServer) -> tuple[int, dict[str, str], str]:
        return await post_raw(server, {"model": "m", "max_tokens": 5, "messages": USER})

    status, headers, text = serve(scenario, body)
    assert status == 529
    assert headers["retry-after"] == "3" and headers["x-should-retry"] == "true"
    payload = json.loads(text)
    assert payload["type"] == "error"
    assert payload["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert payload["request_id"] == headers["request-id"]


@pytest.mark.parametrize(
    ("status", "etype"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_each_error_status_gets_the_api_error_type(status: int, etype: str) -> None:
    scenario = parse_scenario(
        f"schema_version: 1\nscenario: e\nmodel: m\nmodels:\n  m:\n    - error: {{status: {status}}}\n"
    )
    step = scenario.models["m"].steps[0]
    assert step.error is not None and step.error.type == etype


def test_requests_without_an_api_key_or_a_model_are_rejected_like_the_real_api() -> None:
    async def body(server: MockServer) -> list[int]:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.url + "/v1/messages", json={"model": "m"}) as resp:
                no_key = resp.status
        missing, _, _ = await post_raw(server, {"max_tokens": 5, "messages": USER})
        return [no_key, missing]

    assert serve(TOOL_REPLY, body) == [401, 400]


# ---- steps, rules, exhaustion ----------------------------------------------------------


def test_steps_are_consumed_in_order_with_repeat_and_logged() -> None:
    scenario = """
schema_version: 1
scenario: r
model: a
models:
  a:
    - error: {status: 529}
      repeat: 2
    - reply: {content: [{text: ok}]}
"""

    async def body(server: MockServer) -> list[int]:
        out = []
        for _ in range(3):
            status, _, _ = await post_raw(server, {"model": "a", "max_tokens": 5, "messages": USER})
            out.append(status)
        assert [r.step for r in server.requests] == ["models.a[0]", "models.a[0]", "models.a[1]"]
        return out

    assert serve(scenario, body) == [529, 529, 200]


def test_exhausted_steps_answer_500_naming_the_model_and_count() -> None:
    async def body(server: MockServer) -> list[tuple[int, str]]:
        out = []
        for model in ("m", "m", "other"):
            status, _, text = await post_raw(server, {"model": model, "max_tokens": 5, "messages": USER})
            out.append((status, json.loads(text).get("error", {}).get("message", "")))
        return out

    (s1, _), (s2, m2), (s3, m3) = serve(TOOL_REPLY, body)
    assert (s1, s2, s3) == (200, 500, 500)
    assert "scenario exhausted for model m after 1 requests" in m2
    assert "scenario exhausted for model other after 0 requests" in m3


def test_default_steps_and_otherwise_step_answer_unnamed_and_exhausted_models() -> None:
    scenario = """
schema_version: 1
scenario: d
model: x
default:
  - reply: {content: [{text: first}]}
otherwise: {error: {status: 529}}
"""

    async def body(server: MockServer) -> list[int]:
        statuses = []
        for model in ("x", "y", "x"):
            status, _, _ = await post_raw(server, {"model": model, "max_tokens": 5, "messages": USER})
            statuses.append(status)
        return statuses

    assert serve(scenario, body) == [200, 200, 529]


def test_input_tokens_over_rule_answers_prompt_too_long_with_the_numbers() -> None:
    scenario = """
schema_version: 1
scenario: p
model: m
rules:
  - when: {input_tokens_over: 100}
    times: 1
    error: {status: 400, message: "prompt is too long: {n} tokens > {limit} maximum"}
default:
  - reply: {content: [{text: short}]}
    repeat: 5
"""
    big = [{"role": "user", "content": "x" * 1000}]

    async def body(server: MockServer) -> list[tuple[int, str]]:
        out = []
        for messages in (USER, big, big):
            status, _, text = await post_raw(server, {"model": "m", "max_tokens": 5, "messages": messages})
            out.append((status, text))
        assert [r.step for r in server.requests] == ["default[0]", "rules[0]", "default[0]"]
        return out

    (s1, _), (s2, t2), (s3, _) = serve(scenario, body)
    n = estimate_input_tokens(None, big, None)
    assert (s1, s2, s3) == (200, 400, 200)
    assert json.loads(t2)["error"]["message"] == f"prompt is too long: {n} tokens > 100 maximum"


def test_system_and_last_user_rules_answer_matching_requests_without_consuming_steps() -> None:
    scenario = """
schema_version: 1
scenario: s
model: m
rules:
  - when: {system_contains: summarise}
    reply: {content: [{text: SUMMARY}]}
  - when: {last_user_contains: ping}
    reply: {content: [{text: PONG}]}
models:
  m:
    - reply: {content: [{text: NORMAL}]}
"""

    async def body(server: MockServer) -> list[str]:
        texts = []
        for payload in (
            {"system": "Please summarise the conversation.", "messages": USER},
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "ping please"}]}]},
            {"messages": USER},
        ):
            _, _, text = await post_raw(server, {"model": "m", "max_tokens": 5, **payload})
            texts.append(json.loads(text)["content"][0]["text"])
        return texts

    assert serve(scenario, body) == ["SUMMARY", "PONG", "NORMAL"]


def test_count_tokens_returns_the_documented_estimate() -> None:
    tools = [{"name": "Read", "description": "read a file", "input_schema": {"type": "object"}}]

    async def body(server: MockServer) -> int:
        client = sdk(server)
        try:
            result = await client.messages.count_tokens(model="m", messages=USER, system="be brief", tools=tools)  # type: ignore[arg-type]
        finally:
            await client.close()
        assert server.requests[-1].path == "/v1/messages/count_tokens"
        assert server.requests[-1].step == "count_tokens"
        return result.input_tokens

    assert serve(TOOL_REPLY, body) == estimate_input_tokens("be brief", USER, tools)


def test_request_log_records_what_the_sdk_sent_and_which_step_answered() -> None:
    tools = [{"name": "Edit", "description": "edit", "input_schema": {"type": "object"}}]

    async def body(server: MockServer) -> None:
        client = sdk(server)
        try:
            await client.messages.create(
                model="m",
                max_tokens=77,
                system="sys",
                messages=USER,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                extra_headers={"x-client-request-id": "cid-1"},
            )
        finally:
            await client.close()
        (rec,) = server.requests
        assert rec.path == "/v1/messages" and rec.model == "m" and rec.stream is False
        assert rec.max_tokens == 77 and rec.system == "sys" and rec.tools == ("Edit",)
        assert rec.messages == tuple(USER)
        assert rec.headers["x-client-request-id"] == "cid-1"
        assert "anthropic-version" in rec.headers
        assert rec.headers["x-stainless-retry-count"] == "0"
        assert rec.response_status == 200 and rec.step == "models.m[0]"

    serve(TOOL_REPLY, body)


def test_stop_cuts_a_stalled_stream_short() -> None:
    scenario = """
schema_version: 1
scenario: s
model: m
models:
  m:
    - reply: {content: [{text: slow}]}
      stall: {after_block: 0, seconds: 3600}
"""
    payload = json.dumps({"model": "m", "max_tokens": 5, "messages": USER, "stream": True})
    headers = {"x-api-key": "x", "anthropic-version": "2023-06-01", "content-type": "application/json"}

    async def main() -> bool:
        server = MockServer(parse_scenario(scenario))
        await server.start()
        async with (
            aiohttp.ClientSession() as session,
            session.post(server.url + "/v1/messages", data=payload, headers=headers) as resp,
        ):
            seen = b""
            while b"event: ping" not in seen:  # the ping before the first block is out: the hour's stall comes next
                chunk = await resp.content.readany()
                assert chunk, f"the stream ended before its stall: {seen!r}"
                seen += chunk
            try:  # only a stop that cuts the stall returns: the guard ends a wait for the hour, and fails
                await asyncio.wait_for(server.stop(), HANG_GUARD_S)
            except TimeoutError:
                return False
            with contextlib.suppress(aiohttp.ClientError):
                await resp.read()
        return True

    assert asyncio.run(main()), "the server's stop waited for the stalled stream"


# ---- scenario files --------------------------------------------------------------------


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_is_valid(path: pathlib.Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert scenario.model
    for model in (scenario.model, *scenario.fallback_models):
        assert model_info(model) is not None, f"{path.name}: model {model} has no price"


def test_fallback_chain_scenario_scripts_the_seed_chain() -> None:
    scenario = load_scenario(ROOT / "machines" / "scenarios" / "fallback_chain.yaml")
    assert scenario.model == "mock-primary" and scenario.fallback_models == ("mock-fallback",)
    primary = scenario.models["mock-primary"]
    assert primary.length == 3 and all(s.error is not None and s.error.status == 529 for s in primary.steps)
    fallback = scenario.models["mock-fallback"].steps
    assert [b["name"] for s in fallback for b in s.content if b["type"] == "tool_use"] == ["Edit", "Bash"]
    assert fallback[-1].stop_reason == "end_turn"
    assert scenario.files == {"checkpoint.txt": "step=0\n"}


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (
            "schema_version: 1\nscenario: x\nmodel: m\nmodels:\n  m:\n    - reply: {content: []}\n      colour: red\n",
            7,
            "unknown key 'colour'",
        ),
        ("schema_version: 1\nscenario: x\nmodel: m\nmodels:\n  m:\n    - error: {status: 200}\n", 6, "200"),
        ("schema_version: 1\nscenario: x\nmodel: m\ndefault:\n  - repeat: 2\n", 5, "exactly one of 'reply' or 'error'"),
        (
            "schema_version: 1\nscenario: x\nmodel: m\ndefault:\n  - reply:\n      content:\n        - "
            "{text: a}\n      stop_reason: done\n",
            8,
            "use one of",
        ),
        (
            "schema_version: 1\nscenario: x\nmodel: m\ndefault:\n  - reply: {content: [{text: a}]}\n    "
            "cut_after_block: 3\n",
            6,
            "only 1",
        ),
        (
            "schema_version: 1\nscenario: x\nmodel: m\ndefault:\n  - error: {status: 529}\n    stall: "
            "{after_block: 0, seconds: 1}\n",
            6,
            "only applies to a reply",
        ),
        ("schema_version: 1\nscenario: x\nmodel: m\nfiles:\n  ../escape.txt: hi\n", 5, "leaves the working directory"),
        ("schema_version: 1\nscenario: x\n", 1, 'missing required key "model"'),
        ("schema_version: 1\nscenario: x\nmodel: m\nmodel: n\n", 4, "given twice"),
        ("schema_version: 1\nscenario: x\nmodel: [unclosed\n", 4, "invalid YAML"),
    ],
)
def test_malformed_scenario_is_reported_with_file_line_and_fix(text: str, line: int, fragment: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "bad.yaml")
    message = str(info.value)
    assert message.startswith(f"bad.yaml:{line}:"), message
    assert fragment in message
    assert "(" in message and message.endswith(")")


def test_malformed_scenario_file_on_disk_names_its_path(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text(
        "schema_version: 1\nscenario: b\nmodel: m\nrules:\n  - when: {tokens_over: 3}\n    reply: {content: []}\n"
    )
    with pytest.raises(ScenarioError, match=rf"^{bad}:5: .*unknown key 'tokens_over'"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        load_scenario(tmp_path / "missing.yaml")


# ---- pricing ---------------------------------------------------------------------------


def test_cost_of_a_known_model_uses_its_per_million_prices() -> None:
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_read_input_tokens": 10_000}
    assert cost_usd("claude-sonnet-4-5", usage) == pytest.approx(3.0 + 1.5 + 0.003)
    assert cost_usd("claude-sonnet-4-5-20250929", usage) == cost_usd("claude-sonnet-4-5", usage)
    assert cost_usd("mock-primary", usage) == cost_usd("claude-sonnet-4-5", usage)
    assert context_window("claude-opus-4-1") == 200_000


def test_cost_of_an_unlisted_model_uses_the_prices_claude_code_gives_one() -> None:
    usage = {
        "input_tokens": 4000,
        "output_tokens": 6000,
        "cache_creation_input_tokens": 69538,
        "cache_read_input_tokens": 100000,
    }
    assert cost_usd("claude-sonnet-9", usage) == pytest.approx(0.6546125)  # Claude Code 2.1.235's costUSD for it
    assert model_info("claude-sonnet-9") is None and context_window("claude-sonnet-9") is None


SEARCH = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "tides"}}
FOUND = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [
        {"type": "web_search_result", "title": "T", "url": "https://t.e", "encrypted_content": "E", "page_age": None}
    ],
}
CITED = {"type": "text", "text": "High tide at 6.", "citations": [{"type": "char_location", "cited_text": "6"}]}


def test_a_raw_block_streams_as_the_api_streams_its_type_and_reassembles_byte_for_byte() -> None:
    blocks = [SEARCH, FOUND, CITED, {"type": "compaction", "content": "summary", "encrypted_content": "Eq"}]
    raws = ", ".join(json.dumps({"raw": b}) for b in blocks)
    scenario = f"schema_version: 1\nscenario: raw\nmodel: m\nmodels:\n  m:\n    - reply: {{content: [{raws}]}}\n"

    async def body(server: MockServer) -> list[tuple[str, Any]]:
        status, _, text = await post_raw(server, {"model": "m", "max_tokens": 9, "messages": USER, "stream": True})
        assert status == 200
        return sse_events(text)

    events = serve(scenario, body)
    starts = {e["index"]: e["content_block"] for kind, e in events if kind == "content_block_start"}
    assert starts[0]["input"] == {} and starts[1] == FOUND and starts[3]["content"] is None
    deltas = [e["delta"]["type"] for kind, e in events if kind == "content_block_delta"]
    assert {"input_json_delta", "citations_delta", "compaction_delta"} <= set(deltas)


def test_a_server_block_sent_back_changed_is_the_real_apis_400_and_unchanged_it_is_answered() -> None:
    raws = ", ".join(json.dumps({"raw": b}) for b in (SEARCH, FOUND))
    paused = f"    - reply: {{stop_reason: pause_turn, content: [{raws}]}}\n"
    steps = paused + "    - reply: {content: [{text: ok}]}\n" * 2
    scenario = f"schema_version: 1\nscenario: raw\nmodel: m\nmodels:\n  m:\n{steps}"

    async def body(server: MockServer) -> list[tuple[int, str]]:
        async with anthropic.AsyncAnthropic(base_url=server.url, api_key="x", max_retries=0) as client:
            first = await client.messages.create(model="m", max_tokens=9, messages=USER)  # type: ignore[arg-type]
        returned = [b.to_dict() for b in first.content]
        changed = [{**returned[0], "input": {"query": "other"}}, returned[1]]
        answers = []
        for content in (changed, [SEARCH, FOUND]):
            status, _, text = await post_raw(
                server, {"model": "m", "max_tokens": 9, "messages": [*USER, {"role": "assistant", "content": content}]}
            )
            answers.append((status, text))
        return answers

    (refused, refused_body), (answered, _) = serve(scenario, body)
    assert refused == 400 and answered == 200
    message = json.loads(refused_body)["error"]["message"]
    assert message == "messages.1.content.0: the server_tool_use block must be sent back unchanged"


def test_a_steps_server_tool_count_is_sent_as_the_api_sends_it_and_an_unknown_count_is_refused() -> None:
    raws = ", ".join(json.dumps({"raw": b}) for b in (SEARCH, FOUND))
    usage = "usage: {server_tool_use: {web_search_requests: 1}}"
    scenario = (
        f"schema_version: 1\nscenario: raw\nmodel: m\nmodels:\n  m:\n    - reply: {{content: [{raws}], {usage}}}\n"
    )
    scenario += "    - reply: {content: [{text: ok}], " + usage + "}\n"

    async def body(server: MockServer) -> tuple[list[tuple[str, Any]], Any]:
        _, _, streamed = await post_raw(server, {"model": "m", "max_tokens": 9, "messages": USER, "stream": True})
        _, _, whole = await post_raw(server, {"model": "m", "max_tokens": 9, "messages": USER})
        return sse_events(streamed), json.loads(whole)

    events, reply = serve(scenario, body)
    start = next(e for kind, e in events if kind == "message_start")
    delta = next(e for kind, e in events if kind == "message_delta")
    assert "server_tool_use" not in start["message"]["usage"]
    assert delta["usage"]["server_tool_use"] == {"web_search_requests": 1}
    assert reply["usage"]["server_tool_use"] == {"web_search_requests": 1}
    wrong = scenario.replace("web_search_requests: 1}}}\n", "web_searches: 1}}}\n", 1)
    with pytest.raises(ScenarioError, match="web_searches"):
        parse_scenario(wrong, "<test>")
