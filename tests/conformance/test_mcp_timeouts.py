"""MCP timeouts beside Claude Code 2.1.235: a tool call that never answers, a server that never finishes its start.

The server is ``tests/fixtures/mcp/flaky_server.py`` (a real stdio subprocess) started in the
probe's folder: its ``hang()`` never answers, and a start its plan names in ``hang_starts``
never answers the handshake; it logs each start to ``starts``. Each row compares what a
script reads: the exit code, the result's subtype, each tool_result's ``is_error``, whether
the first one says the call timed out, whether a later call was answered, whether the
model was offered the server's tools, the ``init`` line's status and how many times the
server was started (a start MCP_TIMEOUT cuts short may end before it logs itself: a row reads
only whether it was started again). ``MCP_TOOL_TIMEOUT`` and ``MCP_TIMEOUT`` are milliseconds, read from
the environment or the settings' ``env`` ([MCP](mcp.md#timeouts)).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from .reference import ROOT, Observed, Probe, Row, observe

pytestmark = pytest.mark.slow  # two programs per probe

FLAKY = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"
HANG = (("mcp__flaky__hang", {}), ("mcp__flaky__echo", {"text": "hi"}))
ECHO = (("mcp__flaky__echo", {"text": "hi"}),)
TIMEOUTS = "([details](mcp.md#timeouts))"


def _probe(
    calls: tuple[tuple[str, Mapping[str, Any]], ...] = HANG,
    *,
    plan: Mapping[str, Any] | None = None,
    server: Mapping[str, Any] | None = None,
    settings_env: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Probe:
    """The flaky server (its ``hang`` tool offered) in the probe's folder, its tools allowed."""
    entry = {"command": sys.executable, "args": [str(FLAKY), "."], **(server or {})}
    config = {"mcpServers": {"flaky": entry}}
    args: tuple[str, ...] = ("--mcp-config", json.dumps(config), "--allowedTools", "mcp__flaky")
    if settings_env is not None:
        args = (*args, "--settings", json.dumps({"env": dict(settings_env)}))
    files = {"plan.json": {"tools": ["echo", "hang"], **(plan or {})}}
    return Probe(calls=calls, files=files, args=args, env=dict(env or {}))


def _tool_results(seen: Observed) -> list[Mapping[str, Any]]:
    last = seen.requests[-1].messages if seen.requests else ()
    return [
        b for m in last if isinstance(m.get("content"), list) for b in m["content"] if b.get("type") == "tool_result"
    ]


def _text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _timed_out(seen: Observed) -> bool:
    results = _tool_results(seen)
    return bool(results) and any(word in _text(results[0]).lower() for word in ("timed out", "timeout", "no answer"))


def _status(seen: Observed) -> tuple[tuple[str, str], ...]:
    init = next((line for line in seen.lines if line.get("subtype") == "init"), {})
    return tuple((s["name"], s["status"]) for s in init.get("mcp_servers", ()))


READERS: dict[str, Callable[[Observed], object]] = {
    "returncode": lambda seen: seen.returncode,
    "subtype": lambda seen: seen.result.get("subtype"),
    "errored": lambda seen: [bool(r.get("is_error")) for r in _tool_results(seen)],
    "timed_out": _timed_out,
    "answered_after": lambda seen: any("echo: hi" in _text(r) for r in _tool_results(seen)),
    "offered": lambda seen: bool(seen.requests) and "mcp__flaky__echo" in seen.requests[0].tools,
    "no_such_tool": lambda seen: any("No such tool available" in _text(r) for r in _tool_results(seen)),
    "init": _status,
    # Claude Code prints its init line without waiting for a start: "pending", or "failed" once MCP_TIMEOUT
    # passed before it got there (its own start is slow on a loaded machine); never "connected" here
    "init_connected": lambda seen: tuple((name, status == "connected") for name, status in _status(seen)),
}

# The hung call ends as an error result saying so; the server stays connected (started once) and answers the next.
GIVEN_UP = {
    "returncode": 0,
    "subtype": "success",
    "errored": [True, False],
    "timed_out": True,
    "answered_after": True,
    "starts": 1,
}

NEVER_STARTS = {"plan": {"hang_starts": [1, 2, 3, 4, 5, 6, 7, 8]}}

ROWS: dict[str, Row] = {
    "MCP_TOOL_TIMEOUT ends a call that never answers": Row(
        probe=_probe(env={"MCP_TOOL_TIMEOUT": "2000"}), queryloop=GIVEN_UP
    ),
    "MCP_TOOL_TIMEOUT from the settings' env": Row(
        probe=_probe(settings_env={"MCP_TOOL_TIMEOUT": "2000"}), queryloop=GIVEN_UP
    ),
    "a server's own timeout": Row(probe=_probe(server={"timeout": 2000}), queryloop=GIVEN_UP),
    "MCP_TOOL_TIMEOUT under a second is a second": Row(
        probe=_probe(env={"MCP_TOOL_TIMEOUT": "300"}), queryloop=GIVEN_UP
    ),
    "MCP_TIMEOUT ends a start that never finishes its handshake": Row(
        probe=_probe(ECHO, env={"MCP_TIMEOUT": "5000"}, **NEVER_STARTS),
        queryloop={"returncode": 0, "subtype": "success", "offered": False, "no_such_tool": True, "errored": [True]},
    ),
    "a start that never finishes: the init line and the restarts": Row(
        probe=_probe(ECHO, env={"MCP_TIMEOUT": "5000"}, **NEVER_STARTS),
        queryloop={"init": (("flaky", "failed"),), "started_again": True},
        reference={"init_connected": (("flaky", False),), "started_again": False},
        design="the first request waits for each server's start (up to MCP_TIMEOUT), so the init line says "
        "connected or failed, and a server that failed is started again at the request boundary, "
        f"max_mcp_reconnects more times, before its tools are dropped {TIMEOUTS}",
    ),
}


def _starts(base: Path) -> int:
    log = base / "project" / "starts"
    return len(log.read_text().split()) if log.exists() else 0


def _seen(observed: Observed, base: Path, keys: Mapping[str, object]) -> dict[str, object]:
    """What a script reads of the run, and of the server's log of its starts (``starts``, ``started_again``)."""
    server = {"starts": _starts(base), "started_again": _starts(base) > 1}
    return {key: server[key] if key in server else READERS[key](observed) for key in keys}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_mcp_timeout_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    for program in ("queryloop", "claude"):
        (tmp_path / program).mkdir()
    ours = observe("queryloop", row.probe, tmp_path / "queryloop")
    theirs = observe("claude", row.probe, tmp_path / "claude")
    assert _seen(ours, tmp_path / "queryloop", row.queryloop) == row.queryloop, ours.stderr
    expected = row.expected
    seen = _seen(theirs, tmp_path / "claude", expected)
    assert seen == expected, f"Claude Code 2.1.235 ({row.verdict}): {theirs.stderr}"
