"""The runtime takes only declared edges, owns counters and caps, and ends every run in a terminal."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import attrs
import pytest

from queryloop.fsm import (
    Event,
    HandlerError,
    InternalError,
    Program,
    Runner,
    RunState,
    SpecError,
    Step,
    TransitionError,
    load_machine,
)
from queryloop.machines.examples.effects import Feed, ItemsData

ROOT = Path(__file__).resolve().parent.parent.parent
RETRY_FETCH = load_machine(ROOT / "machines/examples/retry_fetch.yaml")
BREAKER = load_machine(ROOT / "machines/examples/circuit_breaker.yaml")


def _drive(runner: Runner) -> list[object]:
    async def main() -> list[object]:
        return [item async for item in runner.run()]

    return asyncio.run(main())


def _reasons(runner: Runner) -> list[str]:
    return [s.reason for s in runner.trace]


def test_transient_failures_are_retried_until_the_item_arrives() -> None:
    runner = Runner(RETRY_FETCH, data=ItemsData(), services=Feed(["transient", "transient", "ok", "ok", "ok"]))
    items = _drive(runner)
    assert runner.final.state == "done"
    assert runner.result == {"is_error": False}
    assert _reasons(runner)[:5] == ["fetch_backoff", "fetch_retry", "fetch_backoff", "fetch_retry", "item_fetched"]
    assert runner.final.data.done == ("item-1", "item-2", "item-3")
    assert next(i for i in items if isinstance(i, str)) == "fetch attempt -> transient"
    assert [i for i in items if isinstance(i, Step)] == list(runner.trace)


def test_the_retry_cap_comes_from_a_param_and_exhaustion_takes_the_catch_all() -> None:
    runner = Runner(RETRY_FETCH, data=ItemsData(), services=Feed(["transient"] * 10), params={"max_retries": 2})
    _drive(runner)
    assert _reasons(runner) == ["fetch_backoff", "fetch_retry", "fetch_backoff", "fetch_retry", "retries_exhausted"]
    assert runner.final.state == "failed" and runner.result["is_error"] is True


def test_a_progress_edge_resets_turn_scoped_counters() -> None:
    runner = Runner(RETRY_FETCH, data=ItemsData(), services=Feed(["transient", "ok", "transient", "ok", "ok"]))
    _drive(runner)
    retries = [s.counter_dict()["retries"] for s in runner.trace]
    progress = [s.index for s in runner.trace if s.progress]
    assert retries[progress[0]] == 0, "next_item starts a new budget"
    assert max(retries) == 1


def test_consecutive_counter_is_reset_by_the_named_success_edge() -> None:
    outcomes = ["fail", "fail", "ok", "fail", "fail", "ok", "ok", "ok", "ok"]
    runner = Runner(BREAKER, services=Feed(outcomes))
    _drive(runner)
    assert runner.final.state == "finished"
    assert max(s.counter_dict()["consecutive_failures"] for s in runner.trace) == 2


def test_three_failures_in_a_row_open_the_breaker() -> None:
    runner = Runner(BREAKER, services=Feed(["fail"] * 5))
    _drive(runner)
    assert _reasons(runner) == ["call_retry"] * 3 + ["failure_breaker"]


def test_unknown_param_override_is_refused() -> None:
    with pytest.raises(Exception, match="unknown param 'max_retry'"):
        Runner(RETRY_FETCH, params={"max_retry": 1})


@pytest.mark.parametrize(
    ("value", "problem"),
    [(None, "may not be null"), ("3", "must be an int"), (True, "must be an int"), (-1, "must be 0 or more")],
)
def test_a_cap_param_refuses_a_value_outside_its_type(value: object, problem: str) -> None:
    """A non-nullable int cap can never be made unbounded (or nonsensical) by a caller."""
    with pytest.raises(TransitionError, match=f"param 'max_retries' {problem}"):
        Runner(RETRY_FETCH, params={"max_retries": value})


def test_a_runs_params_are_checked_and_read_only_without_building_its_state() -> None:
    """What an agent reads before its runner exists (a sub-agent pool's caps): the runner's params, checked alike."""
    program = Program(RETRY_FETCH)
    params = program.run_params({"max_retries": 1})
    assert params == program.initial_state(params={"max_retries": 1}).params
    with pytest.raises(TypeError):
        params["max_retries"] = 9  # type: ignore[index]
    with pytest.raises(TransitionError, match="unknown param 'max_retry'"):
        program.run_params({"max_retry": 1})


def test_a_nullable_cap_param_takes_null_as_no_limit() -> None:
    program = Program(load_machine(ROOT / "machines/query_loop.yaml"))
    assert program.initial_state(params={"max_turns": None}).cap("turns") is None
    assert program.initial_state(params={"max_turns": 3}).cap("turns") == 2


def _ended_in_internal_error(runner: Runner, source: str) -> Step:
    assert runner.final.state == "internal_error" and runner.done
    assert runner.result == {"is_error": True, "subtype": "error_during_execution"}
    last = runner.trace[-1]
    assert (last.source, last.event, last.reason, last.dest, last.terminal) == (
        source,
        "internal_error",
        "internal_error",
        "internal_error",
        True,
    )
    assert runner.error is not None and runner.error.traceback.startswith("Traceback")
    return last


def test_an_effect_returning_an_undeclared_event_ends_in_internal_error() -> None:
    async def bad(ctx):  # type: ignore[no-untyped-def]
        return Event(name="stored")

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "fetching": bad})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    items = _drive(runner)
    _ended_in_internal_error(runner, "fetching")
    assert items == list(runner.trace), "the step into internal_error is yielded like any step"
    assert isinstance(runner.error.exception, HandlerError)  # type: ignore[union-attr]
    assert "returned event 'stored', which the state does not declare" in runner.error.message  # type: ignore[union-attr]


def test_an_effect_that_raises_ends_the_run_in_internal_error_with_counters_unchanged() -> None:
    calls = []

    async def flaky(ctx):  # type: ignore[no-untyped-def]
        calls.append(ctx.run.count("retries"))
        if len(calls) == 2:
            raise ValueError("the disk is on fire")
        return Event(name="failed_transiently")

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "fetching": flaky})
    steps: list[Step] = []
    runner = Runner(machine, data=ItemsData(), services=Feed([]), on_step=steps.append)
    _drive(runner)
    last = _ended_in_internal_error(runner, "fetching")
    assert _reasons(runner) == ["fetch_backoff", "fetch_retry", "internal_error"]
    before = runner.trace[-2].counter_dict()
    assert before["retries"] == 1
    assert last.counter_dict() == before == runner.final.counter_dict(), "the engine's step counts nothing"
    assert steps == list(runner.trace), "on_step is told of the step into internal_error too"
    assert runner.error is not None
    assert runner.error.message == "effect of state 'fetching' raised ValueError: the disk is on fire"
    assert "ValueError: the disk is on fire" in runner.error.traceback, "the original cause is in the traceback"


def test_a_guard_that_raises_ends_the_run_in_internal_error() -> None:
    def broken(run: RunState, event: Event) -> bool:
        raise KeyError("items")

    machine = attrs.evolve(RETRY_FETCH, guards={"has_more_items": broken})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    _drive(runner)
    _ended_in_internal_error(runner, "storing")
    assert runner.final.data.done == ("item-1",), "the data is the last good step's"
    assert "guard of transition 'next_item' raised KeyError" in runner.error.message  # type: ignore[union-attr]


def test_an_exit_that_raises_ends_the_run_in_internal_error() -> None:
    def broken(run: RunState, event: Event) -> ItemsData:
        raise RuntimeError("bookkeeping failed")

    machine = attrs.evolve(RETRY_FETCH, exits={"storing": broken})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    _drive(runner)
    _ended_in_internal_error(runner, "storing")
    assert "exit handler of state 'storing' raised RuntimeError" in runner.error.message  # type: ignore[union-attr]


def test_an_edge_handler_returning_a_run_state_ends_in_internal_error_saying_to_return_data() -> None:
    def sneaky(run: RunState, event: Event) -> RunState:
        return attrs.evolve(run, state="done")

    machine = attrs.evolve(RETRY_FETCH, handlers={"item_fetched": sneaky})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    _drive(runner)
    _ended_in_internal_error(runner, "fetching")
    message = runner.error.message  # type: ignore[union-attr]
    assert "edge handler of 'item_fetched' returned a RunState" in message
    assert "return the new run data only" in message


def test_an_edge_handler_returning_none_is_refused_too() -> None:
    machine = attrs.evolve(RETRY_FETCH, handlers={"item_fetched": lambda run, event: None})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    _drive(runner)
    _ended_in_internal_error(runner, "fetching")
    assert "returned NoneType None" in runner.error.message  # type: ignore[union-attr]


def test_handlers_return_data_and_the_engine_builds_the_next_run_state() -> None:
    program = Program(RETRY_FETCH)
    run = program.initial_state(ItemsData())
    nxt, step = program.step(run, Event(name="fetched", data="item-1"))
    assert nxt.data == ItemsData(done=("item-1",)) and nxt.state == "storing" and step.reason == "item_fetched"
    assert not hasattr(RunState, "with_data"), "handlers cannot build a run state"


def test_step_once_also_ends_in_internal_error() -> None:
    async def boom(ctx):  # type: ignore[no-untyped-def]
        raise OSError("no route")

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "fetching": boom})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    items = asyncio.run(runner.step_once())
    assert items == [runner.trace[-1]]
    _ended_in_internal_error(runner, "fetching")


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("driven", ["step_once", "run"])
def test_keyboard_interrupt_and_system_exit_propagate_after_the_abort_edge(
    error: type[BaseException], driven: str
) -> None:
    """Never swallowed, never the machine's failure, and the run still ends in a terminal state."""

    async def stop(ctx):  # type: ignore[no-untyped-def]
        raise error()

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "fetching": stop})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    with pytest.raises(error):
        asyncio.run(runner.step_once() if driven == "step_once" else _consume(runner))
    assert runner.error is None
    assert runner.final.state == "aborted" and runner.done and runner.aborted
    assert _reasons(runner) == ["fetch_aborted"]


