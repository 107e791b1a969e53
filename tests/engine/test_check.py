"""The model checker passes on shipped machines and reports every seeded bug with the right message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from queryloop.fsm import MachineSpec, SpecError, StateSpec, TransitionSpec, check_spec, load_machine
from queryloop.fsm.spec import CounterSpec
from queryloop.machines import shipped_machines

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ROOT = FIXTURES.parent.parent

BUGS = FIXTURES / "bugs"


@pytest.mark.parametrize("path", shipped_machines(), ids=lambda p: p.stem)
def test_every_shipped_machine_passes_every_check(path) -> None:  # type: ignore[no-untyped-def]
    report = check_spec(load_machine(path).spec)
    assert report.ok, [f.message for f in report.findings]
    assert report.configurations > 0
    assert report.worst_case
    if path.stem == "query_loop":  # the README quotes the figure; it must be the checker's
        readme = (ROOT / "README.md").read_text()
        quoted = re.search(r"at\s+most\s+\*\*(\d+) model requests per turn\*\*", readme)
        assert quoted and int(quoted.group(1)) == report.worst_case["model_requests"]
        shape = re.search(r"\u2014 (\d+) states, (\d+) transitions", readme)
        assert shape and (int(shape.group(1)), int(shape.group(2))) == (report.states, report.transitions)
        explored = re.search(r"about (\d+) (\d{3}) configurations", readme)
        assert explored and abs(int(explored.group(1) + explored.group(2)) - report.configurations) < 1000


def test_recovery_loop_without_a_counter_is_reported_as_unbounded() -> None:
    report = check_spec(load_machine(BUGS / "recovery_loop_without_counter.yaml").spec)
    termination = [f for f in report.findings if f.check == "termination"]
    assert termination[0].states == ("calling", "waiting")
    assert set(termination[0].reasons) == {"api_retry", "retry_elapsed"}
    assert "no edge in it increments a capped counter" in termination[0].message


def test_counter_reset_inside_its_own_loop_is_reported() -> None:
    report = check_spec(load_machine(BUGS / "counter_reset_inside_loop.yaml").spec)
    messages = [f.message for f in report.findings if f.check == "termination"]
    assert any("'retries' are reset inside the cycle" in m for m in messages)
    product = [f for f in report.findings if "product has a cycle" in f.message]
    assert product and product[0].trace, "the product cycle carries a counterexample"


def test_unreachable_state_is_a_spec_error_with_its_line() -> None:
    with pytest.raises(SpecError) as info:
        load_machine(BUGS / "unreachable_state.yaml")
    problem = info.value.first
    assert problem.line == 8
    assert "state 'orphan' is unreachable from 'calling'" in problem.message


def test_missing_catch_all_is_a_spec_error_naming_the_guarded_edge() -> None:
    with pytest.raises(SpecError) as info:
        load_machine(BUGS / "missing_catch_all.yaml")
    assert "end with 'model_fallback', which is guarded" in str(info.value)
    assert info.value.first.line == 14


def test_edge_shadowed_by_an_unguarded_candidate_is_reported_dead() -> None:
    report = check_spec(load_machine(BUGS / "dead_edge.yaml").spec)
    dead = {f.reasons[0]: f.message for f in report.findings if f.check == "dead_edge"}
    assert set(dead) == {"api_retry", "retries_exhausted"}
    assert "shadowed by the unguarded 'gave_up' above it" in dead["api_retry"]


def _spec(transitions: list[TransitionSpec], counters: tuple[CounterSpec, ...] = ()) -> MachineSpec:
    return MachineSpec(
        name="m",
        path="<test>",
        initial="a",
        events={"go": "", "abort": ""},
        counters=counters,
        states=(
            StateSpec(name="a", effect="queryloop.fsm.testing.scripted", emits=("go",)),
            StateSpec(name="end", terminal=True),
        ),
        transitions=(*transitions, TransitionSpec(source="a", event="abort", dest="end", reason="cancelled")),
    )


def test_a_capped_catch_all_is_found_stuck_with_a_counterexample_trace() -> None:
    # load() refuses such a machine; the checker must still find it when handed the records
    spec = _spec(
        [TransitionSpec(source="a", event="go", dest="a", reason="again", counter="n")],
        counters=(CounterSpec(name="n", cap=2),),
    )
    report = check_spec(spec)
    stuck = [f for f in report.findings if f.check == "stuck"]
    assert stuck and "no edge can fire on 'go'" in stuck[0].message
    assert stuck[0].trace[-1] == "a {n=2}"


def test_worst_case_counts_effect_invocations_between_progress_steps() -> None:
    report = check_spec(load_machine(ROOT / "machines/examples/retry_fetch.yaml").spec, {"max_retries": 5})
    assert report.worst_case["queryloop.machines.examples.effects.fetch_item"] == 6
    assert report.worst_case["queryloop.machines.examples.effects.wait_backoff"] == 5


def test_a_state_that_cannot_reach_a_terminal_is_a_dead_end() -> None:
    spec = MachineSpec(
        name="m",
        path="<test>",
        initial="a",
        events={"go": "", "abort": ""},
        states=(
            StateSpec(name="a", effect="queryloop.fsm.testing.scripted", emits=("go",)),
            StateSpec(name="b", effect="queryloop.fsm.testing.scripted", emits=("go",)),
            StateSpec(name="end", terminal=True),
        ),
        transitions=(
            TransitionSpec(source="a", event="go", dest="b", reason="to_b", progress=True),
            TransitionSpec(source="b", event="go", dest="b", reason="spin", progress=True),
        ),
    )
    report = check_spec(spec)
    assert any(f.check == "dead_end" and "'a' can never reach a terminal" in f.message for f in report.findings)
