"""What handlers may rely on: names they read checked at load, exits on every edge, asking the machine, snapshots."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from queryloop.fsm import (
    EffectContext,
    HandlerError,
    Program,
    Runner,
    SpecError,
    TransitionError,
    load_machine,
    parse_machine,
)
from queryloop.fsm.testing import Script

MACHINE = """\
schema_version: 1
machine: contract
package: queryloop.fsm
initial: calling
events: {ok: "", overloaded: "", abort: ""}
guards:
  budget_left: .testing.reads_retries
counters:
  retries: {cap: 2, scope: run}
states:
  calling:
    effect: .testing.scripted
    emits: [ok, overloaded]
    exit: .testing.journal
  done: {terminal: true}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: calling, event: ok, to: done, reason: answered, do: .testing.journal}
  - {from: calling, event: overloaded, to: calling, reason: api_retry, counter: retries, guards: [budget_left]}
  - {from: calling, event: overloaded, to: done, reason: gave_up}
  - {from: calling, event: abort, to: aborted, reason: cancelled}
"""


def _program() -> Program:
    return Program(parse_machine(MACHINE, "contract.yaml"))


def test_relative_names_resolve_against_the_declared_package() -> None:
    machine = parse_machine(MACHINE, "contract.yaml")
    assert machine.spec.state("calling").effect == "queryloop.fsm.testing.scripted"
    assert machine.spec.guards["budget_left"] == "queryloop.fsm.testing.reads_retries"


def test_a_relative_name_without_a_package_is_a_spec_error_with_its_line() -> None:
    with pytest.raises(SpecError) as info:
        parse_machine(MACHINE.replace("package: queryloop.fsm\n", ""), "contract.yaml")
    assert str(info.value.first).startswith(
        "contract.yaml:6: '.testing.reads_retries' is relative but the machine declares no `package`"
    )


def test_a_handler_reading_a_counter_the_machine_lacks_fails_at_load() -> None:
    renamed = MACHINE.replace("retries: {cap", "attempts: {cap").replace("counter: retries", "counter: attempts")
    with pytest.raises(SpecError) as info:
        parse_machine(renamed, "contract.yaml")
    expected = "guard 'budget_left' 'queryloop.fsm.testing.reads_retries' reads counter 'retries'"
    assert f"{expected}, which the machine does not declare" in str(info.value)


def test_the_exit_handler_runs_before_the_edge_handler_on_every_edge_out() -> None:
    runner = Runner(_program(), data=(), services=Script(["overloaded", "ok"]))

    async def drive() -> None:
        async for _ in runner.run():
            pass

    asyncio.run(drive())
    assert [s.reason for s in runner.trace] == ["api_retry", "answered"]
    assert runner.final.data == ("calling:overloaded", "calling:ok", "calling:ok"), (
        "exit on both edges, then the edge's own"
    )


def test_an_exit_on_a_terminal_state_is_refused() -> None:
    with pytest.raises(SpecError, match="terminal state 'done' has an effect, emits or exit"):
        parse_machine(
            MACHINE.replace("done: {terminal: true}", "done: {terminal: true, exit: .testing.journal}"), "c.yaml"
        )


def test_an_effect_asks_the_machine_which_edge_an_event_would_take() -> None:
    program = _program()
    run = program.initial_state(())
    ctx = EffectContext(program, run, None, [])
    assert ctx.next_reason("overloaded") == "api_retry"
    exhausted = program.restore({**program.snapshot(run), "counters": {"retries": 2}}, ())
    assert EffectContext(program, exhausted, None, []).next_reason("overloaded") == "gave_up"


def test_a_run_state_survives_a_json_round_trip_of_its_snapshot() -> None:
    program = _program()
    runner = Runner(program, data=(), services=Script(["overloaded"]))
    asyncio.run(runner.step_once())
    snapshot = json.loads(json.dumps(program.snapshot(runner.final)))
    assert snapshot == {"machine": "contract", "state": "calling", "counters": {"retries": 1}, "params": {}, "steps": 1}
    assert program.restore(snapshot, runner.final.data) == runner.final


def test_a_snapshot_of_another_machine_or_over_its_caps_is_refused() -> None:
    program = _program()
    good = program.snapshot(program.initial_state(()))
    with pytest.raises(TransitionError, match="not a state of 'contract'"):
        program.restore({**good, "machine": "other"}, ())
    with pytest.raises(TransitionError, match="not the machine's"):
        program.restore({**good, "counters": {"attempts": 0}}, ())
    with pytest.raises(Exception, match=r"outside 0\.\.2"):
        program.restore({**good, "counters": {"retries": 3}}, ())


def test_stepping_one_at_a_time_takes_the_same_path_as_running() -> None:
    program = _program()
    stepped = Runner(program, data=(), services=Script(["overloaded", "overloaded"]))

    async def drive() -> None:
        while not stepped.done:
            await stepped.step_once()

    asyncio.run(drive())
    assert [s.reason for s in stepped.trace] == ["api_retry", "gave_up"]
    with pytest.raises(TransitionError, match="has ended"):
        asyncio.run(stepped.step_once())


def test_a_shipped_machine_loads_from_relative_names(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent.parent
    machine = load_machine(root / "machines" / "query_loop.yaml")
    assert machine.spec.package == "queryloop.handlers"
    assert set(machine.exits) == {
        "checking_context",
        "auto_compacting",
        "reactive_compacting",
        "manual_compacting",
        "calling_model",
    }


def test_an_async_guard_is_refused_at_load_because_a_coroutine_is_always_true() -> None:
    text = MACHINE.replace("budget_left: .testing.reads_retries", "budget_left: .testing.scripted")
    with pytest.raises(SpecError, match=r"guard 'budget_left' 'queryloop.fsm.testing.scripted' is an `async def`"):
        parse_machine(text, "contract.yaml")


def test_a_handler_that_cannot_take_run_and_event_is_refused_at_load() -> None:
    text = MACHINE.replace("do: .testing.journal}", "do: .testing.uses}")
    with pytest.raises(SpecError, match=r"cannot be called as \(run, event\)"):
        parse_machine(text, "contract.yaml")


def test_an_abort_edge_into_a_non_terminal_state_is_refused() -> None:
    text = MACHINE.replace(
        "{from: calling, event: abort, to: aborted, reason: cancelled}",
        "{from: calling, event: abort, to: calling, reason: cancelled}",
    )
    with pytest.raises(SpecError, match="abort edge 'cancelled' goes to 'calling', which is not terminal"):
        parse_machine(text, "contract.yaml")


def test_an_effect_may_not_return_the_abort_event() -> None:
    runner = Runner(_program(), data=(), services=Script(["abort"]))
    asyncio.run(runner.step_once())
    assert runner.final.state == "internal_error" and not runner.aborted, "not recorded as a user interrupt"
    assert runner.error is not None and isinstance(runner.error.exception, HandlerError)
    assert "returned the abort event 'abort'; only cancelling the run takes the abort edges" in runner.error.message
