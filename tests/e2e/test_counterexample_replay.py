"""End-to-end: a counterexample `queryloop check` prints is a run the real program takes.

A mutant of the shipped machine breaks a figure's ``max`` or a declared property;
``queryloop check --counterexamples`` prints the shortest run that shows it and writes it as
a scenario; the real CLI replays that scenario with ``--machine`` against the embedded server
(the real ``anthropic`` SDK over loopback), and its stream-json transitions must be exactly
the reasons the checker printed. A run that falls back to another model replays on the
fallback chain its scenario declares, and stays on the fallback model for its retries and its
next turn. A run through auto-compaction replays on mock-small-context, its system prompt padded
past the threshold; a run through a background sub-agent's report replays with the child's one
request answered by a rule (the parent's transitions are compared: a child's lines carry
``parent_tool_use_id``). Also: a ``--machine`` file that does not load, and the clamp the worst-case wait
per turn rests on.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import yaml

from queryloop import Message, QueryOptions, SystemMessage, query
from queryloop.fsm.model.load import load_machine
from queryloop.fsm.verify.check import Finding
from queryloop.fsm.verify.counterexample import Counterexample
from queryloop.fsm.verify.paths import PlannedPath, PlannedStep, plan_paths, shortest_run
from queryloop.handlers.request import AnthropicBackend
from queryloop.mockapi.replay import ScenarioReplayer
from queryloop.mockapi.replay_events import REPORT_HOLD_MS, SMALL_MODEL

from .harness import ROOT, CliRun, MockApi, cli_env, run_cli

SHIPPED = ROOT / "machines" / "query_loop.yaml"
HEAD = "shortest run that shows it"


def replies_read_at_most_3(document: dict[str, Any]) -> None:
    document["figures"]["replies_read"]["max"] = 3


def one_pause_continue_per_turn(document: dict[str, Any]) -> None:
    document["properties"]["pause_continues_per_turn"]["at_most"]["max"] = 1


def overloads_counted_in_total(document: dict[str, Any]) -> None:
    del document["counters"]["overload_streak"]["streak_of"]


def one_fallback_hop_and_two_requests_per_turn(document: dict[str, Any]) -> None:
    # the shortest way to a third request in a turn: the switch to the one fallback model, then a stream fallback
    document["params"]["max_fallback_hops"]["default"] = 1
    document["figures"]["model_requests"]["max"] = 2


def failures_counted_in_total(document: dict[str, Any]) -> None:
    # only a success should reset the count of auto-compactions: without `consecutive`, one does not
    del document["counters"]["auto_compact_failures"]["consecutive"]


def made_up_ban(*reasons: str) -> Callable[[dict[str, Any]], None]:
    def ban(document: dict[str, Any]) -> None:
        document["properties"]["made_up_ban"] = {
            "at_most": {"count": list(reasons), "per": "run", "max": 0},
            "doc": "a made-up ban of an edge the shipped machine takes",
        }

    return ban


def parent_reasons(run: CliRun) -> list[str]:
    """The run's own transitions (a sub-agent's are tagged with the Agent call that started it)."""
    return [
        line["reason"]
        for line in run.lines
        if line.get("subtype") == "transition" and not line.get("parent_tool_use_id")
    ]


def printed_runs(stdout: str) -> list[tuple[list[str], int]]:
    """Each run the report prints under a finding (the line after its heading) and where it shows it (``*r*``)."""
    lines = stdout.splitlines()
    runs = []
    for i, line in enumerate(lines):
        if HEAD in line:
            reasons = lines[i + 1].strip().split(" → ")
            shown = next(k for k, r in enumerate(reasons) if r.startswith("*"))
            runs.append(([r.strip("*") for r in reasons], shown))
    return runs


def counterexample(tmp_path: Path, mutate: Callable[[dict[str, Any]], None]) -> tuple[list[str], int, CliRun]:
    """The mutant's first printed counterexample, where it shows the finding, and its replay by the CLI."""
    document = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    mutate(document)
    machine = tmp_path / "mutant.yaml"
    machine.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    out = tmp_path / "counterexamples"
    check = subprocess.run(
        [sys.executable, "-m", "queryloop", "check", "--machine", str(machine), "--counterexamples", str(out)],
        capture_output=True,
        text=True,
        env=cli_env(None),
        cwd=ROOT,
        timeout=120,
    )
    assert check.returncode == 1, check.stdout + check.stderr
    runs = printed_runs(check.stdout)
    assert runs, check.stdout + check.stderr
    scenario = out / "query_loop-1.yaml"
    assert scenario.exists(), check.stderr
    run = run_cli(["-p", "replay", "--scenario", str(scenario), "--machine", str(machine)], api=None, cwd=tmp_path)
    return *runs[0], run


