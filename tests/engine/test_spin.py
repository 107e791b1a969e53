"""SPIN, the second checker, agrees with ours: same configurations, same verdicts.

Each machine is exported as Promela (``fsm.spin``), verified by pan (a safety search
whose stored states are the configurations, and a non-progress cycle search), and
compared with :func:`check_spec`. ``spin`` and ``gcc`` are installed by tools/test.sh.
"""

from __future__ import annotations

import json
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
    StateSpec,
    TransitionSpec,
    check_spec,
    load_machine,
    parse_machine,
    spin_check,
    to_promela,
)
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
counters:
  tries: {{cap: max_tries, scope: session}}
  other: {{cap: 2, scope: session}}
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


def _machine(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "machine.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def ours(explored_machines: dict[Path, CheckReport]) -> dict[Path, CheckReport]:
    """Our checker's report per shipped machine at its params' check values (shared by the session)."""
    return explored_machines


@pytest.mark.slow  # compares with the session's exploration of every shipped machine (a minute)
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_spin_counts_the_same_configurations_as_our_explorer_on_every_shipped_machine(
    path: Path, ours: dict[Path, CheckReport]
) -> None:
    spec = load_machine(path, bind=False).spec
    report = spin_check(spec)
    assert report.errors == 0, report.verdict
    assert report.ok and not report.counterexample
    assert report.configurations == ours[path].configurations
    assert any("states, stored" in line for line in report.verdict)


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
    assert (tmp_path / "spin/progress/model.pml.trail").exists()  # workdir keeps the files


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
    counters = {"c0": {"cap": draw(st.integers(0, 2)), "scope": "turn"}, "c1": {"cap": 2, "scope": "session"}}
    counters["u"] = {"cap": "limit", "scope": "session"}  # unset: untracked, a free guard
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
    assert f"spin: {ours} configurations (ours: {ours}, equal), 0 error(s)" in out
    assert "spin ok:" in out


def test_check_spin_json_carries_the_spin_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    machine = str(ROOT / "machines/examples/circuit_breaker.yaml")
    rc = main(["check", "--spin", "--format", "json", "--set", "calls=2", "--machine", machine])
    spin = json.loads(capsys.readouterr().out)[0]["spin"]
    ours = check_spec(load_machine(machine, bind=False).spec, {"calls": 2}).configurations
    assert rc == 0
    assert spin["agrees"] and spin["ok"] and spin["configurations"] == ours
    assert spin["params"]["calls"] == 2


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
