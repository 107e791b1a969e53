"""One HTTP attempt at the Messages API, turned into a typed outcome.

Sends through the official SDK with ``max_retries=0`` and classifies every failure (:data:`FailureKind`); none
escapes. The idle timeout and an optional deadline bound an attempt: either running out is a retryable
``timeout_error``, but a stream gone idle after its headers is ``stream_broken``.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, cast, get_args

import attrs

from queryloop.fsm import loads_json, well_formed

from ...messages import Block, Message
from .body import encode_params
from .pricing import cost_usd, wire_model

if TYPE_CHECKING:  # the SDK is imported where a request is sent: importing it costs over a second
    import anthropic

__all__ = [
    "API_VERSION",
    "FAILURE_KINDS",
    "FailureKind",
    "ModelFailure",
    "ModelReply",
    "ModelRequest",
    "ModelUsage",
    "RECOVERABLE_FAILURES",
    "RequestLog",
    "StreamListener",
    "TRANSIENT_FAILURES",
    "UsageTotals",
    "api_headers",
    "classify_error",
    "send_request",
]

StreamListener = Callable[[Mapping[str, Any], int | None], None]
"""Told each event of a streamed answer as it arrived, and for ``message_start`` the milliseconds since the
attempt began (Claude Code's ``ttft_ms`` on that line)."""

FailureKind = Literal[
    "retryable",
    "overloaded",
    "model_unavailable",
    "unauthorized",
    "prompt_too_long",
    "media_too_large",
    "fatal",
    "stream_broken",
    "malformed_response",
]
"""What went wrong with an attempt: the one list of failure kinds (:func:`classify_error` and the response
readers choose one; the request layer's ``classify_failure`` turns each into an event of the machine; a
request log's ``error_kind`` and the telemetry's ``error.type`` are the kind's name)."""
FAILURE_KINDS: Final[tuple[FailureKind, ...]] = get_args(FailureKind)
"""The kinds of :data:`FailureKind`, in its order."""
TRANSIENT_FAILURES: Final[frozenset[FailureKind]] = frozenset(
    {"retryable", "overloaded", "unauthorized", "malformed_response"}
)
"""The kinds a request sent again may not meet (a summary request is sent again after them)."""
RECOVERABLE_FAILURES: Final[frozenset[FailureKind]] = frozenset({"prompt_too_long", "media_too_large"})
"""The kinds the query loop recovers from (compacting, dropping the media) and shows only once recovery is spent."""

API_VERSION = "2023-06-01"
"""The ``anthropic-version`` every request sends, as Claude Code 2.1.235 sends it (the installed SDK's own
default may be a newer version the server interprets differently)."""

_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
_CACHE_SPLIT_KEYS = ("ephemeral_1h_input_tokens", "ephemeral_5m_input_tokens")
"""A reply's ``usage.cache_creation`` split of its cache writes by lifetime, in Claude Code's result order."""

# The nominal HTTP status of each API error type, used to classify an `event: error`
# that arrives after a 200 (the SDK reports those with status_code 200).
_STATUS_OF_TYPE: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "timeout_error": 408,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


@attrs.frozen(kw_only=True)
class ModelRequest:
    """Everything one attempt sends; ``attempt`` counts attempts of one logical request.

    ``body`` is the prepared JSON body (:func:`~queryloop.handlers.request.services.body.encode_request`
    builds it from the stored bytes of the transcript, with cache breakpoints); without
    one, the body is encoded from ``messages``, ``system`` and ``tools`` in one pass.
    ``model`` and ``stream`` must agree with a prepared body: they label the attempt.
    """

    model: str
    max_tokens: int
    messages: tuple[Message, ...] = ()
    system: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    stream: bool = True
    idle_timeout_s: float
    """The longest wait for the response headers, the next SSE event or the next bytes of a body."""
    deadline_s: float | None = None
    """The longest the whole attempt may take (None: no limit but the idle timeout)."""
    attempt: int = 1
    body: bytes | None = None
    """The JSON body as sent (None: encoded from the fields above, without breakpoints)."""


@attrs.frozen(kw_only=True)
class RequestLog:
    """What happened on one HTTP attempt (kept for telemetry, transcripts and tests)."""

    client_request_id: str
    """The uuid sent as ``x-client-request-id``."""
    request_id: str | None
    """The server's ``request-id`` header."""
    attempt: int
    model: str
    stream: bool
    status: int | None
    stop_reason: str | None
    ttft_ms: float | None
    """Time to the first content delta; None when not streamed or none arrived."""
    duration_ms: float
    usage: Mapping[str, Any]
    error_kind: FailureKind | None = None
    error_message: str | None = None


@attrs.frozen(kw_only=True)
class ModelReply:
    """A complete answer: API-format content blocks (tool_use ``input`` parsed to a dict)."""

    content: tuple[Block, ...]
    stop_reason: str | None
    usage: Mapping[str, Any]
    model: str
    request_id: str | None
    log: RequestLog
    message_id: str | None = None
    """The API's id of the message (``msg_…``), when the server sent one."""


@attrs.frozen(kw_only=True)
class ModelFailure:
    """A failed attempt, classified so the state machine can choose a recovery edge."""

    kind: FailureKind
    status: int | None
    error_type: str | None
    message: str
    retry_after_s: float | None = None
    retry_at: float | None = None
    """When the server asked to be retried (Unix time): ``retry_after_s`` after the answer arrived."""
    should_retry: bool | None = None
    partial_content: tuple[Block, ...] = ()
    """Blocks completed (``content_block_stop`` seen, tool input parsed) before a mid-stream failure."""
    log: RequestLog


# ---- classification --------------------------------------------------------------------


def _should_retry(headers: Mapping[str, str] | None) -> bool | None:
    value = (headers or {}).get("x-should-retry")
    if value is None:
        return None
    value = value.strip().lower()
    return True if value == "true" else False if value == "false" else None


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred) or ``retry-after`` (seconds or HTTP date)."""
    headers = headers or {}
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def classify_error(
    status: int | None, error_type: str | None, message: str, *, should_retry: bool | None = None
) -> FailureKind:
    """The kind of an API error; ``status`` 200 means an ``event: error`` after a 200.

    Order matters: the recoverable specifics (overloaded, prompt too long, media too
    large, model unavailable) are recognised first; then ``x-should-retry: true`` makes
    anything retryable, and ``x-should-retry: false`` makes a transient error fatal.
    """
    effective = status if status is not None and status != 200 else _STATUS_OF_TYPE.get(error_type or "", 500)
    text = message.lower()
    if effective == 529 or error_type == "overloaded_error":
        return "fatal" if should_retry is False else "overloaded"
    if effective == 413 or error_type == "request_too_large" or (effective == 400 and "prompt is too long" in text):
        return "prompt_too_long"
    if effective == 400 and (
        "image exceeds" in text or ("too large" in text and ("image" in text or "media" in text or "pdf" in text))
    ):
        return "media_too_large"
    if effective == 404 and "model" in text:
        return "model_unavailable"
    if should_retry is True:
        return "retryable"
    if effective == 401 and should_retry is None:
        return "unauthorized"  # the machine retries it (auth_error_backoff), as Claude Code 2.1.235 does
    if effective in (408, 409, 429) or effective >= 500:
        return "fatal" if should_retry is False else "retryable"
    return "fatal"


def _api_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(exc.message)


def _error_type(exc: anthropic.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            return str(error["type"])
    return None


# ---- the attempt -----------------------------------------------------------------------


class _Attempt:
    """Mutable bookkeeping of one attempt, frozen into a RequestLog at the end."""

    def __init__(self, req: ModelRequest) -> None:
        self.req = req
        self.client_request_id = str(uuid.uuid4())
        self.started = time.monotonic()
        self.request_id: str | None = None
        self.status: int | None = None
        self.ttft_ms: float | None = None
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.model = req.model
        self.note: str | None = None
        self.assembler: _Assembler | None = None  # a streamed reply's blocks so far
        self.message_id: str | None = None  # a streamed reply's, from its message_start

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.started) * 1000.0

    def log(self, kind: FailureKind | None = None, message: str | None = None) -> RequestLog:
        return RequestLog(
            client_request_id=self.client_request_id,
            request_id=self.request_id,
            attempt=self.req.attempt,
            model=self.req.model,
            stream=self.req.stream,
            status=self.status,
            stop_reason=self.stop_reason,
            ttft_ms=self.ttft_ms,
            duration_ms=self.elapsed_ms(),
            usage=dict(self.usage),
            error_kind=kind,
            error_message=message if message is not None else self.note,
        )

    def fail(
        self,
        kind: FailureKind,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        partial: tuple[Block, ...] = (),
    ) -> ModelFailure:
        if status is not None:
            self.status = status
        retry_after = _retry_after(headers)
        return ModelFailure(
            kind=kind,
            status=self.status,
            error_type=error_type,
            message=message,
            retry_after_s=retry_after,
            retry_at=None if retry_after is None else time.time() + retry_after,
            should_retry=_should_retry(headers),
            partial_content=partial,
            log=self.log(kind, message),
        )

    def from_status_error(self, exc: anthropic.APIStatusError, partial: tuple[Block, ...] = ()) -> ModelFailure:
        headers = exc.response.headers
        self.request_id = self.request_id or headers.get("request-id")
        message, etype = _api_message(exc), _error_type(exc)
        kind = classify_error(exc.status_code, etype, message, should_retry=_should_retry(headers))
        return self.fail(kind, message, status=exc.status_code, error_type=etype, headers=headers, partial=partial)

    def from_transport_error(self, exc: anthropic.APIConnectionError) -> ModelFailure:
        import anthropic

        timed_out = isinstance(exc, anthropic.APITimeoutError)
        cause = exc.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        if type(cause).__name__ == "RemoteProtocolError" and "message body" in str(cause):  # the SDK's HTTP library
            # the server answered and its body broke off mid-way: the answer, not the connection, broke
            return self.fail("stream_broken", f"the response broke off before it was complete: {detail}")
        message = f"{'request timed out' if timed_out else 'connection error'}: {detail}"
        return self.fail("retryable", message, error_type="timeout_error" if timed_out else "connection_error")


def _body(req: ModelRequest) -> bytes:
    if req.body is not None:
        return req.body
    return encode_params(
        model=req.model,
        messages=req.messages,
        system=req.system,
        tools=req.tools,
        max_tokens=req.max_tokens,
        stream=req.stream,
    )


def api_headers(client: anthropic.AsyncAnthropic) -> dict[str, object]:
    """The headers in which a request must differ from the SDK's defaults to be Claude Code's.

    ``anthropic-version`` is :data:`API_VERSION`; an API key goes in ``X-Api-Key`` (the
    installed SDK sends it as ``Authorization: Bearer``, which Claude Code 2.1.235 sends only
    for an ``ANTHROPIC_AUTH_TOKEN``).
    """
    import anthropic

    headers: dict[str, object] = {"anthropic-version": API_VERSION}
    if client.api_key and not client.auth_token:
        headers["X-Api-Key"] = client.api_key
        headers["Authorization"] = anthropic.Omit()
    return headers


def _timeout(client: anthropic.AsyncAnthropic, seconds: float | None) -> object:
    """The request's timeout, always given: the SDK reports it in ``x-stainless-timeout``, and reads
    ``NOT_GIVEN`` there when a request leaves the client's default in place (Claude Code: ``600``)."""
    if seconds is None:
        return client.timeout  # the client's, 600 s for reading unless built with another
    return int(seconds) if float(seconds).is_integer() else seconds  # 90, not 90.0, as a JS client writes it