async def _consume(runner: Runner) -> None:
    async for _ in runner.run():
        pass


def test_an_effect_that_swallows_its_cancellation_still_takes_the_abort_edge() -> None:
    """Catching CancelledError and returning an outcome does not carry the run on: the task is still cancelled."""
    returned: list[str] = []

    async def stubborn(ctx):  # type: ignore[no-untyped-def]
        ctx.services.waiting.set()  # in its effect: the cancel comes now (_BackoffWatched)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            returned.append("elapsed")
            return Event(name="elapsed")
        raise AssertionError("never cancelled")

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "backing_off": stubborn})
    runner = _cancelled_while_backing_off(machine)
    assert returned == ["elapsed"], "the effect did catch the cancellation and return"
    assert _reasons(runner) == ["fetch_backoff", "fetch_aborted"], "the outcome it returned was not taken"
    assert runner.final.state == "aborted" and runner.aborted


def _one_decision_machine(tmp_path: Path) -> Any:
    """A machine whose one decision has three candidates, two naming the guard ``ready`` (one also ``fresh``)."""
    text = """
schema_version: 1
machine: guarded
package: tests.engine.guard_effects
initial: deciding
events: {go: the decision's event, cancelled: the caller cancelled}
abort_event: cancelled
guards: {ready: .ready, fresh: .fresh}
states:
  deciding: {effect: .decide, emits: [go]}
  first: {terminal: true}
  second: {terminal: true}
  third: {terminal: true}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: deciding, event: go, to: first, reason: both_hold, guards: [ready, fresh]}
  - {from: deciding, event: go, to: second, reason: ready_holds, guards: [ready]}
  - {from: deciding, event: go, to: third, reason: neither}
  - {from: deciding, event: cancelled, to: aborted, reason: decide_aborted}
"""
    path = tmp_path / "guarded.yaml"
    path.write_text(text)
    return load_machine(path, bind=False)


