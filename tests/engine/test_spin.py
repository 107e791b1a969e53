"""SPIN, the second checker, agrees with ours: same configurations, same verdicts.

Each machine is exported as Promela (``fsm.verify.spin``), verified by pan (a safety search
whose stored states are the configurations, and a monitor search: the declared
properties as assertions and the liveness claim as LTL), and compared with
:func:`check_spec`. Mutants of a small machine show each monitor fails with its trail.
``spin`` and ``gcc`` are installed by tools/test.sh.
"""

from __future__ import annotations

import gc
import json
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from queryloop.frontends.cli import main
from queryloop.fsm import (
    CheckReport,
    CounterSpec,
    MachineSpec,
    SpecError,
    SpinNotFound,
    SpinReport,
    StateSpec,
    TransitionSpec,
    check_spec,
    load_machine,
    parse_machine,
    spin_check,
    to_promela,
)
from queryloop.fsm.verify import promela as promela_module
from queryloop.fsm.verify.spin import derived_resets, spin_beside, spin_settings
from queryloop.machines import shipped_machines

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = shipped_machines()
INTERNAL_ERROR = "internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}"

RECOVERY_LOOP_WITHOUT_COUNTER = f"""
schema_version: 1
machine: unbounded_retry
doc: a retry loop that nothing bounds
initial: calling
events: {{ok: "", overloaded: "", waited: "", abort: ""}}
states:
  calling: {{effect: queryloop.fsm.testing.scripted, emits: [ok, overloaded]}}
  waiting: {{effect: queryloop.fsm.testing.scripted, emits: [waited]}}
  done: {{terminal: true}}
  aborted: {{terminal: true}}
  {INTERNAL_ERROR}
transitions:
  - {{from: calling, event: ok, to: done, reason: answered}}
  - {{from: calling, event: overloaded, to: waiting, reason: api_retry}}
  - {{from: waiting, event: waited, to: calling, reason: retry_elapsed}}
  - {{from: [calling, waiting], event: abort, to: aborted, reason: cancelled}}
"""

# `other_retry` is shadowed: whenever `transient` holds, `transient_exhausted` (same guard, no
# counter) fires before it. Modelled per edge rather than per guard name, `other` would count.
SHADOWED_EDGE = f"""
schema_version: 1
machine: shadowed_edge
doc: a guard shadows a later edge
initial: calling
params:
  max_tries: {{default: 2, max: 10}}
events: {{ok: "", failed: "", waited: "", abort: ""}}
guards:
  transient: {{call: queryloop.fsm.testing.flag_a}}
scopes: [request, turn]
counters:
  tries: {{cap: max_tries, scope: run}}
  other: {{cap: 2, scope: run}}
states:
  calling: {{effect: queryloop.fsm.testing.scripted, emits: [ok, failed]}}
  waiting: {{effect: queryloop.fsm.testing.scripted, emits: [waited]}}
  done: {{terminal: true}}
  failed_for_good: {{terminal: true}}
  aborted: {{terminal: true}}
  {INTERNAL_ERROR}
transitions:
  - {{from: calling, event: ok, to: done, reason: answered}}
  - {{from: calling, event: failed, to: waiting, reason: call_retry, guards: [transient], counter: tries}}
  - {{from: calling, event: failed, to: failed_for_good, reason: transient_exhausted, guards: [transient]}}
  - {{from: calling, event: failed, to: waiting, reason: other_retry, guards: [transient], counter: other}}
  - {{from: calling, event: failed, to: failed_for_good, reason: call_failed}}
  - {{from: waiting, event: waited, to: calling, reason: wait_over}}
  - {{from: [calling, waiting], event: abort, to: aborted, reason: cancelled}}
"""


