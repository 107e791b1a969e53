"""Handler mutants the run-time watch catches (issue 51, part 1): frames, `sets:` and the ledger invariant.

Each test runs the shipped machine in process with a scripted model, once with its handlers and
once with one handler replaced by a mutant that keeps the edge's old contract (`changes:`) but
breaks what the YAML now also says: what the handler may touch (its frame), what it leaves a field
at (`sets:`), or that every tool_use gets exactly one tool_result (`invariants:`). The shipped run
ends normally; the mutant's ends in ``internal_error`` naming what it broke.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from queryloop.fsm import Program, load_machine
from queryloop.handlers.agents import refuse_agent_calls
from queryloop.handlers.hooks.services.config import parse_hook_config
from queryloop.handlers.output import continue_after_truncation
from queryloop.handlers.request import switch_to_fallback_model
from queryloop.handlers.request.services.attempt import ModelFailure, ModelReply
from queryloop.handlers.request.services.backends import ModelCall
from queryloop.machines import MACHINES_DIR
from queryloop.run.agent import AgentRun
from queryloop.run.config import AgentOptions, Limits, PermissionSettings, RequestSettings
from queryloop.run.subagents import CHILD_CONTEXT
from queryloop.testing import ScriptedBackend, scripted_failure, scripted_reply

MACHINE = load_machine(MACHINES_DIR / "query_loop.yaml")
Handler = Callable[..., Any]


def program(mutants: dict[str, Handler] | None = None) -> Program:
    """The shipped machine, with the edge handlers of ``mutants`` (reason → handler) replaced."""
    return Program(attrs.evolve(MACHINE, handlers={**MACHINE.handlers, **(mutants or {})}))


def run(
    tmp_path: Path, script: Callable[[ModelCall], ModelReply | ModelFailure], prog: Program, **options: Any
) -> AgentRun:
    request = options.pop("request", RequestSettings(model="m0", retry_base_delay_s=0.0))
    agent = AgentRun(
        AgentOptions(prompt="go", cwd=tmp_path, request=request, **options), ScriptedBackend(script), program=prog
    )

    async def drive() -> None:
        async for _ in agent.events():
            pass

    asyncio.run(drive())
    return agent


def ended(agent: AgentRun) -> tuple[str, str]:
    """Where the run ended, and the message of what ended it in internal_error ("" otherwise)."""
    error = agent.runner.error
    return agent.runner.final.state, "" if error is None else error.message


def text(call: ModelCall | None = None) -> ModelReply:
    return scripted_reply([{"type": "text", "text": "done"}], call=call)


# ---- a continuation that doubles max_tokens ---------------------------------------------------


def doubling_continuation(run_: Any, event: Any) -> Any:
    data = continue_after_truncation(run_, event)
    return data.evolve(request=attrs.evolve(data.request, max_tokens=data.request.max_tokens * 2))


def cut_then_answered(call: ModelCall) -> ModelReply:
    if len(call.messages) == 1:
        return scripted_reply([{"type": "text", "text": "part"}], "max_tokens", call=call)
    return text(call)


def test_a_continuation_that_also_doubles_max_tokens_changes_a_field_outside_its_frame(tmp_path: Path) -> None:
    assert ended(run(tmp_path, cut_then_answered, program())) == ("completed", "")
    state, message = ended(
        run(tmp_path, cut_then_answered, program({"max_output_tokens_recovery": doubling_continuation}))
    )
    assert state == "internal_error"
    assert "edge handler of 'max_output_tokens_recovery' changed request.max_tokens, outside its frame" in message


# ---- a fallback that keeps the failing model -----------------------------------------------------


def fallback_keeping_the_model(run_: Any, event: Any) -> Any:
    data = switch_to_fallback_model(run_, event)
    return data.evolve(request=attrs.evolve(data.request, model=run_.data.request.model))


def overloaded_until_the_fallback(call: ModelCall) -> ModelReply | ModelFailure:
    return text(call) if call.model == "m1" else scripted_failure("overloaded", 529, model=call.model)


def test_a_fallback_that_keeps_the_failing_model_leaves_request_model_where_sets_says_it_moves(
    tmp_path: Path,
) -> None:
    request = RequestSettings(model="m0", fallback_models=("m1",), retry_base_delay_s=0.0)
    assert ended(run(tmp_path, overloaded_until_the_fallback, program(), request=request)) == ("completed", "")
    mutant = program({"model_fallback": fallback_keeping_the_model})
    state, message = ended(run(tmp_path, overloaded_until_the_fallback, mutant, request=request))
    assert state == "internal_error"
    assert "left request.model at 'm0'" in message
    assert "what request.fallback_models.0 was ('m1')" in message


# ---- stop_hook_active never set --------------------------------------------------------------------


def feedback_without_the_flag(run_: Any, event: Any) -> Any:
    from queryloop.handlers.hooks import send_stop_feedback

    data = send_stop_feedback(run_, event)
    return data.evolve(hooks=attrs.evolve(data.hooks, stop_hook_active=False))


def test_stop_hook_feedback_that_never_sets_stop_hook_active_breaks_its_sets_contract(tmp_path: Path) -> None:
    # blocks once: a second Stop sees stop_hook_active and lets the run end
    answer = json.dumps({"decision": "block", "reason": "once more"})
    code = f"import json,sys; print('' if json.load(sys.stdin)['stop_hook_active'] else {answer!r})"
    command = f"{sys.executable} -c {json.dumps(code)}"
    hooks = parse_hook_config({"Stop": [{"hooks": [{"type": "command", "command": command}]}]})
    shipped = run(tmp_path, text, program(), hooks=hooks)
    assert ended(shipped) == ("completed", "")
    assert shipped.runner.final.counters[shipped.runner.final.counter_names.index("stop_hook_blocks")] == 1
    state, message = ended(run(tmp_path, text, program({"stop_hook_continue": feedback_without_the_flag}), hooks=hooks))
    assert state == "internal_error"
    assert "left hooks.stop_hook_active at False; its edge's contract (`sets:`) says True" in message


# ---- a refusal that also drops the turn's other calls --------------------------------------------


def refusal_dropping_the_other_calls(run_: Any, event: Any) -> Any:
    data = refuse_agent_calls(run_, event)
    return data.evolve(
        tools=attrs.evolve(data.tools, pending=tuple(c for c in data.tools.pending if c.name == "Agent"))
    )


def three_calls_then_answered(call: ModelCall) -> ModelReply:
    if CHILD_CONTEXT[:40] in (call.system or ""):
        return text(call)
    if len(call.messages) > 1:
        return text(call)
    task = {"description": "t", "prompt": "child", "run_in_background": False}
    calls = [
        {"type": "tool_use", "id": "a1", "name": "Agent", "input": task},
        {"type": "tool_use", "id": "a2", "name": "Agent", "input": task},
        {"type": "tool_use", "id": "g1", "name": "Glob", "input": {"pattern": "*.txt"}},
    ]
    return scripted_reply(calls, "tool_use", call=call)


def test_a_refusal_that_drops_the_turns_other_calls_leaves_a_tool_use_without_its_result(tmp_path: Path) -> None:
    options: dict[str, Any] = {
        "permissions": PermissionSettings(mode="bypassPermissions"),
        "limits": Limits(params={"max_agents_per_turn": 1}),
    }
    assert ended(run(tmp_path, three_calls_then_answered, program(), **options)) == ("completed", "")
    mutant = program({"agent_launch_refused": refusal_dropping_the_other_calls})
    state, message = ended(run(tmp_path, three_calls_then_answered, mutant, **options))
    assert state == "internal_error"
    assert "invariant 'every_tool_use_answered'" in message
    assert "tool_use ['a1', 'a2', 'g1'] answered by tool_result ['a1', 'a2']" in message
