"""One DBOS step per effect of a session: each model request, each token count, each tool call.

A recovered workflow replays its recorded steps, so no completed request or call is made twice (docs/fleet.md).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from queryloop.handlers.messages import ToolCall, ToolResultBlock, tool_result_block
from queryloop.handlers.request import ModelBackend, ModelCall, ModelFailure, ModelReply, TokenCount, encode_request
from queryloop.handlers.tools import ToolSpec

from .database import FleetDatabase

__all__ = ["INTERRUPTED_ON_A_WORKER", "StepBackend", "ToolSteps", "call_key", "request_digest"]

INTERRUPTED_ON_A_WORKER = (
    "The worker running this {tool} call stopped before it finished; it may have partly run, and it was "
    "not run again (it is not safe to repeat). Check its effects before running it again."
)


def request_digest(call: ModelCall) -> str:
    """What a model request sends, as a short digest: the same request replayed has the same one.

    The digest of the request's body as the backend builds it (``encode_request``: the
    messages' JSON written once when they were appended), so the history is not
    serialised a second time for its name.
    """
    return hashlib.sha256(encode_request(call, stream=call.stream)).hexdigest()[:16]


def call_key(session_id: str, tool_use_id: str) -> str:
    """A tool call's idempotency key: the session and the tool_use id the model gave it."""
    return f"{session_id}/{tool_use_id}"


class StepBackend:
    """``inner`` with each request a DBOS step named by its number in the session and its digest."""

    def __init__(self, inner: ModelBackend) -> None:
        self.inner = inner
        self.requests = 0  # counted again from 0 by a recovered run: the same numbers in the same order
        self.counts = 0

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        from dbos import DBOS

        self.requests += 1
        name = f"model request {self.requests} {request_digest(call)}"

        async def request() -> ModelReply | ModelFailure:
            return await self.inner.send(call, on_text)

        return await DBOS.run_step_async({"name": name}, request)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        from dbos import DBOS

        self.counts += 1
        name = f"count tokens {self.counts} {request_digest(call)}"

        async def count() -> TokenCount:
            return await self.inner.count_tokens(call)

        return await DBOS.run_step_async({"name": name}, count)


class ToolSteps:
    """Runs each tool call as a DBOS step keyed by its tool_use id (the run's ``call_runner``)."""

    def __init__(self, db: FleetDatabase, *, session_id: str, executor_id: str) -> None:
        self.db = db
        self.session_id = session_id
        self.executor_id = executor_id

    async def __call__(
        self, call: ToolCall, tool: ToolSpec | None, execute: Callable[[], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        if tool is None:  # no such tool: an error result, nothing runs
            return await execute()
        from dbos import DBOS

        async def again() -> ToolResultBlock:  # safe to repeat: a step cut short simply runs it again
            return await execute()

        async def once() -> ToolResultBlock:
            return await self._at_most_once(call, execute)

        return await DBOS.run_step_async({"name": f"tool {call.name} {call.id}"}, again if tool.idempotent else once)

    async def _at_most_once(self, call: ToolCall, execute: Callable[[], Awaitable[ToolResultBlock]]) -> ToolResultBlock:
        if self.db.closing.is_set():  # this worker is stopping: leave the call to the one that recovers the session
            raise asyncio.CancelledError
        key = call_key(self.session_id, call.id)
        prior = self.db.begin_call(key, session_id=self.session_id, tool=call.name, executor_id=self.executor_id)
        if prior is not None and prior.result is not None:
            return _block(prior.result)  # it ended, but its worker died before DBOS recorded the step
        if prior is not None:  # started, never ended: it may have partly run
            interrupted = tool_result_block(call.id, INTERRUPTED_ON_A_WORKER.format(tool=call.name), is_error=True)
            self.db.complete_call(key, interrupted, state="interrupted")
            return interrupted
        result = await execute()
        self.db.complete_call(key, result)
        return result


def _block(raw: dict[str, Any]) -> ToolResultBlock:
    return raw  # type: ignore[return-value]  # the block as it was recorded (a tool_result block)
