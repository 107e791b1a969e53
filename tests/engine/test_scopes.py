"""Scopes are the machine's words, not the engine's: a machine names what its counters count over.

The engine knows progress edges and the run; ``scopes:`` names the spans in between,
innermost first. A machine about jobs and attempts reads and checks in its own words,
and a name it does not declare is refused with the names it does.
"""

from __future__ import annotations

import pytest

from queryloop.fsm import SpecError, check_spec, parse_machine
from queryloop.fsm.model.spec import RUN, SPAN
from queryloop.fsm.verify.promela import derived_resets

JOBS = """\
schema_version: 1
machine: jobs
initial: trying
scopes: [attempt, job]
events: {ok: "", flaky: "", failed: "", next: "", abort: ""}
counters:
  flakes: {cap: 2, scope: attempt, doc: flaky answers within one attempt}
  attempts: {cap: 3, doc: "attempts at one job (no scope: the widest, job)"}
  jobs: {cap: 4, scope: run, doc: jobs in a run}
states:
  trying: {effect: queryloop.fsm.testing.scripted, emits: [ok, flaky, failed]}
  done_job: {effect: queryloop.fsm.testing.scripted, emits: [next]}
  finished: {terminal: true}
  gave_up: {terminal: true, result: {is_error: true}}
  aborted: {terminal: true, result: {is_error: true}}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: trying, event: flaky, to: trying, reason: flaky_again, counter: flakes}
  - {from: trying, event: flaky, to: gave_up, reason: flaky_gave_up}
  - {from: trying, event: failed, to: trying, reason: attempt_again, counter: attempts, ends: attempt}
  - {from: trying, event: failed, to: gave_up, reason: attempts_gave_up}
  - {from: trying, event: ok, to: done_job, reason: job_done}
  - {from: done_job, event: next, to: trying, reason: next_job, counter: jobs, progress: true}
  - {from: done_job, event: next, to: finished, reason: all_done}
  - {from: [trying, done_job], event: abort, to: aborted, reason: cancelled}
figures:
  tries: {effects: [queryloop.fsm.testing.scripted]}
"""


def test_a_machine_counts_over_the_scopes_it_names() -> None:
    spec = parse_machine(JOBS, "jobs.yaml", bind=False).spec
    assert spec.scopes == ("attempt", "job") and spec.step_scope == "job"
    assert spec.counter_map["attempts"].scope == "job"  # left out: the widest declared scope
    edge = {t.reason: t for t in spec.transitions}
    # ending an attempt resets what counts within one, not what counts within the job or the run
    assert spec.resets_of(edge["attempt_again"]) == {"flakes"}
    # a progress edge ends every declared scope; the run's counter is its own
    assert spec.resets_of(edge["next_job"]) == {"flakes", "attempts"}
    # SPIN's model derives the same resets on its own
    derived = derived_resets(spec)
    assert all(derived[t.source, t.reason] == spec.resets_of(t) for t in spec.transitions)


def test_the_checker_speaks_of_the_machines_scopes() -> None:
    report = check_spec(parse_machine(JOBS, "jobs.yaml", bind=False).spec, explore=False)
    assert report.ok, [f.message for f in report.findings]
    assert report.step == "job"
    assert "worst_case_per_job" in report.to_json() and "worst_case_per_turn" not in report.to_json()
    # per job: an attempt tries at most 3 times (2 flaky retries), a job makes at most 4 attempts (3 retries,
    # each restarting the flakes), and the job is done once: 4 × 3 + 1
    assert report.per_step["tries"] == 13


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "scope: attempt,",
            "scope: attemp,",
            "counter 'flakes' has scope 'attemp', which is not declared (did you mean 'attempt'?)",
        ),
        ("ends: attempt}", "ends: run}", "transition 'attempt_again' ends scope 'run', which is not declared"),
        ("scopes: [attempt, job]", "scopes: [attempt, job, run]", "`scopes` lists 'run', the scope every machine has"),
        ("scopes: [attempt, job]", "scopes: [job, job]", "`scopes` names a scope twice"),
    ],
)
def test_a_scope_the_machine_does_not_declare_is_refused(old: str, new: str, expected: str) -> None:
    assert old in JOBS
    with pytest.raises(SpecError) as info:
        parse_machine(JOBS.replace(old, new), "jobs.yaml", bind=False)
    assert expected in str(info.value)


def test_a_machine_that_declares_no_scopes_has_one_span_between_progress_edges() -> None:
    text = JOBS.replace("scopes: [attempt, job]\n", "").replace("scope: attempt, ", "").replace(", ends: attempt", "")
    spec = parse_machine(text, "jobs.yaml", bind=False).spec
    assert spec.scopes == (SPAN,) and {c.name: c.scope for c in spec.counters} == {
        "flakes": SPAN,
        "attempts": SPAN,
        "jobs": RUN,
    }
