"""The control channel to the Claude Agent SDK's process, and what travels over it: Python hooks and MCP tools.

Owns :class:`Channel` and :class:`SdkServer`; an in-process server's tools are ordinary ``mcp__<server>__<tool>``
tools.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TextIO

from queryloop.fsm import inert
from queryloop.handlers.hooks import HOOK_EVENTS, HookConfig, HookFunction
from queryloop.handlers.hooks import HookMatcher as MatcherGroup
from queryloop.handlers.mcp import tool_name
from queryloop.handlers.tools import ToolContext, ToolOutput, ToolSpec

from .. import __version__

__all__ = ["Channel", "ControlError", "SdkAnswerError", "SdkServer", "hook_config", "warn"]

_MCP_PROTOCOL = "2025-06-18"


class ControlError(Exception):
    """A control request that cannot be served: its error response carries the message and a code."""

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


class SdkAnswerError(Exception):
    """The SDK answered one of our requests with an error, or can no longer answer (stdin closed)."""


def warn(text: str) -> None:
    """One line on stderr: what the session skipped or could not do (a server's or a line's text made inert)."""
    print(inert(f"queryloop: {text}"), file=sys.stderr, flush=True)


class Channel:
    """The control protocol's two directions on stdout: our answers, and our requests awaiting the SDK's."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self.closed = False  # stdin ended: nothing we ask can be answered any more

    def send(self, obj: Mapping[str, object]) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()

    def succeed(self, request_id: str, response: Mapping[str, object] | None) -> None:
        """A success; ``None``: one without a ``response`` (Claude Code 2.1.235 answers set_model so)."""
        answer: dict[str, object] = {"subtype": "success", "request_id": request_id}
        if response is not None:
            answer["response"] = dict(response)
        self.send({"type": "control_response", "response": answer})

    def fail(self, request_id: str, error: str, code: str) -> None:
        answer = {"subtype": "error", "request_id": request_id, "error": error, "error_code": code}
        self.send({"type": "control_response", "response": answer})

    async def ask(self, request: Mapping[str, object]) -> dict[str, object]:
        """Send ``request`` to the SDK and wait for its answer; cancelled, the SDK is told to drop it."""
        if self.closed:
            raise SdkAnswerError(f"stdin is closed: the program can no longer answer {request.get('subtype')}")
        request_id = f"queryloop_{next(self.ids)}_{uuid.uuid4().hex[:8]}"
        future: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.send({"type": "control_request", "request_id": request_id, "request": dict(request)})
        try:
            return await future
        except asyncio.CancelledError:
            if not self.closed:
                self.send({"type": "control_cancel_request", "request_id": request_id})
            raise
        finally:
            self.pending.pop(request_id, None)

    def resolve(self, message: Mapping[str, object]) -> None:
        """The SDK's answer to one of our requests (an answer to nothing we asked is reported and dropped)."""
        response = message.get("response")
        request_id = response.get("request_id") if isinstance(response, Mapping) else None
        future = self.pending.get(request_id) if isinstance(request_id, str) else None
        if future is None or future.done():
            warn(f"warning: a control_response answers no pending request ({str(request_id)[:80]}); ignored")
            return
        assert isinstance(response, Mapping)
        if response.get("subtype") == "error":
            future.set_exception(SdkAnswerError(str(response.get("error") or "the program answered with an error")))
        else:
            body = response.get("response")
            future.set_result(dict(body) if isinstance(body, Mapping) else {})

    def close(self) -> None:
        self.closed = True
        for future in self.pending.values():
            if not future.done():
                future.set_exception(SdkAnswerError("stdin closed before the program answered"))


class _SdkHook:
    """A hook the SDK registered: called, it asks the SDK to run callback ``callback_id`` and returns its answer."""

    def __init__(self, channel: Channel, callback_id: str) -> None:
        self.channel = channel
        self.callback_id = callback_id
        self.__module__ = "agent-sdk"  # how hook errors name it: python:agent-sdk.<callback id>
        self.__qualname__ = callback_id

    async def __call__(
        self, input_data: Mapping[str, object], tool_use_id: str | None, context: Mapping[str, object]
    ) -> Mapping[str, object]:
        request = {"subtype": "hook_callback", "callback_id": self.callback_id, "input": input_data}
        return await self.channel.ask({**request, "tool_use_id": tool_use_id})


