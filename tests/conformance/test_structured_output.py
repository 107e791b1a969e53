"""Structured output (``--json-schema``) beside Claude Code 2.1.235: the tool offered, the result's keys, the limits.

Each row runs one probe in both programs and compares what a program reads: the exit code,
the result's ``subtype``, ``terminal_reason``, ``num_turns``, ``stop_reason``, ``result`` and
``structured_output``, the requests sent and the ``StructuredOutput`` tool they offered. The
sentences (the tool's description, the request for a missing call, the error text) are each
program's own and are not compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .reference import Observed, Probe, Row, held_to_its_row

pytestmark = pytest.mark.slow  # two programs per probe

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
ARGS = ("--json-schema", json.dumps(SCHEMA))
GOOD = ("StructuredOutput", {"n": 3})
BAD = ("StructuredOutput", {"n": "x"})


def _again(step: dict[str, Any], env: dict[str, str] | None = None) -> str:
    """A model that answers ``step`` to every request."""
    return json.dumps({"schema_version": 1, "scenario": "p", "model": "mock-primary", "default": [], "otherwise": step})


TEXT = _again({"reply": {"content": [{"text": "plain answer"}]}})
ALWAYS_BAD = _again({"reply": {"content": [{"tool_use": {"name": BAD[0], "input": BAD[1]}}]}})


def _offered(seen: Observed) -> object:
    """The StructuredOutput tool's input schema in the first request (None: not offered)."""
    if not seen.requests:
        return None
    tools = {t["name"]: t for t in seen.requests[0].tool_definitions}
    tool = tools.get("StructuredOutput")
    return None if tool is None else tool["input_schema"]


READERS: dict[str, Callable[[Observed], object]] = {
    "returncode": lambda seen: seen.returncode,
    "requests": lambda seen: len(seen.requests),
    "offered": _offered,
    "subtype": lambda seen: seen.result.get("subtype"),
    "terminal_reason": lambda seen: seen.result.get("terminal_reason"),
    "num_turns": lambda seen: seen.result.get("num_turns"),
    "stop_reason": lambda seen: seen.result.get("stop_reason"),
    "result": lambda seen: seen.result.get("result"),
    "structured_output": lambda seen: seen.result.get("structured_output", "(absent)"),
    "errors": lambda seen: len(seen.result.get("errors", ())),
    "stderr_says": lambda seen: "--json-schema" in seen.stderr,
    "synthetic_lines": lambda seen: sum(1 for line in seen.lines if line.get("isSynthetic")),
}

GIVEN = {
    "returncode": 0,
    "requests": 1,
    "offered": SCHEMA,
    "subtype": "success",
    "terminal_reason": "completed",
    "num_turns": 2,
    "stop_reason": "tool_use",
    "result": '{"n":3}',
    "structured_output": {"n": 3},
}
SPENT = {
    "returncode": 1,
    "requests": 5,
    "subtype": "error_max_structured_output_retries",
    "terminal_reason": "structured_output_retry_exhausted",
    "num_turns": 6,
    "stop_reason": "tool_use",
    "errors": 1,
    "structured_output": "(absent)",
}
REFUSED = {"returncode": 1, "requests": 0, "stderr_says": True}

ROWS: dict[str, Row] = {
    "a valid StructuredOutput call ends the run with it": Row(probe=Probe(calls=(GOOD,), args=ARGS), queryloop=GIVEN),
    "in json output": Row(
        probe=Probe(calls=(GOOD,), args=(*ARGS, "--output-format", "json", "--no-verbose")),
        queryloop={k: GIVEN[k] for k in ("returncode", "subtype", "result", "structured_output", "num_turns")},
    ),
    "nested values and text keep their JSON": Row(
        probe=Probe(
            calls=(("StructuredOutput", {"n": 1, "tags": ["é", "a b"], "deep": {"x": None}}),),
            args=ARGS,
        ),
        queryloop={
            "result": '{"n":1,"tags":["é","a b"],"deep":{"x":null}}',
            "structured_output": {"n": 1, "tags": ["é", "a b"], "deep": {"x": None}},
        },
    ),
    "a failing call, then a valid one": Row(
        probe=Probe(calls=(BAD, GOOD), args=ARGS),
        queryloop={**GIVEN, "requests": 2, "num_turns": 3},
    ),
    "a text answer is asked once for the call, then taken as it is": Row(
        probe=Probe(calls=(), scenario=TEXT, args=ARGS),
        queryloop={
            "returncode": 0,
            "requests": 2,
            "subtype": "success",
            "num_turns": 2,
            "stop_reason": "end_turn",
            "result": "plain answer",
            "structured_output": "(absent)",
        },
    ),
    "the request for the missing call on stdout": Row(
        probe=Probe(calls=(), scenario=TEXT, args=ARGS),
        queryloop={"synthetic_lines": 0, "requests": 2},
        reference={"synthetic_lines": 1, "requests": 2},
        design="the request for a missing StructuredOutput call is a hidden message, as every nudge here is "
        "([details](cli.md#structured-output-json-schema))",
    ),
    "five failing calls end the run": Row(probe=Probe(calls=(), scenario=ALWAYS_BAD, args=ARGS), queryloop=SPENT),
    "MAX_STRUCTURED_OUTPUT_RETRIES sets how many": Row(
        probe=Probe(calls=(), scenario=ALWAYS_BAD, args=ARGS, env={"MAX_STRUCTURED_OUTPUT_RETRIES": "2"}),
        queryloop={**SPENT, "requests": 2, "num_turns": 3},
    ),
    "no schema, no tool": Row(probe=Probe(calls=()), queryloop={"offered": None, "structured_output": "(absent)"}),
    "a schema that is not JSON": Row(probe=Probe(calls=(), args=("--json-schema", "not json")), queryloop=REFUSED),
    "a schema that is not an object": Row(probe=Probe(calls=(), args=("--json-schema", "[1]")), queryloop=REFUSED),
    "a schema that is no JSON Schema": Row(
        probe=Probe(calls=(), args=("--json-schema", '{"type": 5}')), queryloop=REFUSED
    ),
}


def _read(observed: Observed, key: str) -> object:
    return READERS[key](observed)


@pytest.mark.parametrize("name", list(ROWS))
def test_each_structured_output_probe_is_the_same_in_both_programs_or_differs_by_design(
    name: str, tmp_path: Path
) -> None:
    held_to_its_row(ROWS[name], _read, tmp_path)
