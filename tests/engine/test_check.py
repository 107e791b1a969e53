"""The model checker passes on shipped machines and reports every seeded bug with the right message."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from queryloop.fsm import (
    CheckReport,
    MachineSpec,
    SpecError,
    StateSpec,
    TransitionSpec,
    check_spec,
    load_machine,
    parse_machine,
)
from queryloop.fsm.model.spec import CounterSpec
from queryloop.fsm.verify.bounds import effective_resets, figure_bounds, figure_values, most_over, runs_of_steps
from queryloop.fsm.verify.check import composed_figures, without_guard
from queryloop.machines import shipped_machines

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ROOT = FIXTURES.parent.parent

BUGS = FIXTURES / "bugs"


@pytest.mark.parametrize("path", shipped_machines(), ids=lambda p: p.stem)
def test_every_shipped_machine_passes_every_check(path) -> None:  # type: ignore[no-untyped-def]
    report = check_spec(load_machine(path).spec, explore=False)
    assert report.ok, [f.message for f in report.findings]
    assert report.per_step and all(v < math.inf for v in report.per_step.values())
    if path.stem == "query_loop":  # the docs quote the figures; they must be the checker's
        page = (ROOT / "docs/checker.md").read_text()
        quoted = re.search(r"at\s+most\s+\*\*(\d+) model requests per turn\*\*", page)
        assert quoted and int(quoted.group(1)) == report.per_step["model_requests"]
        formula = report.expressions["model_requests"][0]
        assert f"`{formula}`" in " ".join(page.split()), formula
        shape = re.search(r"\u2014 (\d+) states, (\d+) transitions", (ROOT / "docs/recovery.md").read_text())
        assert shape and (int(shape.group(1)), int(shape.group(2))) == (report.states, report.transitions)
        assert report.per_run["model_requests"] == math.inf  # tool turns are unbounded unless --max-turns


@pytest.mark.slow  # the exploration at the check values: a minute
def test_the_query_loop_explored_at_its_check_values_matches_its_bounds_and_the_docs(
    explored_machines: dict[Path, CheckReport],
) -> None:
    """The cross-check at the params' check values: every configuration, the exact worst case equal
    to the symbolic bound there, and the figures docs/checker.md quotes are these."""
    report = explored_machines[ROOT / "machines/query_loop.yaml"]
    assert report.ok, [f.message for f in report.findings]
    assert dict(report.worst_case) == {k: int(v) for k, v in report.symbolic_at_params.items()}
    page = " ".join((ROOT / "docs/checker.md").read_text().split())
    explored = re.search(r"\*\*(\d{1,3}(?: \d{3})*) configurations\*\*", page)
    assert explored and int(explored.group(1).replace(" ", "")) == report.configurations
    exact = re.search(r"exact worst case there is \*\*(\d+)\*\* model requests", page)
    assert exact and int(exact.group(1)) == report.worst_case["model_requests"]


@pytest.mark.parametrize(
    "caps",
    [
        {"max_retries": 1, "max_auto_compact_failures": 2, "max_denied_call_repeats": 2},
        {
            "max_retries": 2,
            "overloaded_retries_before_fallback": 1,
            "max_stop_hook_blocks": 1,
            "max_fallback_hops": 2,
            "max_output_recoveries": 0,
            "max_pause_continues": 0,
            "max_head_truncations": 0,
        },
        {
            "max_retries": 1,
            "max_turns": 2,
            "max_stop_hook_blocks": 1,
            "max_output_recoveries": 2,
            "max_pause_continues": 0,
            "max_head_truncations": 0,
            "max_fallback_hops": 0,
        },
    ],
    ids=["retries-1", "fallback-2", "two-turns"],
)
@pytest.mark.slow  # three explorations of the query loop: a minute
def test_symbolic_and_explored_figures_agree_at_small_caps(caps: dict[str, int]) -> None:
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    report = check_spec(spec, caps)
    assert not [f for f in report.findings if f.check in ("bound", "exploration", "stuck", "termination")]
    assert dict(report.worst_case) == {k: int(v) for k, v in report.symbolic_at_params.items()}
    if report.worst_case_per_run:
        assert all(report.worst_case_per_run[k] <= v for k, v in report.symbolic_per_run_at_params.items())
    if caps.get("max_turns"):  # the explored runs are what a child at max_agent_turns = max_turns can do
        at = {**report.params, "max_agent_turns": caps["max_turns"]}
        composed = composed_figures(spec, at, report.symbolic_at_params)["agents"]
        # a child (depth 1) starts none: explored without the edges `pending` guards, at a `starts` cap of 0
        (children,) = spec.children
        starts_cap = str(spec.counter_map[children.starts].cap)
        child = check_spec(without_guard(spec, str(children.pending)), {**caps, starts_cap: 0})
        explored = {
            k: report.worst_case[k] + composed.starts * child.worst_case_per_run[k]
            for k in composed.per_step
            if k in report.worst_case and k in child.worst_case_per_run
        }
        assert explored and all(explored[k] <= composed.per_step[k] for k in explored), (explored, composed)


# every cap of a per-turn loop at 0, then one or two of them at 1: the caps where the branch of a bound
# largest there leaves out every term of a zero cap (the polynomial once printed 8 for 14 at caps of 0)
NO_CAPS = {
    "max_retries": 0,
    "overloaded_retries_before_fallback": 0,
    "max_fallback_hops": 0,
    "max_output_recoveries": 0,
    "max_pause_continues": 0,
    "max_auto_compact_failures": 0,
    "max_stop_hook_blocks": 0,
    "max_head_truncations": 0,
    "max_mcp_reconnects": 0,
}


def _polynomial_value(text: str, params: dict[str, object]) -> float:
    """The value of a polynomial as ``check`` prints it (``2·max_retries·max_stop_hook_blocks + 14``)."""
    if text == "unbounded":
        return math.inf
    text = text.split(" (", 1)[0]  # what follows says why it is above the figure where a cap is 0
    total = 0.0
    for term in text.replace(" − ", " + -").split(" + "):
        sign, term = (-1, term[1:]) if term.startswith("-") else (1, term)
        value = float(sign)
        for factor in term.split("·"):
            value *= float(factor) if factor.isdigit() else float(params[factor])  # type: ignore[arg-type]
        total += value
    return total


def test_the_symbolic_bounds_are_the_figures_at_the_defaults_and_never_below_them_at_caps_of_0() -> None:
    """The expressions the polynomials are read from are bounds at every cap value: equal to the figures where
    every cap is at least 1, and never below them where one is 0 (a maximum with 0 kept its 0 beside a term that
    is nothing at a cap of 0). There the figure leaves out every edge whose cap is 0, which an expression of the
    caps cannot (the auto-compaction's summary needs max_auto_compact_failures ≥ 1)."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    bounds = figure_bounds(spec)
    for caps in (NO_CAPS, {**NO_CAPS, "max_retries": 1}, {}):
        at = {**spec.param_defaults, **caps}
        per_step, _ = figure_values(spec, at)
        symbolic = {name: b.per_step.evaluate(spec, at) for name, b in bounds.items()}
        assert all(symbolic[name] >= per_step[name] for name in per_step), caps
        if not caps:
            assert symbolic == per_step
    at_0 = {**spec.param_defaults, **NO_CAPS}
    assert figure_values(spec, at_0)[0]["model_requests"] == 13 < bounds["model_requests"].per_step.evaluate(spec, at_0)


def test_at_every_cap_0_the_figure_is_the_exact_worst_case_and_its_polynomial_says_why_it_is_above() -> None:
    """Issue 51: at caps of 0 the polynomial says 14 where a turn sends 13 requests at most. The figure is 13 (an
    edge whose cap is 0 is left out); the polynomial, a bound at every cap value, keeps the auto-compaction's
    summary request, which every max_auto_compact_failures of 1 or more allows: no polynomial term is 1 there
    and 0 at 0, so it says so where it is above the figure."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    report = check_spec(spec, {**NO_CAPS, "max_agents_per_turn": 0, "max_running_agents": 0})
    assert report.worst_case["model_requests"] == report.per_step["model_requests"] == 13
    printed = report.expressions["model_requests"][0]
    assert printed.endswith(
        "(14 here, above the bound 13: an edge whose cap is 0 here never fires, and no term of "
        "a polynomial is there at every cap of 1 or more and gone at 0)"
    ), printed
    assert "(" not in check_spec(spec, explore=False).expressions["model_requests"][0]


@pytest.mark.parametrize(
    "caps",
    [NO_CAPS, {**NO_CAPS, "max_retries": 1}, {**NO_CAPS, "max_fallback_hops": 1, "max_stop_hook_blocks": 1}],
    ids=["every-cap-0", "retries-1", "hops-and-blocks-1"],
)
@pytest.mark.slow  # three small explorations: a few seconds
def test_the_printed_polynomials_are_bounds_at_caps_of_0_and_at_the_defaults(caps: dict[str, int]) -> None:
    """The polynomial check prints at some caps is a bound at every cap value: at those caps and at the
    defaults it is never below the exploration's exact worst case (or the defaults' bound), and the one
    printed at the defaults is never below the exploration at caps of 0."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    report = check_spec(spec, caps)
    defaults = check_spec(spec, explore=False)
    at_defaults = {**spec.param_defaults}
    for name, exact in report.worst_case.items():
        if name not in report.expressions:
            continue
        printed, printed_at_defaults = report.expressions[name][0], defaults.expressions[name][0]
        assert _polynomial_value(printed, dict(report.params)) >= exact, (name, printed, exact, caps)
        assert _polynomial_value(printed_at_defaults, dict(report.params)) >= exact, (name, printed_at_defaults)
        assert _polynomial_value(printed, at_defaults) >= defaults.per_step[name], (name, printed, caps)


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
    assert "shadowed by 'gave_up' above it, which fires whenever it could: no guard)" in dead["api_retry"]


