"""One attempt at the Messages API, as records: what it sends, what came back, and the kind of a failure.

Owns :class:`ModelRequest`, :class:`ModelReply`, :class:`ModelFailure`, :class:`RequestLog`, :func:`classify_error`
and the options an attempt is sent with. Sending it is ``client``'s; reading a stream is ``streaming``'s.
"""

from __future__ import annotations

import email.utils
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, get_args

import attrs

from ...messages import Block, Message
from .body import encode_params
from .pricing import wire_model

if TYPE_CHECKING:  # the SDK is imported where a request is sent: importing it costs over a second
    import anthropic


__all__ = [
    "API_VERSION",
    "AttemptBookkeeping",
    "FAILURE_KINDS",
    "FailureKind",
    "ModelFailure",
    "ModelReply",
    "ModelRequest",
    "RECOVERABLE_FAILURES",
    "RequestLog",
    "StreamListener",
    "TRANSIENT_FAILURES",
    "api_headers",
    "classify_error",
    "request_body",
    "request_options",
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


class _Partial(Protocol):
    """What an attempt keeps of a streamed reply while it comes: the blocks completed so far."""

    @property
    def completed(self) -> tuple[Block, ...]: ...


class AttemptBookkeeping:
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
        self.assembler: _Partial | None = None  # a streamed reply's blocks so far (streaming's assembler)
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


def request_body(req: ModelRequest) -> bytes:
    """The JSON body sent for ``req``: its prepared ``body``, or one encoded from its fields."""
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


def request_options(
    attempt: AttemptBookkeeping, client: anthropic.AsyncAnthropic, *, raw: bool = False, timeout: float | None = None
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
