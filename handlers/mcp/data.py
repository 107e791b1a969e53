"""MCP layer's slice of the run data, what its effects use, and the payloads of its events.

Owns :class:`McpData` (each server's tool generation, servers reconnecting or dropped), the layer's protocols,
:class:`CatalogUpdate` and :class:`ServersDown`.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import attrs
from attrs import evolve

from ..outcome import SharedData
from ..request import RequestData
from .services.client import McpManager
from .services.failures import McpFailure

__all__ = ["CatalogUpdate", "McpData", "McpRun", "McpServices", "ServersDown", "with_mcp"]


@attrs.frozen(kw_only=True, slots=True)
class McpData:
    """What the MCP layer keeps between steps."""

    generations: tuple[tuple[str, int], ...] = ()  # (server, tool generation) the offered catalog was built from
    down: tuple[str, ...] = ()  # servers being reconnected
    dropped: tuple[str, ...] = ()  # servers that stayed down: out of the catalog for the rest of the run


class McpRun(SharedData, Protocol):
    """The run data as MCP handlers see it."""

    @property
    def mcp(self) -> McpData: ...

    @property
    def request(self) -> RequestData: ...


M = TypeVar("M", bound=McpRun)


def with_mcp(data: M, **changes: Any) -> M:
    """The run data with its MCP slice changed as given."""
    return data.evolve(mcp=evolve(data.mcp, **changes))


class McpServices(Protocol):
    """What MCP effects use: the run's servers (None when none is configured)."""

    @property
    def mcp(self) -> McpManager | None: ...


@attrs.frozen(kw_only=True, slots=True)
class CatalogUpdate:
    """``tool_list_changed``: the catalog to offer from the next request on, and what changed."""

    definitions: tuple[dict[str, Any], ...]
    tokens: int  # its share of a request's estimate
    generations: tuple[tuple[str, int], ...]
    changes: tuple[str, ...]  # one line per server whose tools changed


@attrs.frozen(kw_only=True, slots=True)
class ServersDown:
    """``servers_down`` / ``reconnect_failed``: the servers not connected, and why."""

    names: tuple[str, ...]
    failures: tuple[McpFailure, ...] = ()