def _options(
    attempt: _Attempt, client: anthropic.AsyncAnthropic, *, raw: bool = False, timeout: float | None = None
) -> Any:
    """The request options ``messages.create`` would pass, for a body we prepared ourselves.

    Everything else ``messages.create`` adds comes from the client on any request: the
    default headers (the key, ``X-Stainless-*``, the user agent, ``Content-Type``), the
    idempotency key and the retry count; :func:`api_headers` overrides the version and the
    key's header as Claude Code sends them. It also names the
    tracing span, kept here; what it does not do for us is compute a default timeout for
    a non-streamed call from ``max_tokens`` (ours always has the idle timeout) and warn
    about a deprecated model name.
    """
    headers = {
        **api_headers(client),
        "x-client-request-id": attempt.client_request_id,
        "content-type": "application/json",
    }
    betas = wire_model(attempt.req.model)[1]
    if betas:  # ``[1m]``: the long-context window (pricing.wire_model)
        headers["anthropic-beta"] = ",".join(betas)
    if raw:
        headers["X-Stainless-Raw-Response"] = "raw"  # what with_raw_response sets: the response, unparsed
    return {
        "headers": headers,
        "span_name": "anthropic.messages.create",
        "span_route": "/v1/messages",
        "timeout": _timeout(client, timeout),
    }