def _bound(machine: Any, ready: Any, fresh: Any) -> Any:
    async def decide(ctx):  # type: ignore[no-untyped-def]
        return Event(name="go")

    return attrs.evolve(machine, effects={"deciding": decide}, guards={"ready": ready, "fresh": fresh})


def test_each_guard_is_asked_once_per_decision_however_many_candidates_name_it(tmp_path: Path) -> None:
    calls: list[str] = []

    def ready(run: RunState, event: Event) -> bool:
        calls.append("ready")
        return True

    def fresh(run: RunState, event: Event) -> bool:
        calls.append("fresh")
        return False

    runner = Runner(_bound(_one_decision_machine(tmp_path), ready, fresh))
    _drive(runner)
    assert _reasons(runner) == ["ready_holds"]
    assert calls == ["ready", "fresh"], "the second candidate reuses ready's answer"


@pytest.mark.parametrize("answer", ["coroutine", 1, None, "yes"])
def test_a_guard_must_answer_a_bool(tmp_path: Path, answer: object) -> None:
    """A coroutine (an async guard) is truthy: taken as true it would fire an edge nothing decided."""

    async def later() -> bool:
        return False

    def ready(run: RunState, event: Event) -> object:
        return later() if answer == "coroutine" else answer

    runner = Runner(_bound(_one_decision_machine(tmp_path), ready, lambda run, event: True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an async guard's coroutine is closed, not left to warn "never awaited"
        _drive(runner)
    assert runner.final.state == "internal_error"
    assert "guard 'ready'" in runner.error.message and "answers True or False" in runner.error.message  # type: ignore[union-attr]


def test_params_are_read_only_for_effects() -> None:
    async def raise_the_cap(ctx):  # type: ignore[no-untyped-def]
        ctx.run.params["max_retries"] = 1000
        return Event(name="fetched", data="item")

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "fetching": raise_the_cap})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    _drive(runner)
    _ended_in_internal_error(runner, "fetching")
    assert "does not support item assignment" in runner.error.message  # type: ignore[union-attr]
    assert runner.final.params["max_retries"] == 3