# A model call with retries, overload backoffs in a row and tool turns, declaring one property of
# each kind SPIN checks; the tests below break each one by a one-line change and watch SPIN catch it.
SMALL_LOOP = f"""
schema_version: 1
machine: small_loop
doc: a model call with retries, overload backoffs and tool turns
initial: calling
params:
  max_retries: {{default: 2, max: 10}}
  max_turns: {{default: null, type: int, nullable: true, max: 100}}
events: {{replied: "", tool_used: "", overloaded: "", failed: "", waited: "", tools_done: "", abort: ""}}
guards:
  retryable: queryloop.fsm.testing.flag_a
scopes: [request, turn]
counters:
  retries: {{cap: max_retries, scope: turn}}
  overloads: {{cap: 2, scope: turn, streak_of: [overloaded]}}
  turns: {{cap: max_turns, cap_offset: -1, scope: run}}
unbounded_by_design:
  next_turn: {{bound: max_turns, doc: "tool turns: unbounded unless max_turns is set"}}
properties:
  retry_before_giving_up:
    order: [call_retry, retries_exhausted]
    doc: a failed call is retried before the run gives up
  retries_per_turn:
    at_most: {{count: [call_retry], per: turn, max: max_retries}}
    doc: at most max_retries retries per turn
  overloads_in_a_row:
    in_a_row: {{counter: overloads}}
    doc: overloads counts overloaded replies in a row
  turns_per_run:
    at_most: {{count: [next_turn], per: run, max: max_turns - 1}}
    doc: at most max_turns turns per run
  a_turn_starts_afresh:
    resets: {{after: [next_turn], counters: [retries]}}
    doc: each tool turn has its whole retry budget again
  tools_after_a_call:
    preceded: {{states: [running_tools], by: [calling], per: turn}}
    doc: the tools of a turn run after its model call
  giving_up_is_an_error:
    ends: [{{reasons: [retries_exhausted, overloads_exhausted], result: {{is_error: true}}}}]
    doc: a spent budget ends the run in an error
states:
  calling: {{effect: queryloop.fsm.testing.scripted, emits: [replied, tool_used, overloaded, failed]}}
  waiting: {{effect: queryloop.fsm.testing.scripted, emits: [waited]}}
  running_tools: {{effect: queryloop.fsm.testing.scripted, emits: [tools_done]}}
  done: {{terminal: true}}
  failed_for_good: {{terminal: true, result: {{is_error: true}}}}
  turns_used_up: {{terminal: true}}
  aborted: {{terminal: true}}
  {INTERNAL_ERROR}
transitions:
  - {{from: calling, event: replied, to: done, reason: answered}}
  - {{from: calling, event: tool_used, to: running_tools, reason: tools_started}}
  - {{from: calling, event: overloaded, to: waiting, reason: overloaded_backoff, counter: overloads}}
  - {{from: calling, event: overloaded, to: failed_for_good, reason: overloads_exhausted}}
  - {{from: calling, event: failed, to: waiting, reason: call_retry, guards: [retryable], counter: retries}}
  - {{from: calling, event: failed, to: failed_for_good, reason: retries_exhausted}}
  - {{from: waiting, event: waited, to: calling, reason: wait_over}}
  - {{from: running_tools, event: tools_done, to: calling, reason: next_turn, progress: true, counter: turns}}
  - {{from: running_tools, event: tools_done, to: turns_used_up, reason: turns_reached}}
  - {{from: [calling, waiting, running_tools], event: abort, to: aborted, reason: cancelled}}
"""


