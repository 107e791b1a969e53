"""Counterexamples you can run: the shortest run per finding, the event → scenario table and the writer."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from queryloop.frontends.cli import main
from queryloop.fsm.model.load import load_machine
from queryloop.fsm.model.spec import MachineSpec
from queryloop.fsm.verify.check import Finding, check_spec
from queryloop.fsm.verify.counterexample import UNROLL, Counterexample, counterexamples, format_counterexample
from queryloop.fsm.verify.paths import PlannedPath, PlannedStep, plan_paths, shortest_run
from queryloop.mockapi.replay import ScenarioReplayer, scenario_of
from queryloop.mockapi.replay_events import (
    BIG_CHARS,
    BIG_FILES,
    CHILD_HOLD_MS,
    CHILD_MARK,
    PLAIN_GUARDS,
    READ_FILE,
    REPLY_PAD,
    REPORT_HOLD_MS,
    SCRIPT_BY_EVENT,
    SMALL_MODEL,
    SYSTEM_PAD,
)
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


def only(spec: MachineSpec, check: str, about: str = "") -> Counterexample:
    """The one counterexample of a ``check`` finding (whose message names ``about``, when given)."""
    report = check_spec(spec, explore=False)
    found = [
        c
        for c in counterexamples(spec, report, replayer=ScenarioReplayer())
        if c.finding.check == check and about in c.finding.message
    ]
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


def test_a_run_at_a_param_no_scenario_sets_is_shown_but_not_written_as_replayable(
    figure_example: tuple[Path, MachineSpec, Counterexample],
) -> None:
    """A scenario sets max_turns and max_retries; a run searched at another param's non-default value (here
    `--set max_fallback_hops=1`) would replay at the default and diverge: it is printed, never written."""
    _, spec, _ = figure_example
    report = check_spec(spec, {"max_fallback_hops": 1}, explore=False)
    (example,) = [c for c in counterexamples(spec, report, replayer=ScenarioReplayer()) if c.finding.check == "figure"]
    assert example.run is not None and not example.replayable
    assert "max_fallback_hops=1" in example.why, example.why
    with pytest.raises(ValueError, match="max_fallback_hops=1"):
        scenario_of(spec, example, name="not-written")


def test_an_at_most_property_broken_shows_its_edge_taken_once_too_often_in_a_turn(tmp_path: Path) -> None:
    def one_pause_continue(document: dict[str, Any]) -> None:
        document["properties"]["pause_continues_per_turn"]["at_most"]["max"] = 1

    example = only(mutated(tmp_path, one_pause_continue), "property")
    assert example.run is not None and example.replayable
    shown = example.run.reasons[: example.run.taken_at + 1]
    assert shown.count("pause_turn_continue") == 2 and shown[-1] == "pause_turn_continue"


def test_a_streak_a_break_does_not_reset_is_shown_counted_again_after_the_break(tmp_path: Path) -> None:
    def overloads_counted_in_total(document: dict[str, Any]) -> None:
        del document["counters"]["overload_streak"]["streak_of"]

    example = only(mutated(tmp_path, overloads_counted_in_total), "property")
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.steps[: example.run.taken_at + 1]
    counts = [i for i, s in enumerate(shown) if s.transition.counter == "overload_streak"]
    assert len(counts) >= 2 and counts[-1] == len(shown) - 1, example.reasons
    between = shown[counts[-2] + 1 : counts[-1]]
    breaks = [s for s in between if s.source == "calling_model" and s.event != "overloaded"]
    assert breaks, "a streak-breaking outcome of the attempt between the two counts"
    assert shown[-1].counters["overload_streak"] >= 1, "the break left the counter above 0"
    parse_scenario(yaml.safe_dump(scenario_of(load_machine(str(tmp_path / "mutant.yaml")).spec, example, name="s")))


def test_a_streak_only_a_compaction_success_resets_gets_a_replayable_run_on_the_small_window(tmp_path: Path) -> None:
    """Auto-compaction: the run is on mock-small-context, its system prompt padded past the auto-compact threshold."""

    def failures_counted_in_total(document: dict[str, Any]) -> None:
        del document["counters"]["auto_compact_failures"]["consecutive"]

    spec = mutated(tmp_path, failures_counted_in_total)
    example = only(spec, "property")
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.reasons[: example.run.taken_at + 1]
    assert shown[-1] == "auto_compact_start" and "auto_compact_succeeded" in shown
    assert shown[3] == "over_threshold_accepted", "one round: nothing to compact yet"
    scenario = load_scenario(ScenarioReplayer().write(spec, example, tmp_path / "compaction"))
    assert scenario.model == SMALL_MODEL and scenario.cli["append_system_prompt"] == SYSTEM_PAD
    replies = [s for s in scenario.models[SMALL_MODEL].steps if s.kind == "reply"]
    summaries = [s for s in replies if s.content[0].get("text", "").startswith("Summary:")]
    assert len(summaries) == 2 and all(REPLY_PAD.strip() in s.content[0]["text"] for s in replies if s not in summaries)


def test_a_streak_reset_by_an_edge_outside_broken_by_is_shown_reset_mid_streak(tmp_path: Path) -> None:
    def only_auto_compaction_succeeds(document: dict[str, Any]) -> None:
        streak = document["properties"]["compaction_failures_until_success"]["in_a_row"]
        streak["broken_by"] = ["auto_compact_succeeded"]

    example = only(mutated(tmp_path, only_auto_compaction_succeeds), "property")
    assert example.run is not None
    shown = example.run.steps[: example.run.taken_at + 1]
    assert shown[-1].reason == "reactive_compact_succeeded" and shown[-1].counters["auto_compact_failures"] > 0


def test_a_figure_above_its_max_per_run_is_shown_counted_across_turns(tmp_path: Path) -> None:
    def one_tool_turn_per_run(document: dict[str, Any]) -> None:
        document["figures"]["tool_turns"]["max_per_run"] = 1

    example = only(mutated(tmp_path, one_tool_turn_per_run), "figure")
    assert example.run is not None and example.replayable and not example.why
    assert example.shows == "tool_turns reaches 2 in one run"
    shown = example.run.steps[: example.run.taken_at + 1]
    assert sum(s.dest == "running_tools" for s in shown) == 2 and shown[-1].dest == "running_tools"
    assert any(s.transition.progress for s in shown), "a new turn between them: a bound per run does not restart"


def test_a_figure_per_run_at_a_set_max_turns_replays_at_it(tmp_path: Path) -> None:
    def one_turn_fewer(document: dict[str, Any]) -> None:
        document["figures"]["tool_turns"]["max_per_run"] = "max_turns - 1"

    spec = mutated(tmp_path, one_turn_fewer)
    report = check_spec(spec, {"max_turns": 2}, explore=False)
    (example,) = [c for c in counterexamples(spec, report, replayer=ScenarioReplayer()) if c.finding.check == "figure"]
    assert example.run is not None and example.replayable, example.why
    assert example.run.reasons[-1] == "max_turns_reached"
    scenario = load_scenario(ScenarioReplayer().write(spec, example, tmp_path / "turns"))
    assert scenario.cli["max_turns"] == 2


def _edge_of(document: dict[str, Any], reason: str) -> dict[str, Any]:
    found = [t for t in document["transitions"] if t.get("reason") == reason]
    assert len(found) == 1, reason
    return found[0]


def test_a_reply_that_keeps_its_retries_is_shown_after_a_stream_fallback(tmp_path: Path) -> None:
    def reply_keeps_its_retries(document: dict[str, Any]) -> None:
        del _edge_of(document, "reply_received")["ends"]

    example = only(mutated(tmp_path, reply_keeps_its_retries), "property")
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.steps[: example.run.taken_at + 1]
    assert shown[-1].reason == "reply_received"
    assert shown[-1].counters["stream_fallbacks"] == 1, "the shortest: the stream broke once, then the reply came"
    assert [s.reason for s in shown[-2:]] == ["stream_fallback", "reply_received"]


def test_a_fallback_without_its_guard_is_shown_taken_where_the_guard_is_not_read(tmp_path: Path) -> None:
    """The edge is taken without reading fallback_available; the run declares the model it switches to, and replays."""

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


def test_a_run_that_needs_a_fallback_model_is_written_with_the_chain_it_needs(tmp_path: Path) -> None:
    spec = load_machine(str(SHIPPED)).spec
    replayer = ScenarioReplayer()
    target = ("calling_model", "model_fallback")
    plan = plan_paths(spec, params=spec.param_defaults, targets=[target], realiser=replayer.realiser(spec))
    run = plan.paths[target]
    assert run.steps[run.taken_at].guards == {"fallback_available": True}
    example = Counterexample(finding=Finding(check="figure", message="a finding"), shows="x", run=run)
    scenario = load_scenario(replayer.write(spec, example, tmp_path / "fallback"))
    assert scenario.fallback_models == ("mock-fallback-1",)
    # the primary answers every attempt up to the switch (the 529 it switches on included); the fallback the rest
    before = sum(s.event in ("overloaded", "model_unavailable") for s in run.steps[: run.taken_at + 1])
    assert len(scenario.models["mock-primary"].steps) == before
    after = [s for s in run.steps[run.taken_at + 1 :] if SCRIPT_BY_EVENT[s.event].kind in ("answer", "shape")]
    assert len(scenario.models["mock-fallback-1"].steps) == len(after)
    assert [s.note for s in run.steps[run.taken_at + 1 :] if s.note] == ["mock-fallback-1"] * len(after)


def test_a_run_stays_on_the_fallback_model_for_its_later_turns() -> None:
    """After the switch every request goes to the fallback model (as the handlers keep it): a retry, the next turn."""
    spec = load_machine(str(SHIPPED)).spec
    run = switch_then_retry_then_next_turn(spec)
    example = Counterexample(finding=Finding(check="figure", message="a finding"), shows="x", run=run)
    document = scenario_of(spec, example, name="later")
    parse_scenario(yaml.safe_dump(document))
    switched = next(i for i, s in enumerate(run.steps) if s.reason in SWITCHES)
    assert "api_retry" in run.reasons[switched:] and "next_turn" in run.reasons[switched:]
    answered = [i for i, s in enumerate(run.steps) if SCRIPT_BY_EVENT[s.event].kind in ("answer", "shape")]
    assert document["fallback_models"] == ["mock-fallback-1"]
    assert len(document["models"]["mock-primary"]) == sum(i <= switched for i in answered)
    assert len(document["models"]["mock-fallback-1"]) == sum(i > switched for i in answered)
    later = [run.steps[i].note for i in answered if i > switched]
    assert later and set(later) == {"mock-fallback-1"}, "a retry and the next turn go to the fallback model"


def test_a_fallback_after_the_run_found_none_left_is_not_written() -> None:
    spec = load_machine(str(SHIPPED)).spec
    replayer = ScenarioReplayer()
    realiser = replayer.realiser(spec)
    targets = [("calling_model", "overloaded_no_fallback_backoff"), ("calling_model", "model_fallback")]
    plan = plan_paths(spec, params=spec.param_defaults, targets=targets, realiser=realiser)
    no_left, switch = (plan.paths[t] for t in targets)
    steps = [*no_left.steps[: no_left.taken_at + 1], *switch.steps[switch.taken_at :]]
    why = replayer.unscriptable(spec, steps)
    assert why is not None and "(model_fallback): guard 'fallback_available' must be True, but an earlier" in why


SWITCHES = ("model_fallback", "unavailable_model_fallback")


def switch_then_retry_then_next_turn(spec: MachineSpec) -> PlannedPath:
    """The shortest scripted run that switches to a fallback model, then retries, then starts a tool turn."""
    order = (SWITCHES, ("api_retry",), ("next_turn",))

    def step(seen: int, s: PlannedStep) -> int:
        return seen + 1 if seen < len(order) and s.reason in order[seen] else seen

    realiser = ScenarioReplayer().realiser(spec)
    run = shortest_run(spec, params=spec.param_defaults, start=0, step=step, shown=lambda v: v == 3, realiser=realiser)
    assert isinstance(run, PlannedPath), run
    return run


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
    assert report.wait_s_per_step["waits"] == report.per_step["waits"] * 60.0
    shorter = check_spec(spec, {"max_retry_after_s": 10}, explore=False)
    assert shorter.each_s["waits"] == 40.0
    assert report.to_json()["worst_wait_s_per_turn"]["waits"]["each_s"] == 60.0


def test_an_unbounded_figure_has_an_unbounded_wait(tmp_path: Path) -> None:
    def no_stop_hook_cap(document: dict[str, Any]) -> None:
        document["params"]["max_retries"].update(default=None, nullable=True, type="int")

    report = check_spec(mutated(tmp_path, no_stop_hook_cap), explore=False)
    assert report.wait_s_per_step["waits"] == math.inf


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


def test_a_tool_run_that_skips_the_gate_is_shown_as_a_replayable_run(tmp_path: Path) -> None:
    def ungated(document: dict[str, Any]) -> None:
        _edge_of(document, "tools_requested")["to"] = "running_tools"

    spec = mutated(tmp_path, ungated)  # it skips the admission of Agent calls too: a second property broken
    example = only(spec, "property", "tools_run_only_after_the_gate")
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.steps[: example.run.taken_at + 1]
    assert shown[-1].reason == "tools_requested" and shown[-1].dest == "running_tools"
    assert not any(s.dest == "gating_tools" for s in shown)


def test_spent_retries_ending_as_a_success_are_shown_as_a_replayable_run(tmp_path: Path) -> None:
    def spent_is_success(document: dict[str, Any]) -> None:
        document["instances"]["api_retries"]["with"]["give_up"] = "completed"

    example = only(mutated(tmp_path, spent_is_success), "property")
    assert example.run is not None and example.replayable and not example.why
    assert example.run.reasons[example.run.taken_at] == "api_retries_exhausted"
    assert example.run.steps[example.run.taken_at].dest == "completed"


def test_an_edge_taken_without_the_guard_that_decides_it_is_shown_as_a_replayable_run(tmp_path: Path) -> None:
    def unguarded(document: dict[str, Any]) -> None:
        del _edge_of(document, "retry_after_too_long_surfaced")["guards"]

    example = only(mutated(tmp_path, unguarded), "guard")
    assert example.run is not None and example.replayable and not example.why
    assert example.run.reasons[example.run.taken_at] == "retry_after_too_long_surfaced"
    assert "retry_after_over_cap" not in example.run.steps[example.run.taken_at].guards


@pytest.mark.slow  # the scripted search looks past its first give-up: about 10 s (the runs on either window)
def test_a_budget_broken_only_after_a_dozen_retries_still_gets_a_replayable_run(tmp_path: Path) -> None:
    """Ten retries of one request: past the first search's 30 000 nodes, the scripted run is looked for further."""

    def one_retry_too_many(document: dict[str, Any]) -> None:
        document["properties"]["retries_per_request"] = {
            "at_most": {"count": ["api_retry"], "per": "request", "max": "max_retries - 1"},
            "doc": "a made-up budget one below the retries the machine allows",
        }

    example = only(mutated(tmp_path, one_retry_too_many), "property")
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.reasons[: example.run.taken_at + 1]
    assert shown.count("api_retry") == 10 and shown[-1] == "api_retry"