def test_an_edge_shadowed_by_an_earlier_edge_with_the_same_guard_is_dead() -> None:
    """A guard name has one truth value per decision: swapping the breaker check before the
    compaction makes auto-compaction unreachable, and the checker says so."""
    path = ROOT / "machines/query_loop.yaml"
    spec = load_machine(path).spec
    cands = spec.candidates()[("checking_context", "over_threshold")]
    order = [t.reason for t in cands]
    swapped = [*cands]
    i, j = order.index("auto_compact_start"), order.index("auto_compact_breaker")
    swapped[i], swapped[j] = swapped[j], swapped[i]
    rest = [t for t in spec.transitions if (t.source, t.event) != ("checking_context", "over_threshold")]
    report = check_spec(attrs.evolve(spec, transitions=(*rest, *swapped)), explore=False)
    dead = {f.reasons[0]: f.message for f in report.findings if f.check == "dead_edge"}
    assert "auto_compact_start" in dead, report.findings
    assert "shadowed by 'auto_compact_breaker'" in dead["auto_compact_start"]


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


def _query_loop_text() -> str:
    return (ROOT / "machines/query_loop.yaml").read_text()


def _mutated(old: str, new: str) -> str:
    text = _query_loop_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_a_retry_cap_that_may_be_null_does_not_bound_its_cycle() -> None:
    text = _mutated(
        "  max_retries: {default: 10, check: 2,", "  max_retries: {default: null, type: int, nullable: true, check: 2,"
    )
    report = check_spec(parse_machine(text, "mutant.yaml", bind=False).spec, explore=False)
    messages = [f.message for f in report.findings if f.check == "termination"]
    assert any("'api_retries' (cap max_retries, which may be null) bound it only when set" in m for m in messages)