def hook_config(channel: Channel, hooks: object) -> HookConfig:
    """``initialize``'s ``hooks``: ``{event: [{matcher, hookCallbackIds, timeout}]}`` as hook matcher groups."""
    if hooks is None:
        return HookConfig()
    if not isinstance(hooks, Mapping):
        raise ControlError(f"initialize: hooks must be an object of event → matchers, got {json.dumps(hooks)[:80]}")
    groups: list[MatcherGroup] = []
    for event, matchers in hooks.items():
        if event not in HOOK_EVENTS:
            warn(f"warning: {event} hooks never run: queryloop's hook events are {', '.join(HOOK_EVENTS)}")
            continue
        for matcher in matchers if isinstance(matchers, list) else [matchers]:
            ids = matcher.get("hookCallbackIds") if isinstance(matcher, Mapping) else None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise ControlError(f"initialize: hooks.{event} needs [{{matcher, hookCallbackIds: [...]}}]")
            assert isinstance(matcher, Mapping)
            timeout = matcher.get("timeout")
            timeout_s = float(timeout) if isinstance(timeout, int | float) else None
            functions = tuple(HookFunction(callback=_SdkHook(channel, i), timeout_s=timeout_s) for i in ids)
            try:
                groups.append(MatcherGroup(event=event, matcher=str(matcher.get("matcher") or ""), hooks=functions))
            except Exception as exc:  # a matcher that is no regular expression
                raise ControlError(f"initialize: hooks.{event} matcher {matcher.get('matcher')!r}: {exc}") from None
    return HookConfig(matchers=tuple(groups))


# ---- the SDK's in-process MCP servers ------------------------------------------------------------


class SdkServer:
    """One in-process server of the SDK's program: its handshake and tools, spoken as JSON-RPC over the channel."""

    def __init__(self, channel: Channel, name: str) -> None:
        self.channel = channel
        self.name = name
        self.ids = itertools.count(1)
        self.status = "pending"
        self.error: str | None = None
        self.tools: tuple[ToolSpec, ...] = ()

    async def rpc(self, method: str, params: Mapping[str, object] | None = None, *, notify: bool = False) -> object:
        message: dict[str, object] = {"jsonrpc": "2.0", "method": method, "params": dict(params or {})}
        if not notify:
            message["id"] = next(self.ids)
        answer = await self.channel.ask({"subtype": "mcp_message", "server_name": self.name, "message": message})
        reply = answer.get("mcp_response")
        if notify:
            return None
        if not isinstance(reply, Mapping):
            raise SdkAnswerError(f"{method}: the answer holds no mcp_response")
        error = reply.get("error")
        if isinstance(error, Mapping):
            raise SdkAnswerError(f"{method}: {error.get('message') or error}")
        return reply.get("result")

    async def connect(self) -> None:
        """The MCP handshake and the tool listing; a failure marks the server failed, with why."""
        try:
            await self.rpc(
                "initialize",
                {
                    "protocolVersion": _MCP_PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "queryloop", "version": __version__},
                },
            )
            await self.rpc("notifications/initialized", notify=True)
            listed = await self.rpc("tools/list")
            self.tools = tuple(self._specs(listed.get("tools") if isinstance(listed, Mapping) else None))
            self.status, self.error = "connected", None
        except SdkAnswerError as exc:
            self.status, self.error, self.tools = "failed", str(exc), ()
            warn(f"warning: in-process MCP server {self.name!r} failed: {exc}")

    def _specs(self, tools: object) -> list[ToolSpec]:
        specs: list[ToolSpec] = []
        for entry in tools if isinstance(tools, list) else []:
            try:
                spec = self._spec(entry)
                if any(s.name == spec.name for s in specs):  # two listed names spelled alike in a tool name
                    raise ValueError(f"another tool of the server is offered as {spec.name!r}")
                specs.append(spec)
            except (ValueError, TypeError, KeyError) as exc:
                warn(f"warning: a tool of in-process MCP server {self.name!r} is not offered: {exc}")
        return specs

    def _spec(self, entry: Mapping[str, Any]) -> ToolSpec:
        hints = entry.get("annotations") or {}
        read_only = hints.get("readOnlyHint") is True
        idempotent = hints.get("idempotentHint") is True or read_only
        listed_name = str(entry["name"])
        return ToolSpec(
            name=tool_name(self.name, listed_name),
            description=str(entry.get("description") or listed_name),
            input_schema=entry.get("inputSchema") or {"type": "object"},
            read_only=read_only,
            idempotent=idempotent,
            concurrency_safe=read_only,
            run=self._runner(listed_name),
        )

    def _runner(self, listed_name: str) -> Callable[[Mapping[str, object], ToolContext], Awaitable[ToolOutput]]:
        async def run(arguments: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
            try:
                result = await self.rpc("tools/call", {"name": listed_name, "arguments": dict(arguments)})
            except SdkAnswerError as exc:
                return ToolOutput(content=f"MCP tool {self.name}/{listed_name} failed: {exc}", is_error=True)
            result = result if isinstance(result, Mapping) else {}
            return ToolOutput(content=_mcp_text(result.get("content")), is_error=result.get("isError") is True)

        return run

    def status_entry(self) -> dict[str, object]:
        entry: dict[str, object] = {
            "name": self.name,
            "status": self.status,
            "config": {"type": "sdk", "name": self.name},
        }
        if self.error:
            entry["error"] = self.error
        if self.status == "connected":
            entry["tools"] = [{"name": t.name, "description": t.description} for t in self.tools]
        return entry


def _mcp_text(content: object) -> str:
    """An MCP tool result's content as the text the model reads (other blocks are named, not sent)."""
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts = [
        str(b.get("text", "")) if b.get("type") == "text" else f"[{b.get('type')} block not sent: text only]"
        for b in content
        if isinstance(b, Mapping)
    ]
    return "\n".join(parts)
