"""Random fault sequences served over HTTP, and the invariants every run must keep whatever happens.

Owns the catalogue of faults the embedded server can play (statuses with and
without retry headers, resets, stalls, garbage bodies, broken SSE, SSE error
events, prompt-too-long, max_tokens, malformed tool_use, huge replies) as scenario
steps, :func:`play` (one run of the query loop through the real ``anthropic`` SDK
against a server playing a sequence of them, with tiny timeouts so stalls are
fast) and :func:`violations` (what a run broke: a non-terminal end, an undeclared
step, a counter over its cap, a request with an unanswered tool_use, more model
requests in a turn than the checker's bound). Used by the property test in CI and
by ``tools/soak_faults.py`` for long runs. A testing facility: nothing in the
production path imports it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import anthropic
import attrs

from queryloop.fsm import CheckReport, Step, check_spec
from queryloop.handlers.messages import ledger_problem
from queryloop.handlers.request import AnthropicBackend
from queryloop.run.agent import AgentRun, query_loop_program
from queryloop.run.config import AgentOptions, Limits, PermissionSettings, RequestSettings

from .scenario import parse_scenario
from .server import MockServer

__all__ = ["FAULTS", "FaultRun", "check_report", "play", "violations"]

_TOOL = '{tool_use: {name: Glob, input: {pattern: "*.none"}}}'
FAULTS: Final[Mapping[str, str]] = {
    "text": '{reply: {content: [{text: "done"}]}}',
    "tool": f"{{reply: {{content: [{{text: 'looking'}}, {_TOOL}]}}}}",
    "two_tools": f"{{reply: {{content: [{_TOOL}, {_TOOL}]}}}}",
    "overloaded": "{error: {status: 529}}",
    "server_error": "{error: {status: 500}}",
    "retry_after": '{error: {status: 503, headers: {retry-after-ms: "1"}}}',
    "rate_limited_no_retry": '{error: {status: 429, headers: {x-should-retry: "false"}}}',
    "unauthorized": "{error: {status: 401}}",
    "prompt_too_long": '{error: {status: 400, message: "prompt is too long: 9999 tokens > 10 maximum"}}',
    "reset_before_blocks": '{reply: {content: [{text: "a"}, {text: "b"}]}, cut_after_block: 0}',
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
}
_IDLE_TIMEOUT_S: Final = 0.25  # a stall longer than this breaks the stream; keeps stalls fast


@attrs.frozen(kw_only=True)
class FaultRun:
    """What one played run did: its steps, its result, and the request bodies the server received."""

    steps: tuple[Step, ...]
    final_state: str
    caps: tuple[int | None, ...]
    result: Mapping[str, Any]
    requests: tuple[tuple[Mapping[str, Any], ...], ...]  # the messages of every /v1/messages request


def check_report() -> CheckReport:
    """The checker's report with its figures at the params' check values (the caps every fuzzed run uses):
    ``report.at`` are those caps and ``report.per_turn`` the proven bounds there."""
    spec = query_loop_program().spec
    return check_spec(spec, spec.param_check_values, explore=False)


def scenario_text(faults: Sequence[str]) -> str:
    steps = "".join(f"    - {FAULTS[f]}\n" for f in faults)
    return (
        "schema_version: 1\nscenario: fuzz\nmodel: mock-primary\n"
        f"default:\n{steps}    - {FAULTS['text']}\n"
        f"otherwise: {FAULTS['text']}\n"
    )


async def play(faults: Sequence[str], *, fallback: bool, report: CheckReport, max_turns: int | None = None) -> FaultRun:
    """Run the query loop once against a server playing ``faults`` in order, then plain answers."""
    server = MockServer(parse_scenario(scenario_text(faults), "<fuzz>"))
    await server.start()
    client = anthropic.AsyncAnthropic(api_key="fuzz", base_url=server.url, max_retries=0)
    params = {k: v for k, v in report.at.items() if k not in ("max_turns", "max_retries")}
    with tempfile.TemporaryDirectory(prefix="queryloop-fuzz-") as cwd:
        options = AgentOptions(
            prompt="go",
            cwd=Path(cwd),
            request=RequestSettings(
                model="mock-primary",
                fallback_models=("mock-fallback",) if fallback else (),
                retry_base_delay_s=0.0005,
                idle_timeout_s=_IDLE_TIMEOUT_S,
                escalated_max_tokens=64_000,
            ),
            limits=Limits(max_turns=max_turns, max_retries=int(report.at["max_retries"]), params=params),
            permissions=PermissionSettings(mode="bypassPermissions"),
        )
        run = AgentRun(options, AnthropicBackend(client))
        try:
            async for _ in run.events():
                pass
        finally:
            await client.close()
            await server.stop()
    messages = tuple(tuple(r.messages) for r in server.requests if r.path == "/v1/messages")
    final = run.runner.final
    return FaultRun(steps=run.steps, final_state=final.state, caps=final.caps, result=run.result(), requests=messages)


def violations(run: FaultRun, report: CheckReport) -> list[str]:
    """Every invariant the run broke (empty: it kept them all)."""
    spec = query_loop_program().spec
    declared = {(t.source, t.reason, t.dest) for t in spec.transitions}
    out: list[str] = []
    if run.final_state not in spec.terminals:
        out.append(f"the run ended in {run.final_state!r}, not a terminal state")
    if run.result.get("type") != "result" or not run.result.get("terminal_reason"):
        out.append("no typed result")
    worst = report.per_turn["model_requests"]
    requests = 0
    for step in run.steps:
        if (step.source, step.reason, step.dest) not in declared:
            out.append(f"undeclared step {step.source} --{step.reason}--> {step.dest}")
        for name, value, cap in zip(step.counter_names, step.counters, run.caps, strict=True):
            if cap is not None and value > cap:
                out.append(f"counter {name} = {value} over its cap {cap} after {step.reason}")
        if step.progress:
            requests = 0
        elif step.dest in ("calling_model", "auto_compacting", "reactive_compacting"):
            requests += 1
            if requests > worst:
                out.append(f"{requests} model requests in one turn, over the checker's bound {worst}")
    for i, messages in enumerate(run.requests):
        problem = ledger_problem(messages)
        if problem:
            out.append(f"request {i}: {problem}")
    return out
