"""The stream-json lines beside Claude Code 2.1.235: each line type's keys, tool records, retries, prices, results.

Each row runs one ``-p`` probe in both programs and reads one value of what each printed (a
line's keys, a ``user`` line's ``tool_use_result``, the ``system/api_retry`` line, the
result's cost for a known usage…). ``same``: queryloop prints what Claude Code prints. By
design, with the reason: the reference value is pinned too (docs/agent-sdk.md explains each).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from .reference import Observed, Probe, SeenRow, seen_alike
from .test_media import PDF, PNG, png

pytestmark = pytest.mark.slow  # two programs per probe

OURS = ("transition", "api_request")  # queryloop's own system lines
KINDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
BASH = ("--allowedTools", "Bash")
RETRY = {"x-should-retry": "true"}  # a status not retried by default, retried as the server asks
NOBODY = "http://127.0.0.1:9"  # a port nothing listens on: the connection is refused
DETAILS = "agent-sdk.md#what-the-stream-carries"


Row = SeenRow


def _scenario(*steps: Mapping[str, Any], model: str = "mock-primary") -> str:
    done = {"reply": {"content": [{"text": "done"}]}}
    return json.dumps({"schema_version": 1, "scenario": "p", "model": model, "default": [*steps, done]})


def _kinds(observed: Observed) -> object:
    """The lines' (type, subtype), queryloop's own system lines left out."""
    return [(line["type"], line.get("subtype")) for line in observed.lines if line.get("subtype") not in OURS]


def _own_lines(observed: Observed) -> object:
    return sorted({line["subtype"] for line in observed.lines if line.get("subtype") in OURS})


def _keys(kind: str, part: str | None = None) -> Callable[[Observed], object]:
    """The keys of every line of ``kind`` (``type`` or ``type/subtype``), or of its ``part``."""

    def seen(observed: Observed) -> object:
        keys: set[str] = set()
        for line in observed.lines:
            if kind in (line["type"], f"{line['type']}/{line.get('subtype')}"):
                value = line if part is None else line[part]
                for entry in value.values() if part == "modelUsage" else (value,):
                    keys.update(entry)
        return sorted(keys)

    return seen


def _tool_use_results(observed: Observed) -> object:
    """Each ``user`` line's ``tool_use_result``, the run's folder written as BASE."""
    results = [line.get("tool_use_result") for line in observed.lines if line["type"] == "user"]
    return json.loads(json.dumps(results).replace(str(observed.lines[0].get("cwd")), "BASE"))


def _retry(observed: Observed) -> object:
    """The api_retry line, its wait (drawn at random) and ids left out."""
    lines = [line for line in observed.lines if line.get("subtype") == "api_retry"]
    return [{k: v for k, v in line.items() if k not in ("uuid", "session_id", "retry_delay_ms")} for line in lines]


def _denied_lines(observed: Observed) -> object:
    """The first turn's lines: the reply, each permission_denied line (its words and ids left out), the results."""
    seen: list[object] = []
    for line in observed.lines[1:]:
        if line.get("subtype") == "permission_denied":
            said = {k: v for k, v in line.items() if k not in ("uuid", "session_id", "message", "tool_use_id")}
            seen.append({**said, "keys": sorted(line)})
        elif line["type"] in ("assistant", "user"):
            seen.append((line["type"], None))
        if line["type"] == "user":
            return seen
    return seen


def _hook_lines(observed: Observed) -> object:
    """The hook_started and hook_response lines (ids left out, in the order of their words), each
    response's id paired with a start's, and the lines' keys."""
    lines = [line for line in observed.lines if line.get("subtype") in ("hook_started", "hook_response")]
    started = [line["hook_id"] for line in lines if line["subtype"] == "hook_started"]
    answered = [line["hook_id"] for line in lines if line["subtype"] == "hook_response"]
    said = [{k: v for k, v in line.items() if k not in ("uuid", "session_id", "hook_id")} for line in lines]
    keys = sorted({key for line in lines for key in line})
    return sorted(said, key=json.dumps), sorted(started) == sorted(answered), keys


def _hooks_before_init(observed: Observed) -> object:
    kinds = [line.get("subtype") for line in observed.lines if line["type"] == "system"]
    return kinds.index("hook_started") < kinds.index("init")


