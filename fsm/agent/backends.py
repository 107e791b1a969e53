"""Model backends: the real Anthropic SDK over HTTP, and an in-process script for unit tests.

Owns how a :class:`~fsm.agent.loop_state.ModelCall` becomes an attempt. The HTTP
backend materialises the transcript once per attempt (the SDK serialises it anyway);
the scripted backend never looks at it, so in-process runs cost nothing per message.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import anthropic

from .loop_state import ModelCall
from .model_client import (
    ModelFailure,
    ModelReply,
    ModelRequest,
    RequestLog,
    send_request,
)

__all__ = ["AnthropicBackend", "ScriptedBackend", "scripted_failure", "scripted_reply"]


class AnthropicBackend:
    """Sends attempts with the official SDK; the client must be built with ``max_retries=0``."""

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        if client.max_retries != 0:
            raise ValueError("the state machine owns retries: build the client with max_retries=0")
        self.client = client
        self.counts_tokens = True

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        request = ModelRequest(
            model=call.model,
            messages=tuple(call.messages.to_list()),
            system=call.system,
            tools=call.tools,
            max_tokens=call.max_tokens,
            stream=call.stream,
            idle_timeout_s=call.idle_timeout_s,
            attempt=call.attempt,
        )
        return await send_request(self.client, request, on_text=on_text)

    async def count_tokens(self, call: ModelCall) -> int | None:
        """``/v1/messages/count_tokens`` when the server offers it; remembered as unavailable otherwise."""
        if not self.counts_tokens:
            return None
        kwargs: dict[str, Any] = {"model": call.model, "messages": call.messages.to_list()}
        if call.system:
            kwargs["system"] = call.system
        if call.tools:
            kwargs["tools"] = list(call.tools)
        try:
            counted = await self.client.messages.count_tokens(**kwargs)
        except anthropic.APIError:
            self.counts_tokens = False  # not offered (or failing): fall back to the local estimate
            return None
        return int(counted.input_tokens)


_ids = itertools.count(1)


def _log(model: str, call: ModelCall | None, status: int | None, stop_reason: str | None, usage: dict[str, Any]) -> RequestLog:
    return RequestLog(
        client_request_id=str(uuid.uuid4()),
        request_id=f"req_scripted_{next(_ids)}",
        attempt=call.attempt if call else 1,
        model=model,
        stream=call.stream if call else False,
        status=status,
        stop_reason=stop_reason,
        ttft_ms=None,
        duration_ms=0.0,
        usage=usage,
    )


def scripted_reply(content: Iterable[dict[str, Any]], stop_reason: str = "end_turn", *, model: str = "scripted", call: ModelCall | None = None) -> ModelReply:
    """A complete reply as the HTTP backend would return it (API-format blocks)."""
    usage = {"input_tokens": 10, "output_tokens": 5}
    return ModelReply(content=tuple(content), stop_reason=stop_reason, usage=usage, model=model, request_id=None, log=_log(model, call, 200, stop_reason, usage))


def scripted_failure(kind: Any, status: int | None = None, message: str = "scripted failure", *, model: str = "scripted", partial: Iterable[dict[str, Any]] = ()) -> ModelFailure:
    return ModelFailure(kind=kind, status=status, error_type=None, message=message, partial_content=tuple(partial), log=_log(model, None, status, None, {}))


Script = Callable[[ModelCall], ModelReply | ModelFailure]


class ScriptedBackend:
    """An in-process model for unit tests and benchmarks: ``script(call)`` answers each attempt."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls = 0

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        self.calls += 1
        return self.script(call)

    async def count_tokens(self, call: ModelCall) -> int | None:
        return None  # the local estimate is the only one
