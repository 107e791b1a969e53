"""One HTTP attempt at the Messages API, turned into a typed outcome (records: ``attempt``; streams: ``streaming``).

Sends through the official SDK with ``max_retries=0``; every failure is classified (:data:`FailureKind`), none
escapes. The idle timeout and an optional deadline bound an attempt: running out is a retryable ``timeout_error``,
but a stream gone idle after its headers is ``stream_broken``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from queryloop.fsm import loads_json, well_formed

from ...messages import Message
from .attempt import (
    AttemptBookkeeping,
    ModelFailure,
    ModelReply,
    ModelRequest,
    StreamListener,
    classify_error,
    request_body,
    request_options,
)
from .streaming import send_streaming

if TYPE_CHECKING:  # the SDK is imported where a request is sent: importing it costs over a second
    import anthropic

__all__ = ["send_request"]


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
    attempt = AttemptBookkeeping(req)
    if req.stream:
        sending = send_streaming(client, req, attempt, on_text, on_event)
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
    client: anthropic.AsyncAnthropic, req: ModelRequest, attempt: AttemptBookkeeping
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
            content=request_body(req),
            options=request_options(attempt, client, raw=True, timeout=req.idle_timeout_s),
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
