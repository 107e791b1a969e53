"""End-to-end: what the Agent SDK's control requests print beside their answers (Claude Code 2.1.235's lines).

The CLI is driven as the SDK drives it (``--input-format stream-json``) with control
requests only; stdin then closes, which ends the session.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .harness import HANG_GUARD_S, ROOT, cli_env

FLAKY = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"


def _session(tmp_path: Path, *requests: dict[str, Any]) -> list[dict[str, Any]]:
    """Send ``requests``, each once the one before is answered, then close stdin (the session ends)."""
    config = {"mcpServers": {"flaky": {"command": sys.executable, "args": [str(FLAKY), str(tmp_path)]}}}
    cmd = [sys.executable, "-m", "queryloop", "--input-format", "stream-json", "--output-format", "stream-json"]
    cmd += ["--verbose", "--model", "mock-primary", "--cwd", str(tmp_path), "--mcp-config", json.dumps(config)]
    env = cli_env(None, ANTHROPIC_API_KEY="unused")
    pipes: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    lines: list[dict[str, Any]] = []
    with subprocess.Popen(cmd, text=True, env=env, cwd=ROOT, **pipes) as proc:  # its pipes are closed at the end
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            for i, request in enumerate(requests):  # one by one: each is answered before the next is sent
                line = {"type": "control_request", "request_id": f"r{i}", "request": request}
                proc.stdin.write(json.dumps(line) + "\n")
                proc.stdin.flush()
                for raw in proc.stdout:  # the session answers or dies; either ends this loop
                    lines.append(json.loads(raw))
                    if lines[-1].get("response", {}).get("request_id") == f"r{i}":
                        break
            proc.stdin.close()
            proc.wait(timeout=HANG_GUARD_S)
            rest, errors = proc.stdout.read(), proc.stderr.read()
        finally:
            proc.kill()
    assert proc.returncode == 0, errors
    return lines + [json.loads(line) for line in rest.splitlines() if line.strip()]


def _answer(lines: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    (answer,) = [line["response"] for line in lines if line.get("response", {}).get("request_id") == request_id]
    return dict(answer)


def test_set_permission_mode_prints_a_status_line_with_the_new_mode_after_its_answer(tmp_path: Path) -> None:
    lines = _session(tmp_path, {"subtype": "initialize"}, {"subtype": "set_permission_mode", "mode": "acceptEdits"})
    (status,) = [line for line in lines if line.get("subtype") == "status"]
    assert (status["type"], status["status"], status["permissionMode"]) == ("system", None, "acceptEdits")
    assert _answer(lines, "r1")["response"] == {"mode": "acceptEdits"}
    answered = next(i for i, line in enumerate(lines) if line.get("response", {}).get("request_id") == "r1")
    assert answered < lines.index(status), "as Claude Code 2.1.235: the answer, then the status line"


def test_set_model_replays_a_local_command_line_naming_the_model(tmp_path: Path) -> None:
    lines = _session(tmp_path, {"subtype": "initialize"}, {"subtype": "set_model", "model": "mock-secondary"})
    (said,) = [line for line in lines if line.get("type") == "user"]
    assert said["isReplay"] is True
    content = said["message"]["content"]
    assert content.startswith("<local-command-stdout>") and content.endswith("</local-command-stdout>")
    assert "mock-secondary" in content


def test_mcp_status_gives_each_servers_config_and_scope_without_its_env(tmp_path: Path) -> None:
    lines = _session(tmp_path, {"subtype": "initialize"}, {"subtype": "mcp_status"})
    (server,) = _answer(lines, "r1")["response"]["mcpServers"]
    assert server["name"] == "flaky" and server["scope"] == "dynamic"
    assert server["config"] == {"type": "stdio", "command": sys.executable, "args": [str(FLAKY), str(tmp_path)]}


def test_mcp_toggle_turns_a_server_off_then_on_again_started_anew(tmp_path: Path) -> None:
    off = {"subtype": "mcp_toggle", "serverName": "flaky", "enabled": False}
    on = {**off, "enabled": True}
    status = {"subtype": "mcp_status"}
    lines = _session(tmp_path, {"subtype": "initialize"}, off, status, on, status)
    assert [_answer(lines, r) for r in ("r1", "r3")] == [{"subtype": "success", "request_id": r} for r in ("r1", "r3")]
    said = [[s["status"] for s in _answer(lines, r)["response"]["mcpServers"]] for r in ("r2", "r4")]
    assert said == [["disabled"], ["connected"]]
    assert (tmp_path / "starts").read_text().split() == ["1", "2"], "its connection closed, then opened anew"
