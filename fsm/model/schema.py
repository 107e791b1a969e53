"""The JSON Schema every machine declaration must satisfy before it is read further.

Owns the structural contract of the YAML (keys, types, closed sets). Semantic
checks — names that must exist, reachability, catch-alls — live in ``fsm.model.rules``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MACHINE_SCHEMA", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
"""The machine format this engine reads; a file declares it as ``schema_version``."""

_NAME = {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"}
_NAMES = {"type": "array", "items": _NAME, "uniqueItems": True, "minItems": 1}  # a non-empty list of distinct names
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# absolute (pkg.module.attr) or relative to the machine's `package` (.module.attr)
_DOTTED = {"type": "string", "pattern": rf"^(\.{_IDENT}(\.{_IDENT})*|{_IDENT}(\.{_IDENT})+)$"}
_PACKAGE = {"type": "string", "pattern": rf"^{_IDENT}(\.{_IDENT})*$"}
# a field of the run data, dotted (`request.max_tokens`); `was` paths may index a sequence (`fallback_models.0`)
_FIELD = {"type": "string", "pattern": rf"^{_IDENT}(\.{_IDENT})*$"}
_FIELDS = {"type": "array", "items": _FIELD, "uniqueItems": True}
_WAS = {"type": "string", "pattern": rf"^{_IDENT}(\.({_IDENT}|[0-9]+))*$"}
_DOC = {"type": "string"}
_EFFECTS = {"type": "array", "items": _DOTTED, "minItems": 1, "uniqueItems": True}
# an int, or a param with an optional offset: "max_turns", "max_turns - 1"
_LIMIT = {
    "oneOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^[a-z][a-z0-9_]*( [+-] [0-9]+)?$"},
    ]
}

MACHINE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "queryloop machine",
    "type": "object",
    "required": ["schema_version", "machine", "initial", "events", "states", "transitions"],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "machine": _NAME,
        "package": _PACKAGE,
        "doc": _DOC,
        "initial": _NAME,
        "abort_event": _NAME,
        "reason_kinds": {"type": "object", "propertyNames": _NAME, "additionalProperties": {"type": "string"}},
        "params": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "oneOf": [
                    {"type": ["integer", "number", "string", "boolean", "null"]},
                    {
                        "type": "object",
                        "required": ["default"],
                        "additionalProperties": False,
                        "properties": {
                            "default": {},
                            "type": {"enum": ["int", "number", "string", "boolean"]},
                            "nullable": {"type": "boolean"},
                            "check": {"type": "integer", "minimum": 0},
                            "max": {"type": "number", "minimum": 0},
                            "doc": _DOC,
                        },
                    },
                ]
            },
        },
        "figures": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "oneOf": [
                    _EFFECTS,
                    {
                        "type": "object",
                        "required": ["effects"],
                        "additionalProperties": False,
                        "properties": {
                            "effects": _EFFECTS,
                            "max": {"type": "integer", "minimum": 0},
                            "max_per_run": _LIMIT,
                            "max_with_children": {"type": "integer", "minimum": 0},
                            "each_s": {"type": "array", "minItems": 1, "items": {"type": ["string", "number"]}},
                            "doc": _DOC,
                        },
                    },
                ]
            },
        },
        "children": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "required": ["starts", "steps", "depth", "admitted", "refused"],
                "additionalProperties": False,
                "properties": {
                    "starts": _NAME,
                    "steps": _NAME,
                    "depth": {"enum": [1]},
                    "pending": _NAME,
                    "admitted": _NAME,
                    "refused": _NAME,
                    "doc": _DOC,
                },
            },
        },
        "unbounded_by_design": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "required": ["bound", "doc"],
                "additionalProperties": False,
                "properties": {"bound": _NAME, "doc": {"type": "string", "minLength": 1}},
            },
        },
        "properties": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "required": ["doc"],
                "minProperties": 2,
                "maxProperties": 2,
                "additionalProperties": False,
                "properties": {
                    "doc": {"type": "string", "minLength": 1},
                    "order": {"type": "array", "items": _NAME, "uniqueItems": True, "minItems": 2},
                    "at_most": {
                        "type": "object",
                        "required": ["count", "per", "max"],
                        "additionalProperties": False,
                        "properties": {
                            "count": _NAMES,
                            "per": _NAME,
                            "max": _LIMIT,
                        },
                    },
                    "trips": {
                        "type": "object",
                        "required": ["breaker", "at"],
                        "additionalProperties": False,
                        "properties": {"breaker": _NAME, "at": _LIMIT},
                    },
                    "in_a_row": {
                        "type": "object",
                        "required": ["counter"],
                        "additionalProperties": False,
                        "properties": {
                            "counter": _NAME,
                            "broken_by": _NAMES,
                        },
                    },
                    "resets": {
                        "type": "object",
                        "required": ["after", "counters"],
                        "additionalProperties": False,
                        "properties": {
                            "after": _NAMES,
                            "counters": _NAMES,
                        },
                    },
                    "guarded": {
                        "type": "object",
                        "required": ["edges", "by"],
                        "additionalProperties": False,
                        "properties": {
                            "edges": _NAMES,
                            "by": _NAME,
                        },
                    },
                    "preceded": {
                        "type": "object",
                        "required": ["states", "by", "per"],
                        "additionalProperties": False,
                        "properties": {
                            "states": _NAMES,
                            "by": _NAMES,
                            "per": _NAME,
                        },
                    },
                    "ends": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["result"],
                            "anyOf": [{"required": ["kinds"]}, {"required": ["reasons"]}],
                            "additionalProperties": False,
                            "properties": {
                                "kinds": _NAMES,
                                "reasons": _NAMES,
                                "except": _NAMES,
                                "result": {"type": "object", "propertyNames": _NAME},
                            },
                        },
                    },
                },
            },
        },
        "events": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {"type": ["string", "null"]},
        },
        "guards": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "oneOf": [
                    _DOTTED,
                    {
                        "type": "object",
                        "required": ["call"],
                        "additionalProperties": False,
                        "properties": {"call": _DOTTED, "decides": _NAMES, "doc": _DOC},
                    },
                ]
            },
        },
        "scopes": {"type": "array", "items": _NAME, "minItems": 1},
        "invariants": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "required": ["call", "at", "doc"],
                "additionalProperties": False,
                "properties": {"call": _DOTTED, "at": _NAMES, "doc": {"type": "string", "minLength": 1}},
            },
        },
        "counters": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "required": ["cap"],
                "additionalProperties": False,
                "properties": {
                    "cap": {"oneOf": [{"type": "integer", "minimum": 0}, _NAME]},
                    "cap_offset": {"type": "integer"},
                    "scope": _NAME,
                    "consecutive": {"type": "array", "items": _NAME, "uniqueItems": True},
                    "streak_of": _NAMES,
                    "doc": _DOC,
                },
            },
        },
        "states": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "doc": _DOC,
                    "layer": {"type": "string"},
                    "effect": _DOTTED,
                    "emits": _NAMES,
                    "exit": _DOTTED,
                    "terminal": {"type": "boolean"},
                    "result": {"type": "object"},
                },
            },
        },
        "transitions": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["from", "event", "to", "reason"],
                "additionalProperties": False,
                "properties": {
                    "from": {"oneOf": [_NAME, {"type": "array", "items": _NAME, "minItems": 1}]},
                    "event": _NAME,
                    "to": _NAME,
                    "reason": _NAME,
                    "guards": {"type": "array", "items": _NAME, "uniqueItems": True},
                    "counter": _NAME,
                    "resets": {"type": "array", "items": _NAME, "uniqueItems": True},
                    "do": _DOTTED,
                    "changes": {**_FIELDS, "minItems": 1},
                    "may_change": _FIELDS,
                    "sets": {
                        "type": "object",
                        "propertyNames": _FIELD,
                        "minProperties": 1,
                        "additionalProperties": {
                            "oneOf": [
                                {"type": ["string", "number", "boolean", "null"]},
                                {
                                    "type": "object",
                                    "required": ["was"],
                                    "additionalProperties": False,
                                    "properties": {"was": _WAS},
                                },
                            ]
                        },
                    },
                    "progress": {"type": "boolean"},
                    "ends": _NAME,
                    "doc": _DOC,
                },
            },
        },
    },
}
