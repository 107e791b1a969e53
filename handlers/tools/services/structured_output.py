"""Structured output (``--json-schema``): the schema's checks and the ``StructuredOutput`` tool that carries it.

Owns :func:`schema_problem` and :func:`structured_output_tool`, whose input schema is the caller's. What the run
does with the answer is ``handlers/tools/structured``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Final

from .base import ToolContext, ToolOutput, ToolSpec
from .names import STRUCTURED_OUTPUT

__all__ = ["STRUCTURED_OUTPUT", "output_json", "read_schema", "schema_problem", "structured_output_tool"]

_DESCRIPTION: Final = (
    "Give your final answer by calling this tool once, at the end, with input that follows its schema. "
    "The input is the answer the user's program reads."
)
_ACCEPTED: Final = "The structured output was accepted."


def schema_problem(schema: object) -> str | None:
    """Why ``schema`` cannot be the structured output's schema (a JSON object, a valid draft 2020-12 schema)."""
    if not isinstance(schema, dict):
        return "--json-schema must be a JSON object"
    import jsonschema  # only a run given --json-schema pays for it

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(map(str, exc.absolute_path))
        return f"--json-schema is not a valid JSON Schema: {exc.message}" + (f" (at {where})" if where else "")
    if schema.get("type", "object") != "object":
        return f"--json-schema must describe an object (a tool's input), not type {schema.get('type')!r}"
    return _reference_problem(schema)


def _references(node: object) -> Iterator[str]:
    """Every ``$ref`` value in ``node``, depth first (a JSON document: no cycles)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _reference_problem(schema: Mapping[str, object]) -> str | None:
    """A ``$ref`` that does not resolve within the schema itself: nothing is ever fetched to resolve one."""
    import referencing
    import referencing.exceptions
    import referencing.jsonschema

    resource = referencing.jsonschema.DRAFT202012.create_resource(schema)
    resolver = referencing.Registry().with_resource("", resource).resolver()
    for ref in _references(schema):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            return f"--json-schema: $ref {ref!r} does not resolve within the schema (nothing is fetched)"
    return None


def read_schema(text: str) -> dict[str, object]:
    """The ``--json-schema`` argument as a schema; ValueError with a one-line reason when it is not one."""
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--json-schema is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    problem = schema_problem(schema)
    if problem is not None:
        raise ValueError(problem)
    return dict(schema)


def output_json(value: object) -> str:
    """The result's text of a structured output: its JSON, compact, as Claude Code 2.1.235 writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def _accept(tool_input: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(content=_ACCEPTED)  # validated before it runs; the run's edge takes the input


def structured_output_tool(schema: Mapping[str, object]) -> ToolSpec:
    """The ``StructuredOutput`` tool for ``schema`` (an object schema :func:`schema_problem` accepts)."""
    input_schema = dict(schema) if "type" in schema else {**schema, "type": "object"}
    return ToolSpec(
        name=STRUCTURED_OUTPUT,
        description=_DESCRIPTION,
        input_schema=input_schema,
        concurrency_safe=True,
        read_only=True,
        idempotent=True,
        run=_accept,
    )