def _session_start(*commands: str) -> dict[str, object]:
    hooks = [{"type": "command", "command": command} for command in commands]
    return {".claude/settings.json": {"hooks": {"SessionStart": [{"hooks": hooks}]}}}


def _cost(observed: Observed) -> object:
    result = observed.result
    return round(result["total_cost_usd"], 6), {m: round(u["costUSD"], 6) for m, u in result["modelUsage"].items()}


def _window(observed: Observed) -> object:
    """What the 1M suffix does: the id sent, whether the long-context beta went with it, the model as named."""
    request = observed.requests[0]
    long = "context-1m-2025-08-07" in request.headers.get("anthropic-beta", "").split(",")
    windows = {m: u["contextWindow"] for m, u in observed.result["modelUsage"].items()}
    init = next(line for line in observed.lines if line.get("subtype") == "init")
    return request.model, long, init["model"], windows


def _betas(observed: Observed) -> object:
    return observed.requests[0].headers.get("anthropic-beta") is not None


def _result(observed: Observed) -> object:
    """The result's kind: subtype, is_error, the exit code, its errors and terminal reason, and its keys."""
    r = observed.result
    said = {k: r.get(k) for k in ("subtype", "is_error", "errors", "terminal_reason", "api_error_status")}
    return {**said, "exit": observed.returncode, "keys": sorted(r)}


def _priced(model: str) -> Row:
    usage = dict(zip(KINDS, (1_000_000, 100_000, 10_000, 1_000), strict=True))
    step = {"reply": {"content": [{"text": "done"}], "usage": usage}}
    scenario = json.dumps({"schema_version": 1, "scenario": "p", "model": model, "default": [step]})
    input_, output, write, read = PRICES[model]
    cost = round(input_ + output / 10 + write / 100 + read / 1000, 6)
    return Row(probe=Probe(calls=(), scenario=scenario, model=model), seen=_cost, queryloop=(cost, {model: cost}))


def _waits(observed: Observed) -> object:
    """The api_retry lines' waits (``retry_delay_ms``), in order."""
    return [line["retry_delay_ms"] for line in observed.lines if line.get("subtype") == "api_retry"]


def _retried(status: int, error: str, headers: Mapping[str, str] | None = None, **fault: Any) -> Row:
    answer = {"status": status, **({"headers": dict(headers)} if headers else {})}
    step = {"error": answer} if not fault else {"reply": {"content": [{"text": "x"}]}, **fault}
    seen = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 1, "error": error}
    return Row(
        probe=Probe(calls=(), scenario=_scenario(step), env={"CLAUDE_CODE_MAX_RETRIES": "1"}),
        seen=_retry,
        queryloop=[{**seen, "error_status": None if fault else status}],
    )


def _waited(status: int, header: str, value: str, wait_ms: int) -> Row:
    """A retried answer asking for a wait (``header: value``): the api_retry line's ``retry_delay_ms``."""
    return Row(probe=_retried(status, "", {header: value}).probe, seen=_waits, queryloop=[wait_ms])


def _one_m(model: str | None, sent: str, **probe: Any) -> Row:
    return Row(
        probe=Probe(calls=(), model=model, **probe),
        seen=_window,
        queryloop=(sent, True, f"{sent}[1m]", {f"{sent}[1m]": 1_000_000}),
    )


