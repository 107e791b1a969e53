"""One MCP server's connection: its status, its SDK client and task, what it listed, and its own failures.

The manager (client) holds one a server and decides when each connects; here is what a connection does to itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

from ...tools import ToolError, ToolSpec
from .config import McpServerConfig
from .failures import McpFailure, describe_failure
from .listing import McpTool

if TYPE_CHECKING:  # the SDK is imported where a server is connected (see client)
    import mcp.types
    from mcp import Client

__all__ = ["Connection", "ServerStatus"]

ServerStatus = Literal["pending", "connected", "failed", "needs-auth", "disabled"]


@attrs.define(kw_only=True, eq=False)
class Connection:
    """One configured server: its state, its SDK client and task while connected, and what it last listed."""

    config: McpServerConfig
    status: ServerStatus = "pending"
    error: McpFailure | None = None
    client: Client | None = None
    task: asyncio.Task[None] | None = None
    stop: asyncio.Event = attrs.field(factory=asyncio.Event)
    tools: tuple[McpTool, ...] = ()
    specs: dict[str, ToolSpec] = attrs.field(factory=dict)  # each tool as the tool layer runs it, by name
    generation: int = 0  # bumped whenever a listing differs from the one before
    list_changed: bool = False  # the server said its list changed; listed again at the next sync
    warnings: list[str] = attrs.field(factory=list)
    starts: int = 0
    prompts: tuple[mcp.types.Prompt, ...] = ()  # its prompts (offered as /mcp__<server>__<prompt>)
    prompts_changed: bool = False  # it said its prompt list changed: listed again when next asked
    resources: bool = False  # the server declares the resources capability
    resource_list: tuple[mcp.types.Resource, ...] | None = None  # its listing, until it says the list changed
    abort: Callable[[], None] | None = None  # ends the open connection at once (it sent what JSON-RPC does not allow)

    def fail(self, failure: McpFailure) -> None:
        """It failed (``needs-auth`` for an auth failure); a warning says so when its status changes."""
        was = self.status
        self.status = "needs-auth" if failure.kind == "auth" else "failed"
        self.error = failure
        if was != self.status:
            self.warnings.append(f"MCP server {failure.server!r} {failure.kind} failure: {failure.message}")

    def request_failure(self, exc: Exception, *, tool: str | None = None) -> McpFailure:
        """Why a request failed: the server's own failure when it broke while the request waited (it sent what
        JSON-RPC does not allow: the request then ends as the connection closes), else ``exc``'s."""
        if self.status != "connected" and self.error is not None:
            return attrs.evolve(self.error, tool=tool)
        kind, message = describe_failure(exc)
        failure = McpFailure(server=self.config.name, kind=kind, message=message)
        if kind in ("transport", "auth"):  # the connection is gone: reconnected at the next boundary
            self.fail(failure)
            self.stop.set()
        return attrs.evolve(failure, tool=tool)

    def broke_protocol(self, problem: str) -> None:
        """A server sent what JSON-RPC does not allow: it fails now, its waiting requests with it (the SDK
        would leave them to their timeouts), and the machine reconnects it as after any broken connection."""
        self.fail(McpFailure(server=self.config.name, kind="server", message=problem))
        if self.abort is not None:
            self.abort()

    def live(self) -> Client:
        """Its SDK client; a ``ToolError`` saying so when it is not connected."""
        if self.client is None or self.status != "connected":
            raise ToolError(
                f"MCP server {self.config.name!r} is not connected; it is reconnected before the next request"
            )
        return self.client
