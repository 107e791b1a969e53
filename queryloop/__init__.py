"""queryloop: an agent query loop whose every continuation and recovery is a transition of a YAML machine.

The engine, the handlers and the YAML, and above them the run, its ways in, the fleet and the embedded server
(docs/internals.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fsm import lazy_exports

if TYPE_CHECKING:
    from queryloop.handlers.tools import ToolContext, ToolDefinitionError, ToolOutput, ToolSpec, tool

    from .frontends.api import ClaudeSDKClient, QueryClient, query
    from .frontends.messages import (
        AssistantMessage,
        ContentBlock,
        Message,
        ResultMessage,
        SystemMessage,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        UserMessage,
    )
    from .frontends.options import (
        ClaudeAgentOptions,
        HookMatcher,
        OptionsError,
        PermissionResultAllow,
        PermissionResultDeny,
        QueryOptions,
        ToolPermissionContext,
        create_sdk_mcp_server,
    )
    from .run.agent import AgentRun
    from .run.config import AgentOptions
    from .run.data import AgentData, restore_run, snapshot_run
    from .run.services import AgentServices
    from .run.settings import Settings, SettingsError, load_settings
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "queryloop.handlers.tools.services.base": ("ToolContext", "ToolOutput", "ToolSpec"),
            "queryloop.handlers.tools.services.python_tools": ("ToolDefinitionError", "tool"),
            ".run.agent": ("AgentRun",),
            ".run.config": ("AgentOptions",),
            ".run.data": ("AgentData", "restore_run", "snapshot_run"),
            ".run.services": ("AgentServices",),
            ".frontends.api": ("ClaudeSDKClient", "QueryClient", "query"),
            ".frontends.messages": (
                "AssistantMessage",
                "ContentBlock",
                "Message",
                "ResultMessage",
                "SystemMessage",
                "TextBlock",
                "ThinkingBlock",
                "ToolResultBlock",
                "ToolUseBlock",
                "UserMessage",
            ),
            ".frontends.options": (
                "ClaudeAgentOptions",
                "HookMatcher",
                "OptionsError",
                "PermissionResultAllow",
                "PermissionResultDeny",
                "QueryOptions",
                "ToolPermissionContext",
                "create_sdk_mcp_server",
            ),
            ".run.settings": ("Settings", "SettingsError", "load_settings"),
        },
    )

__all__ = [
    "AgentData",
    "AgentOptions",
    "AgentRun",
    "AgentServices",
    "AssistantMessage",
    "ClaudeAgentOptions",
    "ClaudeSDKClient",
    "ContentBlock",
    "HookMatcher",
    "Message",
    "OptionsError",
    "PermissionResultAllow",
    "PermissionResultDeny",
    "QueryClient",
    "QueryOptions",
    "ResultMessage",
    "Settings",
    "SettingsError",
    "SystemMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolContext",
    "ToolDefinitionError",
    "ToolOutput",
    "ToolPermissionContext",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "UserMessage",
    "create_sdk_mcp_server",
    "load_settings",
    "query",
    "restore_run",
    "snapshot_run",
    "tool",
]

__version__ = "0.1.0"