def test_on_the_small_window_the_pads_put_every_request_over_the_threshold_and_one_round_over_what_is_kept() -> None:
    """What the compaction's scripted runs rest on, from the handlers' own numbers (the CLI run's defaults)."""
    from queryloop.handlers.context.compacting import KEEP_RECENT_FRACTION
    from queryloop.handlers.context.services.compaction import request_overhead_tokens
    from queryloop.handlers.messages import message_tokens
    from queryloop.handlers.request.services.pricing import model_info
    from queryloop.handlers.tools import default_registry
    from queryloop.run.defaults import AUTO_COMPACT_THRESHOLD, DEFAULT_SYSTEM_PROMPT, MAX_OUTPUT_TOKENS
    from queryloop.run.subagents import CHILD_CONTEXT

    info = model_info(SMALL_MODEL)
    assert info is not None
    window = info.context_window - min(MAX_OUTPUT_TOKENS, info.max_output_tokens)
    tools = tuple(default_registry().api_definitions())
    overhead = request_overhead_tokens(f"{DEFAULT_SYSTEM_PROMPT}\n\n{SYSTEM_PAD}", tools)
    assert overhead > window * AUTO_COMPACT_THRESHOLD + 500, (overhead, window)
    reply = {"role": "assistant", "content": [{"type": "text", "text": REPLY_PAD}]}
    assert message_tokens(reply) > window * KEEP_RECENT_FRACTION + 100
    assert CHILD_MARK in CHILD_CONTEXT  # the sub-agents' rules are routed on it, and no parent's system prompt has it