def _machine(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "machine.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def ours(explored_machines: dict[Path, CheckReport]) -> dict[Path, CheckReport]:
    """Our checker's report per shipped machine at its params' check values (shared by the session)."""
    return explored_machines


@pytest.fixture(scope="session")
def spin_on_shipped() -> dict[Path, list[SpinReport]]:
    """SPIN's reports on every shipped machine at each of its settings, made once per test session
    (the query loop's two settings take about half a minute)."""
    reports: dict[Path, list[SpinReport]] = {}
    for path in SHIPPED:
        spec = load_machine(path, bind=False).spec
        reports[path] = [spin_check(spec, params) for params in spin_settings(spec)]
    return reports


@pytest.mark.slow  # compares with the session's exploration of every shipped machine (a minute)
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_spin_counts_the_same_configurations_as_our_explorer_on_every_shipped_machine(
    path: Path, ours: dict[Path, CheckReport], spin_on_shipped: dict[Path, list[SpinReport]]
) -> None:
    first = spin_on_shipped[path][0]
    assert dict(first.params) == dict(ours[path].params)
    assert first.configurations == ours[path].configurations
    assert any("states, stored" in line for line in first.verdict)


@pytest.mark.slow  # the session's SPIN runs of the shipped machines (half a minute)
@pytest.mark.xdist_group("exploration")  # the same worker as the test above: SPIN runs once
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_machine_keeps_its_properties_and_ends_every_turn_at_every_setting(
    path: Path, spin_on_shipped: dict[Path, list[SpinReport]]
) -> None:
    spec = load_machine(path, bind=False).spec
    declared = {f"{p.kind} {p.name}" for p in spec.properties}
    for report in spin_on_shipped[path]:
        assert report.ok and not report.counterexample, report.verdict
        checked = {c.split(" (")[0] for c in report.checked}
        unchecked = {c.split(" (")[0] for c in report.unchecked}
        assert checked | unchecked == declared | {
            "ltl every_step_ends: every step scope reaches the next progress step or an end"
        }
    if path.name == "query_loop.yaml":  # max_turns unset, then set: its budget is checked only when set
        unset, set_ = spin_on_shipped[path]
        assert unset.params["max_turns"] is None and set_.params["max_turns"] == 2
        trips = " (proven from the declaration: the breaker's place, guards and cap)"
        structural = {
            "guarded fallback_only_to_a_model_left (a guard is a free choice here: the edge's guard list is the proof)",
            *(
                f"trips {name}{trips}"
                for name in (
                    "denial_breaker_trips_at_its_limit",
                    "ledger_breaker_trips_at_its_limit",
                    "compaction_breaker_opens_after_its_failures",
                )
            ),
        }
        assert set(unset.unchecked) == {
            "at_most tool_turns_per_run (its max, max_turns - 1, is unset: no bound)",
            *structural,
        }
        assert set(set_.unchecked) == structural
        assert set_.setting == "max_turns=2; other caps at their smallest (a cap of 1)"
        assert set_.params["max_retries"] == 1 and set_.params["max_denied_call_repeats"] == 2  # cap_offset -1


def test_spin_derives_the_same_reset_sets_as_the_engine_on_every_shipped_machine() -> None:
    for path in SHIPPED:
        spec = load_machine(path, bind=False).spec
        edges = {(t.source, t.reason): spec.resets_of(t) for t in spec.transitions}
        assert derived_resets(spec) == edges, path.name


def test_the_promela_export_never_reads_the_engines_reset_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_machine(_machine(tmp_path, SMALL_LOOP), bind=False).spec

    def refused(self: MachineSpec, t: TransitionSpec) -> frozenset[str]:
        raise AssertionError("fsm.verify.spin read MachineSpec.resets_of")

    monkeypatch.setattr(MachineSpec, "resets_of", refused)
    assert "c_overloads = 0" in to_promela(spec)


def test_a_reset_the_engine_forgets_makes_the_two_checkers_count_differently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = load_machine(_machine(tmp_path, SMALL_LOOP), bind=False).spec
    honest = check_spec(spec).configurations
    engine = MachineSpec.resets_of

    def without_streaks(self: MachineSpec, t: TransitionSpec) -> frozenset[str]:
        return engine(self, t) - {"overloads"} if t.event != "abort" else engine(self, t)

    monkeypatch.setattr(MachineSpec, "resets_of", without_streaks)
    ours = check_spec(spec)
    assert ours.configurations > honest
    assert not spin_beside(spec, ours)
    out = capsys.readouterr().out
    assert f"{honest} configurations (ours: {ours.configurations}, DIFFERENT)" in out


def test_a_reset_spin_forgets_is_caught_by_its_own_streak_monitor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_machine(_machine(tmp_path, SMALL_LOOP), bind=False).spec
    derived = promela_module.derived_resets

    def without_streaks(spec: MachineSpec) -> dict[tuple[str, str], frozenset[str]]:
        return {edge: c - {"overloads"} for edge, c in derived(spec).items()}

    monkeypatch.setattr(promela_module, "derived_resets", without_streaks)
    assert not [f for f in check_spec(spec).findings if f.check == "property"]  # ours still holds it
    report = spin_check(spec)
    assert (
        report.failure
        == "property overloads_in_a_row broken: overloads is 2 after overloaded_backoff, 1 step(s) in a row"
    )


MUTANTS = {
    "a_budget_lowered": (
        "per: turn, max: max_retries",
        "per: turn, max: 1",
        "property retries_per_turn broken: call_retry makes 2 of its edges this turn, above 1",
    ),
    "a_streak_reset_removed": (
        ", streak_of: [overloaded]",
        "",
        "property overloads_in_a_row broken: overloads is 2 after overloaded_backoff, 1 step(s) in a row",
    ),
    "an_order_swapped": (
        "order: [call_retry, retries_exhausted]",
        "order: [retries_exhausted, call_retry]",
        "property retry_before_giving_up broken: call_retry taken from calling on failed while "
        "retries_exhausted, listed before it, could fire",
    ),
    "a_reset_lost": (
        "retries: {cap: max_retries, scope: turn}",
        "retries: {cap: max_retries, scope: run}",
        "property a_turn_starts_afresh broken: retries is 1 after next_turn, not 0",
    ),
    "a_turn_without_its_call": (
        "to: calling, reason: next_turn",
        "to: running_tools, reason: next_turn",
        "property tools_after_a_call broken: next_turn enters running_tools with no step into calling since the "
        "turn began",
    ),
    "a_spent_budget_ending_well": (
        "to: failed_for_good, reason: retries_exhausted",
        "to: done, reason: retries_exhausted",
        "property giving_up_is_an_error broken: retries_exhausted goes to done",
    ),
    "a_wait_that_never_ends": (
        "to: calling, reason: wait_over",
        "to: waiting, reason: wait_over",
        "non-progress cycle: a step that never reaches the next progress step or an end (ltl every_step_ends)",
    ),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_spin_reports_each_broken_promise_with_its_trail(mutant: str) -> None:
    old, new, failure = MUTANTS[mutant]
    assert old in SMALL_LOOP
    spec = parse_machine(SMALL_LOOP.replace(old, new), bind=False).spec
    report = spin_check(spec)
    assert not report.ok and report.failure == failure
    trail = report.counterexample
    if mutant == "a_budget_lowered":  # two retries in the last turn
        turn = trail[len(trail) - trail[::-1].index("next_turn") :] if "next_turn" in trail else trail
        assert trail[-1] == "call_retry" and turn.count("call_retry") == 2
    elif mutant == "a_streak_reset_removed":  # another outcome between the last two overloads, which kept the count
        previous = max(i for i, r in enumerate(trail[:-1]) if r == "overloaded_backoff")
        assert trail[-1] == "overloaded_backoff" and set(trail[previous + 1 : -1]) - {"wait_over"}
    elif mutant == "a_reset_lost":  # a retry, then the next tool turn, which kept it
        assert trail[-1] == "next_turn" and "call_retry" in trail
    elif mutant == "an_order_swapped":
        assert trail[-1] == "call_retry"
    elif mutant == "a_turn_without_its_call":  # a tool turn, then the next one straight into the tools
        assert trail[-2:] == ("tools_started", "next_turn")
    elif mutant == "a_spent_budget_ending_well":
        assert trail[-1] == "retries_exhausted"
    else:
        assert report.cycle_start is not None and trail[report.cycle_start :] == ("wait_over",)


def test_a_budget_bounded_by_a_nullable_cap_is_checked_only_where_the_cap_is_set() -> None:
    spec = parse_machine(SMALL_LOOP.replace("max: max_turns - 1", "max: max_turns - 2"), bind=False).spec
    unset, set_ = (spin_check(spec, params) for params in spin_settings(spec))
    assert unset.ok
    assert set_.failure == "property turns_per_run broken: next_turn makes 1 of its edges this run, above 0"
    assert set_.counterexample == ("tools_started", "next_turn")


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("retry_fetch", {"max_retries": 5}),
        ("circuit_breaker", {"failure_threshold": 1, "calls": 2}),
    ],
)
def test_spin_agrees_at_other_param_settings_of_the_examples(name: str, params: dict[str, int]) -> None:
    spec = load_machine(ROOT / "machines/examples" / f"{name}.yaml", bind=False).spec
    report = spin_check(spec, params)
    assert report.ok, report.verdict
    assert report.configurations == check_spec(spec, params).configurations
    assert all(report.params[k] == v for k, v in params.items())


