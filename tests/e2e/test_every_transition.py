"""Every transition of the shipped query loop, taken end to end by a run planned for it.

For each ``(source state, reason)`` of ``machines/query_loop.yaml``, ``queryloop.fsm.verify.paths``
plans a shortest run that takes it and then ends, keeping only the steps
``realise.QueryLoopRealiser`` can make happen with real data; the run is then played
through the real ``anthropic`` SDK over loopback against the embedded server — in process
through :class:`~queryloop.run.agent.AgentRun`, and for a few transitions whose flags are the
point through ``queryloop run`` in a subprocess — and its trace must be exactly the
planned path. Hooks are real subprocesses following a plan; aborts are injected at a known
step (the run's generator is closed, or cancelled inside the prompt hooks), never by timing.
A transition no run can take fails here with the reason: a finding, never a skip.

The agents layer's transitions (and the two guarded edges into it) are not planned here, but
for the admission every tool turn passes (``tool_calls_admitted``, and an interrupt there): a
sub-agent is a concurrent run whose end the parent meets at a moment the abstraction of
``realise`` does not model, and the planned runs offer no Agent tool.
``tests/e2e/test_subagents.py`` takes each of them (an Agent call admitted, one refused at
the cap) with a run scripted for it, and the coverage gate of ``tools/test.sh`` holds both
files to every transition. So is ``microcompact``: it needs 10,000 tokens of old tool
results, more than the abstraction's runs hold; ``tests/e2e/test_context_layer.py`` takes it. The
structured output's edges (``--json-schema``) are taken by ``tests/e2e/test_structured_output.py``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from queryloop.fsm import load_machine
from queryloop.fsm.verify.paths import PathPlan, plan_paths
from queryloop.machines import MACHINES_DIR

from .realise import MCP_STATES, QueryLoopRealiser, RunPlan, build_run, play_cli, play_in_process

# ~85 s in all: tools/test.sh --fast leaves the module out. One xdist worker runs the whole module (its group), so
# the in-process plan (half a minute of search, cached per process by planned()) is made once per run, not per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("every_transition")]

SPEC = load_machine(MACHINES_DIR / "query_loop.yaml", bind=False).spec
AGENT_STATES = {s.name for s in SPEC.states if s.layer == "agents"} - {"admitting_agents"}  # every tool turn's
AGENT_CALLS = {"agent_launch_admitted", "agent_launch_refused"}  # the admission of an Agent call: a sub-agent's
TARGETS = list(
    dict.fromkeys(
        (t.source, t.reason)
        for t in SPEC.transitions
        if t.source not in AGENT_STATES
        and t.dest not in AGENT_STATES  # tests/e2e/test_subagents.py takes these
        and t.reason not in AGENT_CALLS  # and these
        and t.reason != "microcompact"  # tests/e2e/test_context_layer.py takes it
        and not t.reason.startswith("structured_output_")  # tests/e2e/test_structured_output.py takes these
    )
)
CLI_TARGETS = (  # played through `queryloop run`, with the CLI's own flags and the params' defaults
    ("submitting_prompt", "prompt_hook_blocked"),  # --settings hooks
    ("checking_context", "auto_compact_start"),  # --auto-compact-threshold
    ("calling_model", "model_fallback"),  # --fallback-model, the third overloaded answer in a row
    ("calling_model", "stream_fallback"),  # a stream cut mid-block through the SDK
    ("reading_reply", "max_output_tokens_escalate"),  # --escalated-max-output-tokens
    ("running_tools", "max_turns_reached"),  # --max-turns
)


MCP_TARGETS = tuple(t for t in TARGETS if t[0] in MCP_STATES)  # planned with an MCP server in the runs


@functools.cache
def planned(how: str) -> PathPlan:
    """In process: the params' check values (the smallest caps that exhaust the machine); the CLI: its defaults.

    ``mcp``: the MCP states' transitions, with a test MCP server in the runs; ``in_process``: the
    others, whose runs have none (a server would multiply every path the search looks at).
    """
    if how == "mcp":
        return plan_paths(SPEC, realiser=QueryLoopRealiser(mcp=True), targets=MCP_TARGETS)
    if how == "in_process":
        others = [t for t in TARGETS if t not in MCP_TARGETS]
        return plan_paths(SPEC, realiser=QueryLoopRealiser(), targets=others)
    defaults = {**SPEC.param_defaults, "max_retries": 2}  # --max-retries is a flag
    return plan_paths(SPEC, params=defaults, realiser=QueryLoopRealiser(cli=True), targets=CLI_TARGETS)


def _how(target: tuple[str, str]) -> str:
    return "cli" if target in CLI_TARGETS else "mcp" if target in MCP_TARGETS else "in_process"


def _explain(plan: RunPlan, reasons: list[str], result: dict[str, object]) -> str:
    first = next((i for i, (a, b) in enumerate(zip(plan.reasons, reasons, strict=False)) if a != b), None)
    if first is None:
        first = min(len(plan.reasons), len(reasons))
    return (
        f"the run left its planned path at step {first}:\n  planned: {plan.reasons}\n  taken:   {reasons}\n"
        f"  result: {result.get('terminal_reason')}: {result.get('result')}\n"
        f"scenario:\n{plan.scenario_yaml}options: {plan.options}\nhooks: {plan.hooks}, abort after: {plan.abort_after}"
    )


def test_the_planner_finds_a_path_for_every_transition_or_says_why() -> None:
    plans = [planned("in_process"), planned("mcp")]
    assert set().union(*(set(p.paths) | set(p.missing) for p in plans)) == set(TARGETS)
    for path in (path for plan in plans for path in plan.paths.values()):
        assert (path.steps[path.taken_at].source, path.steps[path.taken_at].reason) == path.target
        assert path.steps[-1].terminal and not any(s.terminal for s in path.steps[:-1])


@pytest.mark.parametrize("target", TARGETS, ids=[f"{source}-{reason}" for source, reason in TARGETS])
def test_a_planned_run_takes_the_transition_end_to_end(target: tuple[str, str], tmp_path: Path) -> None:
    cli = target in CLI_TARGETS
    plan = planned(_how(target))
    if target not in plan.paths:
        source, reason = target
        pytest.fail(
            f"FINDING: no end-to-end run can take {reason!r} from {source!r}: {plan.missing[target]}. "
            "Change the machine (or the handler that produces the event) so that it can happen, "
            "or teach tests/e2e/realise.py how to make it happen.",
            pytrace=False,
        )
    run = build_run(plan.paths[target], params=plan.params, cli=cli)
    (tmp_path / "cwd").mkdir()
    (tmp_path / "home").mkdir()
    played = (play_cli if cli else play_in_process)(run, tmp_path / "cwd", tmp_path / "home")
    assert played.reasons == run.reasons, _explain(run, played.reasons, played.result)
