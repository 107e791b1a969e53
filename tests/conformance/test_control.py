"""The Agent SDK's control requests beside Claude Code 2.1.235: each one's answer and the lines it makes, in both.

Each row runs one conversation (``converse``: stream-json in and out, as the SDK runs the
program) in both programs and reads one value: a request's ``control_response``, the lines an
interrupt leaves, the next request's messages, a request the program sends (``hook_callback``,
``can_use_tool``). ``same``: queryloop does what Claude Code does. By design, with the reason:
the reference value is pinned too (docs/agent-sdk.md explains each).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from .converse import Answer, Await, Step, converse, is_result, prompt, request, response_to
from .reference import ROOT, Observed, Probe, SeenRow

pytestmark = pytest.mark.slow  # two programs per probe

DETAILS = "agent-sdk.md#what-differs"
INIT = (request("i", subtype="initialize"), Await("the initialize answer", response_to("i")))
TOOL_RUNS = Await("the tool running", lambda line: line.get("type") == "assistant", requests=1)
SLEEP = {"reply": {"content": [{"tool_use": {"name": "Bash", "input": {"command": "sleep 30"}}}]}}
SLOW = {"reply": {"content": [{"text": "slow"}]}, "delay_ms": 30_000}
MARKERS = ("[Request interrupted by user]", "[Request interrupted by user for tool use]")


@attrs.frozen(kw_only=True)
class Row(SeenRow):
    """A conversation (``script``), the value read of each run, and what each program is seen to give."""

    script: Sequence[Step]


def _scenario(*steps: Mapping[str, Any]) -> str:
    later = {"reply": {"content": [{"text": "later"}]}}
    return json.dumps(
        {"schema_version": 1, "scenario": "p", "model": "mock-primary", "default": steps, "otherwise": later}
    )


def _answer(request_id: str, *, error_text: bool = True) -> Callable[[Observed], object]:
    """The control_response to ``request_id``: its subtype and response, an error's text up to queryloop's
    parenthesis (what follows lists what it serves)."""

    def seen(observed: Observed) -> object:
        line = next(line for line in observed.lines if response_to(request_id)(line))
        answer = {k: v for k, v in line["response"].items() if k not in ("request_id", "error_code")}
        if not error_text:
            return {"subtype": answer["subtype"]}
        if "error" in answer:
            answer["error"] = answer["error"].split(" (")[0]
        return answer

    return seen


def _keys(request_id: str) -> Callable[[Observed], object]:
    def seen(observed: Observed) -> object:
        line = next(line for line in observed.lines if response_to(request_id)(line))
        return sorted(line["response"].get("response", line["response"]))

    return seen


def _line(kind: str, subtype: str | None = None) -> Callable[[Observed], object]:
    """The lines of ``kind`` (and ``subtype``) a request made, their ids and times left out."""

    def seen(observed: Observed) -> object:
        lines = [line for line in observed.lines if line["type"] == kind and line.get("subtype") == subtype]
        return [{k: v for k, v in line.items() if k not in ("uuid", "session_id", "timestamp")} for line in lines]

    return seen


def _order(request_id: str) -> Callable[[Observed], object]:
    """The kinds of the lines from the initialize answer on, in order: the request's answer and what it printed."""

    def seen(observed: Observed) -> object:
        start = next(i for i, line in enumerate(observed.lines) if response_to("i")(line)) + 1
        kinds = [
            "answer" if response_to(request_id)(line) else f"{line['type']}/{line.get('subtype')}"
            for line in observed.lines[start:]
        ]
        return [k for k in kinds if k != "system/transition"]

    return seen


def _interrupted(observed: Observed) -> object:
    """The interrupt's answer, the marker lines it left, and the interrupted prompt's result."""
    answer = next(line["response"] for line in observed.lines if response_to("x")(line))
    markers = [
        block["text"]
        for line in observed.lines
        if line["type"] == "user" and isinstance(line["message"]["content"], list)
        for block in line["message"]["content"]
        if block.get("type") == "text"
    ]
    result = next(line for line in observed.lines if is_result(line))
    said = {k: result.get(k) for k in ("subtype", "is_error", "terminal_reason", "num_turns")}
    return answer.get("response"), markers, said