def test_a_recovery_loop_without_a_counter_is_a_non_progress_cycle_named_by_its_reasons(tmp_path: Path) -> None:
    spec = load_machine(_machine(tmp_path, RECOVERY_LOOP_WITHOUT_COUNTER)).spec
    report = spin_check(spec, workdir=tmp_path / "spin")
    assert not report.ok and report.errors == 1
    assert "non-progress cycle" in report.failure
    assert report.cycle_start is not None
    assert set(report.counterexample[report.cycle_start :]) == {"api_retry", "retry_elapsed"}
    assert report.configurations == check_spec(spec).configurations == 4
    assert (tmp_path / "spin/monitors/model.pml.trail").exists()  # workdir keeps the files


def test_a_guard_name_has_one_value_per_decision_in_both_checkers(tmp_path: Path) -> None:
    spec = load_machine(_machine(tmp_path, SHADOWED_EDGE)).spec
    promela = to_promela(spec)
    assert "other_retry never fires: shadowed" in promela
    assert '"@@ other_retry' not in promela
    for params in ({}, {"max_tries": 1}):
        mine = check_spec(spec, params)
        report = spin_check(spec, params)
        assert report.ok, report.verdict
        # calling with 0..max_tries tries, waiting with 1..max_tries, and the three ends (a run
        # that ended is its terminal state); `other` never counts
        tries = mine.params["max_tries"]
        assert report.configurations == mine.configurations == 2 * tries + 4
        assert [f.reasons for f in mine.findings if f.check == "dead_edge"] == [("other_retry",)]


