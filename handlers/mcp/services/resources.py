"""MCP layer, resources as tools: ``ListMcpResourcesTool`` and ``ReadMcpResourceTool``, Claude Code's names and inputs.

Offered, read-only, while a connected server declares ``resources``; they answer as Claude Code 2.1.235 does.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from ...tools import LIST_RESOURCES, READ_RESOURCE, ToolContext, ToolError, ToolOutput, ToolRun

if TYPE_CHECKING:
    import mcp.types

    from .content import Block

__all__ = ["RESOURCE_TOOLS", "ResourceSource", "resource_runs", "resource_schemas"]

RESOURCE_TOOLS: Final = (LIST_RESOURCES, READ_RESOURCE)

_SERVER = {"type": "string", "description": "The name of an MCP server, as configured"}


def resource_schemas() -> dict[str, tuple[str, dict[str, object]]]:
    """Each resource tool's description and input schema, by name."""
    return {
        LIST_RESOURCES: (
            "Lists the resources (files, records, documents …) the connected MCP servers offer, as a JSON "
            "array: each entry has the resource's uri, name, description and mimeType and the server it "
            "comes from. Give server to list one server's resources only.",
            {"type": "object", "properties": {"server": _SERVER}, "additionalProperties": False},
        ),
        READ_RESOURCE: (
            "Reads one resource of an MCP server by its URI (as ListMcpResourcesTool or a resource link "
            "names it) and returns its contents.",
            {
                "type": "object",
                "properties": {"server": _SERVER, "uri": {"type": "string", "description": "The resource's URI"}},
                "required": ["server", "uri"],
                "additionalProperties": False,
            },
        ),
    }


@attrs.frozen(kw_only=True)
class ResourceSource:
    """What the resource tools ask of the servers (the manager answers; a failure is a ``ToolError``)."""

    servers: Callable[[], Sequence[str]]  # connected servers that declare resources
    listing: Callable[[str], Awaitable[Sequence[mcp.types.Resource]]]
    read: Callable[[str, str], Awaitable[str | list[Block]]]  # the contents as embedded resources show
    contents: Callable[[str, str], Awaitable[mcp.types.ReadResourceResult]]  # the contents as the server answered


def _server(source: ResourceSource, name: str) -> str:
    known = source.servers()
    if name not in known:
        available = ", ".join(known) or "none"
        raise ToolError(f"no connected MCP server {name!r} offers resources (servers that do: {available})")
    return name


def resource_runs(source: ResourceSource) -> dict[str, ToolRun]:
    """What each resource tool runs, by name."""

    async def list_resources(tool_input: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
        wanted = tool_input.get("server")
        names = [_server(source, wanted)] if isinstance(wanted, str) else list(source.servers())
        entries: list[dict[str, object]] = []
        for name in names:
            for resource in await source.listing(name):
                entry = resource.model_dump(mode="json", by_alias=True, exclude_none=True)
                entries.append({**entry, "server": name})
        if not entries:
            return ToolOutput(content="No resources found: the MCP servers list none.")
        return ToolOutput(content=_json(entries), response=entries)

    async def read_resource(tool_input: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
        server, uri = _server(source, str(tool_input["server"])), str(tool_input["uri"])
        result = await source.contents(server, uri)
        contents = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.contents]
        if any("text" not in c for c in contents):
            # a blob: shown as an embedded resource is (an image block, decoded text, or its type and size),
            # which ``read`` asks the server for again; blobs are rare, and that path checks what it shows
            return ToolOutput(content=await source.read(server, uri))
        # text, as Claude Code 2.1.235 answers it: the result's contents as one compact JSON object
        return ToolOutput(content=_json({"contents": contents}), response={"contents": contents})

    return {LIST_RESOURCES: list_resources, READ_RESOURCE: read_resource}


def _json(value: object) -> str:
    """Compact JSON, as Claude Code writes a resource listing or read (``JSON.stringify``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
