"""Property tests: random small valid machines driven by random event sequences.

The runtime only takes declared edges, never exceeds a cap, and every
(state, counters) configuration it visits is in the checker's reachable set.
"""

from __future__ import annotations

import asyncio
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from queryloop.fsm import Event, Runner, RunState, SpecError, check_spec, parse_machine

EVENTS = ("e0", "e1", "e2")
GUARDS = {"ga": "queryloop.fsm.testing.flag_a", "gb": "queryloop.fsm.testing.flag_b"}


@st.composite
def machines(draw: st.DrawFn) -> str:
    n = draw(st.integers(min_value=1, max_value=4))
    live = [f"s{i}" for i in range(n)]
    ends = ["done", "failed"]
    counters = {
        f"c{i}": {
            "cap": draw(st.integers(min_value=0, max_value=3)),
            "scope": draw(st.sampled_from(["request", "turn", "session"])),
        }
        for i in range(draw(st.integers(min_value=0, max_value=2)))
    }
    states: dict[str, Any] = {}
    transitions: list[dict[str, Any]] = []
    reason = iter(range(1000))
    for s in live:
        emits = draw(st.lists(st.sampled_from(EVENTS), min_size=1, max_size=3, unique=True))
        states[s] = {"effect": "queryloop.fsm.testing.scripted", "emits": emits}
        for e in emits:
            for _ in range(draw(st.integers(min_value=0, max_value=2))):
                t: dict[str, Any] = {
                    "from": s,
                    "event": e,
                    "to": draw(st.sampled_from(live + ends)),
                    "reason": f"r{next(reason)}",
                }
                if draw(st.booleans()):
                    t["guards"] = draw(st.lists(st.sampled_from(sorted(GUARDS)), min_size=1, max_size=2, unique=True))
                if counters and draw(st.booleans()):
                    t["counter"] = draw(st.sampled_from(sorted(counters)))
                if "guards" not in t and "counter" not in t:
                    t["guards"] = ["ga"]  # keep the group's catch-all last
                if counters and draw(st.booleans()):
                    t["resets"] = [draw(st.sampled_from(sorted(counters)))]
                t["progress"] = draw(st.booleans())
                t["completes_request"] = draw(st.booleans())
                transitions.append(t)
            transitions.append(
                {
                    "from": s,
                    "event": e,
                    "to": draw(st.sampled_from(live + ends)),
                    "reason": f"r{next(reason)}",
                    "progress": draw(st.booleans()),
                }
            )
    for s in [*ends, "aborted"]:
        states[s] = {"terminal": True}
    transitions.append({"from": live, "event": "abort", "to": "aborted", "reason": "cancelled"})
    doc = {
        "schema_version": 1,
        "machine": "random",
        "initial": "s0",
        "events": {e: "" for e in (*EVENTS, "abort")},
        "guards": GUARDS,
        "counters": counters,
        "states": states,
        "transitions": transitions,
    }
    return yaml.safe_dump(doc, sort_keys=False)


class RandomWorld:
    """Services for queryloop.fsm.testing.scripted: hypothesis picks each event and every guard value."""

    def __init__(self, data: st.DataObject, emits: dict[str, tuple[str, ...]], budget: int) -> None:
        self.data = data
        self.emits = emits
        self.budget = budget

    def next_event(self, run: RunState) -> Event:
        self.budget -= 1  # the driver cancels the run once it is spent (effects never return the abort event)
        name = self.data.draw(st.sampled_from(self.emits[run.state]))
        flags = self.data.draw(st.fixed_dictionaries({"a": st.booleans(), "b": st.booleans()}))
        return Event(name=name, data=flags)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=machines(), data=st.data())
def test_runtime_stays_inside_the_declared_and_checked_configurations(text: str, data: st.DataObject) -> None:
    try:
        machine = parse_machine(text, "<random>")
    except SpecError:
        assume(False)
        return
    spec = machine.spec
    report = check_spec(spec)
    declared = {(t.source, t.reason, t.dest) for t in spec.transitions}
    caps = [spec.cap_of(c) for c in spec.counters]
    world = RandomWorld(data, {s.name: s.emits for s in spec.states}, budget=data.draw(st.integers(1, 40)))
    runner = Runner(machine, services=world)

    async def drive() -> None:
        steps = runner.run()
        async for _ in steps:
            if world.budget <= 0:
                await steps.aclose()  # the abort edges are taken from wherever the run stands
                break

    asyncio.run(drive())
    assert runner.final.state in spec.terminals
    config = (spec.initial, (0,) * len(caps))
    assert config in report.reachable
    for step in runner.trace:
        assert (step.source, step.reason, step.dest) in declared
        assert all(cap is None or v <= cap for v, cap in zip(step.counters, caps, strict=True))
        config = (step.dest, tuple(v if cap is not None else 0 for v, cap in zip(step.counters, caps, strict=True)))
        assert config in report.reachable, f"runtime visited {config}, which the checker never explored"
