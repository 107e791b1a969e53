"""The embedded Anthropic-compatible fake server that plays a scenario over loopback HTTP.

Serves ``/v1/messages`` (JSON or SSE) and ``count_tokens`` with the real API's shapes, refusals and the scripted
faults (docs/scenarios.md). Keeps a bounded request log.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import attrs
from aiohttp import web

from .holds import Holds
from .prompt_cache import (
    CacheUsage,
    PromptCache,
    breakpoint_paths,
    breakpoint_problem,
    has_breakpoints,
    usage_fields,
)
from .scenario import ErrorSpec, Rule, Scenario, Step, load_scenario
from .wire import (
    _as_read,
    _block_events,
    _compact,
    _first_user_text,
    _issued_key,
    _last_user_text,
    _prompt,
    _text_of,
    estimate_input_tokens,
    estimate_output_tokens,
)

__all__ = [
    "DEFAULT_MAX_RECORDED",
    "MockServer",
    "REQUEST_MAX_BYTES",
    "RecordedRequest",
    "estimate_input_tokens",
    "estimate_output_tokens",
    "serve_forever",
]

DEFAULT_MAX_RECORDED = 200
"""Requests a server keeps in ``requests`` unless told otherwise (each holds the whole transcript it was sent)."""

REQUEST_MAX_BYTES = 32 * 1024 * 1024
"""The largest request body the server reads, the Messages API's 32 MB; a larger one is its 413 request_too_large."""

_LOGGED_HEADERS = (
    "x-client-request-id",
    "anthropic-version",
    "anthropic-beta",
    "x-stainless-retry-count",
    "x-api-key",  # which credential reached the server (a test server: keys are fake)
    "authorization",
)


@attrs.frozen(kw_only=True)
class RecordedRequest:
    """One request the server answered, as the test or the CLI sees it afterwards."""

    path: str
    model: str | None
    stream: bool
    max_tokens: int | None
    messages: tuple[Any, ...]
    system: Any
    tools: tuple[str, ...]
    """The names of the tools offered."""
    tool_definitions: tuple[Mapping[str, Any], ...]
    """The tools offered, whole (name, description, input_schema)."""
    headers: Mapping[str, str]
    """The subset of request headers in ``_LOGGED_HEADERS`` that was sent."""
    request_id: str
    response_status: int
    step: str
    """Which scenario entry answered: ``models.mock-primary[0]``, ``rules[1]``,
    ``otherwise``, ``exhausted``, ``count_tokens`` or ``invalid_request``."""
    input_tokens: int
    """The server's estimate of the whole input (cached parts included, markers not counted)."""
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    """The part of ``cache_creation_input_tokens`` written for an hour (``ttl: "1h"``)."""
    output_tokens: int = 0
    """The reply's output estimate (0 for an error); a step's ``usage`` override is not applied here."""
    cache_breakpoints: tuple[str, ...] = ()
    """Where the request's ``cache_control`` markers were: ``system[0]``, ``tools[2]``, ``messages[4][0]``."""


class _Disconnected(Exception):
    """The client went away while the server was writing."""


