"""What an MCP server lists: its tools as the model is offered them, and the paged listings that read them.

The resource tools, offered for every server that has resources, are listed here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .resources import resource_schemas

if TYPE_CHECKING:  # the SDK is imported where a server is connected (see client)
    import mcp.types
    from mcp import Client

__all__ = ["MAX_PAGES", "McpTool", "all_pages", "list_prompts", "list_tools", "resource_tools", "tool_description"]

T = TypeVar("T")

# Input fields that name one attempt rather than the action: a re-proposed call with a fresh
# value is still the same call to the side-effect ledger (compared lower-case, without _ and -).
_ATTEMPT_FIELDS = frozenset({"idempotencykey", "idempotencytoken", "requestid", "clientrequestid", "dedupkey", "nonce"})


MAX_PAGES = 100
"""The most pages of one listing (tools, prompts, resources) read from a server: one that pages forever is cut off."""


async def all_pages(fetch: Callable[[str | None], Awaitable[Any]], items: Callable[[Any], Sequence[T]]) -> list[T]:
    """Every item of a paged MCP listing: ``fetch(cursor)`` reads one page, ``items(page)`` its entries."""
    out: list[T] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        out.extend(items(page))
        cursor = page.next_cursor
        if cursor is None:
            break
    return out


@attrs.frozen(kw_only=True)
class McpTool:
    """A tool a server listed: the name the model sees, the server's own name, its schema and annotations."""

    server: str
    name: str  # mcp__<server>__<tool>
    remote: str  # the server's name for it
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool = False  # readOnlyHint (MCP default: false)
    idempotent: bool = False  # idempotentHint (MCP default: false)
    destructive: bool = True  # destructiveHint (MCP default: true)

    def definition(self) -> dict[str, object]:
        """What the API's ``tools`` parameter gets for it."""
        return {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}

    def attempt_fields(self) -> tuple[str, ...]:
        """Its input fields that name an attempt (an idempotency key, a request id): not part of the call's identity."""
        properties = self.input_schema.get("properties")
        if not isinstance(properties, Mapping):
            return ()
        return tuple(p for p in properties if p.lower().replace("_", "").replace("-", "") in _ATTEMPT_FIELDS)


_DESCRIPTION_CHARS = 2048  # a longer description is cut (as Claude Code cuts it)


def tool_description(raw: mcp.types.Tool) -> str:
    """The description a listed tool is offered with (its title or name when it has none), cut at 2,048 characters."""
    text = raw.description or raw.title or raw.name
    return text if len(text) <= _DESCRIPTION_CHARS else text[:_DESCRIPTION_CHARS] + "… [truncated]"


async def list_tools(client: Client, timeout_s: float) -> list[mcp.types.Tool]:
    """Every tool ``client``'s server lists, each page within ``timeout_s``."""
    return await all_pages(
        lambda cursor: asyncio.wait_for(client.list_tools(cursor=cursor), timeout=timeout_s),
        lambda page: page.tools,
    )


async def list_prompts(client: Client, timeout_s: float) -> tuple[mcp.types.Prompt, ...]:
    """Every prompt ``client``'s server lists, each page within ``timeout_s``."""
    listed = await all_pages(
        lambda cursor: asyncio.wait_for(client.list_prompts(cursor=cursor), timeout=timeout_s),
        lambda page: page.prompts,
    )
    return tuple(listed)


def resource_tools() -> tuple[McpTool, ...]:
    """The resource tools as servers' tools are offered: read-only, idempotent, of no one server."""
    return tuple(
        McpTool(
            server="",
            name=name,
            remote=name,
            description=description,
            input_schema=schema,
            read_only=True,
            idempotent=True,
            destructive=False,
        )
        for name, (description, schema) in resource_schemas().items()
    )