async def send_request(
    client: anthropic.AsyncAnthropic,
    req: ModelRequest,
    *,
    on_text: Callable[[str], None] | None = None,
    on_event: StreamListener | None = None,
) -> ModelReply | ModelFailure:
    """Send ``req`` once through ``client`` (built with ``max_retries=0``) and classify the outcome.

    Streaming calls ``on_text`` with each text delta as it arrives. The idle timeout
    bounds the wait for the response headers and for every following SSE event (or
    read of a non-streamed body); ``req.deadline_s`` bounds the whole attempt.
    """
    attempt = _Attempt(req)
    if req.stream:
        sending = _send_streaming(client, req, attempt, on_text, on_event)
    else:
        sending = _send_plain(client, req, attempt)
    if req.deadline_s is None:
        return await sending
    try:
        async with asyncio.timeout(req.deadline_s):
            return await sending
    except TimeoutError:
        done = attempt.assembler.completed if attempt.assembler is not None else ()
        return attempt.fail(
            "retryable",
            f"no complete response within the request deadline of {req.deadline_s:g} s",
            error_type="timeout_error",
            partial=done,
        )


async def _send_plain(
    client: anthropic.AsyncAnthropic, req: ModelRequest, attempt: _Attempt
) -> ModelReply | ModelFailure:
    import anthropic
    from anthropic.types import Message

    try:
        # The idle timeout is httpx's read timeout: the longest silence, not the whole
        # answer (that is the deadline's). Explicit, too, because the SDK refuses
        # non-streaming calls whose max_tokens suggests > 10 minutes unless one is given.
        answer = await client.post(
            "/v1/messages",
            cast_to=Message,
            content=_body(req),
            options=_options(attempt, client, raw=True, timeout=req.idle_timeout_s),
        )
        raw = cast("anthropic.AsyncAPIResponse[Message]", answer)  # the raw-response header: the response, unparsed
        attempt.status = raw.status_code
        attempt.request_id = raw.headers.get("request-id")
        text = await raw.text()
    except anthropic.APIStatusError as exc:
        return attempt.from_status_error(exc)
    except anthropic.APIConnectionError as exc:
        return attempt.from_transport_error(exc)
    except Exception as exc:  # the 200's body broke off mid-way (httpx errors are not wrapped here)
        return attempt.fail(
            "stream_broken", f"the response broke off before it was complete: {type(exc).__name__}: {exc}"
        )
    try:
        data = loads_json(text)
    except ValueError as exc:
        return attempt.fail("malformed_response", f"the response body is not JSON: {exc} (body starts {text[:80]!r})")
    if isinstance(data, dict) and data.get("type") == "error" and isinstance(data.get("error"), dict):
        etype = data["error"].get("type")
        message = str(data["error"].get("message", ""))
        kind = classify_error(attempt.status, etype, message)
        return attempt.fail(kind, message, error_type=etype, headers=raw.headers)
    problem = _message_problem(data)
    if problem:
        return attempt.fail("malformed_response", problem)
    attempt.usage = {k: v for k, v in data.get("usage", {}).items() if v is not None}
    attempt.stop_reason = data.get("stop_reason")
    content = tuple(well_formed(dict(b)) for b in data["content"])
    return ModelReply(
        content=content,
        stop_reason=attempt.stop_reason,
        usage=dict(attempt.usage),
        model=str(well_formed(data.get("model")) or req.model),
        request_id=attempt.request_id,
        log=attempt.log(),
        message_id=well_formed(data["id"]) if isinstance(data.get("id"), str) else None,
    )