def test_a_head_truncation_is_replayable_when_the_summarised_part_has_two_rounds(tmp_path: Path) -> None:
    def no_head_truncation(document: dict[str, Any]) -> None:
        document["properties"]["no_head_truncation"] = {
            "at_most": {"count": ["compact_head_truncation_retry"], "per": "run", "max": 0},
            "doc": "a made-up ban",
        }

    example = only(mutated(tmp_path, no_head_truncation), "property")
    assert example.run is not None and example.replayable and not example.why
    shown = example.run.steps[: example.run.taken_at + 1]
    assert shown[-1].reason == "compact_head_truncation_retry" and shown[-1].guards["can_drop_oldest_group"]
    # the prompt's round and two rounds more before the compaction: the one it keeps, and one older to drop
    kept = [s for s in shown if s.reason in ("tools_requested", "malformed_tool_use_retry", "answer_recorded")]
    assert len(kept) >= 2


def made_up_ban(*reasons: str) -> Any:
    def ban(document: dict[str, Any]) -> None:
        document["properties"]["made_up_ban"] = {
            "at_most": {"count": list(reasons), "per": "run", "max": 0},
            "doc": "a made-up ban of an edge the shipped machine takes",
        }

    return ban


def test_a_report_after_a_later_tool_turn_holds_that_turns_request_and_a_failed_child_gets_a_400(
    tmp_path: Path,
) -> None:
    spec = mutated(tmp_path, made_up_ban("agent_failure_collected"))
    example = only(spec, "property")
    assert example.run is not None and example.replayable and not example.why
    reasons = example.run.reasons
    launch = reasons.index("next_turn_with_agents")
    assert reasons[launch + 1] == "agents_still_running", "the tool turn that launched it finds it running"
    document = scenario_of(spec, example, name="collected")
    parse_scenario(yaml.safe_dump(document))
    child, rest = document["rules"]
    assert child["when"] == {"system_contains": CHILD_MARK, "first_user_contains": "[sub-agent 1]"}
    assert child["error"]["status"] == 400 and child["delay_ms"] == CHILD_HOLD_MS and child["times"] == 1
    assert rest["when"] == {"system_contains": CHILD_MARK} and "times" not in rest
    first, second, *_ = document["models"]["mock-primary"]
    assert [b["tool_use"]["name"] for b in first["reply"]["content"]] == ["Read", "Agent"]
    assert "delay_ms" not in first and second["delay_ms"] == REPORT_HOLD_MS  # the next tool turn's: held
    assert document["cli"]["allowed_tools"] == ["Read", "Agent"]


