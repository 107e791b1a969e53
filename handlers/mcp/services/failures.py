"""Why an MCP request failed: the kinds of failure, the record a program and a model both read, and its texts.

:func:`describe_failure` turns what the SDK, its transports or a server raised into a kind and one line.
"""

from __future__ import annotations

import json
from typing import Literal

import attrs

from .content import MalformedContent

__all__ = ["McpFailure", "McpFailureKind", "describe_failure", "gave_up", "malformed"]

McpFailureKind = Literal["transport", "auth", "server", "timeout"]


@attrs.frozen(kw_only=True)
class McpFailure:
    """Why an MCP call, connection or listing failed, in a shape a program and a model can both read."""

    server: str
    kind: McpFailureKind
    message: str
    tool: str | None = None

    def text(self) -> str:
        """The ``is_error`` tool_result's content: one line for the model, then the structured error as JSON."""
        subject = f"MCP tool {self.tool!r} of server {self.server!r}" if self.tool else f"MCP server {self.server!r}"
        detail = {"server": self.server, "tool": self.tool, "kind": self.kind, "message": self.message}
        return f"{subject} failed ({self.kind}): {self.message}\n{json.dumps({'mcp_error': detail})}"


def describe_failure(exc: BaseException) -> tuple[McpFailureKind, str]:
    """The kind and a one-line message of a failure to connect, list or call."""
    import httpx2
    import mcp.types
    import pydantic
    from mcp import MCPError

    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe_failure(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "timeout", "no answer in time"
    if isinstance(exc, MCPError):
        if exc.code == mcp.types.REQUEST_TIMEOUT:
            return "timeout", exc.message
        if exc.code == mcp.types.CONNECTION_CLOSED:
            return "transport", "the connection closed (the server exited or went away)"
        return "server", f"{exc.message} (JSON-RPC error {exc.code})"
    if isinstance(exc, pydantic.ValidationError):  # the SDK's check of a result's shape
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
        where = ".".join(map(str, first["loc"])) or "the result"
        return "server", f"answered with a result of the wrong shape ({where}: {first['msg']})"
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        return ("auth" if status in (401, 403) else "server"), f"HTTP {status}"
    if isinstance(exc, httpx2.TransportError | OSError | EOFError):
        return "transport", str(exc) or type(exc).__name__
    return "server", f"{type(exc).__name__}: {exc}"


def gave_up(timeout_s: float) -> str:
    """Why a call that had no answer within ``timeout_s`` was given up, and what sets how long a call may take."""
    return (
        f"no answer within {timeout_s:g} s, so the call was given up (the server was told to stop it); "
        "MCP_TOOL_TIMEOUT (ms) or the server's timeout sets how long a call may take"
    )


def malformed(server: str, problem: MalformedContent) -> str:
    """What the model is told instead of a result the protocol refuses (none of it is passed on)."""
    return f"MCP server {server!r} returned a malformed result: {problem}; none of it was passed on to the model"
