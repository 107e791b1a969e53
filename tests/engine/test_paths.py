"""Planning shortest event paths: every transition gets one, the runtime takes each exactly, a realiser prunes.

Random small machines (the same shape as the property tests') check the planner's model
of the engine — candidates in YAML order, counter caps and resets, guards consulted
and short-circuited — against the runtime itself: each planned path, its events carrying
the planned guard values, is replayed step for step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from queryloop.fsm import Event, Runner, SpecError, check_spec, load_machine, parse_machine
from queryloop.fsm.testing import Script
from queryloop.fsm.verify.paths import PlannedPath, PlannedStep, plan_paths
from queryloop.machines import MACHINES_DIR, shipped_machines

GUARD_FLAGS = {"ga": "a", "gb": "b"}  # guard name -> the event-data key queryloop.fsm.testing reads


def _well_formed(spec: Any, path: PlannedPath) -> None:
    assert path.steps[0].source == spec.initial
    for before, after in zip(path.steps, path.steps[1:], strict=False):
        assert before.dest == after.source and not before.terminal
    assert path.steps[-1].terminal
    taken = path.steps[path.taken_at]
    assert (taken.source, taken.reason) == path.target


def test_every_transition_of_every_shipped_machine_has_a_shortest_abstract_path() -> None:
    for file in shipped_machines():
        spec = load_machine(file, bind=False).spec
        plan = plan_paths(spec)
        assert not plan.missing, plan.missing
        assert set(plan.paths) == {(t.source, t.reason) for t in spec.transitions}
        for path in plan.paths.values():
            _well_formed(spec, path)


def test_the_path_to_a_spent_budget_goes_round_the_retry_loop_up_to_the_cap() -> None:
    spec = load_machine(MACHINES_DIR / "examples" / "retry_fetch.yaml", bind=False).spec
    path = plan_paths(spec, params={"max_retries": 2}).paths[("fetching", "retries_exhausted")]
    assert path.reasons == ("fetch_backoff", "fetch_retry", "fetch_backoff", "fetch_retry", "retries_exhausted")
    assert [s.counters["retries"] for s in path.steps] == [0, 1, 1, 2, 2]


def test_only_a_counter_whose_cap_the_caller_leaves_unset_is_an_open_choice() -> None:
    spec = load_machine(MACHINES_DIR / "examples" / "retry_fetch.yaml", bind=False).spec
    capped = plan_paths(spec)
    assert all(not s.open_caps for p in capped.paths.values() for s in p.steps)
    unset = plan_paths(spec, params={"max_retries": None})
    exhausted = unset.paths[("fetching", "retries_exhausted")]
    assert exhausted.reasons == ("retries_exhausted",) and exhausted.steps[0].open_caps == {"retries": False}
    assert unset.paths[("fetching", "fetch_backoff")].steps[0].open_caps == {"retries": True}


class NoTransientFailures:
    """A realiser for retry_fetch whose source never fails transiently."""

    def start(self) -> None:
        return None

    def refuse(self, step: PlannedStep) -> str | None:
        return "this source never fails transiently" if step.event == "failed_transiently" else None

    def advance(self, data: None, step: PlannedStep) -> Iterable[tuple[None, Any]]:
        return [(None, None)]


def test_what_the_realiser_refuses_leaves_its_edges_missing_with_the_reason() -> None:
    spec = load_machine(MACHINES_DIR / "examples" / "retry_fetch.yaml", bind=False).spec
    plan = plan_paths(spec, realiser=NoTransientFailures())
    assert set(plan.missing) == {
        ("fetching", "fetch_backoff"),
        ("fetching", "retries_exhausted"),
        ("backing_off", "fetch_retry"),
        ("backing_off", "fetch_aborted"),
    }
    assert "this source never fails transiently" in plan.missing[("fetching", "fetch_backoff")]
    assert ("storing", "next_item") in plan.paths


class FailsOnlyAfterTwoSuccesses:
    """A realiser for circuit_breaker: the service fails only once it has answered twice."""

    def start(self) -> int:
        return 0

    def refuse(self, step: PlannedStep) -> str | None:
        return None

    def advance(self, data: int, step: PlannedStep) -> Iterable[tuple[int, Any]]:
        if step.event == "failed" and data < 2:
            return []
        successes = min(2, data + (step.event == "succeeded"))
        return [(successes, f"success {successes}" if step.event == "succeeded" else None)]


def test_the_realisers_state_makes_the_search_find_the_shortest_realisable_path() -> None:
    spec = load_machine(MACHINES_DIR / "examples" / "circuit_breaker.yaml", bind=False).spec
    plan = plan_paths(spec, realiser=FailsOnlyAfterTwoSuccesses())
    path = plan.paths[("calling", "failure_breaker")]
    assert path.reasons == ("call_succeeded",) * 2 + ("call_retry",) * 3 + ("failure_breaker",)
    assert [s.note for s in path.steps[:2]] == ["success 1", "success 2"]
    assert path.end == 2


# ---- random machines: the runtime takes every planned path --------------------------------------

EVENTS = ("e0", "e1", "e2")


@st.composite
def machines(draw: st.DrawFn) -> str:
    live = [f"s{i}" for i in range(draw(st.integers(min_value=1, max_value=4)))]
    ends = ["done", "failed"]
    counters = {
        f"c{i}": {"cap": draw(st.integers(0, 3)), "scope": draw(st.sampled_from(["request", "turn", "run"]))}
        for i in range(draw(st.integers(0, 2)))
    }
    states: dict[str, Any] = {s: {"terminal": True} for s in (*ends, "aborted")}
    transitions: list[dict[str, Any]] = []
    number = iter(range(1000))
    for s in live:
        emits = draw(st.lists(st.sampled_from(EVENTS), min_size=1, max_size=3, unique=True))
        states[s] = {"effect": "queryloop.fsm.testing.scripted", "emits": emits}
        for e in emits:
            for _ in range(draw(st.integers(0, 2))):
                t: dict[str, Any] = {"from": s, "event": e, "to": draw(st.sampled_from(live + ends))}
                t["reason"] = f"r{next(number)}"
                if draw(st.booleans()):
                    t["guards"] = draw(st.lists(st.sampled_from(sorted(GUARD_FLAGS)), min_size=1, max_size=2))
                    t["guards"] = list(dict.fromkeys(t["guards"]))
                if counters and draw(st.booleans()):
                    t["counter"] = draw(st.sampled_from(sorted(counters)))
                if "guards" not in t and "counter" not in t:
                    t["guards"] = ["ga"]
                if counters and draw(st.booleans()):
                    t["resets"] = [draw(st.sampled_from(sorted(counters)))]
                t["progress"] = draw(st.booleans())
                if draw(st.booleans()):
                    t["ends"] = "request"
                transitions.append(t)
            last = {"from": s, "event": e, "to": draw(st.sampled_from(live + ends)), "reason": f"r{next(number)}"}
            transitions.append({**last, "progress": draw(st.booleans())})
    states["internal_error"] = {"terminal": True, "result": {"is_error": True, "subtype": "error_during_execution"}}
    transitions.append({"from": live, "event": "abort", "to": "aborted", "reason": "cancelled"})
    doc = {
        "schema_version": 1,
        "machine": "random",
        "initial": "s0",
        "events": {e: "" for e in (*EVENTS, "abort")},
        "guards": {g: f"queryloop.fsm.testing.flag_{flag}" for g, flag in GUARD_FLAGS.items()},
        "scopes": ["request", "turn"],
        "counters": counters,
        "states": states,
        "transitions": transitions,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def _replay(machine: Any, path: PlannedPath) -> list[str]:
    """Drive the runtime with the path's events, each carrying its planned guard values; abort by closing."""
    aborts = path.steps[-1].event == machine.spec.abort_event
    planned = path.steps[:-1] if aborts else path.steps
    script = Script(
        Event(name=s.event, data={flag: s.guards.get(g, False) for g, flag in GUARD_FLAGS.items()}) for s in planned
    )
    runner = Runner(machine, services=script)

    async def drive() -> None:
        steps = runner.run()
        async for _ in steps:
            if aborts and len(runner.trace) == len(planned):
                await steps.aclose()
                break

    asyncio.run(drive())
    return [s.reason for s in runner.trace]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=machines())
def test_the_runtime_takes_every_planned_path_step_for_step(text: str) -> None:
    try:
        machine = parse_machine(text, "<random>")
    except SpecError:
        assume(False)
        return
    spec = machine.spec
    plan = plan_paths(spec)
    dead = {f.reasons[0] for f in check_spec(spec).findings if f.check == "dead_edge"}
    assert not dead & {reason for _, reason in plan.paths}, "the planner found a path the checker calls impossible"
    for path in plan.paths.values():
        _well_formed(spec, path)
        if len(path.steps) == 1 and path.steps[0].event == spec.abort_event:
            continue  # an abort before the first effect: nothing to drive
        assert _replay(machine, path) == list(path.reasons)