def test_a_report_within_the_tool_turn_that_launched_its_agent_is_not_scripted() -> None:
    spec = load_machine(str(SHIPPED)).spec

    def step(seen: bool, s: PlannedStep) -> bool:
        return seen or s.reason == "agent_completion_collected"

    scripted = shortest_run(
        spec, params=spec.param_defaults, start=False, step=step, shown=bool, realiser=ScenarioReplayer().realiser(spec)
    )
    assert isinstance(scripted, PlannedPath), scripted
    launch = scripted.reasons.index("next_turn_with_agents")
    assert scripted.reasons[launch + 1] == "agents_still_running"
    assert scripted.reasons[scripted.taken_at - 1] == "next_turn_with_agents", "after a later tool turn"
    # the report spliced in right after the launch: its end cannot be timed to come before the parent looks
    early = [*scripted.steps[: launch + 1], scripted.steps[scripted.taken_at]]
    why = ScenarioReplayer().unscriptable(spec, early)
    assert why is not None and "cannot be timed to end within the tool turn that launched it" in why


def test_the_admitted_call_is_the_tool_turns_agent_call() -> None:
    """The shipped machine's admission (admitting_agents): the Agent call it admits is the one the reply holds."""
    spec = load_machine(str(ROOT / "machines/query_loop.yaml")).spec
    replayer = ScenarioReplayer()
    target = ("awaiting_agents", "agent_failure_reported")
    run = plan_paths(spec, params=spec.param_defaults, realiser=replayer.realiser(spec), targets=[target]).paths[target]
    assert run.reasons[7:10] == ("agent_launch_admitted", "tool_calls_admitted", "next_turn_with_agents")
    assert run.reasons.count("tool_calls_admitted") == run.reasons.count("tools_requested") == 1
    example = Counterexample(finding=Finding(check="figure", message="a finding"), shows="x", run=run)
    document = scenario_of(spec, example, name="admitted")
    parse_scenario(yaml.safe_dump(document))
    calls = [b["tool_use"]["name"] for b in document["models"]["mock-primary"][0]["reply"]["content"]]
    assert calls == ["Read", "Agent"] and document["rules"][0]["error"]["status"] == 400