def _message_problem(data: object) -> str | None:
    """Why ``data`` is not a usable Messages API reply, or None."""
    if not isinstance(data, dict) or data.get("type") != "message":
        kind = data.get("type") if isinstance(data, dict) else None
        return f"the response is not a message object (found {type(data).__name__} of type {kind!r})"
    content = data.get("content")
    if not isinstance(content, list) or not all(
        isinstance(b, dict) and isinstance(b.get("type"), str) for b in content
    ):
        return "the response's content is not a list of typed blocks"
    for block in content:
        if block["type"] == "tool_use" and not (
            isinstance(block.get("input"), dict) and isinstance(block.get("id"), str)
        ):
            return f"tool_use block {block.get('name')!r} has no id or an input that is not an object"
    if not isinstance(data.get("usage", {}), dict):
        return "the response's usage is not an object"
    return None


class _Assembler:
    """Builds content blocks from stream events (as parsed from their JSON); keeps only the ones that completed.

    A block is its ``content_block_start`` object, in its keys' order, with the deltas applied
    to its fields: text, citations, thinking and its signature, a tool call's input JSON
    (``tool_use``, ``server_tool_use``, ``mcp_tool_use``), a compaction's content. A block no
    delta changes (``redacted_thinking``, ``web_search_tool_result``, any block type this
    client does not know) is kept exactly as it came: every block goes back to the API in
    the next request as the API sent it, as it requires of signed and server-side blocks.
    """

    def __init__(self, on_text: Callable[[str], None] | None) -> None:
        self.on_text = on_text
        self.open: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.done: list[tuple[int, dict[str, Any]]] = []
        self.dropped: list[str] = []
        self.saw_stop = False

    @property
    def completed(self) -> tuple[Block, ...]:
        return tuple(well_formed(block) for _, block in sorted(self.done, key=lambda item: item[0]))

    def start(self, event: Mapping[str, object]) -> None:
        block = event.get("content_block")
        index = event.get("index")
        if not isinstance(block, dict) or not isinstance(index, int):
            return
        if str(block.get("type", "")).endswith("tool_use") and isinstance(block.get("input"), dict):
            block["input"] = {}  # its JSON arrives in deltas
            self.json_parts[index] = []
        self.open[index] = block

    def delta(self, event: Mapping[str, object]) -> bool:
        """Apply a delta; True when it carried visible content (for time-to-first-token)."""
        index: Any = event.get("index")
        block = self.open.get(index)
        d = event.get("delta")
        if block is None or not isinstance(d, dict):
            return False
        kind = d.get("type")
        if kind == "text_delta":
            text = str(d.get("text", ""))
            block["text"] = block.get("text", "") + text
            if self.on_text is not None and text:
                self.on_text(well_formed(text))
            return True
        if kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(d.get("thinking", ""))
            return True
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(d.get("signature", ""))
            return False
        if kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or ()), d.get("citation")]
            return False
        if kind == "compaction_delta":  # the summary in one delta, as the SDK reads it
            block.update((k, v) for k, v in d.items() if k != "type")
            return True
        if kind == "input_json_delta":
            self.json_parts.setdefault(index, []).append(str(d.get("partial_json", "")))
            return True
        return False

    def stop(self, event: Mapping[str, object]) -> None:
        index: Any = event.get("index")
        block = self.open.pop(index, None)
        if block is None:
            return
        if index in self.json_parts:
            raw = "".join(self.json_parts.pop(index))
            try:
                parsed = loads_json(raw) if raw.strip() else {}
            except ValueError:  # cut off, or past what can be read safely (nested too deep, a number too long)
                parsed = None
            if not isinstance(parsed, dict):
                # Never hand over half a tool call: the loop sees stop_reason=tool_use
                # without this block and takes its malformed-tool-use edge.
                self.dropped.append(
                    f"{block.get('type')} {block.get('name')!r} ({block.get('id')}): input JSON did not parse"
                )
                return
            block["input"] = parsed
        self.done.append((index, block))