def test_a_null_cap_param_without_a_type_is_refused_at_load() -> None:
    text = _mutated("  max_retries: {default: 10, check: 2,", "  max_retries: {default: null, check: 2,")
    with pytest.raises(SpecError) as info:
        parse_machine(text, "mutant.yaml", bind=False)
    assert "param 'max_retries' caps counter 'api_retries' but has no type" in str(info.value)


def test_a_retry_edge_marked_progress_is_refused_at_load() -> None:
    """Progress resets every turn budget: a recovery marked progress would never be bounded per turn."""
    text = _mutated(
        '        reason: "{retry}"\n        counter: "{counter}"\n',
        '        reason: "{retry}"\n        progress: true\n',
    )
    with pytest.raises(SpecError) as info:
        parse_machine(text, "mutant.yaml", bind=False)
    assert "transition 'api_retry' is marked `progress` but is a recovery (`_retry`)" in str(info.value)


def test_unbounded_by_design_must_name_a_progress_edge() -> None:
    text = _mutated(
        '  next_turn: {bound: max_turns, doc: "tool turns: unbounded unless --max-turns is set"}',
        '  next_turn: {bound: max_turns, doc: "tool turns: unbounded unless --max-turns is set"}\n'
        '  api_retry: {bound: max_retries, doc: "retries"}',
    )
    with pytest.raises(SpecError) as info:
        parse_machine(text, "mutant.yaml", bind=False)
    assert "`unbounded_by_design` lists 'api_retry', which is not a `progress` edge" in str(info.value)


