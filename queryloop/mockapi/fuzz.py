"""Random fault sequences served over HTTP, and the invariants every run must keep whatever happens.

Owns the faults, :func:`play` (one run, then a resume) and :func:`violations`. Used by a property test and
``tools/soak_faults.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import anthropic
import attrs

from queryloop.fsm import CheckReport, Step, check_spec
from queryloop.handlers.hooks import HookCommand, HookConfig, HookMatcher
from queryloop.handlers.mcp import McpServerConfig
from queryloop.handlers.messages import ledger_problem
from queryloop.handlers.request import AnthropicBackend
from queryloop.handlers.session import SessionPaths, load_history
from queryloop.run import defaults
from queryloop.run.agent import AgentRun, query_loop_program
from queryloop.run.config import (
    AgentOptions,
    Limits,
    PermissionSettings,
    RequestSettings,
    SessionSettings,
    ToolSettings,
)

from .scenario import parse_scenario
from .server import MockServer

__all__ = ["FAULTS", "HOOK_EVENTS", "HOOK_FAULTS", "FaultRun", "check_report", "play", "violations"]

_TOOL = '{tool_use: {name: Glob, input: {pattern: "*.none"}}}'


def _call(name: str, arguments: str = "{}") -> str:
    return f"{{reply: {{content: [{{tool_use: {{name: {name}, input: {arguments}}}}}]}}}}"


# Every wait a server asks for is scaled down: retry-after-ms of 1 where the API would say seconds.
# Only the over-the-cap retry-after (120 s > max_retry_after_s) is sent as it is: the run ends without waiting.
FAULTS: Final[Mapping[str, str]] = {
    "text": '{reply: {content: [{text: "done"}]}}',
    "tool": f"{{reply: {{content: [{{text: 'looking'}}, {_TOOL}]}}}}",
    "two_tools": f"{{reply: {{content: [{_TOOL}, {_TOOL}]}}}}",
    "overloaded": "{error: {status: 529}}",
    "overloaded_retry_after": '{error: {status: 529, headers: {retry-after-ms: "1"}}}',
    "server_error": "{error: {status: 500}}",
    "server_error_retry_after": '{error: {status: 500, headers: {retry-after-ms: "1"}}}',
    "retry_after": '{error: {status: 503, headers: {retry-after-ms: "1"}}}',
    "rate_limited": "{error: {status: 429}}",
    "rate_limited_retry_after": '{error: {status: 429, headers: {retry-after-ms: "1"}}}',
    "rate_limited_no_retry": '{error: {status: 429, headers: {x-should-retry: "false"}}}',
    "retry_after_over_cap": '{error: {status: 429, headers: {retry-after: "120"}}}',
    "unauthorized": "{error: {status: 401}}",
    "prompt_too_long": '{error: {status: 400, message: "prompt is too long: 9999 tokens > 10 maximum"}}',
    "reset_before_blocks": '{reply: {content: [{text: "a"}, {text: "b"}]}, cut_after_block: 0}',
    "reset_before_tool": f'{{reply: {{content: [{{text: "a"}}, {_TOOL}]}}, cut_after_block: 0}}',
    "reset_after_tool": f'{{reply: {{content: [{_TOOL}, {{text: "b"}}]}}, cut_after_block: 1}}',
    "sse_error_event": '{reply: {content: [{text: "a"}, {text: "b"}]}, error_event_after_block: 1}',
    "garbage_sse": '{reply: {content: [{text: "a"}]}, malformed: sse}',
    "garbage_json": '{reply: {content: [{text: "a"}]}, malformed: json}',
    "stall": '{reply: {content: [{text: "a"}, {text: "b"}]}, stall: {after_block: 1, seconds: 2}}',
    "max_tokens": '{reply: {content: [{text: "cut"}], stop_reason: max_tokens}}',
    "malformed_tool_use": '{reply: {content: [{text: "x"}], stop_reason: tool_use}}',
    "thinking_only": '{reply: {content: [{thinking: "hm"}]}}',
    "pause_turn": '{reply: {content: [{text: "wait"}], stop_reason: pause_turn}}',
    "refusal": '{reply: {content: [{text: "no"}], stop_reason: refusal}}',
    "context_window": '{reply: {content: [{text: "x"}], stop_reason: model_context_window_exceeded}}',
    "huge_reply": '{reply: {content: [{text: "' + "z" * 20_000 + '"}]}}',
    "tool_error": _call("Read", '{file_path: "/nonexistent/fuzz.txt"}'),
    "bash_error": _call("Bash", '{command: "echo failing >&2; exit 3"}'),
    "mcp_call": _call("mcp__fuzz__echo", '{text: "hi"}'),
    "mcp_crash": _call("mcp__fuzz__die"),
    "mcp_hang": _call("mcp__fuzz__hang"),
}
_MCP_FAULTS: Final = frozenset(("mcp_call", "mcp_crash", "mcp_hang"))

# Hooks that misbehave, each configured on one of HOOK_EVENTS for the whole run.
HOOK_FAULTS: Final[Mapping[str, HookCommand]] = {
    "hook_timeout": HookCommand(command="sleep 5", timeout_s=0.1),
    "hook_bad_json": HookCommand(command="echo '{\"decision\": '"),
}
HOOK_EVENTS: Final = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")

_IDLE_TIMEOUT_S: Final = 0.25  # a stall longer than this breaks the stream; keeps stalls fast
_TOOL_TIMEOUT_S: Final = 0.3  # a hung MCP call is given up after this (Claude Code's default is far longer)
_MCP_SERVER: Final = Path(__file__).with_name("fuzz_mcp.py")


@attrs.frozen(kw_only=True)
class FaultRun:
    """What one played run did: its steps, its result, the request bodies the server received, and its resume."""

    steps: tuple[Step, ...]
    final_state: str
    caps: tuple[int | None, ...]
    result: Mapping[str, Any]
    requests: tuple[tuple[Mapping[str, Any], ...], ...]  # the messages of every /v1/messages request
    interrupted: bool = False  # the run was interrupted (the SIGINT of a headless run: its task cancelled)
    transcript_problem: str | None = None  # why the stored transcript does not load whole (None: it does)
    resumed: FaultRun | None = None  # the run that resumed the stored session, against a server that answers


def check_report() -> CheckReport:
    """The checker's report with its figures at the params' check values (the caps every fuzzed run uses):
    ``report.at`` are those caps and ``report.per_step`` the proven bounds there."""
    spec = query_loop_program().spec
    return check_spec(spec, spec.param_check_values, explore=False)


def scenario_text(faults: Sequence[str]) -> str:
    steps = "".join(f"    - {FAULTS[f]}\n" for f in faults)
    return (
        "schema_version: 1\nscenario: fuzz\nmodel: mock-primary\n"
        f"default:\n{steps}    - {FAULTS['text']}\n"
        f"otherwise: {FAULTS['text']}\n"
    )


def _hook_config(hooks: Sequence[tuple[str, str]]) -> HookConfig:
    return HookConfig(matchers=tuple(HookMatcher(event=event, hooks=(HOOK_FAULTS[kind],)) for kind, event in hooks))


def _options(
    cwd: Path, report: CheckReport, *, fallback: bool, max_turns: int | None, faults: Sequence[str]
) -> AgentOptions:
    params = {k: v for k, v in report.at.items() if k not in ("max_turns", "max_retries")}
    servers = (McpServerConfig(name="fuzz", command=sys.executable, args=("-I", str(_MCP_SERVER))),)
    return AgentOptions(
        prompt="go",
        cwd=cwd,
        request=RequestSettings(
            model="mock-primary",
            fallback_models=("mock-fallback",) if fallback else (),
            retry_base_delay_s=0.0005,
            idle_timeout_s=_IDLE_TIMEOUT_S,
            escalated_max_tokens=64_000,
        ),
        limits=Limits(max_turns=max_turns, max_retries=int(report.at["max_retries"]), params=params),
        tools=ToolSettings(mcp_servers=servers if _MCP_FAULTS.intersection(faults) else ()),
        permissions=PermissionSettings(mode="bypassPermissions"),
        session=SessionSettings(home=cwd / ".home"),
    )


async def _drive(run: AgentRun, interrupt_at: int | None) -> bool:
    """Iterate the run to its end; at its ``interrupt_at``-th step cancel it (a SIGINT). True if it was."""
    # the run's tool timeout is a service, not an option: a hung MCP call is given up after _TOOL_TIMEOUT_S
    context = attrs.evolve(run.services.tool_context, tool_timeout_s=_TOOL_TIMEOUT_S)
    run.services = run.runner.services = attrs.evolve(run.services, tool_context=context)

    async def consume() -> None:
        seen = 0
        async for item in run.events():
            seen += isinstance(item, Step)
            if seen == interrupt_at:
                task.cancel()  # delivered at the run's next wait: mid-request, mid-tool or mid-hook

    task = asyncio.create_task(consume())
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


async def _run_against(faults: Sequence[str], options: AgentOptions, interrupt_at: int | None) -> FaultRun:
    server = MockServer(parse_scenario(scenario_text(faults), "<fuzz>"))
    await server.start()
    client = anthropic.AsyncAnthropic(api_key="fuzz", base_url=server.url, max_retries=0)
    try:
        run = AgentRun(options, AnthropicBackend(client))
        interrupted = await _drive(run, interrupt_at)
    finally:
        await client.close()
        await server.stop()
    messages = tuple(tuple(r.messages) for r in server.requests if r.path == "/v1/messages")
    final = run.runner.final
    return FaultRun(
        steps=run.steps,
        final_state=final.state,
        caps=final.caps,
        result=run.result(),
        requests=messages,
        interrupted=interrupted,
    )


def _transcript_problem(paths: SessionPaths) -> str | None:
    if not paths.transcript.is_file():
        return "no transcript was written"
    history = load_history(paths.transcript)
    if history.warnings:
        return f"the transcript loads with warnings: {'; '.join(history.warnings)}"
    return ledger_problem(history.messages)


def resume_options(options: AgentOptions) -> AgentOptions:
    """The run that resumes a played session: a new prompt, no hooks, and the default stream idle timeout.

    Its server answers plainly, so it needs no tiny timeout; with one, a loaded machine that
    left the process unscheduled for a quarter second ended the resume in api_error
    (tools/soak_faults.py, seed 53, six runs of the first 1 500 at load 13)."""
    session = attrs.evolve(options.session, resume_from=options.session_paths(), start_source="resume")
    request = attrs.evolve(options.request, idle_timeout_s=defaults.idle_timeout_s())
    return attrs.evolve(options, prompt="continue", session=session, hooks=HookConfig(), request=request)


async def play(
    faults: Sequence[str],
    *,
    fallback: bool,
    report: CheckReport,
    max_turns: int | None = None,
    hooks: Sequence[tuple[str, str]] = (),
    interrupt_at: int | None = None,
    resume: bool = False,
) -> FaultRun:
    """Run the query loop once against a server playing ``faults`` in order, then plain answers.

    ``hooks``: (a HOOK_FAULTS kind, a HOOK_EVENTS event) pairs configured for the run;
    ``interrupt_at``: the step at which the run is interrupted; ``resume``: then resume the
    stored session with a new prompt against a server that answers plainly."""
    with tempfile.TemporaryDirectory(prefix="queryloop-fuzz-") as folder:
        cwd = Path(folder)
        options = attrs.evolve(
            _options(cwd, report, fallback=fallback, max_turns=max_turns, faults=faults), hooks=_hook_config(hooks)
        )
        first = await _run_against(faults, options, interrupt_at)
        paths = options.session_paths()
        problem = _transcript_problem(paths)
        if not resume or problem is not None:
            return attrs.evolve(first, transcript_problem=problem)
        second = await _run_against((), resume_options(options), None)
        return attrs.evolve(first, resumed=attrs.evolve(second, transcript_problem=_transcript_problem(paths)))


def worst_requests_per_turn(run: FaultRun) -> int:
    """The most model requests the run sent in one turn (between two progress steps)."""
    worst = requests = 0
    for step in run.steps:
        if step.progress:
            requests = 0
        elif step.dest in ("calling_model", "auto_compacting", "reactive_compacting"):
            requests += 1
            worst = max(worst, requests)
    return worst


def violations(run: FaultRun, report: CheckReport) -> list[str]:
    """Every invariant the run (and the run that resumed it) broke (empty: they kept them all)."""
    out = _run_violations(run, report)
    if run.transcript_problem is not None:
        out.append(f"the stored transcript: {run.transcript_problem}")
    resumed = run.resumed
    if resumed is not None:
        out.extend(f"resumed: {problem}" for problem in _run_violations(resumed, report))
        if resumed.result.get("terminal_reason") != "completed":
            out.append(f"resumed: ended {resumed.result.get('terminal_reason')!r}, not completed")
        if resumed.transcript_problem is not None:
            out.append(f"resumed: the stored transcript: {resumed.transcript_problem}")
    return out


def _run_violations(run: FaultRun, report: CheckReport) -> list[str]:
    spec = query_loop_program().spec
    declared = {(t.source, t.reason, t.dest) for t in spec.transitions}
    out: list[str] = []
    if run.final_state not in spec.terminals:
        out.append(f"the run ended in {run.final_state!r}, not a terminal state")
    if run.result.get("type") != "result" or not run.result.get("terminal_reason"):
        out.append("no typed result")
    if run.result.get("terminal_reason") == "internal_error":  # a watched property broke, or a handler raised
        out.append(f"the run ended in internal_error: {run.result.get('errors')}")
    worst = report.per_step["model_requests"]
    if worst_requests_per_turn(run) > worst:
        out.append(f"{worst_requests_per_turn(run)} model requests in one turn, over the checker's bound {worst}")
    for step in run.steps:
        if (step.source, step.reason, step.dest) not in declared:
            out.append(f"undeclared step {step.source} --{step.reason}--> {step.dest}")
        for name, value, cap in zip(step.counter_names, step.counters, run.caps, strict=True):
            if cap is not None and value > cap:
                out.append(f"counter {name} = {value} over its cap {cap} after {step.reason}")
    for i, messages in enumerate(run.requests):
        problem = ledger_problem(messages)
        if problem:
            out.append(f"request {i}: {problem}")
    return out