def _as_arrived(event: dict[str, Any]) -> dict[str, object]:
    """``event`` as it came: a block's start is copied, since the assembler fills that block in as deltas arrive."""
    block = event.get("content_block")
    return {**event, "content_block": dict(block)} if isinstance(block, dict) else event


async def _send_streaming(
    client: anthropic.AsyncAnthropic,
    req: ModelRequest,
    attempt: _Attempt,
    on_text: Callable[[str], None] | None,
    on_event: StreamListener | None,
) -> ModelReply | ModelFailure:
    opened = await _open_stream(client, req, attempt)
    if isinstance(opened, ModelFailure):
        return opened
    stream = opened
    attempt.status = stream.response.status_code
    attempt.request_id = stream.response.headers.get("request-id")
    asm = attempt.assembler = _Assembler(on_text)
    try:
        broken = await _read_stream(stream, req, attempt, asm, on_event)
    finally:
        await _close_quietly(stream)
    return broken if broken is not None else _streamed_reply(attempt, asm)


async def _open_stream(
    client: anthropic.AsyncAnthropic, req: ModelRequest, attempt: _Attempt
) -> anthropic.AsyncStream[object] | ModelFailure:
    """The response's stream once its headers came, or the failure that came instead (within the idle timeout)."""
    import anthropic
    from anthropic.types import Message

    idle = req.idle_timeout_s
    try:
        async with asyncio.timeout(idle):
            return await client.post(
                "/v1/messages",
                cast_to=Message,
                content=_body(req),
                options=_options(attempt, client),
                stream=True,
                # each event as its JSON parsed, not a model: a block goes back in its keys' order (_Assembler)
                stream_cls=anthropic.AsyncStream[object],
            )
    except TimeoutError:
        return attempt.fail(
            "retryable", f"no response headers within the idle timeout of {idle:g} s", error_type="timeout_error"
        )
    except anthropic.APIStatusError as exc:
        return attempt.from_status_error(exc)
    except anthropic.APIConnectionError as exc:
        return attempt.from_transport_error(exc)


