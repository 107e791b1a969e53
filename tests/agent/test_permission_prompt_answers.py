"""What a permission prompt tool's answer means (``handlers/mcp/services/approval.read_answer``): hostile text in,
a decision out — anything that is no decision denies, saying why, and nothing raises."""

from __future__ import annotations

import json

import pytest

from queryloop.handlers.mcp.services.approval import MAX_ANSWER_CHARS, read_answer
from queryloop.handlers.tools import ToolOutput

TOOL = "mcp__perm__approve"


def _read(text: str, *, is_error: bool = False) -> tuple[bool, object, str]:
    answer = read_answer(TOOL, ToolOutput(content=[{"type": "text", "text": text}], is_error=is_error))
    return answer.allow, answer.updated_input, answer.message


def test_an_allow_with_an_input_runs_that_input_and_an_empty_one_the_call_as_it_was() -> None:
    assert _read('{"behavior": "allow", "updatedInput": {"command": "ls"}}') == (True, {"command": "ls"}, "")
    assert _read('{"behavior": "allow", "updatedInput": {}}') == (True, None, "")
    assert _read('{"behavior": "allow"}') == (True, None, "")


def test_a_deny_carries_its_message_for_the_model() -> None:
    assert _read('{"behavior": "deny", "message": "not today"}') == (False, None, "not today")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("allow", "not JSON"),
        ('["allow"]', "a JSON list, not an object"),
        ('{"behavior": "maybe"}', "behavior 'maybe'"),
        ('{"behavior": "deny"}', "a deny without a message"),
        ('{"behavior": "allow", "updatedInput": "rm -rf /"}', "updatedInput is not an object"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (json.dumps({"behavior": "allow", "pad": "x" * MAX_ANSWER_CHARS}), "more than"),
    ],
)
def test_an_answer_that_is_no_decision_denies_saying_why(text: str, why: str) -> None:
    allow, updated, message = _read(text)
    assert (allow, updated) == (False, None) and why in message and TOOL in message


def test_a_failed_call_of_the_tool_denies() -> None:
    allow, _, message = _read('{"behavior": "allow"}', is_error=True)
    assert not allow and "failed" in message