def test_a_machine_without_internal_error_fails_to_load_naming_the_fix(tmp_path: Path) -> None:
    text = (ROOT / "machines/examples/retry_fetch.yaml").read_text()
    start = text.index("  internal_error:")
    path = tmp_path / "m.yaml"
    path.write_text(text[:start] + text[text.index("transitions:") :])
    with pytest.raises(SpecError) as info:
        load_machine(path)
    message = str(info.value)
    assert f"{path}:" in message and "no state `internal_error` is declared" in message
    assert "internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}" in message


def test_internal_error_is_entered_by_the_engine_only(tmp_path: Path) -> None:
    text = (ROOT / "machines/examples/retry_fetch.yaml").read_text()
    path = tmp_path / "m.yaml"
    path.write_text(text.replace("to: failed, reason: fetch_failed", "to: internal_error, reason: fetch_failed"))
    with pytest.raises(SpecError, match="transition 'fetch_failed' goes to `internal_error`, which only the engine"):
        load_machine(path)
    path.write_text(
        text.replace("result: {is_error: true, subtype: error_during_execution}", "result: {is_error: true}")
    )
    with pytest.raises(SpecError, match=r"must be terminal with `result: \{is_error: true, subtype: error_during"):
        load_machine(path)


def test_an_undeclared_step_is_an_internal_error() -> None:
    program = Program(RETRY_FETCH)
    run = program.initial_state(ItemsData())
    forged = attrs.evolve(run, state="backing_off")  # the bookkeeping machine still says 'fetching'
    book = type("Book", (), {})()
    program._book.add_model(book, initial="fetching")
    try:
        with pytest.raises(InternalError, match="undeclared step"):
            program.step(forged, Event(name="elapsed"), book)  # type: ignore[arg-type]
    finally:
        program._book.remove_model(book)


def test_the_step_builds_run_states_and_steps_by_position_in_their_declared_field_order() -> None:
    """The engine's step gives RunState's and Step's fields by position: a reordered field would swap values."""
    assert [f.name for f in attrs.fields(RunState)] == [
        "machine", "state", "counter_names", "caps", "limits", "counters", "params", "data", "steps",
    ]  # fmt: skip
    assert [f.name for f in attrs.fields(Step)] == [
        "index", "source", "event", "reason", "dest", "progress", "counter_names", "counters", "terminal",
    ]  # fmt: skip
    program = Program(RETRY_FETCH)
    run = program.initial_state(ItemsData())
    nxt, step = program.step(run, Event(name="failed_transiently"))
    assert (nxt.machine, nxt.state, nxt.caps, nxt.params, nxt.data) == (
        run.machine,
        "backing_off",
        run.caps,
        run.params,
        run.data,
    )
    assert (nxt.steps, nxt.counter_dict()["retries"]) == (1, 1)
    assert (step.index, step.source, step.event, step.reason, step.dest) == (
        0, "fetching", "failed_transiently", "fetch_backoff", "backing_off",
    )  # fmt: skip
    assert (step.counters, step.counter_names, step.progress, step.terminal) == (
        nxt.counters,
        run.counter_names,
        False,
        False,
    )


