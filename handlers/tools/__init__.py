"""The tool layer: the built-in tools, the permission gate, running calls, the ledger of tool_use/tool_result.

Its states are ``gating_tools`` and ``running_tools``. Here: ``data``, ``gate``, ``running``, ``structured`` and
``services`` (the tools, rules, permissions, sandbox, dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm.lazy import lazy_exports

if TYPE_CHECKING:
    from .data import ToolResultPublished, ToolsData, ToolServices, ToolsRun
    from .gate import (
        GateOutcome,
        checkpoint_taken,
        close_calls_and_stop,
        gate_tool_calls,
        record_gate,
        stop_repeated_denial,
        stop_repeated_replay,
    )
    from .running import (
        ToolsDone,
        close_dangling_tool_uses,
        record_tool_request,
        record_tool_results,
        record_tool_results_and_stop,
        record_tool_results_at_turn_limit,
        run_tools,
    )
    from .services.base import ToolContext, ToolError, ToolOutput, ToolRun, ToolSpec
    from .services.dispatch import OnResult, ToolRegistry, run_tool_calls
    from .services.permissions import AskPermission, PermissionAnswer, decide
    from .services.python_tools import ToolDefinitionError, tool
    from .services.registry import default_registry, default_tools
    from .services.rules import PERMISSION_MODES, PermissionMode, PermissionRuleError, PermissionRules, hidden_tools
    from .structured import (
        record_structured_output,
        structured_output_attempts_spent,
        structured_output_given,
        surface_structured_output_failure,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".services.base": ("ToolContext", "ToolError", "ToolOutput", "ToolRun", "ToolSpec"),
            ".data": ("ToolResultPublished", "ToolsData", "ToolServices", "ToolsRun"),
            ".services.dispatch": ("OnResult", "ToolRegistry", "run_tool_calls"),
            ".gate": (
                "GateOutcome",
                "checkpoint_taken",
                "close_calls_and_stop",
                "gate_tool_calls",
                "record_gate",
                "stop_repeated_denial",
                "stop_repeated_replay",
            ),
            ".services.permissions": ("AskPermission", "PermissionAnswer", "decide"),
            ".services.rules": (
                "PERMISSION_MODES",
                "PermissionMode",
                "PermissionRuleError",
                "PermissionRules",
                "hidden_tools",
            ),
            ".services.python_tools": ("ToolDefinitionError", "tool"),
            ".services.registry": ("default_registry", "default_tools"),
            ".running": (
                "ToolsDone",
                "close_dangling_tool_uses",
                "record_tool_request",
                "record_tool_results",
                "record_tool_results_and_stop",
                "record_tool_results_at_turn_limit",
                "run_tools",
            ),
            ".structured": (
                "record_structured_output",
                "structured_output_attempts_spent",
                "structured_output_given",
                "surface_structured_output_failure",
            ),
        },
    )

__all__ = [
    "AskPermission",
    "GateOutcome",
    "OnResult",
    "PERMISSION_MODES",
    "PermissionAnswer",
    "PermissionMode",
    "PermissionRuleError",
    "PermissionRules",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "ToolResultPublished",
    "ToolRun",
    "ToolServices",
    "ToolSpec",
    "ToolsData",
    "ToolsDone",
    "ToolsRun",
    "checkpoint_taken",
    "close_calls_and_stop",
    "close_dangling_tool_uses",
    "decide",
    "default_registry",
    "default_tools",
    "gate_tool_calls",
    "hidden_tools",
    "record_gate",
    "record_structured_output",
    "record_tool_request",
    "record_tool_results",
    "record_tool_results_and_stop",
    "record_tool_results_at_turn_limit",
    "run_tool_calls",
    "run_tools",
    "stop_repeated_denial",
    "stop_repeated_replay",
    "structured_output_attempts_spent",
    "structured_output_given",
    "surface_structured_output_failure",
    "tool",
]