def test_a_figure_above_its_declared_max_fails_the_check() -> None:
    text = _mutated("    max: 400\n", "    max: 389\n")
    report = check_spec(parse_machine(text, "mutant.yaml", bind=False).spec, explore=False)
    found = [f for f in report.findings if f.check == "figure"]
    assert found and "'model_requests' can reach 390 per turn" in found[0].message
    assert "above its declared max 389" in found[0].message


def test_every_state_must_be_able_to_end_without_an_interrupt(write_machine) -> None:  # type: ignore[no-untyped-def]
    path = write_machine(
        """schema_version: 1
machine: spins
initial: a
events: {go: "", again: "", abort: ""}
scopes: [request, turn]
counters: {n: {cap: 3, scope: run}}
states:
  a: {effect: queryloop.fsm.testing.scripted, emits: [go]}
  b: {effect: queryloop.fsm.testing.scripted, emits: [again]}
  end: {terminal: true}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: a, event: go, to: b, reason: start}
  - {from: b, event: again, to: b, reason: spin, progress: true, counter: n}
  - {from: b, event: again, to: b, reason: spin_more, progress: true}
  - {from: [a, b], event: abort, to: end, reason: cancelled}
"""
    )
    report = check_spec(load_machine(path).spec, explore=False)
    assert any(
        f.check == "dead_end" and "'b' can never reach a terminal state unless the run is interrupted" in f.message
        for f in report.findings
    ), report.findings


def test_the_check_reports_per_run_figures_when_every_progress_edge_is_bounded() -> None:
    report = check_spec(load_machine(ROOT / "machines/query_loop.yaml").spec, {"max_turns": 3}, explore=False)
    # three tool turns, and as many turns started by background sub-agents' reports (not counted by max_turns)
    assert report.per_run["model_requests"] == 2 * 3 * report.per_step["model_requests"]
    assert "max_turns" in report.expressions["model_requests"][1]


def test_a_long_exploration_tells_its_progress_which_the_command_prints_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from queryloop.fsm.verify import check, progress

    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.005)  # "long" for this test: a few milliseconds
    told: list[tuple[str, str, int, float]] = []
    spec = load_machine(ROOT / "machines/examples/retry_fetch.yaml", bind=False).spec
    report = check_spec(spec, {"max_retries": 30, "items": 30}, progress=lambda *said: told.append(said))
    assert told, "no progress in a run many times longer than the interval"
    assert {machine for machine, *_ in told} == {"retry_fetch"}
    assert {phase for _, phase, *_ in told} <= {"exploring", "analysing"}
    found = [n for _, _, n, _ in told]
    assert found == sorted(found) and found[-1] <= report.configurations
    check.print_progress("retry_fetch", "exploring", 1234567, 20.4)
    assert capsys.readouterr().err == "queryloop check: exploring retry_fetch: 1,234,567 configurations, 20 s\n"