def test_counters_outside_their_caps_cannot_exist() -> None:
    run = Program(RETRY_FETCH).initial_state(ItemsData())
    with pytest.raises(InternalError, match=r"outside 0\.\.3"):
        attrs.evolve(run, counters=(4,))


def test_cancelling_the_task_takes_the_abort_edge_re_raises_and_yields_nothing_more() -> None:
    async def main() -> tuple[Runner, list[object], list[Step]]:
        told: list[Step] = []
        runner = Runner(RETRY_FETCH, data=ItemsData(), services=Feed(["transient"], backoff_s=30), on_step=told.append)
        seen: list[object] = []

        async def consume() -> None:
            async for item in runner.run():
                seen.append(item)

        task = asyncio.create_task(consume())
        while not any(isinstance(i, Step) for i in seen):
            await asyncio.sleep(0.01)
        at_cancel = len(seen)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(seen) == at_cancel, "nothing is yielded while cancelling"
        return runner, seen, told

    runner, seen, told = asyncio.run(main())
    assert _reasons(runner) == ["fetch_backoff", "fetch_aborted"]
    assert [s.reason for s in seen if isinstance(s, Step)] == ["fetch_backoff"]
    assert told == list(runner.trace), "the abort step is recorded and told to on_step"
    assert runner.final.state == "aborted" and runner.aborted


class _BackoffWatched(Feed):
    """A feed that says when the backoff effect reads its wait: the effect then sleeps, with no step between."""

    def __init__(self, outcomes: list[str], backoff_s: float) -> None:
        self.waiting = asyncio.Event()
        super().__init__(outcomes, backoff_s=backoff_s)

    @property  # type: ignore[override]  # Feed's plain attribute, read here as the effect starts its wait
    def backoff_s(self) -> float:
        self.waiting.set()
        return self._backoff_s

    @backoff_s.setter
    def backoff_s(self, value: float) -> None:
        self._backoff_s = value


def _cancelled_while_backing_off(machine: Any) -> Runner:
    """A run of ``machine`` on one transient failure, cancelled once it backs off (the first step taken)."""

    async def main() -> Runner:
        feed = _BackoffWatched(["transient"], backoff_s=30)
        runner = Runner(machine, data=ItemsData(), services=feed)

        async def consume() -> None:
            async for _ in runner.run():
                pass

        task = asyncio.create_task(consume())
        await feed.waiting.wait()  # the run is in the effect of the state it stepped to
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return runner

    return asyncio.run(main())


def test_an_abort_handler_that_raises_ends_in_internal_error_and_the_cancellation_still_propagates() -> None:
    def broken(run: RunState, event: Event) -> ItemsData:
        raise RuntimeError("cleanup failed")

    machine = attrs.evolve(RETRY_FETCH, handlers={**RETRY_FETCH.handlers, "fetch_aborted": broken})

    runner = _cancelled_while_backing_off(machine)
    _ended_in_internal_error(runner, "backing_off")
    assert "edge handler of 'fetch_aborted' raised RuntimeError" in runner.error.message  # type: ignore[union-attr]


def test_closing_the_generator_ends_the_run_in_a_terminal_state() -> None:
    async def main() -> Runner:
        runner = Runner(RETRY_FETCH, data=ItemsData(), services=Feed(["ok"], backoff_s=30))
        gen = runner.run()
        first = await gen.__anext__()
        assert first == "fetch attempt -> ok"
        await gen.aclose()
        return runner

    runner = asyncio.run(main())
    assert runner.final.state == "aborted"
    assert _reasons(runner) == ["item_fetched", "fetch_aborted"], "the finished fetch is kept, then the abort edge"


def test_an_effect_cancelled_part_way_hands_the_abort_edge_the_data_it_saved() -> None:
    """Work an effect finished before the interrupt is not reported as undone (``EffectContext.save``)."""

    async def wait_having_done_part(ctx):  # type: ignore[no-untyped-def]
        ctx.save(attrs.evolve(ctx.run.data, done=("half-way",)))
        ctx.services.waiting.set()  # part done: the cancel comes now (_BackoffWatched)
        await asyncio.sleep(30)

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "backing_off": wait_having_done_part})
    seen: list[ItemsData] = []

    def aborted(run: RunState, event: Event) -> ItemsData:
        seen.append(run.data)
        return run.data

    machine = attrs.evolve(machine, handlers={**machine.handlers, "fetch_aborted": aborted})

    runner = _cancelled_while_backing_off(machine)
    assert _reasons(runner) == ["fetch_backoff", "fetch_aborted"]
    assert seen == [ItemsData(done=("half-way",))] and runner.final.data.done == ("half-way",)