def test_a_run_past_a_figures_max_replays_step_for_step(tmp_path: Path) -> None:
    reasons, _, run = counterexample(tmp_path, replies_read_at_most_3)
    assert run.all_reasons == reasons, run.stderr
    assert run.result["terminal_reason"] == "malformed_tool_use_exhausted"


def test_a_run_that_breaks_a_property_replays_up_to_the_step_the_runtime_refuses(tmp_path: Path) -> None:
    # the runtime watches the declared properties: the step that would break one ends the run in internal_error
    reasons, shown, run = counterexample(tmp_path, one_pause_continue_per_turn)
    assert reasons[shown] == "pause_turn_continue"
    assert run.all_reasons == [*reasons[:shown], "internal_error"], run.stderr
    assert run.result["terminal_reason"] == "internal_error"
    assert "property 'pause_continues_per_turn' broken at run time" in run.stderr


def test_a_streak_counted_past_a_break_is_refused_by_the_runtime_at_the_step_the_checker_marks(tmp_path: Path) -> None:
    reasons, shown, run = counterexample(tmp_path, overloads_counted_in_total)
    assert reasons[shown] == "overloaded_backoff" and "overloaded_backoff" in reasons[: shown - 1]
    assert run.all_reasons == [*reasons[:shown], "internal_error"], run.stderr
    assert "property 'overloads_in_a_row' broken at run time" in run.stderr


def test_a_run_that_falls_back_replays_on_the_fallback_model_its_scenario_declares(tmp_path: Path) -> None:
    reasons, shown, run = counterexample(tmp_path, one_fallback_hop_and_two_requests_per_turn)
    switched = reasons.index("unavailable_model_fallback")
    assert switched < shown and reasons[-1] == "model_unavailable_surfaced", reasons
    scenario = yaml.safe_load((tmp_path / "counterexamples" / "query_loop-1.yaml").read_text(encoding="utf-8"))
    assert scenario["fallback_models"] == ["mock-fallback-1"]
    assert set(scenario["models"]) == {"mock-primary", "mock-fallback-1"}
    # the 404 it switches on, then the retry after the broken stream and the last 404 on the fallback model
    assert run.all_reasons == reasons, run.stderr
    assert run.result["is_error"] and "mock-fallback-1" in run.result["result"], run.result


def test_a_run_stays_on_its_fallback_model_for_the_retry_and_the_next_turn(tmp_path: Path) -> None:
    spec = load_machine(str(SHIPPED)).spec
    order = (("model_fallback", "unavailable_model_fallback"), ("api_retry",), ("next_turn",))

    def step(seen: int, s: PlannedStep) -> int:
        return seen + 1 if seen < len(order) and s.reason in order[seen] else seen

    replayer = ScenarioReplayer()
    found = shortest_run(
        spec, params=spec.param_defaults, start=0, step=step, shown=lambda v: v == 3, realiser=replayer.realiser(spec)
    )
    assert isinstance(found, PlannedPath), found
    example = Counterexample(finding=Finding(check="figure", message="a run past a fallback"), shows="", run=found)
    scenario = replayer.write(spec, example, tmp_path / "later")
    run = run_cli(["-p", "replay", "--scenario", str(scenario)], api=None, cwd=tmp_path)
    assert run.all_reasons == list(found.reasons), run.stderr
    models = [m["message"]["model"] for m in run.of("assistant") if "message" in m]
    assert models and set(models) == {"mock-fallback-1"}, models


def test_a_machine_file_that_does_not_load_is_a_one_line_error_and_nothing_runs(tmp_path: Path) -> None:
    machine = tmp_path / "broken.yaml"
    machine.write_text("schema_version: 1\nmachine: broken\n", encoding="utf-8")
    run = run_cli(["-p", "hi", "--scenario", "hello", "--machine", str(machine)], api=None, cwd=tmp_path)
    assert run.returncode == 1
    assert f"queryloop: {machine}:1: $: missing required key" in run.stderr
    assert "Traceback" not in run.stderr and not any(line.get("type") == "assistant" for line in run.lines)


def test_a_backoff_longer_than_max_backoff_s_is_clamped_to_it(tmp_path: Path) -> None:
    # the worst-case wait `check` prints rests on this clamp: a 10 s backoff base waits max_backoff_s (2 ms) instead
    text = (
        "schema_version: 1\nscenario: clamp\nmodel: mock-primary\nmodels:\n  mock-primary:\n"
        '    - error: {status: 500}\n    - reply: {content: [{text: "ok"}]}\n'
    )

    async def play(backend: AnthropicBackend) -> list[Message]:
        options = QueryOptions(
            model="mock-primary",
            cwd=tmp_path,
            home=tmp_path / "home",
            backend=backend,
            retry_base_delay_s=10.0,
            params={"max_backoff_s": 0.002},
        )
        return [m async for m in query(prompt="hi", options=options)]

    with MockApi(text) as api:

        async def run() -> list[Message]:
            client = anthropic.AsyncAnthropic(api_key="test-key", base_url=api.url, max_retries=0)
            try:
                return await play(AnthropicBackend(client))
            finally:
                await client.close()

        messages = asyncio.run(run())
    retries = [m.data for m in messages if isinstance(m, SystemMessage) and m.subtype == "api_retry"]
    assert [r["retry_delay_ms"] for r in retries] == [2]