_STREAM_ENDED: Final = object()  # the stream's last event came (an event of the API itself is never this object)


async def _read_stream(
    stream: anthropic.AsyncStream[object],
    req: ModelRequest,
    attempt: _Attempt,
    asm: _Assembler,
    on_event: StreamListener | None,
) -> ModelFailure | None:
    """Every event of ``stream`` into ``attempt`` and ``asm``, to its end; the failure when it breaks first."""
    iterator = stream.__aiter__()
    while True:
        event = await _next_event(iterator, req.idle_timeout_s, attempt, asm)
        if event is _STREAM_ENDED:
            return None
        if isinstance(event, ModelFailure):
            return event
        if not isinstance(event, dict):
            continue  # every event of the API is an object
        if on_event is not None:  # message_start's with the time it took to come, as Claude Code's line has
            on_event(_as_arrived(event), round(attempt.elapsed_ms()) if event.get("type") == "message_start" else None)
        _take_event(event, req, attempt, asm)


async def _next_event(
    iterator: AsyncIterator[object], idle: float, attempt: _Attempt, asm: _Assembler
) -> object | ModelFailure:
    """The stream's next event, :data:`_STREAM_ENDED` after its last, or the failure when none comes in ``idle`` s."""
    import anthropic

    try:
        # asyncio.timeout (not wait_for) keeps the SDK's generator in this task.
        async with asyncio.timeout(idle):
            return await iterator.__anext__()
    except StopAsyncIteration:
        return _STREAM_ENDED
    except TimeoutError:
        return attempt.fail(
            "stream_broken",
            f"stream idle timeout: no event for {idle:g} s after {len(asm.done)} complete blocks",
            error_type="stream_idle_timeout",
            partial=asm.completed,
        )
    except anthropic.APIStatusError as exc:  # `event: error` after the 200
        return attempt.from_status_error(exc, partial=asm.completed)
    except Exception as exc:  # cut connection, malformed SSE/JSON: the SDK does not wrap these
        return attempt.fail(
            "stream_broken",
            f"stream broke after {len(asm.done)} complete blocks: {type(exc).__name__}: {exc}",
            error_type="stream_error",
            partial=asm.completed,
        )


