"""``--permission-prompt-tool mcp__SERVER__TOOL`` beside Claude Code 2.1.235: an MCP tool answers what would ask.

The approver is a real stdio MCP server (``tests/fixtures/mcp/approval_server.py``) that logs
what it is asked to ``approvals.jsonl`` in the working directory and answers as told. Each row
compares what a program reads: what the tool was given, what ran (the files made), the
``permission_denials``, whether the model saw the denial's message, the exit code and the
requests sent: ``same``, or by design with the reason (docs/security.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .reference import ROOT, Observed, Probe, Row, held_to_its_row, observe

pytestmark = pytest.mark.slow  # two programs per probe

SERVER = ROOT / "tests" / "fixtures" / "mcp" / "approval_server.py"
LOG = "approvals.jsonl"  # in the probe's working directory, where the server starts
TOOL = "mcp__perm__approve"
TOUCH = (("Bash", {"command": "touch made"}),)
DETAILS = "([details](security.md#a-permission-prompt-tool))"


def _args(answer: str, tool: str = TOOL) -> tuple[str, ...]:
    config = {"mcpServers": {"perm": {"command": sys.executable, "args": [str(SERVER), answer, LOG]}}}
    return ("--mcp-config", json.dumps(config), "--permission-prompt-tool", tool)


def _tool_results(seen: Observed) -> list[dict[str, object]]:
    last = seen.requests[-1].messages if seen.requests else ()
    return [
        b for m in last if isinstance(m.get("content"), list) for b in m["content"] if b.get("type") == "tool_result"
    ]


READERS: dict[str, Callable[[Observed], object]] = {
    "returncode": lambda seen: seen.returncode,
    "requests": lambda seen: len(seen.requests),
    "denied": lambda seen: seen.denied,
    "made": lambda seen: frozenset(m for m in seen.made if not m.endswith(LOG)),
    "saw_message": lambda seen: any("not today" in str(r.get("content")) for r in _tool_results(seen)),
    "errored": lambda seen: [bool(r.get("is_error")) for r in _tool_results(seen)],
    "offered": lambda seen: bool(seen.requests) and TOOL in seen.requests[0].tools,
    "no_such_tool": lambda seen: any("No such tool available" in str(r.get("content")) for r in _tool_results(seen)),
    "stderr_names_it": lambda seen: "mcp__perm__nope" in seen.stderr,
}

ALLOWED = {"denied": (), "made": frozenset({"project/made"}), "errored": [False]}
REFUSED = {"denied": ("Bash",), "made": frozenset(), "errored": [True]}

ROWS: dict[str, Row] = {
    "allow with the input as given": Row(probe=Probe(calls=TOUCH, args=_args("allow")), queryloop=ALLOWED),
    "allow without updatedInput": Row(probe=Probe(calls=TOUCH, args=_args("allow-bare")), queryloop=ALLOWED),
    "allow with another input": Row(
        probe=Probe(calls=TOUCH, args=_args("rewrite")),
        queryloop={**ALLOWED, "made": frozenset({"project/rewritten"})},
    ),
    "deny with a message": Row(
        probe=Probe(calls=TOUCH, args=_args("deny")), queryloop={**REFUSED, "saw_message": True, "returncode": 0}
    ),
    "an answer that is not JSON": Row(probe=Probe(calls=TOUCH, args=_args("not-json")), queryloop=REFUSED),
    "an answer of another shape": Row(probe=Probe(calls=TOUCH, args=_args("wrong-shape")), queryloop=REFUSED),
    "an updatedInput that is no object": Row(
        probe=Probe(calls=TOUCH, args=_args("no-input-object")), queryloop=REFUSED
    ),
    "a call of the tool that fails": Row(
        probe=Probe(calls=TOUCH, args=_args("tool-error")),
        queryloop=REFUSED,
        reference={"denied": (), "made": frozenset(), "errored": [True]},
        design=f"an approver that fails denies the call, and the denial is listed {DETAILS}",
    ),
    "what needs no asking is not asked": Row(
        probe=Probe(calls=(("Read", {"file_path": "a.txt"}),), files={"a.txt": "x"}, args=_args("deny")),
        queryloop={"denied": (), "errored": [False]},
    ),
    "the model is not offered the tool, nor can it call it": Row(
        probe=Probe(calls=((TOOL, {"tool_name": "Bash", "input": {}}),), args=_args("allow")),
        queryloop={"offered": False, "no_such_tool": True, "denied": ()},
    ),
    "a tool no server offers": Row(
        probe=Probe(calls=TOUCH, args=_args("allow", "mcp__perm__nope")),
        queryloop={"returncode": 1, "requests": 0, "stderr_names_it": True, "made": frozenset()},
        reference={"returncode": 1, "requests": 2, "stderr_names_it": True, "made": frozenset()},
        design=f"a prompt tool no server offers is found before anything is sent {DETAILS}",
    ),
}


def _read(observed: Observed, key: str) -> object:
    return READERS[key](observed)


def _asked(base: Path) -> list[dict[str, object]]:
    log = base / "project" / LOG
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("name", list(ROWS))
def test_each_permission_prompt_tool_probe_is_the_same_in_both_programs_or_differs_by_design(
    name: str, tmp_path: Path
) -> None:
    held_to_its_row(ROWS[name], _read, tmp_path)


def test_both_programs_give_the_tool_the_call_by_the_same_keys(tmp_path: Path) -> None:
    probe = Probe(calls=TOUCH, args=_args("allow"))
    asked = {}
    for who in ("queryloop", "claude"):
        (tmp_path / who).mkdir()
        seen = observe(who, probe, tmp_path / who)  # type: ignore[arg-type]
        [request] = _asked(tmp_path / who)
        call = seen.requests[0].messages and [
            b
            for r in seen.requests[1:2]
            for m in r.messages
            if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_use"
        ]
        assert call and request["tool_use_id"] == call[0]["id"], who
        asked[who] = {k: v for k, v in request.items() if k != "tool_use_id"}
    assert asked["queryloop"] == asked["claude"] == {"tool_name": "Bash", "input": {"command": "touch made"}}
