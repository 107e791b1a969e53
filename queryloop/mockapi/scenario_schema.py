"""The JSON Schema a scenario file is checked against before its meaning is.

Owns :data:`SCHEMA` and the format's version; not the records a scenario becomes nor the checks by meaning
(scenario). The format: docs/scenarios.md.
"""

from __future__ import annotations

from typing import Any

from .holds import HOLD_SCHEMA

__all__ = ["CLI_HINTS", "SCENARIO_SCHEMA_VERSION", "SCHEMA", "STOP_REASONS"]

SCENARIO_SCHEMA_VERSION = 1
"""The scenario format this server reads; a file declares it as ``schema_version``."""

STOP_REASONS = (
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
)

CLI_HINTS = {
    "prompt": {"type": "string"},
    "permission_mode": {"enum": ["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]},
    "max_turns": {"type": "integer", "minimum": 1},
    "max_retries": {"type": "integer", "minimum": 0},
    "max_budget_usd": {"type": "number", "minimum": 0},
    "output_format": {"enum": ["text", "json", "stream-json"]},
    "allowed_tools": {"type": "array", "items": {"type": "string"}},
    "disallowed_tools": {"type": "array", "items": {"type": "string"}},
    "mcp_config": {"type": "array", "items": {"type": ["string", "object"]}},  # as --mcp-config: files or documents
    "append_system_prompt": {"type": "string"},
    "settings": {"type": "object"},
    "verbose": {"type": "boolean"},
}


_BLOCK: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "thinking": {"type": "string"},
        "signature": {"type": "string"},
        "raw": {
            "type": "object",
            "properties": {"type": {"type": "string", "minLength": 1}},
            "required": ["type"],
        },
        "tool_use": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "input": {"type": "object"},
                "id": {"type": "string", "minLength": 1},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

_STEP_PROPERTIES: dict[str, Any] = {
    "reply": {
        "type": "object",
        "properties": {
            "content": {"type": "array", "items": _BLOCK},
            "stop_reason": {"enum": list(STOP_REASONS)},
            "usage": {
                "type": "object",
                "properties": {
                    k: {"type": "integer", "minimum": 0}
                    for k in (
                        "input_tokens",
                        "output_tokens",
                        "cache_creation_input_tokens",
                        "cache_read_input_tokens",
                    )
                }
                | {
                    "server_tool_use": {
                        "type": "object",
                        "properties": {
                            k: {"type": "integer", "minimum": 0} for k in ("web_search_requests", "web_fetch_requests")
                        },
                        "additionalProperties": False,
                    }
                },
                "additionalProperties": False,
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    },
    "error": {
        "type": "object",
        "properties": {
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "type": {"type": "string", "minLength": 1},
            "message": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
        },
        "required": ["status"],
        "additionalProperties": False,
    },
    "name": {"type": "string", "minLength": 1},
    "hold": HOLD_SCHEMA,
    "repeat": {"type": "integer", "minimum": 1},
    "delay_ms": {"type": "integer", "minimum": 0},
    "pause_s": {"type": "number", "minimum": 0},
    "cut_after_block": {"type": "integer", "minimum": 0},
    "cut_body": {"type": "boolean"},
    "error_event_after_block": {
        "type": ["integer", "object"],
        "minimum": 0,
        "properties": {
            "after_block": {"type": "integer", "minimum": 0},
            "type": {"type": "string", "minLength": 1},
            "message": {"type": "string"},
        },
        "required": ["after_block"],
        "additionalProperties": False,
    },
    "stall": {
        "type": "object",
        "properties": {
            "after_block": {"type": "integer", "minimum": 0},
            "seconds": {"type": "number", "minimum": 0},
        },
        "required": ["after_block", "seconds"],
        "additionalProperties": False,
    },
    "malformed": {"enum": ["sse", "json"]},
}

_STEP: dict[str, Any] = {"type": "object", "properties": _STEP_PROPERTIES, "additionalProperties": False}
_STEPS: dict[str, Any] = {"type": "array", "items": _STEP}

_RULE: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_STEP_PROPERTIES,
        "when": {
            "type": "object",
            "properties": {
                "input_tokens_over": {"type": "integer", "minimum": 0},
                "system_contains": {"type": "string", "minLength": 1},
                "last_user_contains": {"type": "string", "minLength": 1},
                "first_user_contains": {"type": "string", "minLength": 1},
                "model": {"type": "string", "minLength": 1},
            },
            "minProperties": 1,
            "additionalProperties": False,
        },
        "times": {"type": "integer", "minimum": 1},
    },
    "required": ["when"],
    "additionalProperties": False,
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "schema_version": {"const": SCENARIO_SCHEMA_VERSION},
        "scenario": {"type": "string", "minLength": 1},
        "doc": {"type": "string"},
        "model": {"type": "string", "minLength": 1},
        "fallback_models": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 3},
        "cli": {"type": "object", "properties": CLI_HINTS, "additionalProperties": False},
        "files": {"type": "object", "additionalProperties": {"type": "string"}},
        "rules": {"type": "array", "items": _RULE},
        "prompt_cache": {
            "type": "object",
            "properties": {"min_tokens": {"type": "integer", "minimum": 0}},
            "additionalProperties": False,
        },
        "models": {
            "type": "object",
            "additionalProperties": {
                # Either a plain list of steps or {steps: [...], otherwise: step}.
                "type": ["array", "object"],
                "items": _STEP,
                "properties": {"steps": _STEPS, "otherwise": _STEP},
                "required": ["steps"],
                "additionalProperties": False,
            },
        },
        "default": _STEPS,
        "otherwise": _STEP,
    },
    "required": ["schema_version", "scenario", "model"],
    "additionalProperties": False,
}
