"""Counterexamples you can run: the shortest run per finding, the event → scenario table and the writer."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from queryloop.frontends.cli import main
from queryloop.fsm.check import check_spec
from queryloop.fsm.counterexample import UNROLL, Counterexample, counterexamples, format_counterexample
from queryloop.fsm.load import load_machine
from queryloop.fsm.paths import plan_paths
from queryloop.fsm.spec import MachineSpec
from queryloop.mockapi.replay import PLAIN_GUARDS, SCRIPT_BY_EVENT, ScenarioReplayer, scenario_of
from queryloop.mockapi.scenario import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "machines" / "query_loop.yaml"
LOOP_BUG = ROOT / "tests" / "fixtures" / "bugs" / "recovery_loop_without_counter.yaml"


def mutated(tmp_path: Path, change: Any) -> MachineSpec:
    """The shipped machine with ``change(document)`` applied, loaded from a file in ``tmp_path``."""
    document = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    change(document)
    path = tmp_path / "mutant.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return load_machine(str(path)).spec


def replies_read_at_most_3(document: dict[str, Any]) -> None:
    document["figures"]["replies_read"]["max"] = 3


@pytest.fixture(scope="module")
def figure_example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, MachineSpec, Counterexample]:
    """The mutant whose replies_read may be at most 3, its file's folder and its figure's counterexample."""
    folder = tmp_path_factory.mktemp("figure")
    spec = mutated(folder, replies_read_at_most_3)
    return folder, spec, only(spec, "figure")


def only(spec: MachineSpec, check: str) -> Counterexample:
    report = check_spec(spec, explore=False)
    found = [c for c in counterexamples(spec, report, replayer=ScenarioReplayer()) if c.finding.check == check]
    assert len(found) == 1, [c.finding.message for c in found]
    return found[0]


def test_a_figure_over_its_max_gets_the_shortest_replayable_run_that_passes_it(
    figure_example: tuple[Path, MachineSpec, Counterexample],
) -> None:
    _, _, example = figure_example
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.steps[: example.run.taken_at + 1]
    assert sum(s.dest == "reading_reply" for s in shown) == 4, example.reasons
    assert example.run.steps[-1].terminal
    assert not any(s.guards.get("escalation_configured") for s in example.run.steps), "a plain run has no escalation"


def test_an_at_most_property_broken_shows_its_edge_taken_once_too_often_in_a_turn(tmp_path: Path) -> None:
    def one_pause_continue(document: dict[str, Any]) -> None:
        document["properties"]["pause_continues_per_turn"]["at_most"]["max"] = 1

    example = only(mutated(tmp_path, one_pause_continue), "property")
    assert example.run is not None and example.replayable
    shown = example.run.reasons[: example.run.taken_at + 1]
    assert shown.count("pause_turn_continue") == 2 and shown[-1] == "pause_turn_continue"


def _edge_of(document: dict[str, Any], reason: str) -> dict[str, Any]:
    found = [t for t in document["transitions"] if t.get("reason") == reason]
    assert len(found) == 1, reason
    return found[0]


def test_a_reply_that_keeps_its_retries_is_shown_after_a_stream_fallback(tmp_path: Path) -> None:
    def reply_keeps_its_retries(document: dict[str, Any]) -> None:
        del _edge_of(document, "reply_received")["completes_request"]

    example = only(mutated(tmp_path, reply_keeps_its_retries), "property")
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.steps[: example.run.taken_at + 1]
    assert shown[-1].reason == "reply_received"
    assert shown[-1].counters["stream_fallbacks"] == 1, "the shortest: the stream broke once, then the reply came"
    assert [s.reason for s in shown[-2:]] == ["stream_fallback", "reply_received"]


def test_a_fallback_without_its_guard_is_shown_taken_in_a_plain_run(tmp_path: Path) -> None:
    """A plain offline run has no fallback model: taking the fallback there is the defect, and it replays."""

    def unguarded_fallback(document: dict[str, Any]) -> None:
        del _edge_of(document, "model_fallback")["guards"]

    example = only(mutated(tmp_path, unguarded_fallback), "property")
    assert example.run is not None and example.replayable and not example.why
    assert example.run.reasons[example.run.taken_at] == "model_fallback"
    assert "fallback_available" not in example.run.steps[example.run.taken_at].guards


def test_an_unbounded_cycle_is_shown_as_its_lasso_with_the_loop_taken_three_times() -> None:
    spec = load_machine(str(LOOP_BUG)).spec
    example = only(spec, "termination")
    assert example.run is not None and "a lasso" in example.shows
    shown = example.run.reasons[: example.run.taken_at + 1]
    assert shown.count("retry_elapsed") == UNROLL
    assert "not replayable" in "\n".join(format_counterexample(example))
    assert "has no script" in example.why


def test_every_event_of_the_shipped_machine_has_a_script_or_a_reason_it_has_none() -> None:
    spec = load_machine(str(SHIPPED)).spec
    assert set(spec.events) <= set(SCRIPT_BY_EVENT), sorted(set(spec.events) - set(SCRIPT_BY_EVENT))
    assert set(spec.guards) <= set(PLAIN_GUARDS), sorted(set(spec.guards) - set(PLAIN_GUARDS))
    for event, script in SCRIPT_BY_EVENT.items():
        assert (script.kind == "never") == bool(script.why), event
        assert bool(script.step) == (script.kind in ("answer", "shape")), event


def test_every_scripted_answer_is_a_step_the_server_reads() -> None:
    steps = [dict(s.step) for s in SCRIPT_BY_EVENT.values() if s.step]
    text = yaml.safe_dump({"schema_version": 1, "scenario": "all", "model": "m", "models": {"m": steps}})
    scenario = parse_scenario(text)
    assert len(scenario.models["m"].steps) == len(steps)


def test_a_run_that_needs_a_fallback_model_is_not_written_and_says_which_step() -> None:
    spec = load_machine(str(SHIPPED)).spec
    plan = plan_paths(spec, targets=[("calling_model", "model_fallback")])
    run = plan.paths[("calling_model", "model_fallback")]
    report = check_spec(spec, explore=False)
    example = Counterexample(finding=next(iter(report.findings), None) or _finding(), shows="x", run=run)
    with pytest.raises(ValueError, match=r"step \d+ \(model_fallback\): guard 'fallback_available' must be True"):
        scenario_of(spec, example, name="fallback")


def _finding() -> Any:
    from queryloop.fsm.check import Finding

    return Finding(check="figure", message="a finding")


def test_the_writer_writes_one_scripted_answer_per_request_of_the_run(
    tmp_path: Path, figure_example: tuple[Path, MachineSpec, Counterexample]
) -> None:
    _, spec, example = figure_example
    written = ScenarioReplayer().write(spec, example, tmp_path / "cx")
    scenario = load_scenario(written)
    assert example.run is not None
    requests = sum(s.dest == "reading_reply" for s in example.run.steps)
    assert len(scenario.models["mock-primary"].steps) == requests
    assert written.name == "cx.yaml" and "Reasons: " + " ".join(example.reasons) in scenario.doc.replace("\n", " ")


def test_check_prints_the_run_and_writes_the_scenario(
    tmp_path: Path, figure_example: tuple[Path, MachineSpec, Counterexample], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _, _ = figure_example
    out = tmp_path / "cx"
    assert main(["check", "--machine", str(folder / "mutant.yaml"), "--counterexamples", str(out)]) == 1
    printed = capsys.readouterr()
    assert "shortest run that shows it (replies_read reaches 4 in one turn" in printed.out
    assert [p.name for p in out.iterdir()] == ["query_loop-1.yaml"]
    assert "replay: queryloop -p replay --scenario" in printed.err


def test_the_worst_case_wait_per_turn_is_the_waits_times_the_longest_declared_wait() -> None:
    spec = load_machine(str(SHIPPED)).spec
    report = check_spec(spec, explore=False)
    assert report.each_s["waits"] == 60.0  # max(max_retry_after_s 60, max_backoff_s 40)
    assert report.wait_s_per_turn["waits"] == report.per_turn["waits"] * 60.0
    shorter = check_spec(spec, {"max_retry_after_s": 10}, explore=False)
    assert shorter.each_s["waits"] == 40.0
    assert report.to_json()["worst_wait_s_per_turn"]["waits"]["each_s"] == 60.0


def test_an_unbounded_figure_has_an_unbounded_wait(tmp_path: Path) -> None:
    def no_stop_hook_cap(document: dict[str, Any]) -> None:
        document["params"]["max_retries"].update(default=None, nullable=True, type="int")

    report = check_spec(mutated(tmp_path, no_stop_hook_cap), explore=False)
    assert report.wait_s_per_turn["waits"] == math.inf


DEAD_END = """\
schema_version: 1
machine: dead_end
initial: calling
events: {ok: "", broke: "", tick: "", abort: ""}
states:
  calling: {effect: queryloop.fsm.testing.scripted, emits: [ok, broke]}
  spinning: {effect: queryloop.fsm.testing.scripted, emits: [tick]}
  done: {terminal: true}
  aborted: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: calling, event: ok, to: done, reason: answered}
  - {from: calling, event: broke, to: spinning, reason: broke_down}
  - {from: spinning, event: tick, to: spinning, reason: spun, progress: true}
  - {from: [calling, spinning], event: abort, to: aborted, reason: cancelled}
"""


def test_a_state_that_cannot_end_is_shown_by_the_run_into_it(tmp_path: Path) -> None:
    path = tmp_path / "dead_end.yaml"
    path.write_text(DEAD_END, encoding="utf-8")
    example = only(load_machine(str(path)).spec, "dead_end")
    assert example.run is not None and example.reasons == ("broke_down",)


def test_an_order_broken_is_shown_by_the_candidate_tried_too_early_taken(tmp_path: Path) -> None:
    def recovery_before_escalation(document: dict[str, Any]) -> None:
        edges = document["transitions"]
        at = {t.get("reason"): i for i, t in enumerate(edges) if isinstance(t, dict)}
        i, j = at["max_output_tokens_escalate"], at["max_output_tokens_recovery"]
        edges[i], edges[j] = edges[j], edges[i]

    example = only(mutated(tmp_path, recovery_before_escalation), "property")
    assert example.run is not None and example.replayable
    assert example.run.reasons[example.run.taken_at] == "max_output_tokens_recovery"