def test_a_turn_with_its_agents_is_its_own_figure_plus_each_agents_whole_run() -> None:
    """children: agents — unbounded while a child's turns are unlimited; with max_agent_turns = T, the turn's own
    bound plus max_agents_per_turn runs of the same machine at max_turns = T (the runtime keeps both limits)."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    unset = check_spec(spec, explore=False).composed["agents"]
    assert unset.child_steps is None and unset.per_step["model_requests"] == math.inf
    at = {"max_agent_turns": 2, "max_agents_per_turn": 3}
    composed = check_spec(spec, at, explore=False).composed["agents"]
    own = check_spec(spec, explore=False).per_step["model_requests"]
    # a child (depth 1) starts none: its run is the machine's without the edges `pending` (agents_running) guards
    (children,) = spec.children
    assert children.pending == "agents_running"
    child = without_guard(spec, children.pending)
    gone = {"next_turn_with_agents", "agent_report_turn", "turn_limit_agent_wait"}
    assert not gone & {t.reason for t in child.transitions}
    child_at = {bound: 2 for bound in set(child.progress_bounds.values())}
    loose = check_spec(child, child_at, explore=False).per_run["model_requests"]
    a_run = runs_of_steps(child, {**child.param_defaults, **at, **child_at}, ["model_requests"])["model_requests"]
    assert composed.child_run["model_requests"] == a_run < loose, "each run budget paid once per child run"
    assert composed.per_step["model_requests"] == own + 3 * a_run
    assert composed.per_step["tool_turns"] == 1 + 3 * 2
    cmd = [sys.executable, "-m", "queryloop", "check", "--machine", "machines/query_loop.yaml"]
    shown = subprocess.run([*cmd, "--set", "max_agent_turns=2"], capture_output=True, text=True, cwd=ROOT, check=True)
    assert f"model_requests there = {int(own)} + 8 × a run of at most 2 turns" in shown.stdout


def test_a_children_entry_must_name_a_counter_per_turn_with_a_cap_always_set_and_an_int_param() -> None:
    """`starts` names the counter of the edge that admits each start: per turn (the step), its cap never null."""
    for old, new, said in [
        (
            "    starts: agent_launches\n",
            "    starts: agent_launch\n",
            "names counter 'agent_launch', which is not declared",
        ),
        (
            "    starts: agent_launches\n",
            "    starts: api_retries\n",
            "names counter 'api_retries', counted per request",
        ),
        ("    cap: max_agents_per_turn\n", "    cap: max_agent_turns\n", "whose cap 'max_agent_turns' may be null"),
        (
            "    steps: max_agent_turns\n",
            "    steps: max_agent_turn\n",
            "names param 'max_agent_turn', which is not declared",
        ),
        (
            "    steps: max_agent_turns\n",
            "    steps: max_retry_after_s\n",
            "names param 'max_retry_after_s', not an int",
        ),
        ("    counter: agent_launches\n", "", "names counter 'agent_launches', which no edge counts"),
        (
            "    counter: agent_launches\n",
            "    counter: agent_launches\n    resets: [agent_launches]\n",
            "names counter 'agent_launches', which is reset within a turn",
        ),
        ("    depth: 1\n", "    depth: 2\n", "children.agents.depth: 2 is not allowed here (use one of: 1)"),
    ]:
        with pytest.raises(SpecError) as info:
            parse_machine(_mutated(old, new), "mutant.yaml", bind=False)
        assert said in str(info.value), (new, str(info.value))
    with pytest.raises(SpecError) as info:
        parse_machine(_mutated("    starts: agent_launches\n", "    starts: agent_launch\n"), "mutant.yaml", bind=False)
    assert "did you mean 'agent_launches'" in str(info.value)


def test_the_composed_bound_the_docs_quote_is_the_checkers() -> None:
    """docs/checker.md's block is rendered from the checker (tools/docs_figures.py; tests/test_docs.py holds it
    current); at the defaults it says 15 750 = 390 + 8 × 1 920."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    composed = check_spec(spec, {"max_agent_turns": 10}, explore=False).composed["agents"]
    total, a_run = int(composed.per_step["model_requests"]), int(composed.child_run["model_requests"])
    assert (total, a_run, composed.starts) == (15_750, 1_920, 8)
    checker = " ".join((ROOT / "docs/checker.md").read_text().split())
    assert "`--max-agent-turns 10`" in checker and "**15 750 model requests** (390 + 8 × 1 920)" in checker


# ---- the worst-case wait: each `each_s` covers what its effects may sleep (issue 42) ----------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (  # 13 600 s printed where a turn may wait 20 400 s: retry-afters up to 60 s are waited for
            "    each_s: [max_retry_after_s, max_backoff_s]\n",
            "    each_s: [max_backoff_s]\n",
            "figure 'waits' `each_s` leaves out 'max_retry_after_s'",
        ),
        (  # 0 s printed for reconnects, which back off up to max_backoff_s each
            "    each_s: [max_backoff_s]\n    doc: >\n      reconnect attempts",
            "    each_s: [0]\n    doc: >\n      reconnect attempts",
            "figure 'mcp_reconnects' `each_s` leaves out 'max_backoff_s'",
        ),
        (  # no wait printed at all
            "    each_s: [max_backoff_s]\n    doc: >\n      reconnect attempts",
            "    doc: >\n      reconnect attempts",
            "effect 'queryloop.handlers.mcp.reconnect_servers' sleeps up to max_backoff_s seconds at a time, but no "
            "figure with `each_s` counts it ('mcp_reconnects' count it without)",
        ),
    ],
    ids=["waits-without-retry-after", "reconnects-each-0-s", "reconnects-without-each_s"],
)
def test_a_worst_case_wait_below_what_the_effects_sleep_is_refused(old: str, new: str, expected: str) -> None:
    text = _mutated(old, new)
    parse_machine(text, "mutant.yaml", bind=False)  # the YAML alone cannot tell: the handlers declare their sleeps
    with pytest.raises(SpecError) as info:
        parse_machine(text, "mutant.yaml")
    assert expected in str(info.value)


