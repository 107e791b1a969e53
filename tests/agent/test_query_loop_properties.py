"""Property tests of the query loop with an in-process scripted model and random faults.

Whatever the model and the network do, the loop takes only declared edges, keeps its
counters within their caps, sends no request with an unanswered tool_use, ends in a
typed terminal state, and surfaces an error whenever the result is an error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queryloop.fsm import check_spec
from queryloop.handlers.messages import ledger_problem
from queryloop.handlers.request.services.attempt import ModelFailure, ModelReply
from queryloop.handlers.request.services.backends import ModelCall
from queryloop.run.agent import AgentRun, query_loop_program
from queryloop.run.config import AgentOptions, Limits, RequestSettings
from queryloop.testing import ScriptedBackend, scripted_failure, scripted_reply

PROGRAM = query_loop_program()
SPEC = PROGRAM.spec
DECLARED = {(t.source, t.reason, t.dest) for t in SPEC.transitions}
# the proven bounds at the params' check values, which the runs below use too
REPORT = check_spec(SPEC, SPEC.param_check_values, explore=False)
CHECK_PARAMS = {k: v for k, v in REPORT.at.items() if k not in ("max_turns", "max_retries")}

OUTCOMES = [
    "text",
    "tool",
    "two_tools",
    "truncated",
    "malformed_tool_use",
    "thinking_only",
    "paused",
    "refusal",
    "overloaded",
    "retryable",
    "fatal",
    "stream_broken",
    "stream_cut_tool",
    "malformed_response",
    "model_unavailable",
    "prompt_too_long",
    "context_exceeded",
]


def make(kind: str, call: ModelCall, n: int) -> ModelReply | ModelFailure:
    tool = {"type": "tool_use", "id": f"t{n}", "name": "Glob", "input": {"pattern": "*.none"}}
    text = {"type": "text", "text": f"part{n} "}
    if kind == "text":
        return scripted_reply([text], call=call)
    if kind == "tool":
        return scripted_reply([text, tool], "tool_use", call=call)
    if kind == "two_tools":
        return scripted_reply(
            [tool, {**tool, "id": f"u{n}", "name": "Read", "input": {"file_path": "nope"}}], "tool_use", call=call
        )
    if kind == "truncated":
        return scripted_reply([text], "max_tokens", call=call)
    if kind == "malformed_tool_use":
        return scripted_reply([text], "tool_use", call=call)
    if kind == "thinking_only":
        return scripted_reply([{"type": "thinking", "thinking": "hm", "signature": "s"}], call=call)
    if kind == "paused":
        return scripted_reply([text], "pause_turn", call=call)
    if kind == "refusal":
        return scripted_reply([text], "refusal", call=call)
    if kind == "context_exceeded":
        return scripted_reply([text], "model_context_window_exceeded", call=call)
    if kind == "stream_cut_tool":
        return scripted_failure("stream_broken", 200, partial=[tool])
    status = {
        "overloaded": 529,
        "retryable": 500,
        "fatal": 401,
        "stream_broken": 200,
        "malformed_response": 200,
        "model_unavailable": 404,
        "prompt_too_long": 400,
    }[kind]
    return scripted_failure(kind if kind not in ("retryable",) else "retryable", status)


def ledger_closed(messages: list[dict[str, Any]]) -> bool:
    return ledger_problem(messages) is None


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    outcomes=st.lists(st.sampled_from(OUTCOMES), max_size=40),
    fallbacks=st.integers(min_value=0, max_value=3),
    max_turns=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
)
def test_any_fault_sequence_ends_typed_with_the_ledger_closed(
    tmp_path_factory: Any, outcomes: list[str], fallbacks: int, max_turns: int | None
) -> None:
    script = list(outcomes)
    seen: list[list[dict[str, Any]]] = []

    def answer(call: ModelCall) -> ModelReply | ModelFailure:
        seen.append(call.messages.to_list())
        kind = script.pop(0) if script else "text"
        return make(kind, call, len(seen))

    cwd = Path(tmp_path_factory.mktemp("loop"))
    options = AgentOptions(
        prompt="go",
        cwd=cwd,
        request=RequestSettings(
            model="m0",
            fallback_models=tuple(f"m{i + 1}" for i in range(fallbacks)),
            retry_base_delay_s=0.0,
            escalated_max_tokens=64_000,
        ),
        limits=Limits(max_turns=max_turns, max_retries=REPORT.at["max_retries"], params=CHECK_PARAMS),
    )
    run = AgentRun(options, ScriptedBackend(answer), program=PROGRAM)

    async def drive() -> None:
        async for _ in run.events():
            pass

    asyncio.run(drive())
    final = run.runner.final
    assert final.state in SPEC.terminals
    caps = final.caps
    requests_this_turn = 0
    worst = REPORT.per_step["model_requests"]
    for step in run.steps:
        assert (step.source, step.reason, step.dest) in DECLARED
        assert all(cap is None or v <= cap for v, cap in zip(step.counters, caps, strict=True))
        if step.progress:
            requests_this_turn = 0
        elif step.dest in ("calling_model", "auto_compacting", "reactive_compacting"):
            requests_this_turn += 1
            assert requests_this_turn <= worst, "more model requests in one turn than the checker's worst case"
    for messages in seen:
        assert ledger_closed(messages), messages
    assert ledger_closed(run.data.messages.to_list()) or final.state == "completed"
    result = run.result()
    assert result["terminal_reason"] == PROGRAM.results[final.state].get("terminal_reason", final.state)
    if result["is_error"]:  # Claude Code's shapes: the text in `result`, or in `errors` for an error subtype
        surfaced = result["result"] if result["subtype"] == "success" else "; ".join(result["errors"])
        assert surfaced, "an error result always surfaces its error"


def test_an_abort_after_the_gate_keeps_refusals_and_interrupts_the_rest_in_order() -> None:
    from queryloop.fsm import Event
    from queryloop.handlers.messages import MessageView, ToolCall, tool_result_block
    from queryloop.handlers.request import RequestData
    from queryloop.handlers.tools import ToolsData, close_dangling_tool_uses
    from queryloop.run.data import AgentData

    calls = [ToolCall(id=f"t{i}", name="Bash", input={"command": "true"}) for i in range(3)]
    assistant = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in calls],
    }
    data = AgentData(
        messages=MessageView().append({"role": "user", "content": "go"}).append(assistant),
        request=RequestData(model="m", max_tokens=64),
        tools=ToolsData(
            pending=(calls[0], calls[2]),
            denied=(dict(tool_result_block("t1", "Permission denied", is_error=True)),),
            order=("t0", "t1", "t2"),
        ),
    )
    run = PROGRAM.initial_state(data)
    after = close_dangling_tool_uses(run, Event(name="abort"))
    results = after.messages.to_list()[-2]["content"]
    assert after.messages.last()["content"] == [{"type": "text", "text": "[Request interrupted by user for tool use]"}]
    assert [r["tool_use_id"] for r in results] == ["t0", "t1", "t2"]
    assert results[1]["content"] == "Permission denied" and "Interrupted" in results[0]["content"]
    assert ledger_closed(after.messages.to_list())
