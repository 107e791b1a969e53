"""``queryloop run --permission-prompt-tool mcp__SERVER__TOOL`` end to end: a real stdio MCP server answers.

The approver (``tests/fixtures/mcp/approval_server.py``) logs each question to a file and
answers as told; its answers are hostile input: whatever it says that is no decision denies
the call, and nothing it says ends the run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from queryloop.mockapi.server import RecordedRequest

from .harness import ROOT, CliRun, MockApi, run_cli
from .test_request_layer import scenario

SERVER = ROOT / "tests" / "fixtures" / "mcp" / "approval_server.py"
TOOL = "mcp__perm__approve"
TOUCH = '  mock-primary:\n    - reply: {content: [{tool_use: {name: Bash, input: {command: "touch made"}}}]}\n'
DONE = '    - reply: {content: [{text: "done"}]}\n'


def _flags(answer: str, log: Path, tool: str = TOOL) -> list[str]:
    config = {"mcpServers": {"perm": {"command": sys.executable, "args": [str(SERVER), answer, str(log)]}}}
    return [
        "--model",
        "mock-primary",
        "--permission-mode",
        "default",
        "--mcp-config",
        json.dumps(config),
        "--permission-prompt-tool",
        tool,
        "-p",
        "go",
    ]


def _run(
    answer: str, tmp_path: Path, *extra: str, steps: str = TOUCH + DONE
) -> tuple[CliRun, list[RecordedRequest], list[dict[str, Any]]]:
    """Run the CLI with the approver answering ``answer``: the run, the requests sent, what the approver was asked."""
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "asked.jsonl"
    with MockApi(scenario(steps)) as api:
        run = run_cli([*_flags(answer, log), *extra], api=api, cwd=work)
        requests = api.requests
    asked = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return run, requests, asked


def test_the_tool_is_asked_with_the_call_and_its_updated_input_is_what_runs(tmp_path: Path) -> None:
    run, requests, asked = _run("rewrite", tmp_path)
    assert run.returncode == 0, run.stderr
    [call] = [b for b in requests[1].messages[1]["content"] if b["type"] == "tool_use"]
    assert asked == [{"tool_name": "Bash", "input": {"command": "touch made"}, "tool_use_id": call["id"]}]
    assert (tmp_path / "work" / "rewritten").exists() and not (tmp_path / "work" / "made").exists()
    assert run.result["permission_denials"] == []


def test_a_denial_tells_the_model_the_tools_message_and_is_listed(tmp_path: Path) -> None:
    run, requests, _ = _run("deny", tmp_path)
    [result] = [b for b in requests[-1].messages[-1]["content"] if b["type"] == "tool_result"]
    assert result["is_error"] is True and result["content"].endswith(": not today")
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Bash"]
    assert not (tmp_path / "work" / "made").exists()


@pytest.mark.parametrize("answer", ["not-json", "wrong-shape", "no-input-object", "tool-error", "deep"])
def test_an_answer_that_is_no_decision_denies_the_call_and_the_run_goes_on(answer: str, tmp_path: Path) -> None:
    run, requests, asked = _run(answer, tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert len(asked) == 1 and len(requests) == 2
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Bash"]
    assert not (tmp_path / "work" / "made").exists()
    assert run.result["result"] == "done"


def test_an_updated_input_a_deny_rule_covers_is_denied(tmp_path: Path) -> None:
    run, _, _ = _run("rewrite", tmp_path, "--disallowedTools", "Bash(touch rewritten)")
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Bash"]
    assert not (tmp_path / "work" / "rewritten").exists()


def test_the_model_is_not_offered_the_tool_and_cannot_call_it(tmp_path: Path) -> None:
    steps = f"  mock-primary:\n    - reply: {{content: [{{tool_use: {{name: {TOOL}, input: {{}}}}}}]}}\n" + DONE
    _, requests, asked = _run("allow", tmp_path, steps=steps)
    assert TOOL not in requests[0].tools and asked == []
    [result] = [b for b in requests[-1].messages[-1]["content"] if b["type"] == "tool_result"]
    assert "No such tool available" in result["content"]


def test_a_tool_no_server_offers_is_one_error_line_and_nothing_is_sent(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with MockApi(scenario(TOUCH + DONE)) as api:
        run = run_cli(_flags("allow", tmp_path / "asked.jsonl", "mcp__perm__nope"), api=api, cwd=work)
        requests = api.requests
    assert run.returncode == 1 and requests == []
    assert run.stderr.strip().splitlines() == [
        "queryloop: error: --permission-prompt-tool mcp__perm__nope: no MCP server offers this tool "
        "(the MCP tools: mcp__perm__approve)"
    ]
