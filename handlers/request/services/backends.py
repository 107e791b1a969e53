"""Model backends: the real Anthropic SDK over HTTP (the scripted test double is ``queryloop.testing``'s).

Owns :class:`ModelCall`, the :class:`ModelBackend` protocol, :class:`TokenCount` and :func:`with_request_deadline`.
The HTTP backend sends the prepared body (``body``). Backends keep nothing about the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from ...messages import MessageView
from .attempt import ModelFailure, ModelReply, ModelRequest, StreamListener, api_headers
from .body import encode_request, prompt_caching_disabled
from .client import send_request
from .pricing import wire_model

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "AnthropicBackend",
    "ModelBackend",
    "ModelCall",
    "TokenCount",
    "with_request_deadline",
]


@attrs.frozen(kw_only=True, slots=True)
class ModelCall:
    """One attempt as the loop asks for it; backends turn it into HTTP (or script it)."""

    model: str
    messages: MessageView
    system: str | None
    tools: tuple[dict[str, Any], ...]
    max_tokens: int
    stream: bool
    attempt: int
    idle_timeout_s: float
    deadline_s: float | None = None
    """The longest the whole attempt may take; past it the attempt is a ``retryable`` timeout."""
    prompt_cache: bool = True
    """Whether the request may carry ``cache_control`` breakpoints (the backend may still send none)."""
    cache_ttl: Literal["5m", "1h"] = "5m"
    """How long the breakpoints ask the prompt cache to keep their prefixes (``ttl``; ``5m`` sends none)."""
    instructions: str | None = None
    """The project instructions (CLAUDE.md files, ``queryloop.run.memory``) as one text: sent as a block in front
    of the first user message (:func:`~queryloop.handlers.request.services.body.encode_request`), never stored."""
    on_stream_event: StreamListener | None = attrs.field(default=None, eq=False)
    """Told each event of a streamed answer as it arrives (``call_model`` publishes them for
    ``--include-partial-messages``); a backend that does not stream tells it nothing."""


@attrs.frozen(kw_only=True, slots=True)
class TokenCount:
    """The server's count of a request's input tokens: ``None`` when it gave none.

    ``offered`` is False when the server refuses the request for good (a 4xx other
    than 408, 409 or 429: no such endpoint, not for this model): the run stops asking.
    A transient failure (a 5xx, a rate limit, a timeout) keeps it True.
    """

    tokens: int | None
    offered: bool = True


class ModelBackend(Protocol):
    """Sends one attempt; returns a typed reply or failure, never raises for API problems."""

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure: ...

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        """The server's count of the request's input tokens (``tokens`` None when it gives none)."""
        ...


class AnthropicBackend:
    """Sends attempts with the official SDK; the client must be built with ``max_retries=0``.

    ``prompt_caching`` None reads ``DISABLE_PROMPT_CACHING`` from the environment once,
    here (as Claude Code does): set to a true value, no request carries a breakpoint.
    """

    def __init__(self, client: anthropic.AsyncAnthropic, *, prompt_caching: bool | None = None) -> None:
        if client.max_retries != 0:
            raise ValueError("the state machine owns retries: build the client with max_retries=0")
        self.client = client
        self.prompt_caching = not prompt_caching_disabled() if prompt_caching is None else prompt_caching

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        body = encode_request(call, stream=call.stream, prompt_cache=call.prompt_cache and self.prompt_caching)
        request = ModelRequest(
            model=call.model,
            max_tokens=call.max_tokens,
            stream=call.stream,
            idle_timeout_s=call.idle_timeout_s,
            deadline_s=call.deadline_s,
            attempt=call.attempt,
            body=body,
        )
        return await send_request(self.client, request, on_text=on_text, on_event=call.on_stream_event)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        """``/v1/messages/count_tokens``; a lasting client error says the server does not offer it.

        Bounded like a model call: the idle timeout for each wait, the deadline overall.
        """
        import anthropic  # already loaded: the client is an anthropic client
        from anthropic.types import MessageTokensCount

        # The prepared body, as the messages request's (breakpoints included): no message is serialised again.
        body = encode_request(call, stream=False, prompt_cache=call.prompt_cache and self.prompt_caching, counting=True)
        headers = {**api_headers(self.client), "content-type": "application/json"}
        if betas := wire_model(call.model)[1]:
            headers["anthropic-beta"] = ",".join(betas)
        options: Any = {"headers": headers, "timeout": call.idle_timeout_s}
        try:
            async with asyncio.timeout(call.deadline_s):
                counted = await self.client.post(
                    "/v1/messages/count_tokens", cast_to=MessageTokensCount, content=body, options=options
                )
        except anthropic.APIStatusError as exc:
            status = exc.status_code  # a client error other than a rate limit or timeout will not go away
            return TokenCount(tokens=None, offered=not (400 <= status < 500 and status not in (408, 409, 429)))
        except (anthropic.APIError, TimeoutError):
            return TokenCount(tokens=None)  # transient (connection, timeout, bad body): ask again next time
        return TokenCount(tokens=int(counted.input_tokens))


class _DeadlineBackend:
    """Hands every call to ``inner`` with ``deadline_s`` set."""

    def __init__(self, inner: ModelBackend, deadline_s: float) -> None:
        self.inner = inner
        self.deadline_s = deadline_s

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        return await self.inner.send(attrs.evolve(call, deadline_s=self.deadline_s), on_text)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        return await self.inner.count_tokens(attrs.evolve(call, deadline_s=self.deadline_s))


def with_request_deadline(backend: ModelBackend, deadline_s: float | None) -> ModelBackend:
    """``backend`` giving every call (model, summary and count_tokens requests) ``deadline_s``; None: unchanged."""
    if deadline_s is None:
        return backend
    if deadline_s <= 0:
        raise ValueError(f"a request deadline must be > 0 seconds, got {deadline_s:g}")
    return _DeadlineBackend(backend, deadline_s)