def test_no_wait_is_counted_where_no_wait_can_be_long() -> None:
    """An unbounded count of waits that are each 0 s is 0 s, not a NaN."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    report = check_spec(spec, {"max_backoff_s": 0, "max_retry_after_s": 0, "max_retries": 100}, explore=False)
    assert report.wait_s_per_step["waits"] == 0.0
    unbounded = attrs.evolve(report, per_step={**report.per_step, "waits": math.inf})
    from queryloop.fsm.verify.figures import waits

    assert waits(spec, unbounded.at, unbounded.per_step)[1]["waits"] == 0.0


# ---- a run's budgets paid once per run: the tight composed figure (issue 42) ---------------------------------


def test_a_child_run_pays_its_stop_hook_blocks_and_fallback_hops_once_not_once_per_turn() -> None:
    """A turn's 390 is 170 + 23 per Stop-hook block + 12 per fallback hop; a run of T turns spends each of those
    budgets once in all, so it is T × 170 + 8 × 23 + 3 × 12, not T × 390 (nor the per-run decomposition's)."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    for turns in (1, 2, 10):
        at = {**spec.param_defaults, **{bound: turns for bound in set(spec.progress_bounds.values())}}
        _, loose = figure_values(spec, at)
        tight = runs_of_steps(spec, at, spec.figures)
        progress = {t.counter for t in spec.transitions if t.progress}
        steps = sum(spec.cap_of(spec.counter_map[c], at) or 0 for c in progress if c)
        assert tight["model_requests"] == (steps + 1) * 170 + 8 * 23 + 3 * 12 < loose["model_requests"]


def test_the_composed_figure_has_a_max_checked_for_every_value_of_the_childrens_turns() -> None:
    """Issue 51: `max_with_children` holds for every value a run accepts, not only at a `--set`: a turn with its
    agents at max_agent_turns up to its `max` (100), max_agents_per_turn up to its (8), every other cap in range."""
    text = _mutated("    max_with_children: 143000\n", "    max_with_children: 15000\n")
    spec = parse_machine(text, "mutant.yaml", bind=False).spec
    found = [f.message for f in check_spec(spec, explore=False).findings if f.check == "figure"]
    assert len(found) == 1 and "figure 'model_requests' with its children may reach 142956 per turn" in found[0]
    assert "max_agent_turns up to 100, max_agents_per_turn up to 8 (396 + 8 × 17820)" in found[0]
    report = check_spec(spec, {"max_agent_turns": 10}, explore=False)
    found = [f.message for f in report.findings if f.check == "figure"]
    assert len(found) == 1 and "figure 'model_requests' with its children can reach 15750" in found[0], found
    assert "above its declared max_with_children 15000" in found[0]


def test_each_figure_holds_for_every_value_a_run_accepts_not_only_at_the_defaults() -> None:
    """Issue 51: at the defaults a turn admits 9 Agent calls and sends 15 750 requests with its agents at
    --max-agent-turns 10; a range that lets max_agents_per_turn reach 32 breaks both figures' `max`, and `check`
    says so at the defaults."""
    text = _mutated(
        "    max: 8\n    doc: >\n      sub-agents one tool turn",
        "    max: 32\n    doc: >\n      sub-agents one tool turn",
    )
    report = check_spec(parse_machine(text, "mutant.yaml", bind=False).spec, explore=False)
    assert report.per_step["agent_admissions"] == 9  # at the defaults
    found = [f.message for f in report.findings]
    assert any(m.startswith("figure 'agent_admissions' may reach 33 per turn for a value a run accepts") for m in found)
    assert any("figure 'model_requests' with its children may reach" in m for m in found), found
    shipped = check_spec(load_machine(ROOT / "machines/query_loop.yaml").spec, explore=False)
    assert shipped.ok and shipped.over_ranges is not None
    assert shipped.over_ranges.per_step["model_requests"] == 396 <= 400
    assert shipped.over_ranges.composed["agents"].per_step["model_requests"] == 142_956 <= 143_000


def test_the_most_over_a_box_of_caps_is_the_bound_at_its_worst_setting() -> None:
    """The figure for every value a run accepts is proven by intervals, not by assuming the bound grows with each
    cap: over a small box it is at least the bound at every setting, and (split fine enough) the largest of them."""
    spec = load_machine(ROOT / "machines/query_loop.yaml").spec
    bounds = figure_bounds(spec)
    box = {"max_retries": 3, "max_fallback_hops": 2, "max_stop_hook_blocks": 2, "max_head_truncations": 2}
    low = {**spec.param_defaults, **dict.fromkeys(box, 0)}
    high = {**spec.param_defaults, **box}
    for name in ("model_requests", "waits", "replies_read"):
        expr = bounds[name].per_step
        each = [
            expr.evaluate(spec, {**low, **dict(zip(box, point, strict=True))})
            for point in itertools.product(*(range(top + 1) for top in box.values()))
        ]
        assert most_over(expr, spec, low, high) == max(each), name


def test_a_reset_where_the_counter_is_always_0_leaves_the_run_budget_paid_once() -> None:
    """Issue 51: a run budget is decided by what a reset does, not by where one is written. Resetting the Stop-hook
    blocks as the session starts (always 0 there) once made a child run pay them every turn: 28 998, not 15 750."""
    for resets in ("[stop_hook_blocks]", "[fallback_hops]"):
        text = _mutated(
            "    reason: session_started\n    do: .session.start_session\n",
            f"    reason: session_started\n    resets: {resets}\n    do: .session.start_session\n",
        )
        spec = parse_machine(text, "mutant.yaml", bind=False).spec
        assert "stop_hook_blocks" not in effective_resets(spec) and "fallback_hops" not in effective_resets(spec)
        report = check_spec(spec, {"max_agent_turns": 10}, explore=False)
        assert report.ok and report.composed["agents"].per_step["model_requests"] == 15_750, resets
    # a reset where the counter may be above 0 is one (a Stop-hook block, then a tool turn): paid every turn
    text = _mutated("    reason: next_turn\n", "    reason: next_turn\n    resets: [stop_hook_blocks]\n")
    spec = parse_machine(text, "mutant.yaml", bind=False).spec
    assert "stop_hook_blocks" in effective_resets(spec)


SMALL_RUNS = {
    "max_retries": 0,
    "overloaded_retries_before_fallback": 0,
    "max_output_recoveries": 0,
    "max_pause_continues": 0,
    "max_auto_compact_failures": 0,
    "max_head_truncations": 0,
    "max_denied_call_repeats": 2,
    "max_ledger_replays": 2,
    "max_mcp_reconnects": 0,
    "max_running_agents": 1,
}


@pytest.mark.slow  # four explorations of whole runs at small caps: about 10 s
@pytest.mark.parametrize(
    ("turns", "blocks", "hops"), [(1, 2, 1), (2, 1, 1), (2, 2, 0), (3, 1, 0)], ids=lambda v: str(v)
)
def test_the_run_bound_with_budgets_paid_once_is_never_below_an_explored_run(
    turns: int, blocks: int, hops: int
) -> None:
    """Soundness at every cap value of a small range: the worst whole run the exploration finds stays within
    the bound that charges each run budget once (its steps are the largest over the whole box of budgets)."""
    spec = load_machine(ROOT / "machines/query_loop.yaml", bind=False).spec
    caps = {**SMALL_RUNS, "max_stop_hook_blocks": blocks, "max_fallback_hops": hops}
    caps.update({bound: turns for bound in set(spec.progress_bounds.values())})
    report = check_spec(spec, caps)
    assert report.worst_case_per_run, [f.message for f in report.findings]
    tight = runs_of_steps(spec, report.params, spec.figures)
    for name in spec.figures:
        assert report.worst_case_per_run[name] <= tight[name], (name, report.worst_case_per_run[name], tight[name])
