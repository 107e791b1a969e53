"""A tool's input schema that names a ``$ref`` outside itself: nothing is fetched, and a call gets an error result.

An MCP server's tool schemas (and ``--json-schema``) are someone else's text. Both validators
``ToolSpec`` compiles would fetch a remote ``$ref`` over HTTP when a call is checked, and one that
resolves nowhere raised out of the tool run (the run ended in internal_error).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from queryloop.handlers.messages import ToolCall
from queryloop.handlers.tools import ToolContext, ToolOutput, ToolRegistry, ToolSpec, run_tool_calls


async def _ran(tool_input: Any, ctx: ToolContext) -> ToolOutput:
    return ToolOutput(content="ran")


def _call(ref: str, tmp_path: Path) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"n": {"$ref": ref}}}
    tool = ToolSpec(
        name="echo",
        description="echo",
        input_schema=schema,
        concurrency_safe=True,
        read_only=True,
        idempotent=True,
        run=_ran,
    )
    calls = [ToolCall(id="toolu_1", name="echo", input={"n": "x"})]
    [result] = asyncio.run(run_tool_calls(calls, ToolRegistry(tools=(tool,)), ToolContext(cwd=tmp_path)))
    return dict(result)


def test_a_remote_ref_in_a_tool_schema_is_never_fetched_and_the_call_gets_an_error_result(
    tmp_path: Path, schema_listener: tuple[str, list[str]]
) -> None:
    url, asked = schema_listener
    result = _call(f"{url}/n.json", tmp_path)
    assert asked == []
    assert result["is_error"] is True and "does not resolve" in str(result["content"])


def test_a_ref_to_nowhere_in_a_tool_schema_gets_an_error_result_not_a_crash(tmp_path: Path) -> None:
    result = _call("#/nowhere", tmp_path)
    assert result["is_error"] is True and "does not resolve" in str(result["content"])