def _take_event(event: dict[str, Any], req: ModelRequest, attempt: _Attempt, asm: _Assembler) -> None:
    """One event of the stream: the message's model, id and usage into ``attempt``, its blocks into ``asm``."""
    kind = event.get("type")
    if kind == "message_start":
        message = event.get("message") or {}
        attempt.model = well_formed(message.get("model")) or req.model
        attempt.message_id = well_formed(message.get("id")) or None
        attempt.usage.update(_usage_dict(message.get("usage")))
    elif kind == "content_block_start":
        asm.start(event)
    elif kind == "content_block_delta":
        if asm.delta(event) and attempt.ttft_ms is None:
            attempt.ttft_ms = attempt.elapsed_ms()
    elif kind == "content_block_stop":
        asm.stop(event)
    elif kind == "message_delta":
        attempt.stop_reason = (event.get("delta") or {}).get("stop_reason")
        attempt.usage.update(_usage_dict(event.get("usage")))
    elif kind == "message_stop":
        asm.saw_stop = True


def _streamed_reply(attempt: _Attempt, asm: _Assembler) -> ModelReply | ModelFailure:
    """The reply a stream that ran to its end assembled; a failure when it never said ``message_stop``."""
    if not asm.saw_stop:
        return attempt.fail(
            "stream_broken",
            f"stream ended without message_stop after {len(asm.done)} complete blocks",
            error_type="stream_error",
            partial=asm.completed,
        )
    if asm.dropped:
        attempt.note = "; ".join(asm.dropped)
    return ModelReply(
        content=asm.completed,
        stop_reason=attempt.stop_reason,
        usage=dict(attempt.usage),
        model=attempt.model,
        request_id=attempt.request_id,
        log=attempt.log(),
        message_id=attempt.message_id,
    )


def _usage_dict(usage: object) -> dict[str, object]:
    """A usage object's fields that are set."""
    return {k: v for k, v in usage.items() if v is not None} if isinstance(usage, dict) else {}


async def _close_quietly(stream: anthropic.AsyncStream[Any]) -> None:
    try:
        await stream.close()
    except Exception:  # closing an already broken connection can fail; the outcome is decided
        pass


# ---- usage totals ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ModelUsage:
    """Usage summed over the requests to one model, and its cost (None if the model has no price)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0
    """The part of the cache writes the replies reported under ``cache_creation`` as 1-hour ones."""
    ephemeral_5m_input_tokens: int = 0
    """The part the replies reported as 5-minute ones (a reply without the split adds to neither)."""
    cost_usd: float | None = 0.0


_NO_USAGE = ModelUsage()  # a model's totals before its first request (frozen: one is shared)


def _split(usage: Mapping[str, Any]) -> tuple[int, int]:
    """One reply's cache writes reported as 1-hour and as 5-minute ones (0 and 0 without the split)."""
    split = usage.get("cache_creation")
    if split is None or not isinstance(split, Mapping):  # None first: no ABC check on the usual reply
        return 0, 0
    return int(split.get("ephemeral_1h_input_tokens") or 0), int(split.get("ephemeral_5m_input_tokens") or 0)