def test_saved_data_is_forgotten_once_the_effect_returns() -> None:
    async def fetch_saving(ctx):  # type: ignore[no-untyped-def]
        ctx.save(attrs.evolve(ctx.run.data, done=("never kept",)))
        return Event(name="fetched", data="item-1")

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "fetching": fetch_saving})

    async def main() -> Runner:
        runner = Runner(machine, data=ItemsData(), services=Feed(["ok"], backoff_s=30))
        gen = runner.run()
        await gen.__anext__()
        await gen.aclose()
        return runner

    runner = asyncio.run(main())
    assert runner.final.state == "aborted" and "never kept" not in runner.final.data.done


def _breaker_variant(tmp_path: Path, old: str, new: str) -> Any:
    text = (ROOT / "machines/examples/circuit_breaker.yaml").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "circuit_breaker.yaml"
    path.write_text(text.replace(old, new))
    return load_machine(path)


def test_a_run_that_would_break_an_at_most_property_ends_in_internal_error_naming_it(tmp_path: Path) -> None:
    """The watch is independent of the counters: here the property promises fewer calls than the cap allows."""
    machine = _breaker_variant(tmp_path, "max: calls}", "max: 2}")
    runner = Runner(machine, services=Feed(["ok"] * 5))
    _drive(runner)
    assert _reasons(runner) == ["call_succeeded", "call_succeeded", "internal_error"]
    assert runner.final.counter_dict()["calls_made"] == 2, "the breaking step was not taken"
    assert "property 'calls_per_run' broken at run time" in runner.error.message  # type: ignore[union-attr]
    assert "'call_succeeded' taken 3 times, above 2" in runner.error.message  # type: ignore[union-attr]


def test_a_counter_that_stops_counting_in_a_row_is_caught_at_run_time(tmp_path: Path) -> None:
    """Without `consecutive`, a success no longer resets the failures: the count is a total, not a streak."""
    machine = _breaker_variant(tmp_path, "    consecutive: [call_succeeded, call_succeeded_last]\n", "")
    runner = Runner(machine, services=Feed(["fail", "ok", "fail", "fail"]))
    _drive(runner)
    assert _reasons(runner) == ["call_retry", "call_succeeded", "internal_error"]
    assert "property 'failures_until_success' broken at run time" in runner.error.message  # type: ignore[union-attr]
    assert "its counter is 2 after 1 in a row" in runner.error.message  # type: ignore[union-attr]


