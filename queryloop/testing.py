"""Test doubles: an in-process model that answers each request from a script, for unit tests and benchmarks.

Owns :class:`ScriptedBackend`, :func:`scripted_reply` and :func:`scripted_failure`. Nothing on the production path
imports it; end-to-end tests use the embedded server.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from queryloop.handlers.messages import Block
from queryloop.handlers.request import ModelCall, ModelFailure, ModelReply, RequestLog, TokenCount

__all__ = ["Script", "ScriptedBackend", "scripted_failure", "scripted_reply"]


_ids = itertools.count(1)


def _log(
    model: str, call: ModelCall | None, status: int | None, stop_reason: str | None, usage: dict[str, Any]
) -> RequestLog:
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


def scripted_reply(
    content: Iterable[Block],
    stop_reason: str = "end_turn",
    *,
    model: str = "scripted",
    call: ModelCall | None = None,
) -> ModelReply:
    """A complete reply as the HTTP backend would return it (API-format blocks)."""
    usage = {"input_tokens": 10, "output_tokens": 5}
    return ModelReply(
        content=tuple(content),
        stop_reason=stop_reason,
        usage=usage,
        model=model,
        request_id=None,
        log=_log(model, call, 200, stop_reason, usage),
    )


def scripted_failure(
    kind: Any,
    status: int | None = None,
    message: str = "scripted failure",
    *,
    model: str = "scripted",
    partial: Iterable[Block] = (),
) -> ModelFailure:
    return ModelFailure(
        kind=kind,
        status=status,
        error_type=None,
        message=message,
        partial_content=tuple(partial),
        log=_log(model, None, status, None, {}),
    )


Script = Callable[[ModelCall], ModelReply | ModelFailure]


class ScriptedBackend:
    """An in-process model for unit tests and benchmarks: ``script(call)`` answers each attempt."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls = 0

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        self.calls += 1
        return self.script(call)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        return TokenCount(tokens=None, offered=False)  # the local estimate is the only one
