"""The MCP layer: tools from Model Context Protocol servers, and their recovery.

Its states are ``syncing_tools`` and ``reconnecting_mcp_servers``. Here: ``data``, ``syncing`` and ``services``
(config, client, connection, listing, failures, content). Its tools go through the tool layer's gate like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .data import CatalogUpdate, McpData, McpRun, McpServices, ServersDown, with_mcp
    from .services.approval import mcp_permission_asker
    from .services.client import McpManager, load_sdk
    from .services.config import (
        McpConfigError,
        McpServerConfig,
        parse_mcp_servers,
        server_name_problem,
        tool_name,
        with_timeouts,
    )
    from .services.connection import ServerStatus
    from .services.failures import McpFailure, McpFailureKind
    from .services.host import Elicit, ElicitAnswer, Elicitation, McpProgress
    from .services.listing import McpTool
    from .services.prompts import PromptCommandError, expand_command
    from .syncing import apply_catalog, apply_reconnected, drop_servers, reconnect_servers, start_reconnect, sync_tools
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".data": (
                "CatalogUpdate",
                "McpData",
                "McpRun",
                "McpServices",
                "ServersDown",
                "with_mcp",
            ),
            ".services.approval": ("mcp_permission_asker",),
            ".services.client": ("McpManager", "load_sdk"),
            ".services.config": (
                "McpConfigError",
                "McpServerConfig",
                "parse_mcp_servers",
                "server_name_problem",
                "tool_name",
                "with_timeouts",
            ),
            ".services.connection": ("ServerStatus",),
            ".services.failures": (
                "McpFailure",
                "McpFailureKind",
            ),
            ".services.host": (
                "Elicit",
                "ElicitAnswer",
                "Elicitation",
                "McpProgress",
            ),
            ".services.listing": ("McpTool",),
            ".services.prompts": (
                "PromptCommandError",
                "expand_command",
            ),
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
    "PromptCommandError",
    "ServerStatus",
    "ServersDown",
    "apply_catalog",
    "apply_reconnected",
    "drop_servers",
    "expand_command",
    "load_sdk",
    "mcp_permission_asker",
    "parse_mcp_servers",
    "reconnect_servers",
    "server_name_problem",
    "start_reconnect",
    "sync_tools",
    "tool_name",
    "with_mcp",
    "with_timeouts",
]
