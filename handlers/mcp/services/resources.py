"""MCP layer, resources as tools: ``ListMcpResourcesTool`` and ``ReadMcpResourceTool``, Claude Code's names and inputs.

Owns the two tools' definitions (the descriptions are ours) and what their calls answer:
a listing is a JSON array of every resource a server lists, each with the ``server`` it
came from; a read is the resource's contents as embedded resources are shown
(``content``). They are offered only while a connected server declares the ``resources``
capability, and are read-only (the permission gate lets them run without asking unless a
rule says otherwise; a bare deny rule hides one).

Does not own the connection, the listing's cache nor its refresh after
``notifications/resources/list_changed`` (``client``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ...tools.services.base import ToolContext, ToolError, ToolOutput, ToolRun

if TYPE_CHECKING:
    import mcp.types

__all__ = ["LIST_RESOURCES", "READ_RESOURCE", "RESOURCE_TOOLS", "ResourceSource", "resource_runs", "resource_schemas"]

LIST_RESOURCES: Final = "ListMcpResourcesTool"
READ_RESOURCE: Final = "ReadMcpResourceTool"
RESOURCE_TOOLS: Final = (LIST_RESOURCES, READ_RESOURCE)

_SERVER = {"type": "string", "description": "The name of an MCP server, as configured"}


def resource_schemas() -> dict[str, tuple[str, dict[str, Any]]]:
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
    read: Callable[[str, str], Awaitable[str | list[dict[str, Any]]]]


def _server(source: ResourceSource, name: str) -> str:
    known = source.servers()
    if name not in known:
        available = ", ".join(known) or "none"
        raise ToolError(f"no connected MCP server {name!r} offers resources (servers that do: {available})")
    return name


def resource_runs(source: ResourceSource) -> dict[str, ToolRun]:
    """What each resource tool runs, by name."""

    async def list_resources(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        wanted = tool_input.get("server")
        names = [_server(source, wanted)] if isinstance(wanted, str) else list(source.servers())
        entries: list[dict[str, Any]] = []
        for name in names:
            for resource in await source.listing(name):
                entry = resource.model_dump(mode="json", by_alias=True, exclude_none=True)
                entries.append({**entry, "server": name})
        if not entries:
            return ToolOutput(content="No resources found: the MCP servers list none.")
        return ToolOutput(content=json.dumps(entries, ensure_ascii=False))

    async def read_resource(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        server = _server(source, str(tool_input["server"]))
        return ToolOutput(content=await source.read(server, str(tool_input["uri"])))

    return {LIST_RESOURCES: list_resources, READ_RESOURCE: read_resource}