def test_a_run_through_a_microcompaction_is_replayable_with_two_big_reads_five_tool_turns_before(
    tmp_path: Path,
) -> None:
    """A microcompaction clears the old results once that frees 10,000 tokens: the run's scenario reads two
    big files in the tool turn the newest four results came after, and the check after the fourth clears them."""
    spec = mutated(tmp_path, made_up_ban("microcompact"))
    example = only(spec, "property")
    assert example.run is not None and example.replayable and not example.why, example.why
    shown = example.run.reasons[: example.run.taken_at + 1]
    assert shown[-1] == "microcompact" and shown.count("next_turn") == 5
    document = scenario_of(spec, example, name="micro")
    parse_scenario(yaml.safe_dump(document))
    reads = [
        [b["tool_use"]["input"]["file_path"] for b in step["reply"]["content"] if "tool_use" in b]
        for step in document["models"]["mock-primary"]
        if any("tool_use" in b for b in step.get("reply", {}).get("content", []))
    ]
    assert reads[0] == [BIG_FILES[0], BIG_FILES[1]] and all(r == [READ_FILE] for r in reads[1:]), reads
    assert all(len(document["files"][name]) >= BIG_CHARS for name in BIG_FILES)


def test_a_microcompaction_is_not_scripted_before_four_newer_tool_turns() -> None:
    spec = load_machine(str(SHIPPED)).spec
    target = ("checking_context", "microcompact")
    plan = plan_paths(spec, params=spec.param_defaults, targets=[target], realiser=ScenarioReplayer().realiser(spec))
    run = plan.paths[target]
    early = [*run.steps[:3], run.steps[run.taken_at]]  # the first context check, with no tool turn before it
    why = ScenarioReplayer().unscriptable(spec, early)
    assert why is not None and "old_results_clearable" in why, why


