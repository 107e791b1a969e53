"""End-to-end: an MCP server that breaks JSON-RPC fails what it was asked at once, naming the server.

The server (``tests/fixtures/mcp/malformed_server.py``, a real subprocess speaking JSON-RPC
without the SDK) answers one of ``initialize``, ``tools/list`` or ``tools/call`` with a line
that is not JSON, a response under an id no request has, a response with neither a result nor
an error, or a result of the wrong shape. The SDK drops the first three and the request would
wait out its whole timeout (120 s for a call, 30 s for the start); here the connection fails
at once, a call is an ``is_error`` result naming the server, and the machine reconnects the
server before the next request as after any broken connection. No clock is read: the runs'
timeout is only there so a wait that never ends fails the test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .harness import ROOT, MockApi, run_cli

SERVER = ROOT / "tests" / "fixtures" / "mcp" / "malformed_server.py"
FAULTS = {
    "not-json": "sent a line that is not a JSON-RPC message",
    "neither": "sent a line that is not a JSON-RPC message",
    "wrong-id": "answered request id 987654, which it was never sent",
    "wrong-shape": "answered with a result of the wrong shape",
}
CALL = """schema_version: 1
scenario: malformed-mcp
model: mock-primary
models:
  mock-primary:
    - reply: {content: [{tool_use: {name: mcp__bad__echo, input: {text: hi}}}]}
    - reply: {content: [{text: "done"}]}
"""
HELLO = """schema_version: 1
scenario: malformed-mcp
model: mock-primary
models:
  mock-primary:
    - reply: {content: [{text: "hello"}]}
"""


def _config(method: str, fault: str) -> str:
    return json.dumps({"mcpServers": {"bad": {"command": sys.executable, "args": [str(SERVER), method, fault]}}})


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_malformed_answer_to_a_tool_call_is_an_error_result_naming_the_server_at_once(
    tmp_path: Path, fault: str
) -> None:
    with MockApi(CALL) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--mcp-config", _config("tools/call", fault)],
            api=api,
            cwd=tmp_path,
            timeout=100,  # under the call's 120 s: a call that waits out its timeout fails here
        )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.result["result"] == "done"
    (result,) = [b for b in api.requests[1].messages[-1]["content"] if b["type"] == "tool_result"]
    assert result["is_error"] is True
    text = result["content"] if isinstance(result["content"], str) else result["content"][0]["text"]
    assert text.startswith("MCP tool 'echo' of server 'bad' failed (server): ") and FAULTS[fault] in text, text
    assert "\n" not in text.split("\n{")[0], "one line, then the structured error"


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("method", ["initialize", "tools/list"])
def test_a_malformed_answer_at_the_start_fails_the_server_with_a_warning_naming_it_and_the_problem(
    tmp_path: Path, method: str, fault: str
) -> None:
    with MockApi(HELLO) as api:
        run = run_cli(
            ["-p", "go", "--model", "mock-primary", "--mcp-config", _config(method, fault)],
            api=api,
            cwd=tmp_path,
            timeout=100,
        )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.result["result"] == "hello"
    lines = [line for line in run.stderr.splitlines() if "'bad'" in line]
    assert lines[0].startswith("queryloop: warning: MCP server 'bad' server failure: "), lines
    assert FAULTS[fault] in lines[0] and not [line for line in lines if "timeout" in line], lines
    init = next(line for line in run.lines if line.get("subtype") == "init")
    assert init["mcp_servers"] == [{"name": "bad", "status": "failed"}]
