"""Structured output end to end: ``queryloop run --json-schema`` against the embedded server.

Each test takes one of the machine's structured-output edges (``structured_output_recorded``,
``structured_output_nudge``, ``structured_output_missing_accepted``,
``structured_output_retries_exhausted``) or a refusal of a bad argument; the coverage gate
of ``tools/test.sh`` counts them (``tests/e2e/test_every_transition.py`` leaves them here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.handlers.output import STRUCTURED_OUTPUT_PROMPT

from .harness import MockApi, assert_ledger_closed, run_cli
from .test_request_layer import scenario

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
FLAG = ["--json-schema", json.dumps(SCHEMA)]


def _call(value: object) -> str:
    return f"    - reply: {{content: [{{tool_use: {{name: StructuredOutput, input: {json.dumps(value)}}}}}]}}\n"


def test_a_valid_structured_output_call_is_the_json_results_structured_output_and_nothing_follows(
    tmp_path: Path,
) -> None:
    text = scenario(f"  mock-primary:\n{_call({'n': 7})}")
    with MockApi(text) as api:
        run = run_cli(["--model", "mock-primary", "-p", "count", *FLAG], api=api, cwd=tmp_path, fmt="json")
        requests = api.requests
    assert run.returncode == 0, run.stderr
    result = run.result
    assert (result["subtype"], result["structured_output"], result["result"]) == ("success", {"n": 7}, '{"n":7}')
    assert (result["num_turns"], result["stop_reason"], len(requests)) == (2, "tool_use", 1)
    offered = {t["name"]: t for t in requests[0].tool_definitions}
    assert offered["StructuredOutput"]["input_schema"] == SCHEMA


def test_an_answer_without_the_call_is_asked_for_it_once_in_a_hidden_message(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "seven"}]}\n' + _call({"n": 7}))
    with MockApi(text) as api:
        run = run_cli(["--model", "mock-primary", "-p", "count", *FLAG], api=api, cwd=tmp_path)
        requests = api.requests
    assert run.returncode == 0, run.stderr
    assert run.reasons == ["structured_output_nudge", "tools_requested", "structured_output_recorded"]
    assert requests[1].messages[-1] == {"role": "user", "content": STRUCTURED_OUTPUT_PROMPT}
    assert STRUCTURED_OUTPUT_PROMPT not in run.stdout  # hidden: sent to the model, never shown
    assert run.result["structured_output"] == {"n": 7} and run.result["num_turns"] == 3


def test_a_second_answer_without_the_call_is_the_result_without_structured_output(tmp_path: Path) -> None:
    text = scenario('  mock-primary:\n    - reply: {content: [{text: "seven"}]}\n      repeat: 2\n')
    with MockApi(text) as api:
        run = run_cli(["--model", "mock-primary", "-p", "count", *FLAG], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.reasons == ["structured_output_nudge", "answer_recorded"]
    assert run.result["result"] == "seven" and "structured_output" not in run.result


def test_after_a_thinking_only_nudge_an_answer_without_the_call_is_taken_as_it_is(tmp_path: Path) -> None:
    text = scenario(
        '  mock-primary:\n    - reply: {content: [{thinking: "hmm"}]}\n    - reply: {content: [{text: "seven"}]}\n'
    )
    with MockApi(text) as api:
        run = run_cli(["--model", "mock-primary", "-p", "count", *FLAG], api=api, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.reasons == ["thinking_only_nudge", "structured_output_missing_accepted"]
    assert run.result["result"] == "seven" and "structured_output" not in run.result


def test_calls_failing_the_schema_end_the_run_after_max_structured_output_retries(tmp_path: Path) -> None:
    text = scenario("  mock-primary:\n" + _call({"n": "seven"}) + "      repeat: 5\n")
    with MockApi(text) as api:
        run = run_cli(
            ["--model", "mock-primary", "-p", "count", *FLAG], api=api, cwd=tmp_path, MAX_STRUCTURED_OUTPUT_RETRIES="3"
        )
        requests = api.requests
    assert run.returncode == 1, run.stderr
    result = run.result
    assert (result["subtype"], result["terminal_reason"]) == (
        "error_max_structured_output_retries",
        "structured_output_retry_exhausted",
    )
    assert len(requests) == 3 and result["num_turns"] == 4 and "structured_output" not in result
    assert run.reasons[-1] == "structured_output_retries_exhausted"
    told = requests[-1].messages[-1]["content"]  # the model was told what failed, as a tool error
    assert told[0]["is_error"] is True and "InputValidationError" in told[0]["content"]
    assert_ledger_closed(requests)


@pytest.mark.parametrize(
    ("argument", "said"),
    [
        ("not json", "--json-schema is not valid JSON"),
        ("[1]", "--json-schema must be a JSON object"),
        ('{"type": 5}', "--json-schema is not a valid JSON Schema"),
        ('{"type": "string"}', "--json-schema must describe an object"),
        ('{"type": "object", "properties": {"n": {"$ref": "#/nowhere"}}}', "does not resolve"),
    ],
)
def test_a_bad_json_schema_argument_is_one_error_line_and_nothing_runs(
    argument: str, said: str, tmp_path: Path
) -> None:
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')) as api:
        run = run_cli(["--model", "mock-primary", "-p", "hi", "--json-schema", argument], api=api, cwd=tmp_path)
        requests = api.requests
    assert run.returncode == 1 and requests == [] and run.stdout == ""
    assert run.stderr.count("\n") == 1 and said in run.stderr and "Traceback" not in run.stderr


def test_a_bad_max_structured_output_retries_is_one_error_line(tmp_path: Path) -> None:
    with MockApi(scenario('  mock-primary:\n    - reply: {content: [{text: "hi"}]}\n')) as api:
        run = run_cli(
            ["--model", "mock-primary", "-p", "hi", *FLAG], api=api, cwd=tmp_path, MAX_STRUCTURED_OUTPUT_RETRIES="many"
        )
    assert run.returncode == 1 and "MAX_STRUCTURED_OUTPUT_RETRIES='many'" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_schema_naming_a_remote_ref_is_refused_and_nothing_is_fetched(
    tmp_path: Path, schema_listener: tuple[str, list[str]]
) -> None:
    url, asked = schema_listener
    schema = {"type": "object", "properties": {"n": {"$ref": f"{url}/n.json"}}}
    with MockApi(scenario(f"  mock-primary:\n{_call({'n': 1})}")) as api:
        run = run_cli(
            ["--model", "mock-primary", "-p", "hi", "--json-schema", json.dumps(schema)], api=api, cwd=tmp_path
        )
    assert run.returncode == 1 and "does not resolve" in run.stderr and "Traceback" not in run.stderr
    assert asked == []