PRICES = {  # USD per million input, output, cache-write and cache-read tokens, as Claude Code 2.1.235 counts them
    "claude-opus-5": (5.0, 25.0, 6.25, 0.5),
    "claude-sonnet-5": (3.0, 15.0, 3.75, 0.3),
    "claude-fable-5": (10.0, 50.0, 12.5, 1.0),
    "claude-haiku-4-5-20251001": (1.0, 5.0, 1.25, 0.1),
}
WIDE = png(2400, 300)  # wider than the 2000 pixels Claude Code scales an image down to
DENIED_KEYS = ["message", "session_id", "subtype", "tool_name", "tool_use_id", "type", "uuid"]
DENY = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no"}
HOOK_DENIES = {
    ".claude/settings.json": {
        "hooks": {
            "PreToolUse": [
                {"hooks": [{"type": "command", "command": f"echo '{json.dumps({'hookSpecificOutput': DENY})}'"}]}
            ]
        }
    }
}
START = {"hook_name": "SessionStart:startup", "hook_event": "SessionStart"}
OUT = ("stdout", "subtype", "type", "uuid")
TOOL = Probe(calls=(("Bash", {"command": "echo hi"}),), args=BASH)
TWO_TURNS = (("Bash", {"command": "echo hi"}), ("Bash", {"command": "echo hi"}))
RESULT_KEYS = ["duration_api_ms", "duration_ms", "errors", "fast_mode_disabled_reason", "fast_mode_state", "is_error"]
RESULT_KEYS += ["modelUsage", "num_turns", "permission_denials", "session_id", "stop_reason", "subtype"]
RESULT_KEYS += ["terminal_reason", "total_cost_usd", "type", "usage", "uuid"]