@pytest.mark.parametrize("reason", ["agent_timeout_reported", "agent_timeout_collected", "agent_wait_aborted"])
def test_an_unreplayable_run_waits_for_a_sub_agent_only_after_admitting_one(tmp_path: Path, reason: str) -> None:
    """A timeout or an interrupt is never scripted, so the run printed is the abstract one: it must still be one a
    real run can take, with an Agent call admitted before the run waits for, or collects, a report."""
    example = only(mutated(tmp_path, made_up_ban(reason)), "property")
    assert example.run is not None and not example.replayable
    reasons = example.run.reasons
    assert reasons[example.run.taken_at] == reason
    waits = [i for i, s in enumerate(example.run.steps) if s.guards.get("agents_running")]
    assert waits and "agent_launch_admitted" in reasons[: waits[0]], reasons


@pytest.mark.parametrize(
    ("reason", "why"),
    [
        ("agent_timeout_reported", "event 'agent_timed_out' needs a sub-agent past its time limit"),
        ("permission_denied", "event 'tools_denied' needs a permission rule that denies"),
        ("stop_hook_continue", "event 'stop_blocked' needs a Stop hook"),
    ],
)
def test_an_unreplayable_run_asks_no_guard_true_it_does_not_need_and_names_the_step_no_scenario_plays(
    tmp_path: Path, reason: str, why: str
) -> None:
    """Among runs equally short, the abstract search takes the plain edge (context_ok, not a microcompaction at
    the first check, which no real run can take), and the reason printed is the shown step's own."""
    example = only(mutated(tmp_path, made_up_ban(reason)), "property")
    assert example.run is not None and not example.replayable
    assert "microcompact" not in example.run.reasons, example.run.reasons
    assert example.why.startswith(f"step {example.run.taken_at + 1} ({reason}): {why}"), example.why


@pytest.mark.parametrize("reason", ["agent_launch_refused", "auto_compact_breaker"])
def test_a_ban_of_an_edge_far_past_a_breadth_first_search_still_gets_a_run(tmp_path: Path, reason: str) -> None:
    """Refusing an Agent call needs max_agents_per_turn admitted first; opening the compaction breaker needs
    max_auto_compact_failures failures first: past 30 000 nodes breadth-first, found guided by the distance."""
    example = only(mutated(tmp_path, made_up_ban(reason)), "property")
    assert example.run is not None, example.why
    assert example.run.reasons[example.run.taken_at] == reason