def test_a_reset_the_edge_no_longer_makes_is_caught_at_run_time(tmp_path: Path) -> None:
    """A ``resets`` property is watched at every step: here a success keeps the failures it should clear."""
    text = (ROOT / "machines/examples/circuit_breaker.yaml").read_text()
    for old, new in (
        ("    consecutive: [call_succeeded, call_succeeded_last]\n", ""),
        (
            "properties:\n",
            "properties:\n  a_success_clears_the_failures:\n"
            "    resets: {after: [call_succeeded], counters: [consecutive_failures]}\n"
            "    doc: a success closes the breaker's count\n",
        ),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "circuit_breaker.yaml"
    path.write_text(text)
    runner = Runner(load_machine(path), services=Feed(["fail", "ok", "ok"]))
    _drive(runner)
    assert _reasons(runner) == ["call_retry", "internal_error"], "the success that kept the count was not taken"
    message = runner.error.message  # type: ignore[union-attr]
    assert "property 'a_success_clears_the_failures' broken at run time" in message
    assert "consecutive_failures is 1 after 'call_succeeded', not 0" in message


def test_the_shipped_examples_keep_their_properties_on_every_path_the_tests_drive() -> None:
    """The control: the breaker's own runs never trip the watch."""
    for outcomes in (["fail", "fail", "ok"] * 3, ["ok"] * 6, ["fail"] * 5):
        runner = Runner(BREAKER, services=Feed(outcomes))
        _drive(runner)
        assert runner.error is None and runner.final.state in ("finished", "breaker_open")


def test_a_run_restored_mid_streak_is_not_blamed_for_the_steps_before_it() -> None:
    """The watch of a restored run starts a streak at its counter's value (the earlier steps are not seen)."""
    first = Runner(BREAKER, services=Feed(["fail", "fail"]))

    async def two_steps() -> None:
        await first.step_once()
        await first.step_once()

    asyncio.run(two_steps())
    assert first.final.counter_dict()["consecutive_failures"] == 2
    resumed = Runner(BREAKER, services=Feed(["fail", "ok"] * 4), state=first.final)
    _drive(resumed)
    assert resumed.error is None
    assert _reasons(resumed)[:2] == ["call_retry", "call_succeeded"], "the third failure in a row, then a success"


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_raised_by_the_abort_edges_own_handler_still_ends_the_run(error: type[BaseException]) -> None:
    """A second Ctrl-C while the abort edge cleans up: the run ends in internal_error, and the interrupt goes on."""

    def interrupted(run: RunState, event: Event) -> ItemsData:
        raise error()

    machine = attrs.evolve(RETRY_FETCH, handlers={**RETRY_FETCH.handlers, "fetch_aborted": interrupted})

    async def stop(ctx):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    machine = attrs.evolve(machine, effects={**machine.effects, "fetching": stop})
    runner = Runner(machine, data=ItemsData(), services=Feed([]))
    with pytest.raises(error):
        asyncio.run(_consume(runner))
    _ended_in_internal_error(runner, "fetching")
    assert runner.aborted
    message = runner.error.message  # type: ignore[union-attr]
    assert (
        f"the abort edge 'fetch_aborted' (its state's exit or its handler) was interrupted by {error.__name__}"
        in message
    )


def test_an_interrupt_in_the_abort_handler_after_a_cancellation_still_ends_the_run() -> None:
    def interrupted(run: RunState, event: Event) -> ItemsData:
        raise KeyboardInterrupt

    machine = attrs.evolve(RETRY_FETCH, handlers={**RETRY_FETCH.handlers, "fetch_aborted": interrupted})
    feed = _BackoffWatched(["transient"], backoff_s=30)
    runner = Runner(machine, data=ItemsData(), services=feed)

    async def main() -> None:
        task = asyncio.create_task(_consume(runner))
        await feed.waiting.wait()  # into the backoff
        task.cancel()
        await task

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    _ended_in_internal_error(runner, "backing_off")


def _rewriting(field: str, value: Any) -> Any:
    async def rewrite(ctx):  # type: ignore[no-untyped-def]
        object.__setattr__(ctx.run, field, value)  # a frozen record rewritten in place
        return Event(name="elapsed")

    return rewrite


@pytest.mark.parametrize("field", ["counters", "state", "steps"])
def test_an_effect_that_rewrites_the_frozen_run_state_ends_the_run_in_internal_error(field: str) -> None:
    """Resetting the retries by rewriting the run state in place would give the item a new budget: refused."""
    value = {"counters": (0, 0), "state": "fetching", "steps": 0}[field]
    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "backing_off": _rewriting(field, value)})
    runner = Runner(machine, data=ItemsData(), services=Feed(["transient"] * 10))
    _drive(runner)
    _ended_in_internal_error(runner, "backing_off")
    assert _reasons(runner) == ["fetch_backoff", "internal_error"]
    assert runner.trace[-1].counter_dict()["retries"] == 1, "the count the effect tried to reset is kept"
    message = runner.error.message  # type: ignore[union-attr]
    assert f"effect of state 'backing_off' rewrote the run state it was given ({field})" in message


def test_an_edge_handler_that_rewrites_the_counters_it_was_given_ends_the_run_in_internal_error() -> None:
    def reset(run: RunState, event: Event) -> ItemsData:
        object.__setattr__(run, "counters", (0, *run.counters[1:]))  # the item's retries, reset in place
        return run.data

    machine = attrs.evolve(RETRY_FETCH, handlers={**RETRY_FETCH.handlers, "item_fetched": reset})
    runner = Runner(machine, data=ItemsData(), services=Feed(["transient", "ok"]))
    _drive(runner)
    _ended_in_internal_error(runner, "fetching")
    assert "edge handler of 'item_fetched' rewrote the run state it was given (counters)" in runner.error.message  # type: ignore[union-attr]