ROWS: dict[str, Row] = {
    # ---- the lines and their keys ----
    "the lines of a run with one tool call": Row(
        probe=TOOL,
        seen=_kinds,
        queryloop=[("system", "init"), ("assistant", None), ("user", None), ("assistant", None), ("result", "success")],
    ),
    "queryloop's own system lines": Row(
        probe=TOOL,
        seen=_own_lines,
        queryloop=["api_request", "transition"],
        reference=[],
        design=f"each step of the state machine and each request attempt is a line, for tracing ([details]({DETAILS}))",
    ),
    "the init line's keys": Row(
        probe=TOOL,
        seen=lambda o: [k for k in _keys("system/init")(o) if k not in ("fallback_models", "machine")],
        queryloop=[
            *("agents", "analytics_disabled", "apiKeySource", "capabilities", "claude_code_version", "cwd"),
            *("fast_mode_disabled_reason", "fast_mode_state", "mcp_servers", "memory_paths", "model", "output_style"),
            *("permissionMode", "plugins", "product_feedback_disabled", "session_id", "skills", "slash_commands"),
            *("subtype", "terminal_slash_commands", "tools", "type", "uuid"),
        ],
    ),
    "the init line's own keys": Row(
        probe=TOOL,
        seen=lambda o: [k for k in _keys("system/init")(o) if k in ("fallback_models", "machine")],
        queryloop=["fallback_models", "machine"],
        reference=[],
        design=f"the init line also names the machine that runs and the fallback models ([details]({DETAILS}))",
    ),
    "an assistant line's keys": Row(
        probe=TOOL,
        seen=_keys("assistant"),
        queryloop=["message", "parent_tool_use_id", "request_id", "session_id", "timestamp", "type", "uuid"],
    ),
    "a user line's keys": Row(
        probe=TOOL,
        seen=_keys("user"),
        queryloop=["message", "parent_tool_use_id", "session_id", "timestamp", "tool_use_result", "type", "uuid"],
    ),
    "the result line's keys": Row(
        probe=TOOL,
        seen=_keys("result"),
        queryloop=sorted(
            [
                *(k for k in RESULT_KEYS if k != "errors"),
                "api_error_status",
                "result",
                "time_to_request_ms",
                "ttft_ms",
                "ttft_stream_ms",
            ]
        ),
    ),
    "the result's modelUsage keys": Row(
        probe=TOOL,
        seen=_keys("result", "modelUsage"),
        queryloop=[
            *("cacheCreationInputTokens", "cacheReadInputTokens", "contextWindow", "costUSD", "inputTokens"),
            *("maxOutputTokens", "outputTokens", "webSearchRequests"),
        ],
        reference=[
            *("cacheCreationInputTokens", "cacheReadInputTokens", "canonicalModel", "contextWindow", "costUSD"),
            *("inputTokens", "maxOutputTokens", "outputTokens", "provider", "webSearchRequests"),
        ],
        design="no canonicalModel or provider: queryloop speaks to one provider, by the id given "
        f"([details]({DETAILS}))",
    ),
    # ---- each tool's record: a user line's tool_use_result ----
    "read an image: tool_use_result": Row(
        probe=Probe(calls=(("Read", {"file_path": "a.png"}),), files={"a.png": PNG}),
        seen=_tool_use_results,
        queryloop=[
            {
                "type": "image",
                "file": {
                    "base64": base64.b64encode(PNG).decode(),
                    "type": "image/png",
                    "originalSize": 71,
                    "dimensions": {"originalWidth": 4, "originalHeight": 4, "displayWidth": 4, "displayHeight": 4},
                },
            }
        ],
    ),
    "read a pdf: tool_use_result": Row(
        probe=Probe(calls=(("Read", {"file_path": "f.pdf"}),), files={"f.pdf": PDF}),
        seen=lambda o: [r for r in _tool_use_results(o) if r is not None],  # Claude Code's document line has none
        queryloop=[
            {
                "type": "pdf",
                "file": {"filePath": "BASE/f.pdf", "base64": base64.b64encode(PDF).decode(), "originalSize": len(PDF)},
            }
        ],
    ),
    "read a wide image: the record's dimensions": Row(
        probe=Probe(calls=(("Read", {"file_path": "w.png"}),), files={"w.png": WIDE}),
        seen=lambda o: _tool_use_results(o)[0]["file"]["dimensions"],
        queryloop={"originalWidth": 2400, "originalHeight": 300, "displayWidth": 2400, "displayHeight": 300},
        reference={"originalWidth": 2400, "originalHeight": 300, "displayWidth": 2000, "displayHeight": 250},
        design="queryloop has no image library: an image is sent as it is, never scaled down "
        "([security](security.md#what-leaves-the-run-telemetry-mcp-content-the-inspector))",
    ),
    "read a text file: tool_use_result": Row(
        probe=Probe(calls=(("Read", {"file_path": "a.txt"}),), files={"a.txt": "one\ntwo\n"}),
        seen=_tool_use_results,
        queryloop=[
            {
                "type": "text",
                "file": {"filePath": "a.txt", "content": "one\ntwo\n", "numLines": 3, "startLine": 1, "totalLines": 3},
            }
        ],
    ),
    "bash: tool_use_result": Row(
        probe=Probe(calls=(("Bash", {"command": "echo hi; echo err >&2"}),), args=BASH),
        seen=_tool_use_results,
        queryloop=[
            {"stdout": "hi\nerr", "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}
        ],
    ),
    "write and edit: tool_use_result": Row(
        probe=Probe(
            calls=(
                ("Write", {"file_path": "w.txt", "content": "a\nb\n"}),
                ("Edit", {"file_path": "w.txt", "old_string": "b", "new_string": "c"}),
            ),
            args=("--permission-mode", "acceptEdits"),
        ),
        seen=_tool_use_results,
        queryloop=[
            {
                "type": "create",
                "filePath": "w.txt",
                "content": "a\nb\n",
                "structuredPatch": [],
                "originalFile": None,
                "userModified": False,
            },
            {
                "filePath": "w.txt",
                "oldString": "b",
                "newString": "c",
                "originalFile": "a\nb\n",
                "structuredPatch": [
                    {"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 2, "lines": [" a", "-b", "+c"]}
                ],
                "userModified": False,
                "replaceAll": False,
            },
        ],
    ),
    "a failed command: tool_use_result": Row(
        probe=Probe(calls=(("Bash", {"command": "exit 3"}),), args=BASH),
        seen=lambda o: [str(r)[:6] for r in _tool_use_results(o)],
        queryloop=["Error:"],  # the words after it are each program's own
    ),
    # ---- system/api_retry ----
    "api_retry after a 401": _retried(401, "authentication_failed"),
    "api_retry after a 429": _retried(429, "rate_limit"),
    "api_retry after a 529": _retried(529, "overloaded"),
    "api_retry after a 500": _retried(500, "server_error"),
    "api_retry after a 503": _retried(503, "server_error"),
    "api_retry after a 408": _retried(408, "server_error"),
    "api_retry after a 409": _retried(409, "server_error"),
    "api_retry after a 403 the server asks to retry": _retried(403, "authentication_failed", RETRY),
    "api_retry after a 400 the server asks to retry": _retried(400, "unknown", RETRY),
    "api_retry after a refused connection": Row(
        probe=Probe(calls=(), env={"CLAUDE_CODE_MAX_RETRIES": "1", "ANTHROPIC_BASE_URL": NOBODY}),
        seen=_retry,
        queryloop=[
            {
                "type": "system",
                "subtype": "api_retry",
                "attempt": 1,
                "max_retries": 1,
                "error_status": None,
                "error": "unknown",
            }
        ],
    ),
    "api_retry's wait after a 429 with retry-after": _waited(429, "retry-after", "2", 2000),
    "api_retry's wait after a 529 with retry-after": _waited(529, "retry-after", "2", 2000),
    "api_retry's wait after a 500 with retry-after": _waited(500, "retry-after", "2", 2000),
    "api_retry's wait after a 529 with retry-after-ms": Row(
        probe=_waited(529, "retry-after-ms", "1500", 1500).probe,
        seen=lambda o: [wait >= 1500 for wait in _waits(o)],  # Claude Code's own backoff: 500 ms and a draw
        queryloop=[True],
        reference=[False],
        design="the API's retry-after-ms is waited for, as the SDK waits: a retry sooner than the server asks "
        f"is refused again ([details]({DETAILS}))",
    ),
    "api_retry after a cut stream": Row(
        probe=_retried(200, "unknown", cut_after_block=0).probe,
        seen=_retry,
        queryloop=[],
        reference=_retried(200, "unknown", cut_after_block=0).queryloop,
        design="a broken stream is asked again without streaming (stream fallback), which is not an api_retry "
        "([details](agent-sdk.md#what-the-stream-carries))",
    ),
    "model_fallback after 529s": Row(
        probe=Probe(
            calls=(),
            scenario=_scenario({"error": {"status": 529}, "repeat": 3}),
            args=("--fallback-model", "mock-secondary"),
            env={"CLAUDE_CODE_MAX_RETRIES": "5"},
        ),
        seen=lambda o: [  # its words (``content``) are each program's own
            {k: v for k, v in line.items() if k not in ("uuid", "session_id", "content")} | {"keys": sorted(line)}
            for line in o.lines
            if line.get("subtype") == "model_fallback"
        ],
        queryloop=[
            {
                "type": "system",
                "subtype": "model_fallback",
                "trigger": "overloaded",
                "original_model": "mock-primary",
                "fallback_model": "mock-secondary",
                "keys": [
                    *("content", "fallback_model", "original_model", "session_id", "subtype", "trigger", "type"),
                    "uuid",
                ],
            }
        ],
    ),
    "a call the run cannot ask for: the permission_denied line": Row(
        probe=Probe(calls=(("Write", {"file_path": "x.txt", "content": "x"}),)),
        seen=_denied_lines,
        queryloop=[
            ("assistant", None),
            {"type": "system", "subtype": "permission_denied", "tool_name": "Write", "keys": DENIED_KEYS},
            ("user", None),
        ],
    ),
    "a call a PreToolUse hook denies: no permission_denied line": Row(
        probe=Probe(
            calls=(("Write", {"file_path": "x.txt", "content": "x"}),), files=HOOK_DENIES, trusted=("project",)
        ),
        seen=_denied_lines,
        queryloop=[("assistant", None), ("user", None)],
    ),
    # ---- SessionStart hooks: reported as lines, without --include-hook-events ----
    "a SessionStart hook's lines": Row(
        probe=Probe(calls=(), files=_session_start("echo a", "echo err >&2; exit 1"), trusted=("project",)),
        seen=_hook_lines,
        queryloop=(
            sorted(
                [
                    *([{"type": "system", "subtype": "hook_started", **START}] * 2),
                    {**START, "type": "system", "subtype": "hook_response", "exit_code": 0, "outcome": "success"}
                    | {"output": "a\n", "stdout": "a\n", "stderr": ""},
                    {**START, "type": "system", "subtype": "hook_response", "exit_code": 1, "outcome": "error"}
                    | {"output": "err\n", "stdout": "", "stderr": "err\n"},  # output: both, as they came,
                ],
                key=json.dumps,
            ),
            True,
            [*("exit_code", "hook_event", "hook_id", "hook_name", "outcome", "output", "session_id", "stderr"), *OUT],
        ),
    ),
    "a SessionStart hook's lines: where they go": Row(
        probe=Probe(calls=(), files=_session_start("echo a"), trusted=("project",)),
        seen=_hooks_before_init,
        queryloop=False,
        reference=True,
        design="SessionStart hooks run in the machine's first state, once the run has begun: the init line "
        f"comes first ([details]({DETAILS}))",
    ),
    # ---- prices: the result's cost of 1M input, 100k output, 10k cache-write and 1k cache-read tokens ----
    **{f"price of {model}": _priced(model) for model in PRICES},
    # ---- [1m]: the id sent, the long-context beta, the model named and its window ----
    "--model sonnet[1m]": _one_m("sonnet[1m]", "claude-sonnet-5"),
    "--model opus[1m]": _one_m("opus[1m]", "claude-opus-5"),
    "--model claude-haiku-4-5-20251001[1M]": _one_m("claude-haiku-4-5-20251001[1M]", "claude-haiku-4-5-20251001"),
    "ANTHROPIC_MODEL=sonnet[1m]": _one_m(None, "claude-sonnet-5", env={"ANTHROPIC_MODEL": "sonnet[1m]"}),
    "settings model opus[1m]": _one_m(
        None, "claude-opus-5", files={".claude/settings.json": {"model": "opus[1m]"}}, trusted=("project",)
    ),
    "--model haiku[1m]: max_tokens": Row(
        probe=Probe(calls=(), model="haiku[1m]"),
        seen=lambda o: o.requests[0].max_tokens,
        queryloop=32_000,  # the model's own: the suffix widens the window, not the answer
    ),
    "the beta header of a plain model": Row(
        probe=Probe(calls=(), model="sonnet"),
        seen=_betas,
        queryloop=False,
        reference=True,
        design=f"requests ask for no beta feature but the 1M window: no thinking, no context editing "
        f"([details]({DETAILS}))",
    ),
    # ---- the result's error subtypes ----
    "error_max_turns": Row(
        probe=Probe(calls=TWO_TURNS, args=(*BASH, "--max-turns", "1")),
        seen=_result,
        queryloop={
            "subtype": "error_max_turns",
            "is_error": True,
            "errors": ["Reached maximum number of turns (1)"],
            "terminal_reason": "max_turns",
            "api_error_status": None,
            "exit": 1,
            "keys": RESULT_KEYS,
        },
    ),
    "error_max_budget_usd": Row(
        probe=Probe(calls=TWO_TURNS, args=(*BASH, "--max-budget-usd", "0.0001")),
        seen=_result,
        queryloop={
            "subtype": "error_max_budget_usd",
            "is_error": True,
            "errors": ["Reached maximum budget ($0.0001)"],
            "terminal_reason": "budget_exhausted",
            "api_error_status": None,
            "exit": 1,
            "keys": RESULT_KEYS,
        },
    ),
    "an API error's result": Row(
        probe=Probe(calls=(), scenario=_scenario({"error": {"status": 400, "message": "bad thing"}})),
        seen=lambda o: {**_result(o), "result": o.result.get("result")},
        queryloop={
            "subtype": "success",
            "is_error": True,
            "errors": None,
            "terminal_reason": "api_error",
            "api_error_status": 400,
            "exit": 1,
            "result": "API Error: 400 bad thing",
            "keys": sorted([*(k for k in RESULT_KEYS if k != "errors"), "api_error_status", "result"]),
        },
    ),
    "an API error: the lines before the result, and its stop_reason": Row(
        probe=Probe(calls=(), scenario=_scenario({"error": {"status": 500}})),
        seen=lambda o: (
            [line["type"] for line in o.lines if line["type"] != "system"],
            o.result.get("stop_reason"),
        ),
        queryloop=(["result"], None),
        reference=(["assistant", "result"], "stop_sequence"),  # a synthetic message: the error, as the answer
        design="an API error is no reply: no assistant line stands for it, and the result's stop_reason is "
        f"the last real reply's (null when there was none) ([details]({DETAILS}))",
    ),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_each_stream_probe_is_the_same_in_both_programs_or_differs_by_design(name: str, tmp_path: Path) -> None:
    seen_alike(ROWS[name], tmp_path)
