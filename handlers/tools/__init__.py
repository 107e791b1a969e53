"""The tool layer: the built-in tools, the permission gate, running calls, the ledger of tool_use/tool_result.

Its states are ``gating_tools`` and ``running_tools``. Here: ``data``, ``gate``, ``running``, ``structured`` and
``services`` (the tools, rules, permissions, sandbox, dispatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .data import NotRun, PermissionDenied, ToolResultPublished, ToolsData, ToolServices, ToolsRun
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
        INTERRUPT_MARKERS,
        ToolsDone,
        close_dangling_tool_uses,
        record_tool_request,
        record_tool_results,
        record_tool_results_and_stop,
        record_tool_results_at_turn_limit,
        run_tools,
    )
    from .services.base import BackgroundTask, SearchAnswer, ToolContext, ToolError, ToolOutput, ToolRun, ToolSpec
    from .services.decision import AskPermission, PermissionAnswer
    from .services.dispatch import CallRunner, OnResult, ToolRegistry, run_tool_calls
    from .services.names import (
        AGENT_TOOL,
        AGENT_TOOL_EARLIER_NAME,
        CHANGES_CODE,
        CLEARABLE_TOOLS,
        LIST_RESOURCES,
        READ_RESOURCE,
    )
    from .services.permissions import decide, observable_input, suggest_rules
    from .services.python_tools import ToolDefinitionError, tool
    from .services.registry import default_registry, default_tools
    from .services.rules import (
        PERMISSION_MODES,
        PermissionMode,
        PermissionRule,
        PermissionRuleError,
        PermissionRules,
        hidden_tools,
        parse_rule,
        parse_rule_list,
        read_denied,
    )
    from .services.runs_later import instruction_imports
    from .services.sandbox import Sandbox, unavailable_reason
    from .services.sandbox.policy import SandboxPolicy
    from .services.structured_output import read_schema, structured_output_tool
    from .services.web import search_tool_definition
    from .services.web_urls import named_hosts
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
            ".data": (
                "NotRun",
                "PermissionDenied",
                "ToolResultPublished",
                "ToolServices",
                "ToolsData",
                "ToolsRun",
            ),
            ".gate": (
                "GateOutcome",
                "checkpoint_taken",
                "close_calls_and_stop",
                "gate_tool_calls",
                "record_gate",
                "stop_repeated_denial",
                "stop_repeated_replay",
            ),
            ".running": (
                "INTERRUPT_MARKERS",
                "ToolsDone",
                "close_dangling_tool_uses",
                "record_tool_request",
                "record_tool_results",
                "record_tool_results_and_stop",
                "record_tool_results_at_turn_limit",
                "run_tools",
            ),
            ".services.base": (
                "BackgroundTask",
                "SearchAnswer",
                "ToolContext",
                "ToolError",
                "ToolOutput",
                "ToolRun",
                "ToolSpec",
            ),
            ".services.decision": (
                "AskPermission",
                "PermissionAnswer",
            ),
            ".services.dispatch": (
                "CallRunner",
                "OnResult",
                "ToolRegistry",
                "run_tool_calls",
            ),
            ".services.names": (
                "AGENT_TOOL",
                "AGENT_TOOL_EARLIER_NAME",
                "CHANGES_CODE",
                "CLEARABLE_TOOLS",
                "LIST_RESOURCES",
                "READ_RESOURCE",
            ),
            ".services.permissions": (
                "decide",
                "observable_input",
                "suggest_rules",
            ),
            ".services.python_tools": (
                "ToolDefinitionError",
                "tool",
            ),
            ".services.registry": (
                "default_registry",
                "default_tools",
            ),
            ".services.rules": (
                "PERMISSION_MODES",
                "PermissionMode",
                "PermissionRule",
                "PermissionRuleError",
                "PermissionRules",
                "hidden_tools",
                "parse_rule",
                "parse_rule_list",
                "read_denied",
            ),
            ".services.runs_later": ("instruction_imports",),
            ".services.sandbox": (
                "Sandbox",
                "unavailable_reason",
            ),
            ".services.sandbox.policy": ("SandboxPolicy",),
            ".services.structured_output": (
                "read_schema",
                "structured_output_tool",
            ),
            ".services.web": ("search_tool_definition",),
            ".services.web_urls": ("named_hosts",),
            ".structured": (
                "record_structured_output",
                "structured_output_attempts_spent",
                "structured_output_given",
                "surface_structured_output_failure",
            ),
        },
    )

__all__ = [
    "AGENT_TOOL",
    "AGENT_TOOL_EARLIER_NAME",
    "AskPermission",
    "BackgroundTask",
    "CHANGES_CODE",
    "CLEARABLE_TOOLS",
    "CallRunner",
    "GateOutcome",
    "INTERRUPT_MARKERS",
    "LIST_RESOURCES",
    "NotRun",
    "OnResult",
    "PERMISSION_MODES",
    "PermissionAnswer",
    "PermissionDenied",
    "PermissionMode",
    "PermissionRule",
    "PermissionRuleError",
    "PermissionRules",
    "READ_RESOURCE",
    "Sandbox",
    "SandboxPolicy",
    "SearchAnswer",
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
    "instruction_imports",
    "named_hosts",
    "observable_input",
    "parse_rule",
    "parse_rule_list",
    "read_denied",
    "read_schema",
    "record_gate",
    "record_structured_output",
    "record_tool_request",
    "record_tool_results",
    "record_tool_results_and_stop",
    "record_tool_results_at_turn_limit",
    "run_tool_calls",
    "run_tools",
    "search_tool_definition",
    "stop_repeated_denial",
    "stop_repeated_replay",
    "structured_output_attempts_spent",
    "structured_output_given",
    "structured_output_tool",
    "suggest_rules",
    "surface_structured_output_failure",
    "tool",
    "unavailable_reason",
]