def test_a_stuck_decision_is_an_assertion_replayed_as_its_reasons() -> None:
    # built directly: the loader refuses a decision without a catch-all
    spec = MachineSpec(
        name="stuck",
        path="<test>",
        initial="calling",
        events={"failed": "", "abort": ""},
        counters=(CounterSpec(name="tries", cap=2),),
        states=(
            StateSpec(name="calling", effect="e", emits=("failed",)),
            StateSpec(name="aborted", terminal=True),
        ),
        transitions=(
            TransitionSpec(source="calling", event="failed", dest="calling", reason="call_retry", counter="tries"),
            TransitionSpec(source="calling", event="abort", dest="aborted", reason="cancelled"),
        ),
    )
    assert any(f.check == "stuck" for f in check_spec(spec).findings)
    report = spin_check(spec)
    assert not report.ok
    assert report.failure == "stuck in calling on failed: no candidate can fire"
    assert report.counterexample == ("call_retry", "call_retry")


@st.composite
def machines(draw: st.DrawFn) -> str:
    """Small valid machines: guards, counters with int caps and one whose cap param is unset."""
    live = [f"s{i}" for i in range(draw(st.integers(min_value=1, max_value=3)))]
    targets = [*live, "done", "failed"]
    counters = {"c0": {"cap": draw(st.integers(0, 2)), "scope": "turn"}, "c1": {"cap": 2, "scope": "run"}}
    counters["u"] = {"cap": "limit", "scope": "run"}  # unset: untracked, a free guard
    states: dict[str, object] = {}
    transitions: list[dict[str, object]] = []
    for s in live:
        emits = draw(st.lists(st.sampled_from(["e0", "e1"]), min_size=1, max_size=2, unique=True))
        states[s] = {"effect": "queryloop.fsm.testing.scripted", "emits": emits}
        for e in emits:
            for _ in range(draw(st.integers(0, 2))):
                t: dict[str, object] = {"from": s, "event": e, "to": draw(st.sampled_from(targets))}
                t["guards"] = draw(st.lists(st.sampled_from(["ga", "gb"]), max_size=2, unique=True))
                t["counter"] = draw(st.sampled_from(sorted(counters)))
                t["resets"] = draw(st.lists(st.sampled_from(sorted(counters)), max_size=1))
                t["progress"] = draw(st.booleans())
                transitions.append(t)
            transitions.append({"from": s, "event": e, "to": draw(st.sampled_from(targets))})
    for i, t in enumerate(transitions):
        t["reason"] = f"r{i}"
    states.update({"done": {"terminal": True}, "failed": {"terminal": True}, "aborted": {"terminal": True}})
    states["internal_error"] = {"terminal": True, "result": {"is_error": True, "subtype": "error_during_execution"}}
    transitions.append({"from": live, "event": "abort", "to": "aborted", "reason": "cancelled"})
    doc = {
        "schema_version": 1,
        "machine": "random",
        "initial": "s0",
        "params": {"limit": {"default": None, "type": "int", "nullable": True, "max": 3}},
        "events": {"e0": "", "e1": "", "abort": ""},
        "guards": {"ga": "queryloop.fsm.testing.flag_a", "gb": "queryloop.fsm.testing.flag_b"},
        "scopes": ["request", "turn"],
        "counters": counters,
        "states": states,
        "transitions": transitions,
    }
    return yaml.safe_dump(doc, sort_keys=False)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(machines())
