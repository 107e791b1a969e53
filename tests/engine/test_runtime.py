"""The runtime takes only declared edges, owns counters and caps, and ends every run in a terminal."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest

from queryloop.fsm import Event, HandlerError, InternalError, Program, Runner, RunState, Step, load_machine
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


def test_an_effect_returning_an_undeclared_event_is_a_handler_error() -> None:
    async def bad(ctx):  # type: ignore[no-untyped-def]
        return Event(name="stored")

    machine = attrs.evolve(RETRY_FETCH, effects={**RETRY_FETCH.effects, "fetching": bad})
    with pytest.raises(HandlerError, match="returned event 'stored', which the state does not declare"):
        _drive(Runner(machine, data=ItemsData(), services=Feed([])))


def test_an_edge_handler_may_not_choose_the_state() -> None:
    def sneaky(run: RunState, event: Event) -> RunState:
        return attrs.evolve(run, state="done")

    machine = attrs.evolve(RETRY_FETCH, handlers={"item_fetched": sneaky})
    with pytest.raises(HandlerError, match="only `data` changed"):
        _drive(Runner(machine, data=ItemsData(), services=Feed([])))


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


def test_counters_outside_their_caps_cannot_exist() -> None:
    run = Program(RETRY_FETCH).initial_state(ItemsData())
    with pytest.raises(InternalError, match=r"outside 0\.\.3"):
        attrs.evolve(run, counters=(4,))


def test_cancelling_the_task_takes_the_abort_edge_and_re_raises() -> None:
    async def main() -> Runner:
        runner = Runner(RETRY_FETCH, data=ItemsData(), services=Feed(["transient"], backoff_s=30))
        seen: list[object] = []

        async def consume() -> None:
            async for item in runner.run():
                seen.append(item)

        task = asyncio.create_task(consume())
        while not any(isinstance(i, Step) for i in seen):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert isinstance(seen[-1], Step) and seen[-1].reason == "fetch_aborted", "the abort step is still yielded"
        return runner

    runner = asyncio.run(main())
    assert _reasons(runner) == ["fetch_backoff", "fetch_aborted"]
    assert runner.final.state == "aborted" and runner.aborted


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
