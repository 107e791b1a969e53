"""The MCP layer: tools from Model Context Protocol servers, and their recovery.

Its states in ``machines/query_loop.yaml`` are ``syncing_tools`` (the request boundary
where the catalog the model sees may change) and ``reconnecting_mcp_servers``
(bounded reconnects with backoff; a server that stays down is dropped from the
catalog). Here: the configuration in Claude Code's ``mcpServers`` schema (``config``),
the connections through the official ``mcp`` client (``client``), the slice of the run
data it owns (``data``) and the boundary's effects and handlers (``syncing``). Its
tools run through the tool layer's gate and dispatcher like any other
(``ToolServices.extra_tool``); annotations decide scheduling and the side-effect ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm.lazy import lazy_exports

if TYPE_CHECKING:
    from .data import CatalogUpdate, McpData, McpRun, McpServices, ServersDown, with_mcp
    from .services.client import McpFailure, McpFailureKind, McpManager, McpTool, ServerStatus
    from .services.config import McpConfigError, McpServerConfig, parse_mcp_servers, server_name_problem, tool_name
    from .services.host import Elicit, ElicitAnswer, Elicitation, McpProgress
    from .syncing import apply_catalog, apply_reconnected, drop_servers, reconnect_servers, start_reconnect, sync_tools
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".services.client": ("McpFailure", "McpFailureKind", "McpManager", "McpTool", "ServerStatus"),
            ".services.host": ("Elicit", "ElicitAnswer", "Elicitation", "McpProgress"),
            ".services.config": (
                "McpConfigError",
                "McpServerConfig",
                "parse_mcp_servers",
                "server_name_problem",
                "tool_name",
            ),
            ".data": ("CatalogUpdate", "McpData", "McpRun", "McpServices", "ServersDown", "with_mcp"),
            ".syncing": (
                "apply_catalog",
                "apply_reconnected",
                "drop_servers",
                "reconnect_servers",
                "start_reconnect",
                "sync_tools",
            ),
        },
    )

__all__ = [
    "CatalogUpdate",
    "Elicit",
    "ElicitAnswer",
    "Elicitation",
    "McpConfigError",
    "McpData",
    "McpFailure",
    "McpFailureKind",
    "McpManager",
    "McpProgress",
    "McpRun",
    "McpServerConfig",
    "McpServices",
    "McpTool",
    "ServerStatus",
    "ServersDown",
    "apply_catalog",
    "apply_reconnected",
    "drop_servers",
    "parse_mcp_servers",
    "reconnect_servers",
    "server_name_problem",
    "start_reconnect",
    "sync_tools",
    "tool_name",
    "with_mcp",
]