def _next_request(observed: Observed) -> object:
    """The last request's user text and tool results in order, however each program groups them into messages
    (Claude Code merges a run of user messages into one, each text ending in a newline)."""
    said: list[object] = []
    for message in observed.requests[-1].messages:
        if message["role"] == "system":
            continue  # Claude Code's mid-conversation system messages (its agent and skill lists)
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            if block.get("type") == "text" and not block["text"].startswith("<system-reminder>"):
                said.append(block["text"].rstrip("\n"))
            elif block.get("type") in ("tool_use", "tool_result"):
                said.append(block["type"])
    return said


def _tool_result_line(observed: Observed) -> object:
    """The interrupted call's user line: its tool_use_result and the keys beside it."""
    line = next(line for line in observed.lines if line["type"] == "user" and "tool_use_result" in line)
    return line["tool_use_result"], sorted(set(line) - {"uuid", "session_id", "timestamp"})


def _asked(subtype: str, *, inner: str | None = None) -> Callable[[Observed], object]:
    """The keys of the program's ``subtype`` request (or of its ``inner`` object)."""

    def seen(observed: Observed) -> object:
        asked = next(line["request"] for line in observed.lines if line.get("type") == "control_request")
        assert asked["subtype"] == subtype
        return sorted(asked if inner is None else asked[inner])

    return seen


def _asks(*requests: tuple[str, dict[str, Any]]) -> tuple[Step, ...]:
    script: list[Step] = [*INIT]
    for request_id, body in requests:
        script += [request(request_id, **body), Await(f"the {request_id} answer", response_to(request_id))]
    return tuple(script)


def _in_the_turn(line: Mapping[str, Any]) -> bool:
    """A line of the turn: no control line, no init, no queryloop's own line."""
    return line["type"] in ("assistant", "user", "result") or (
        line["type"] == "system" and line.get("subtype") not in NOT_THE_TURN
    )


def _control(request_id: str, body: dict[str, Any], queryloop: object, **row: Any) -> Row:
    return Row(
        probe=Probe(calls=()), script=_asks((request_id, body)), seen=_answer(request_id), queryloop=queryloop, **row
    )


def _interrupt_row(
    steps: tuple[Mapping[str, Any], ...],
    *script: Step,
    seen: Callable[[Observed], object],
    queryloop: object,
    **row: Any,
) -> Row:
    probe = Probe(calls=(), scenario=_scenario(*steps), args=("--allowedTools", "Bash"))
    return Row(probe=probe, script=(*INIT, prompt("go"), *script), seen=seen, queryloop=queryloop, **row)


INTERRUPT = request("x", subtype="interrupt")
RESULT = Await("the result", is_result)
AGAIN = (RESULT, prompt("again"), Await("the second request", requests=2))
HOOKS = {"PreToolUse": [{"matcher": "Bash", "hookCallbackIds": ["h1"]}]}
NOT_THE_TURN = ("init", "transition", "api_request", None)  # a control line, or the run's own bookkeeping
TOUCH = Probe(calls=(("Bash", {"command": "touch x"}),), args=("--permission-prompt-tool", "stdio"))
ALLOW = {"behavior": "allow", "updatedInput": {"command": "touch x"}}
FLAKY = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"
SERVER = Probe(
    calls=(),
    args=(
        "--mcp-config",
        json.dumps({"mcpServers": {"flaky": {"command": sys.executable, "args": [str(FLAKY), "."]}}}),
    ),
    files={"plan.json": {"tools": ["echo"]}},
)
TOGGLED = (
    *INIT,
    request("t", subtype="mcp_toggle", serverName="flaky", enabled=False),
    Await("the toggle's answer", response_to("t")),
    request("s", subtype="mcp_status"),
    Await("the status", response_to("s")),
    prompt("go"),
    Await("the result", lambda line: line.get("type") == "result"),
    request("u", subtype="mcp_toggle", serverName="flaky", enabled=True),
    Await("the second toggle's answer", response_to("u")),
    request("v", subtype="mcp_status"),
    Await("the status", response_to("v")),
    prompt("again"),
    Await("the second request", requests=2),
)
INIT_KEYS = ["agents", "available_output_styles", "commands", "current_permission_mode", "models", "output_style"]