def test_spin_and_our_explorer_agree_on_random_machines(text: str) -> None:
    try:
        spec = parse_machine(text, bind=False).spec
    except SpecError:
        assume(False)
        raise
    mine = check_spec(spec)
    report = spin_check(spec)
    assert report.configurations == mine.configurations
    if report.ok:  # no cycle once progress edges are cut, for the explorer either
        assert not any("product has a cycle" in f.message for f in mine.findings)
        return
    # SPIN's counterexample: a closed walk of non-progress edges, which our checker reports too
    assert "non-progress cycle" in report.failure and report.cycle_start is not None
    edge = {t.reason: t for t in spec.transitions}
    cycle = [edge[r] for r in report.counterexample[report.cycle_start :]]
    assert cycle and not any(t.progress for t in cycle)
    assert all(a.dest == b.source for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True))
    assert any(f.check == "termination" for f in mine.findings)


def test_check_spin_prints_both_counts_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--spin", "--machine", str(ROOT / "machines/examples/retry_fetch.yaml")])
    out = capsys.readouterr().out
    assert rc == 0, out
    ours = check_spec(load_machine(ROOT / "machines/examples/retry_fetch.yaml", bind=False).spec).configurations
    assert f"spin (params as explored): {ours} configurations (ours: {ours}, equal), 0 error(s)" in out
    assert "spin ok: nothing stuck; at_most" not in out  # retry_fetch declares no property
    assert "spin ok: nothing stuck; ltl every_step_ends" in out


def test_check_spin_on_the_small_machine_proves_every_property_with_its_nullable_cap_unset_then_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["check", "--spin", "--machine", str(_machine(tmp_path, SMALL_LOOP))])
    out = capsys.readouterr().out
    assert rc == 0, out
    unset, set_ = out.split("  spin (max_turns=2; other caps at their smallest (a cap of 1))")
    assert "spin (max_turns=unset; other params as explored): 24 configurations (ours: 24, equal)" in unset
    assert "spin did not check: at_most turns_per_run (its max, max_turns - 1, is unset: no bound)" in unset
    assert "at_most turns_per_run (at most 1 per run)" in set_ and "did not check" not in set_
    assert "at_most retries_per_turn (at most 2 per turn)" in unset
    assert "at_most retries_per_turn (at most 1 per turn)" in set_
    for part in (unset, set_):
        assert "spin ok: nothing stuck; order retry_before_giving_up" in part
        assert "in_a_row overloads_in_a_row" in part and "ltl every_step_ends" in part


def test_check_spin_json_carries_the_spin_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    machine = str(ROOT / "machines/examples/circuit_breaker.yaml")
    rc = main(["check", "--spin", "--format", "json", "--set", "calls=2", "--machine", machine])
    spin, smallest = json.loads(capsys.readouterr().out)[0]["spin"]
    ours = check_spec(load_machine(machine, bind=False).spec, {"calls": 2}).configurations
    assert rc == 0
    assert spin["agrees"] and spin["ok"] and spin["configurations"] == ours
    assert spin["params"]["calls"] == 2
    assert "in_a_row failures_until_success" in spin["checked"]
    assert smallest["ok"] and smallest["params"] == {"failure_threshold": 1, "calls": 1}
    assert smallest["setting"] == "caps at their smallest (a cap of 1)"


def test_check_spin_on_a_broken_machine_exits_1_with_the_cycle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["check", "--spin", "--machine", str(_machine(tmp_path, RECOVERY_LOOP_WITHOUT_COUNTER))])
    out = capsys.readouterr().out
    assert rc == 1
    assert "spin FINDING non-progress cycle" in out
    assert "[cycle:]" in out and "retry_elapsed" in out


def test_without_spin_on_path_the_check_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "")
    spec = load_machine(ROOT / "machines/examples/retry_fetch.yaml", bind=False).spec
    with pytest.raises(SpinNotFound, match="spin not found on PATH; install it"):
        spin_check(spec)
    rc = main(["check", "--spin", "--machine", str(ROOT / "machines/examples/retry_fetch.yaml")])
    assert rc == 2
    assert "spin not found on PATH; install it (apt-get install spin)" in capsys.readouterr().err


def test_a_failed_compile_ends_the_other_compiles_and_leaves_no_pipe_open(tmp_path: Path) -> None:
    from queryloop.fsm.verify import spin as spin_module

    runs = {tmp_path / "a": (), tmp_path / "b": ("-DNOREDUCE",)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(spin_module.SpinError, match="gcc failed"):
            spin_module._build("spin", "false", "init { skip }\n", runs, "-O0", 60)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