class MockServer:
    """Serve ``scenario`` on loopback; ``requests`` holds the ``max_recorded`` latest requests, oldest first."""

    def __init__(self, scenario: Scenario, *, max_recorded: int = DEFAULT_MAX_RECORDED) -> None:
        if max_recorded < 1:
            raise ValueError(f"MockServer max_recorded must be at least 1, got {max_recorded}")
        self.scenario = scenario
        self.requests: deque[RecordedRequest] = deque(maxlen=max_recorded)
        self.model_time_skipped = 0.0
        """Seconds of model time the scenario's ``pause_s`` steps have skipped (the cache's clock adds them)."""
        self.prompt_cache = PromptCache(min_tokens=scenario.cache_min_tokens, clock=self._model_clock)
        self._consumed: dict[str, int] = {}
        self._rule_hits: dict[int, int] = {}
        self._counter = 0
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._closing = asyncio.Event()
        self.holds = Holds(self._closing)
        self._issued: dict[tuple[str, str], set[str]] = {}  # (type, key) → the compact JSON of each such block sent

    # ---- lifecycle ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to hand the SDK (``http://127.0.0.1:PORT``); only after ``start``."""
        if self._url is None:
            raise RuntimeError("MockServer.url read before start(): await server.start() first")
        return self._url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (0 picks a free port) on the running event loop."""
        if self._runner is not None:
            raise RuntimeError("MockServer.start() called twice: stop() it before starting again")
        app = web.Application(client_max_size=REQUEST_MAX_BYTES)
        app.router.add_post("/v1/messages", self._handle_messages)
        app.router.add_post("/v1/messages/count_tokens", self._handle_count_tokens)
        app.router.add_route("*", "/{tail:.*}", self._handle_unknown)
        self._closing.clear()
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_port = runner.addresses[0][1]
        self._runner = runner
        self._url = f"http://{host}:{bound_port}"

    async def stop(self) -> None:
        """Stop listening; stalled and delayed answers are cut short."""
        self._closing.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> MockServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _model_clock(self) -> float:
        """The prompt cache's time: the monotonic clock plus the pauses the scenario skipped."""
        return time.monotonic() + self.model_time_skipped

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds`` unless the server is stopping."""
        if seconds <= 0:
            return
        try:
            await asyncio.wait_for(self._closing.wait(), seconds)
        except TimeoutError:
            pass

    # ---- choosing the step ----------------------------------------------------------

    def _next_request_id(self) -> str:
        self._counter += 1
        return f"req_mock_{self._counter:04d}{uuid.uuid4().hex[:20]}"

    def _rule_matches(self, rule: Rule, model: str, system: object, messages: object, n_tokens: int) -> bool:
        if rule.model is not None and rule.model != model:
            return False
        if rule.input_tokens_over is not None and not n_tokens > rule.input_tokens_over:
            return False
        if rule.system_contains is not None and rule.system_contains not in _text_of(system):
            return False
        if rule.first_user_contains is not None and rule.first_user_contains not in _first_user_text(messages):
            return False
        return rule.last_user_contains is None or rule.last_user_contains in _last_user_text(messages)

    def _choose(self, model: str, system: object, messages: object, n_tokens: int) -> tuple[Step | None, str, int]:
        """The step answering this request, its label, and the rule limit for ``{limit}``."""
        for i, rule in enumerate(self.scenario.rules):
            if rule.times is not None and self._rule_hits.get(i, 0) >= rule.times:
                continue
            if self._rule_matches(rule, model, system, messages, n_tokens):
                self._rule_hits[i] = self._rule_hits.get(i, 0) + 1
                return rule.step, f"rules[{i}]", rule.input_tokens_over or 0
        script = self.scenario.script_for(model)
        index = self._consumed.get(model, 0)
        if script is not None:
            step = script.step_at(index)
            if step is not None:
                self._consumed[model] = index + 1
                return step, step.where, 0
            if script.otherwise is not None:
                return script.otherwise, script.otherwise.where, 0
        if self.scenario.otherwise is not None:
            return self.scenario.otherwise, "otherwise", 0
        return None, "exhausted", 0

    # ---- responses ------------------------------------------------------------------

    @staticmethod
    def _error_response(
        status: int, etype: str, message: str, request_id: str, headers: Mapping[str, str] = {}
    ) -> web.Response:
        body = {"type": "error", "error": {"type": etype, "message": message}, "request_id": request_id}
        return web.json_response(body, status=status, headers={"request-id": request_id, **headers})

    def _record(self, request: web.Request, body: Mapping[str, Any], *, marked: bool = False, **fields: Any) -> None:
        """Log the request; with cache markers, the prompt is logged as the model reads it, the markers apart.

        The markers are not part of the prompt: ``messages``, ``system`` and
        ``tool_definitions`` are logged without them (and a system prompt sent as one text
        block for its marker, as its string), ``cache_breakpoints`` says where they were.
        """
        system, messages, tools = _prompt(body, marked)
        if marked:
            system = _as_read(system)
            fields["cache_breakpoints"] = breakpoint_paths(body.get("system"), body.get("messages"), body.get("tools"))
        names = tuple(t.get("name", "") for t in tools if isinstance(t, dict)) if isinstance(tools, list) else ()
        self.requests.append(
            RecordedRequest(
                path=request.path,
                model=body.get("model") if isinstance(body.get("model"), str) else None,
                stream=body.get("stream") is True,
                max_tokens=body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else None,
                messages=tuple(messages) if isinstance(messages, list) else (),
                system=system,
                tools=names,
                tool_definitions=tuple(t for t in tools if isinstance(t, dict)) if isinstance(tools, list) else (),
                headers={h: request.headers[h] for h in _LOGGED_HEADERS if h in request.headers},
                **fields,
            )
        )

    async def _read_body(self, request: web.Request) -> tuple[dict[str, object] | None, str, bool]:
        """The JSON body (or the problem with it), and whether its bytes mention ``cache_control``."""
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None, "the request body is not valid JSON", False
        if not isinstance(body, dict):
            return None, "the request body must be a JSON object", False
        return body, "", has_breakpoints(raw)  # only a marked body's prompt is walked for markers

    def _invalid(self, request: web.Request, body: Mapping[str, Any] | None, marked: bool) -> str | None:
        """A 400/401 message the real API would give this request, else None."""
        if "x-api-key" not in request.headers and "authorization" not in request.headers:
            return "x-api-key header is required"
        if body is None:
            return None
        if not isinstance(body.get("model"), str):
            return "model: Field required"
        if not isinstance(body.get("messages"), list):
            return "messages: Field required"
        if request.path == "/v1/messages" and not isinstance(body.get("max_tokens"), int):
            return "max_tokens: Field required"
        if marked:
            problem = breakpoint_problem(body.get("system"), body["messages"], body.get("tools"))
            if problem:
                return problem
        return self._altered(body["messages"]) if request.path == "/v1/messages" else None

    def _altered(self, messages: Sequence[Any]) -> str | None:
        """The 400 the real API gives a request that sends back a signed or server-side block it returned changed
        (thinking, a server tool's call or result, a compaction); a block it never sent is not checked."""
        if not self._issued:
            return None
        for i, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list) or message.get("role") != "assistant":
                continue
            for j, block in enumerate(content):
                key = _issued_key(block)
                sent = self._issued.get(key) if key is not None else None
                if sent is not None and _compact({k: v for k, v in block.items() if k != "cache_control"}) not in sent:
                    if block.get("type") == "thinking":
                        return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                    return f"messages.{i}.content.{j}: the {block.get('type')} block must be sent back unchanged"
        return None

    async def _handle_unknown(self, request: web.Request) -> web.Response:
        rid = self._next_request_id()
        return self._error_response(404, "not_found_error", f"Not found: {request.method} {request.path}", rid)

    async def _accept(self, request: web.Request, rid: str) -> tuple[dict[str, Any] | None, bool, web.Response | None]:
        """The request's JSON body and whether it carries cache markers, or the real API's 401/400 answer
        (recorded) when it is unusable."""
        try:
            body, problem, marked = await self._read_body(request)
        except web.HTTPRequestEntityTooLarge:
            self._record(request, {}, request_id=rid, response_status=413, step="request_too_large", input_tokens=0)
            too_large = "Request exceeds the maximum allowed number of bytes."  # the real API's words
            return None, False, self._error_response(413, "request_too_large", too_large, rid)
        problem = problem or self._invalid(request, body, marked) or ""
        if body is None or problem:
            status = 401 if problem.startswith("x-api-key") else 400
            self._record(
                request, body or {}, request_id=rid, response_status=status, step="invalid_request", input_tokens=0
            )
            etype = "authentication_error" if status == 401 else "invalid_request_error"
            return None, marked, self._error_response(status, etype, problem, rid)
        return body, marked, None

    async def _handle_count_tokens(self, request: web.Request) -> web.Response:
        rid = self._next_request_id()
        body, marked, rejection = await self._accept(request, rid)
        if rejection is not None:
            return rejection
        assert body is not None
        n = estimate_input_tokens(*_prompt(body, marked))
        self._record(
            request, body, marked=marked, request_id=rid, response_status=200, step="count_tokens", input_tokens=n
        )
        return web.json_response({"input_tokens": n}, headers={"request-id": rid})

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        rid = self._next_request_id()
        body, marked, rejection = await self._accept(request, rid)
        if rejection is not None:
            return rejection
        assert body is not None

        model: str = body["model"]
        system, messages = body.get("system"), body["messages"]
        n_in = estimate_input_tokens(*_prompt(body, marked))
        step, where, limit = self._choose(model, system, messages, n_in)
        status = 500 if step is None else (step.error.status if step.error is not None else 200)
        if step is not None:
            self.model_time_skipped += step.pause_s  # the user was away before this request: no real wait
            self.holds.reach(step.name)
        cache = CacheUsage()
        if status == 200 and marked:  # an answered prompt is cached; a refused one is not
            cache = self.prompt_cache.account(model, system, messages, body.get("tools"))
        self._record(
            request,
            body,
            request_id=rid,
            response_status=status,
            step=where,
            input_tokens=n_in,
            cache_read_input_tokens=cache.read,
            cache_creation_input_tokens=cache.write,
            cache_creation_1h_input_tokens=cache.write_1h,
            output_tokens=estimate_output_tokens(step.content) if status == 200 and step is not None else 0,
            marked=marked,
        )

        if step is None:
            consumed = self._consumed.get(model, 0)
            hint = (
                "" if self.scenario.script_for(model) else " (the scenario names no steps for it and has no default:)"
            )
            message = f"scenario exhausted for model {model} after {consumed} requests{hint}"
            return self._error_response(500, "api_error", message, rid)
        if step.hold is not None and not await self.holds.wait(step.hold):
            return self._hold_expired(step, rid)
        await self._pause(step.delay_ms / 1000)
        if step.error is not None:
            return self._scripted_error(step.error, rid, model, n_in, limit)
        stream = body.get("stream") is True
        input_usage = usage_fields(n_in, cache)
        if stream:
            return await self._stream_reply(request, step, rid, model, input_usage)
        if step.cut_body:
            return await self._cut_json_reply(request, step, rid, model, input_usage)
        return self._json_reply(step, rid, model, input_usage)

    async def _cut_json_reply(
        self, request: web.Request, step: Step, rid: str, model: str, input_usage: Mapping[str, object]
    ) -> web.StreamResponse:
        """A 200 whose JSON body stops half-way and the connection closes (``cut_body: true``)."""
        blocks, _, msg_id = self._materialise(step, rid, model, input_usage)
        text = json.dumps({"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": blocks})
        response = web.StreamResponse(status=200, headers={"request-id": rid, "content-type": "application/json"})
        response.content_length = len(text.encode()) + 64  # promises more than it sends
        await response.prepare(request)
        await response.write(text[: len(text) // 2].encode())
        self._cut(request)
        return response

    def _hold_expired(self, step: Step, rid: str) -> web.Response:
        """A hold nothing released within its ``max_s``: a 400 (not retried) naming it, and a line on stderr."""
        assert step.hold is not None
        message = f"scenario hold not released: {step.where} waited {step.hold.max_s:g} s for {step.hold.describe()}"
        print(f"mock-api: {message}", file=sys.stderr, flush=True)
        return self._error_response(400, "invalid_request_error", message, rid)

    def _scripted_error(self, spec: ErrorSpec, rid: str, model: str, n_in: int, limit: int) -> web.Response:
        message = spec.message.replace("{n}", str(n_in)).replace("{limit}", str(limit)).replace("{model}", model)
        return self._error_response(spec.status, spec.type, message, rid, spec.headers)

    def _materialise(
        self, step: Step, rid: str, model: str, input_usage: Mapping[str, object]
    ) -> tuple[list[dict[str, object]], dict[str, object], str]:
        """Reply blocks with ids and signatures filled in, the final usage, and a message id.

        ``input_usage`` is the input side of the usage (uncached, read and written tokens).
        """
        base = rid.removeprefix("req_mock_")
        blocks: list[dict[str, object]] = []
        for i, template in enumerate(step.content):
            block = dict(template)
            if block["type"] == "tool_use" and "id" not in block:
                block["id"] = f"toolu_mock{base}{i:02d}"  # `toolu_` and base62, the API's shape
            if block["type"] == "thinking" and "signature" not in block:
                block["signature"] = f"sig_mock_{base}_{i}"
            key = _issued_key(block)
            if key is not None:
                self._issued.setdefault(key, set()).add(_compact(block))
            blocks.append(block)
        usage: dict[str, object] = {
            "input_tokens": input_usage["input_tokens"],
            "cache_creation_input_tokens": input_usage["cache_creation_input_tokens"],
            "cache_read_input_tokens": input_usage["cache_read_input_tokens"],
            "output_tokens": estimate_output_tokens(blocks),
        }
        if "cache_creation" in input_usage:
            usage["cache_creation"] = input_usage["cache_creation"]
        usage.update(step.usage)
        return blocks, usage, f"msg_mock_{base}"

    def _json_reply(self, step: Step, rid: str, model: str, input_usage: Mapping[str, object]) -> web.Response:
        blocks, usage, msg_id = self._materialise(step, rid, model, input_usage)
        headers = {"request-id": rid}
        if step.malformed == "json":
            broken = '{"id": "' + msg_id + '", "type": "message", "role": "assistant", "content": [{"type": "te'
            return web.Response(status=200, text=broken, content_type="application/json", headers=headers)
        message = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": step.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        return web.json_response(message, headers=headers)

    async def _stream_reply(
        self, request: web.Request, step: Step, rid: str, model: str, input_usage: Mapping[str, object]
    ) -> web.StreamResponse:
        blocks, usage, msg_id = self._materialise(step, rid, model, input_usage)
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": rid,
            },
        )
        await response.prepare(request)

        async def send(event: str, data: Mapping[str, object] | str) -> None:
            payload = data if isinstance(data, str) else _compact(data)
            try:
                await response.write(f"event: {event}\ndata: {payload}\n\n".encode())
            except (ConnectionError, RuntimeError) as exc:
                raise _Disconnected() from exc

        late = ("output_tokens", "server_tool_use")  # counted at the end: message_delta carries them
        start_usage = {k: v for k, v in usage.items() if k not in late} | {"output_tokens": 1}
        try:
            await send(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
            )
            await send("ping", {"type": "ping"})
            if step.malformed == "sse":
                # Truncated JSON in an event the client must parse: a broken stream after a 200.
                await send("content_block_start", '{"type": "content_block_start", "index": 0, "content_block": {"ty')
                await response.write_eof()
                return response
            for index in range(len(blocks) + 1):
                if step.stall_after_block == index:
                    await self._pause(step.stall_seconds)
                if step.error_event_after_block == index:
                    await send(
                        "error",
                        {
                            "type": "error",
                            "error": {"type": step.error_event_type, "message": step.error_event_message},
                            "request_id": rid,
                        },
                    )
                    await response.write_eof()
                    return response
                if step.cut_after_block == index:
                    if index < len(blocks):
                        await self._send_block(send, index, blocks[index], partial=True)
                    self._cut(request)
                    return response
                if index < len(blocks):
                    await self._send_block(send, index, blocks[index], partial=False)
                    if index == 0 and len(blocks) > 1:
                        await send("ping", {"type": "ping"})
            await send(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": step.stop_reason, "stop_sequence": None},
                    "usage": {k: usage[k] for k in ("output_tokens", "server_tool_use") if k in usage},
                },
            )
            await send("message_stop", {"type": "message_stop"})
            await response.write_eof()
        except _Disconnected:
            pass
        return response

    @staticmethod
    def _cut(request: web.Request) -> None:
        """Close the connection without finishing the chunked body (an abrupt cut)."""
        transport = request.transport
        if transport is not None:
            transport.close()

    @staticmethod
    async def _send_block(send: Any, index: int, block: Mapping[str, Any], *, partial: bool) -> None:
        """Stream one block; ``partial`` stops after its first delta (no content_block_stop)."""
        start, deltas = _block_events(block)
        await send("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        if partial:
            deltas = deltas[: max(1, len(deltas) // 2)]
        for delta in deltas:
            await send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        if not partial:
            await send("content_block_stop", {"type": "content_block_stop", "index": index})


async def _serve(scenario: Scenario, host: str, port: int) -> None:
    server = MockServer(scenario)
    await server.start(host, port)
    print(f"mock-api listening on {server.url}", file=sys.stderr, flush=True)
    print(
        f"mock-api: playing scenario {scenario.name!r}; point a client at it with ANTHROPIC_BASE_URL={server.url} "
        f"and ANTHROPIC_API_KEY set to any value (e.g. offline); its scripted model is {scenario.model!r}",
        file=sys.stderr,
        flush=True,
    )
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def serve_forever(scenario_path: str, port: int = 0, host: str = "127.0.0.1") -> None:
    """Load ``scenario_path`` (a file, or a shipped scenario's name) and serve it until interrupted.

    ``queryloop mock-api``. Prints ``mock-api listening on http://HOST:PORT`` to stderr once
    listening, then a line saying how to point a client at it (``ANTHROPIC_BASE_URL``,
    ``ANTHROPIC_API_KEY`` with any value, the scenario's model). Raises
    :class:`~queryloop.mockapi.scenario.ScenarioError` for a bad scenario file.
    """
    scenario = load_scenario(scenario_path)
    try:
        asyncio.run(_serve(scenario, host, port))
    except KeyboardInterrupt:
        pass