ROWS: dict[str, Row] = {
    # ---- initialize ----
    "initialize: the answer's keys": Row(
        probe=Probe(calls=()),
        script=INIT,
        seen=_keys("i"),
        queryloop=sorted([*INIT_KEYS, "pid", "queryloop_version", "session_state"]),
        reference=sorted(
            [
                *INIT_KEYS,
                "pid",
                "account",
                "fast_mode_disabled_reason",
                "fast_mode_state",
                "ide_rc_auto_enable_gate",
                "remote_control_auto_enable",
                "remote_control_auto_on_by_default",
            ]
        ),
        design=f"no account, fast mode or remote control; the version named is queryloop's ([details]({DETAILS}))",
    ),
    "initialize twice": Row(
        probe=Probe(calls=()),
        script=_asks(("j", {"subtype": "initialize"})),
        seen=_answer("j", error_text=False),
        queryloop={"subtype": "error"},
        reference={"subtype": "success"},
        design=f"hooks and servers registered twice would run twice: initialize is once ([details]({DETAILS}))",
    ),
    # ---- interrupt ----
    "interrupt with nothing running": _control(
        "x", {"subtype": "interrupt"}, {"subtype": "success", "response": {"still_queued": []}}
    ),
    "interrupt while a tool runs": _interrupt_row(
        (SLEEP,),
        TOOL_RUNS,
        INTERRUPT,
        RESULT,
        seen=_interrupted,
        queryloop=(
            {"still_queued": []},
            [MARKERS[1]],
            {"subtype": "error_during_execution", "is_error": True, "terminal_reason": "aborted_tools", "num_turns": 3},
        ),
    ),
    "interrupt while the model is awaited": _interrupt_row(
        (SLOW,),
        Await("the request sent", requests=1),
        INTERRUPT,
        RESULT,
        seen=_interrupted,
        queryloop=(
            {"still_queued": []},
            [MARKERS[0]],
            {
                "subtype": "error_during_execution",
                "is_error": True,
                "terminal_reason": "aborted_streaming",
                "num_turns": 2,
            },
        ),
    ),
    "the request after an interrupted tool": _interrupt_row(
        (SLEEP,),
        TOOL_RUNS,
        INTERRUPT,
        *AGAIN,
        seen=_next_request,
        queryloop=["go", "tool_use", "tool_result", MARKERS[1], "again"],
    ),
    "the request after an interrupted model call": _interrupt_row(
        (SLOW,),
        Await("the request sent", requests=1),
        INTERRUPT,
        *AGAIN,
        seen=_next_request,
        queryloop=["go", MARKERS[0], "again"],
    ),
    "interrupt with a prompt queued": _interrupt_row(
        (SLOW,),
        Await("the request sent", requests=1),
        prompt("queued"),
        INTERRUPT,
        RESULT,
        Await("the queued prompt's request", requests=2),
        seen=lambda o: (_interrupted(o)[0], _next_request(o)),
        queryloop=({"still_queued": []}, ["go", MARKERS[0], "queued"]),
    ),
    "an interrupted tool's user line": _interrupt_row(
        (SLEEP,),
        TOOL_RUNS,
        INTERRUPT,
        RESULT,
        seen=_tool_result_line,
        queryloop=(
            "Error: Interrupted by the user before this tool finished; it may have partly run.",
            ["message", "parent_tool_use_id", "tool_use_result", "type"],
        ),
        reference=(
            "User rejected tool use",
            ["message", "parent_tool_use_id", "tool_result_meta", "tool_use_result", "type"],
        ),
        design="a command interrupted may have partly run: queryloop says so, not that it was rejected "
        f"([details]({DETAILS}))",
    ),
    "an interrupted prompt's errors": _interrupt_row(
        (SLOW,),
        Await("the request sent", requests=1),
        INTERRUPT,
        RESULT,
        seen=lambda o: next(line for line in o.lines if is_result(line))["errors"],
        queryloop=["Interrupted by the user"],
        reference=["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"],
        design=f"the errors say what ended the prompt, not an internal diagnostic ([details]({DETAILS}))",
    ),
    # ---- the session's settings ----
    "set_permission_mode": Row(
        probe=Probe(calls=()),
        script=_asks(("m", {"subtype": "set_permission_mode", "mode": "acceptEdits"})),
        seen=lambda o: (_answer("m")(o), _line("system", "status")(o), _order("m")(o)),
        queryloop=(
            {"subtype": "success", "response": {"mode": "acceptEdits"}},
            [{"type": "system", "subtype": "status", "status": None, "permissionMode": "acceptEdits"}],
            ["answer", "system/status"],  # the status line after the answer
        ),
    ),
    "set_permission_mode to no mode": Row(
        probe=Probe(calls=()),
        script=_asks(("m", {"subtype": "set_permission_mode", "mode": "bogus"})),
        seen=_answer("m", error_text=False),
        queryloop={"subtype": "error"},
    ),
    "set_model": Row(
        probe=Probe(calls=()),
        script=_asks(("m", {"subtype": "set_model", "model": "opus"})),
        seen=lambda o: (_answer("m")(o), [sorted(line) for line in _line("user")(o)], _order("m")(o)),
        queryloop=(
            {"subtype": "success"},
            [["isReplay", "message", "parent_tool_use_id", "type"]],
            ["user/None", "answer"],  # the replayed line before the answer
        ),
    ),
    "mcp_status without servers": _control(
        "s", {"subtype": "mcp_status"}, {"subtype": "success", "response": {"mcpServers": []}}
    ),
    "get_context_usage: the answer's keys": Row(
        probe=Probe(calls=()),
        script=_asks(("u", {"subtype": "get_context_usage"})),
        seen=_keys("u"),
        queryloop=sorted(
            [
                "agents",
                "autoCompactThreshold",
                "categories",
                "gridRows",
                "isAutoCompactEnabled",
                "maxTokens",
                "mcpTools",
                "memoryFiles",
                "model",
                "percentage",
                "rawMaxTokens",
                "totalTokens",
            ]
        ),
        reference=sorted(
            [
                "agents",
                "autoCompactThreshold",
                "categories",
                "gridRows",
                "isAutoCompactEnabled",
                "maxTokens",
                "mcpTools",
                "memoryFiles",
                "model",
                "percentage",
                "rawMaxTokens",
                "totalTokens",
                "apiUsage",
                "autocompactSource",
                "messageBreakdown",
                "skills",
                "slashCommands",
            ]
        ),
        design=f"queryloop's estimates by part, without Claude Code's breakdowns ([details]({DETAILS}))",
    ),
    "mcp_reconnect of no server": _control(
        "r", {"subtype": "mcp_reconnect", "serverName": "nope"}, {"subtype": "error", "error": "Server not found: nope"}
    ),
    "mcp_toggle of no server": _control(
        "t",
        {"subtype": "mcp_toggle", "serverName": "nope", "enabled": False},
        {"subtype": "error", "error": "Server not found: nope"},
    ),
    "mcp_toggle of a server: off, then on again": Row(
        probe=SERVER,
        script=TOGGLED,
        seen=lambda o: (
            [_answer(r)(o) for r in "tu"],
            [[(e["name"], e["status"]) for e in _answer(r)(o)["response"]["mcpServers"]] for r in "sv"],
            [sorted(t for t in request.tools if t.startswith("mcp__")) for request in o.requests],
        ),
        queryloop=(
            [{"subtype": "success"}, {"subtype": "success"}],
            [[("flaky", "disabled")], [("flaky", "connected")]],
            [[], ["mcp__flaky__echo"]],  # its tools leave the next request, and come back after it is on again
        ),
    ),
    "stop_task of no task": _control(
        "k",
        {"subtype": "stop_task", "task_id": "nope"},
        {"subtype": "error", "error": "Unsupported control request subtype: stop_task"},
        reference={"subtype": "success", "response": {}},
        design=f"queryloop does not stop one background task; it says so rather than succeed ([details]({DETAILS}))",
    ),
    "rewind_files of no message": Row(
        probe=Probe(calls=()),
        script=_asks(("w", {"subtype": "rewind_files", "user_message_id": "nope"})),
        seen=_answer("w", error_text=False),
        queryloop={"subtype": "error"},
    ),
    "an unknown request": _control(
        "z", {"subtype": "teleport"}, {"subtype": "error", "error": "Unsupported control request subtype: teleport"}
    ),
    "an error answer's keys": Row(
        probe=Probe(calls=()),
        script=_asks(("z", {"subtype": "teleport"})),
        seen=lambda o: sorted(next(line for line in o.lines if response_to("z")(line))["response"]),
        queryloop=["error", "error_code", "request_id", "subtype"],
        reference=["error", "request_id", "subtype"],
        design=f"an error answer also names its kind in error_code, for a program to branch on ([details]({DETAILS}))",
    ),
    # ---- what the program asks the SDK ----
    "hook_callback: the request's keys": Row(
        probe=TOUCH,
        script=(
            request("i", subtype="initialize", hooks=HOOKS),
            Await("initialize", response_to("i")),
            prompt("go"),
            Answer("hook_callback", {}),
            Answer("can_use_tool", ALLOW),
            RESULT,
        ),
        seen=_asked("hook_callback"),
        queryloop=["callback_id", "input", "subtype", "tool_use_id"],
    ),
    "hook_callback: its input's keys": Row(
        probe=TOUCH,
        script=(
            request("i", subtype="initialize", hooks=HOOKS),
            Await("initialize", response_to("i")),
            prompt("go"),
            Answer("hook_callback", {}),
            Answer("can_use_tool", ALLOW),
            RESULT,
        ),
        seen=_asked("hook_callback", inner="input"),
        queryloop=sorted(
            [
                "cwd",
                "hook_event_name",
                "permission_mode",
                "prompt_id",
                "session_id",
                "tool_input",
                "tool_name",
                "tool_use_id",
                "transcript_path",
            ]
        ),
        reference=sorted(
            [
                "cwd",
                "effort",
                "hook_event_name",
                "permission_mode",
                "prompt_id",
                "session_id",
                "tool_input",
                "tool_name",
                "tool_use_id",
                "transcript_path",
            ]
        ),
        design=f"requests ask for no effort level, so a hook is told none ([details]({DETAILS}))",
    ),
    "can_use_tool denied: the lines of the turn": Row(
        probe=TOUCH,
        script=(*INIT, prompt("go"), Answer("can_use_tool", {"behavior": "deny", "message": "not today"}), RESULT),
        seen=lambda o: [(line["type"], line.get("subtype")) for line in o.lines if _in_the_turn(line)],
        queryloop=[("assistant", None), ("user", None), ("assistant", None), ("result", "success")],  # no
        # permission_denied line: the SDK answered (the rules' refusals have one: test_stream.py)
    ),
    "can_use_tool: the request's keys": Row(
        probe=TOUCH,
        script=(*INIT, prompt("go"), Answer("can_use_tool", ALLOW), RESULT),
        seen=_asked("can_use_tool"),
        queryloop=sorted(
            [
                "blocked_path",
                "decision_reason",
                "display_name",
                "input",
                "permission_suggestions",
                "subtype",
                "tool_name",
                "tool_use_id",
            ]
        ),
        reference=sorted(
            [
                "blocked_path",
                "description",
                "display_name",
                "input",
                "permission_suggestions",
                "subtype",
                "tool_name",
                "tool_use_id",
            ]
        ),
        design=f"the request says why the call asks (decision_reason), not what it does ([details]({DETAILS}))",
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_control_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    row = ROWS[name]
    for who in ("queryloop", "claude"):
        (tmp_path / who).mkdir()
    ours = converse("queryloop", row.probe, row.script, tmp_path / "queryloop")
    theirs = converse("claude", row.probe, row.script, tmp_path / "claude")
    assert row.seen(ours) == row.queryloop, ours.stderr
    assert row.seen(theirs) == row.expected, f"Claude Code 2.1.235 ({row.verdict}): {theirs.stderr}"
