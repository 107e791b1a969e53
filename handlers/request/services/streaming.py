"""A streamed answer of the Messages API, read event by event into a reply or a failure.

Owns the assembler of content blocks and the idle timeout between events. The attempt's records are ``attempt``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from queryloop.fsm import loads_json, well_formed

from ...messages import Block
from .attempt import (
    AttemptBookkeeping,
    ModelFailure,
    ModelReply,
    ModelRequest,
    StreamListener,
    request_body,
    request_options,
)

if TYPE_CHECKING:  # the SDK is imported where a request is sent: importing it costs over a second
    import anthropic

__all__ = ["send_streaming"]


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


async def send_streaming(
    client: anthropic.AsyncAnthropic,
    req: ModelRequest,
    attempt: AttemptBookkeeping,
    on_text: Callable[[str], None] | None,
    on_event: StreamListener | None,
) -> ModelReply | ModelFailure:
    """Send ``req`` streamed and read its events into a reply or a failure, kept in ``attempt``'s books."""
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
    client: anthropic.AsyncAnthropic, req: ModelRequest, attempt: AttemptBookkeeping
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
                content=request_body(req),
                options=request_options(attempt, client),
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


class _IdleTimer:
    """The idle timeout of a stream's reading: ``idle`` s without an event expires ``timeout``.

    One timer for the whole stream, not an ``asyncio.timeout`` entered per event (about 3 µs each,
    several events a turn): a wait for an event only moves the deadline, and the timer, when it
    goes off before the deadline (an event came meanwhile), is set again for it. At the deadline
    it expires the enclosing ``timeout``, which cancels the reading task and raises TimeoutError.
    """

    def __init__(self, timeout: asyncio.Timeout, idle: float) -> None:
        self._timeout = timeout
        self._idle = idle
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + idle
        self._armed_for = self._deadline
        self._handle = self._loop.call_at(self._deadline, self._went_off)

    def wait_starts(self) -> None:
        """A wait for the next event starts now: it may last ``idle`` s."""
        self._deadline = self._loop.time() + self._idle

    def stop(self) -> None:
        self._handle.cancel()

    def _went_off(self) -> None:
        if self._deadline > self._armed_for:  # an event came since: the wait going on now has till its deadline
            self._armed_for = self._deadline
            self._handle = self._loop.call_at(self._deadline, self._went_off)
        else:
            self._timeout.reschedule(self._loop.time())  # expires at once: the task is cancelled


async def _read_stream(
    stream: anthropic.AsyncStream[object],
    req: ModelRequest,
    attempt: AttemptBookkeeping,
    asm: _Assembler,
    on_event: StreamListener | None,
) -> ModelFailure | None:
    """Every event of ``stream`` into ``attempt`` and ``asm``, to its end; the failure when it breaks first."""
    iterator = stream.__aiter__()
    try:
        async with asyncio.timeout(None) as timeout:
            timer = _IdleTimer(timeout, req.idle_timeout_s)
            try:
                return await _read_events(iterator, timer, req, attempt, asm, on_event)
            finally:
                timer.stop()
    except TimeoutError:
        return _idle_failure(req.idle_timeout_s, attempt, asm)


async def _read_events(
    iterator: AsyncIterator[object],
    timer: _IdleTimer,
    req: ModelRequest,
    attempt: AttemptBookkeeping,
    asm: _Assembler,
    on_event: StreamListener | None,
) -> ModelFailure | None:
    """The events of ``iterator``, each waited for under ``timer``, to the end; the failure that ends it first."""
    while True:
        timer.wait_starts()
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
    iterator: AsyncIterator[object], idle: float, attempt: AttemptBookkeeping, asm: _Assembler
) -> object | ModelFailure:
    """The stream's next event, :data:`_STREAM_ENDED` after its last, or the failure that came instead.

    The idle timeout is the caller's (:class:`_IdleTimer`): it cancels this wait, and the caller's
    ``asyncio.timeout`` turns that into TimeoutError. It keeps the SDK's generator in this task."""
    import anthropic

    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return _STREAM_ENDED
    except TimeoutError:  # one the stream itself raised: read as the idle timeout, as it always was
        return _idle_failure(idle, attempt, asm)
    except anthropic.APIStatusError as exc:  # `event: error` after the 200
        return attempt.from_status_error(exc, partial=asm.completed)
    except Exception as exc:  # cut connection, malformed SSE/JSON: the SDK does not wrap these
        return attempt.fail(
            "stream_broken",
            f"stream broke after {len(asm.done)} complete blocks: {type(exc).__name__}: {exc}",
            error_type="stream_error",
            partial=asm.completed,
        )


def _idle_failure(idle: float, attempt: AttemptBookkeeping, asm: _Assembler) -> ModelFailure:
    """No event came for ``idle`` s: the stream is broken, with the blocks it completed."""
    return attempt.fail(
        "stream_broken",
        f"stream idle timeout: no event for {idle:g} s after {len(asm.done)} complete blocks",
        error_type="stream_idle_timeout",
        partial=asm.completed,
    )


def _take_event(event: dict[str, Any], req: ModelRequest, attempt: AttemptBookkeeping, asm: _Assembler) -> None:
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


def _streamed_reply(attempt: AttemptBookkeeping, asm: _Assembler) -> ModelReply | ModelFailure:
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
