"""MCP layer, what a server sends that breaks JSON-RPC: told at once, not waited out.

The SDK drops a response under an unknown id, and the request would wait out its timeout; here it fails the server.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from mcp.client._transport import Transport, TransportStreams
    from mcp.shared._stream_protocols import ReadStream, WriteStream
    from mcp.shared.message import SessionMessage

__all__ = ["StrayResponse", "checked_transport", "protocol_problem"]


class StrayResponse(ValueError):
    """A server's response under an id no request of this client had."""


def protocol_problem(exc: Exception) -> str | None:
    """The one line a malformed message from a server is reported as; None for an item that is no such message."""
    if isinstance(exc, StrayResponse):
        return str(exc)
    if isinstance(exc, ValueError):  # the SDK's parse of a line: pydantic's ValidationError is a ValueError
        return f"sent a line that is not a JSON-RPC message ({_first_error(exc)})"
    return None


def _first_error(exc: ValueError) -> str:
    """What was wrong with the line: not JSON (and where), or JSON of none of the message kinds."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            invalid = [e for e in errors() if e.get("type") == "json_invalid"]
            return str(invalid[0]["msg"]) if invalid else "JSON, but no request, notification, result or error"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@contextlib.asynccontextmanager
async def checked_transport(transport: Transport) -> AsyncIterator[TransportStreams]:
    """``transport``'s streams, the request ids written remembered and a response to any other id an error item."""
    _quiet_sdk_log()
    async with transport as (read, write):
        sent: set[str] = set()
        yield _Reader(read, sent), _Writer(write, sent)


def _quiet_sdk_log() -> None:
    """The SDK logs a malformed line with its traceback, and where no logging is configured Python prints that
    on stderr: a handler that drops it keeps it off (the failure is reported once, in one line). A program
    that configures logging still gets the SDK's records through its own handlers."""
    sdk = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in sdk.handlers):
        sdk.addHandler(logging.NullHandler())


class _Wrapped:
    """A stream of the SDK's, closed and entered as the stream it wraps; the subclasses check what passes."""

    inner: Any

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Any:
        return await self.inner.__aexit__(kind, exc, tb)


class _Writer(_Wrapped):
    """The write stream; remembers the id of every request sent."""

    def __init__(self, inner: WriteStream[SessionMessage], sent: set[str]) -> None:
        self.inner, self.sent = inner, sent

    async def send(self, item: SessionMessage, /) -> None:
        import mcp.types

        if isinstance(item.message, mcp.types.JSONRPCRequest):
            self.sent.add(str(item.message.id))
        await self.inner.send(item)


class _Reader(_Wrapped):
    """The read stream; a response whose id was never sent comes out as a :class:`StrayResponse`."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], sent: set[str]) -> None:
        self.inner, self.sent = inner, sent

    @property
    def last_context(self) -> Any:  # the SDK reads the sender's context off the stream, when it has one
        return getattr(self.inner, "last_context", None)

    def _checked(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        import mcp.types

        message = getattr(item, "message", None)
        if isinstance(message, mcp.types.JSONRPCResponse | mcp.types.JSONRPCError) and message.id is not None:
            if str(message.id) not in self.sent:
                return StrayResponse(f"answered request id {message.id!r}, which it was never sent")
        return item

    async def receive(self) -> SessionMessage | Exception:
        return self._checked(await self.inner.receive())

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._checked(await self.inner.__anext__())