def _retry_fetch_with(tmp_path: Path, prop: str) -> Any:
    text = (ROOT / "machines/examples/retry_fetch.yaml").read_text()
    assert "properties:" not in text
    path = tmp_path / "retry_fetch.yaml"
    path.write_text(text.replace("states:\n", f"properties:\n{prop}states:\n", 1))
    return load_machine(path)


def test_a_step_into_a_state_before_the_step_it_must_follow_is_caught_at_run_time(tmp_path: Path) -> None:
    """A ``preceded`` property is watched at every step: here an item is stored without a backoff first."""
    prop = (
        "  stored_only_after_a_wait:\n"
        "    preceded: {states: [storing], by: [backing_off], per: turn}\n"
        "    doc: an item is stored only after a backoff in its turn\n"
    )
    runner = Runner(_retry_fetch_with(tmp_path, prop), data=ItemsData(), services=Feed(["transient", "ok", "ok"]))
    _drive(runner)
    assert _reasons(runner) == ["fetch_backoff", "fetch_retry", "item_fetched", "next_item", "internal_error"]
    message = runner.error.message  # type: ignore[union-attr]
    assert "property 'stored_only_after_a_wait' broken at run time" in message
    assert "no step into backing_off since the turn began, and 'item_fetched' enters one of its states" in message


def test_an_edge_ending_where_its_kind_may_not_end_is_caught_at_run_time(tmp_path: Path) -> None:
    prop = (
        "  a_spent_budget_is_no_error:\n"
        "    ends: [{kinds: [exhausted], result: {is_error: false}}]\n"
        "    doc: a made-up promise the machine breaks\n"
    )
    runner = Runner(_retry_fetch_with(tmp_path, prop), data=ItemsData(), services=Feed(["transient"] * 10))
    _drive(runner)
    assert _reasons(runner)[-2:] == ["fetch_retry", "internal_error"], "the step into 'failed' is not taken"
    message = runner.error.message  # type: ignore[union-attr]
    assert "property 'a_spent_budget_is_no_error' broken at run time" in message
    assert "'retries_exhausted' (from 'fetching') goes to the terminal state 'failed'" in message


def test_an_edge_handler_that_breaks_its_contract_ends_the_run_in_internal_error(tmp_path: Path) -> None:
    """``changes:`` says what an edge's ``do`` must change; a handler that leaves it (the item never recorded,
    so the same item would be fetched again and again) ends the run at that step."""
    text = (ROOT / "machines/examples/retry_fetch.yaml").read_text()
    old = "reason: item_fetched, do: .effects.record_item}"
    assert text.count(old) == 1
    path = tmp_path / "retry_fetch.yaml"
    path.write_text(text.replace(old, "reason: item_fetched, do: .effects.record_item, changes: [done]}"))
    machine = load_machine(path)
    kept = Runner(machine, data=ItemsData(), services=Feed(["ok"] * 3))
    _drive(kept)
    assert kept.error is None and kept.final.state == "done", "record_item keeps the contract"

    def forgets(run: RunState, event: Event) -> ItemsData:
        return run.data

    broken = Runner(
        attrs.evolve(machine, handlers={**machine.handlers, "item_fetched": forgets}),
        data=ItemsData(),
        services=Feed(["ok"] * 3),
    )
    _drive(broken)
    _ended_in_internal_error(broken, "fetching")
    message = broken.error.message  # type: ignore[union-attr]
    assert (
        "edge handler of 'item_fetched' left done as it was; its edge's contract (`changes:`) says it changes it"
        in message
    )


def test_a_contract_without_a_handler_to_keep_it_is_refused_at_load(tmp_path: Path) -> None:
    text = (ROOT / "machines/examples/retry_fetch.yaml").read_text()
    old = "{from: fetching, event: failed_for_good, to: failed, reason: fetch_failed}"
    assert text.count(old) == 1
    path = tmp_path / "retry_fetch.yaml"
    path.write_text(
        text.replace(old, "{from: fetching, event: failed_for_good, to: failed, reason: fetch_failed, changes: [done]}")
    )
    with pytest.raises(SpecError) as info:
        load_machine(path)
    assert "transition 'fetch_failed' promises to change ['done'] (`changes:`) but has no `do`" in str(info.value)
