"""Which tools a call can name this turn: the registry's, and the ones offered beside it (MCP servers').

Owns :func:`find_tool` and :func:`turn_registry`. The tools beyond the registry are the catalog the model saw,
changed only at a request boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..data import ToolServices
from .base import ToolSpec
from .dispatch import ToolRegistry

__all__ = ["find_tool", "turn_registry"]


def find_tool(services: ToolServices, catalog: Sequence[Mapping[str, object]], name: str) -> ToolSpec | None:
    """The tool a call named ``name`` runs: a registered one, else one the ``catalog`` offered that can run now."""
    tool = services.tools.get(name)
    if tool is not None or not catalog:
        return tool
    if any(d.get("name") == name for d in catalog):
        return services.extra_tool(name)
    return None


def turn_registry(services: ToolServices, catalog: Sequence[Mapping[str, object]]) -> ToolRegistry:
    """The registry with the offered catalog's tools added (as they can run now); the registry itself without one."""
    if not catalog:
        return services.tools
    extra = []
    for definition in catalog:
        name = str(definition.get("name"))
        if name not in services.tools and (spec := services.extra_tool(name)) is not None:
            extra.append(spec)
    return ToolRegistry(tools=(*services.tools.tools, *extra)) if extra else services.tools