def test_a_run_through_auto_compaction_replays_on_the_small_window_up_to_the_step_the_runtime_refuses(
    tmp_path: Path,
) -> None:
    reasons, shown, run = counterexample(tmp_path, failures_counted_in_total)
    assert reasons[shown] == "auto_compact_start" and "auto_compact_succeeded" in reasons[:shown]
    scenario = yaml.safe_load((tmp_path / "counterexamples" / "query_loop-1.yaml").read_text(encoding="utf-8"))
    assert scenario["model"] == SMALL_MODEL
    # every check over the threshold: the first sends its one round as it is, each later one compacts
    assert run.all_reasons == [*reasons[:shown], "internal_error"], run.stderr
    assert "property 'compaction_failures_until_success' broken at run time" in run.stderr


def test_a_head_truncation_replays_where_the_summarised_part_has_two_rounds(tmp_path: Path) -> None:
    reasons, shown, run = counterexample(tmp_path, made_up_ban("compact_head_truncation_retry"))
    assert reasons[shown] == "compact_head_truncation_retry"
    assert run.all_reasons == [*reasons[:shown], "internal_error"], run.stderr


def test_a_run_through_a_background_agents_report_replays_with_its_child_scripted(tmp_path: Path) -> None:
    reasons, shown, run = counterexample(tmp_path, made_up_ban("agent_completion_reported"))
    assert reasons[shown] == "agent_completion_reported" and reasons[shown - 1] == "agent_report_turn"
    assert parent_reasons(run) == [*reasons[:shown], "internal_error"], run.stderr
    (started,) = run.of("system", "task_started")
    child = [
        line["reason"]
        for line in run.lines
        if line.get("subtype") == "transition" and line.get("parent_tool_use_id") == started["tool_use_id"]
    ]
    assert child and child[-1] == "stop_hooks_passed", child  # the child's own run: its one answer


def test_a_failed_childs_report_after_a_later_tool_turn_replays_with_that_turns_request_held(tmp_path: Path) -> None:
    reasons, shown, run = counterexample(tmp_path, made_up_ban("agent_failure_collected"))
    launch = reasons.index("next_turn_with_agents")
    assert reasons[launch + 1] == "agents_still_running" and reasons[shown - 1] == "next_turn_with_agents"
    scenario = yaml.safe_load((tmp_path / "counterexamples" / "query_loop-1.yaml").read_text(encoding="utf-8"))
    assert scenario["models"]["mock-primary"][1]["delay_ms"] == REPORT_HOLD_MS
    assert parent_reasons(run) == [*reasons[:shown], "internal_error"], run.stderr
    (ended,) = run.of("system", "task_notification")
    assert ended["status"] == "failed"


def test_three_compactions_in_a_row_replay_to_the_refill_breaker(tmp_path: Path) -> None:
    """A whole run of the shipped machine: three compactions each a tool turn after the one before."""
    spec = load_machine(str(SHIPPED)).spec

    replayer = ScenarioReplayer()
    target = ("checking_context", "rapid_refill_breaker")
    plan = plan_paths(spec, params=spec.param_defaults, realiser=replayer.realiser(spec), targets=[target])
    found = plan.paths[target]
    assert found.reasons.count("auto_compact_succeeded") == 2 and found.reasons[-1] == "rapid_refill_breaker"
    example = Counterexample(finding=Finding(check="figure", message="a run into the breaker"), shows="", run=found)
    scenario = replayer.write(spec, example, tmp_path / "breaker")
    run = run_cli(["-p", "replay", "--scenario", str(scenario)], api=None, cwd=tmp_path)
    assert run.all_reasons == list(found.reasons), run.stderr
    assert run.result["terminal_reason"] == "rapid_refill_breaker"


def test_a_run_through_a_microcompaction_replays_with_the_big_reads_cleared(tmp_path: Path) -> None:
    """Two big reads, then four tool turns: the check after the fourth clears the big results, as the checker said."""
    reasons, shown, run = counterexample(tmp_path, made_up_ban("microcompact"))
    assert reasons[shown] == "microcompact" and reasons[:shown].count("next_turn") == 5
    assert run.all_reasons == [*reasons[:shown], "internal_error"], run.stderr
    assert "property 'made_up_ban' broken at run time" in run.stderr