@attrs.frozen(kw_only=True)
class UsageTotals:
    """Usage and cost per model over a run; :meth:`add` returns a new record."""

    by_model: Mapping[str, ModelUsage] = attrs.field(factory=dict)

    def add(self, model: str, usage: Mapping[str, Any]) -> UsageTotals:
        """These totals plus one request's ``usage`` (API field names) on ``model``."""
        old = self.by_model.get(model, _NO_USAGE)
        cost = cost_usd(model, usage)
        get = usage.get
        hour, five = _split(usage)
        new = ModelUsage(
            requests=old.requests + 1,
            input_tokens=old.input_tokens + int(get("input_tokens") or 0),
            output_tokens=old.output_tokens + int(get("output_tokens") or 0),
            cache_creation_input_tokens=old.cache_creation_input_tokens + int(get("cache_creation_input_tokens") or 0),
            cache_read_input_tokens=old.cache_read_input_tokens + int(get("cache_read_input_tokens") or 0),
            ephemeral_1h_input_tokens=old.ephemeral_1h_input_tokens + hour,
            ephemeral_5m_input_tokens=old.ephemeral_5m_input_tokens + five,
            cost_usd=None if cost is None or old.cost_usd is None else old.cost_usd + cost,
        )
        return UsageTotals(by_model={**self.by_model, model: new})

    def __add__(self, other: UsageTotals) -> UsageTotals:
        """Both runs' usage (a run's and its sub-agents'), model by model."""
        merged = dict(self.by_model)
        for model, u in other.by_model.items():
            old = merged.get(model)
            if old is None:
                merged[model] = u
                continue
            counts = {k: getattr(old, k) + getattr(u, k) for k in (*_USAGE_KEYS, *_CACHE_SPLIT_KEYS)}
            cost = None if old.cost_usd is None or u.cost_usd is None else old.cost_usd + u.cost_usd
            merged[model] = ModelUsage(requests=old.requests + u.requests, cost_usd=cost, **counts)
        return UsageTotals(by_model=merged)

    @property
    def total_cost_usd(self) -> float | None:
        """The summed cost, or None when any model used has no price (never a partial guess)."""
        costs = [u.cost_usd for u in self.by_model.values()]
        if any(c is None for c in costs):
            return None
        return sum(c for c in costs if c is not None)

    @property
    def known_cost_usd(self) -> float:
        """The summed cost of the models that have a price (a lower bound when some don't)."""
        return sum(u.cost_usd for u in self.by_model.values() if u.cost_usd is not None)

    def usage(self) -> dict[str, Any]:
        """Token counts summed over all models, with API field names.

        The cache writes' split by lifetime comes under ``cache_creation``, as in a reply's
        usage and in Claude Code 2.1.235's result: the sums of what the replies reported.
        """

        def total(key: str) -> int:
            return sum(getattr(u, key) for u in self.by_model.values())

        return {**{k: total(k) for k in _USAGE_KEYS}, "cache_creation": {k: total(k) for k in _CACHE_SPLIT_KEYS}}

    def model_usage(self) -> dict[str, dict[str, object]]:
        """Per-model usage in the result object's ``model_usage`` shape (camelCase keys)."""
        return {
            model: {
                "inputTokens": u.input_tokens,
                "outputTokens": u.output_tokens,
                "cacheCreationInputTokens": u.cache_creation_input_tokens,
                "cacheReadInputTokens": u.cache_read_input_tokens,
                "costUSD": u.cost_usd,
            }
            for model, u in self.by_model.items()
        }
