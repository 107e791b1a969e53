"""Random fault sequences over HTTP, through the real SDK: every run ends typed and keeps the loop's invariants.

The embedded server plays a random sequence of faults (statuses with and without
retry headers, resets, stalls, garbage bodies, broken SSE, SSE error events,
prompt-too-long, max_tokens, malformed tool_use, refusals, huge replies, tool errors,
an MCP server that crashes or hangs) between random tool turns; the loop runs at the
caps the checker explored, so its bound applies. The second test adds hooks that time
out or print bad JSON and an interrupt at a random step, then resumes the session.
``tools/soak_faults.py`` runs the same for as long as you like.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queryloop.mockapi.fuzz import FAULTS, HOOK_EVENTS, HOOK_FAULTS, FaultRun, check_report, play, violations

pytestmark = pytest.mark.slow  # ~40 s in all: tools/test.sh --fast leaves the module out

REPORT = check_report()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    faults=st.lists(st.sampled_from(sorted(FAULTS)), max_size=12),
    fallback=st.booleans(),
    max_turns=st.one_of(st.none(), st.integers(min_value=1, max_value=3)),
)
def test_any_fault_sequence_over_http_ends_typed_within_the_invariants(
    faults: list[str], fallback: bool, max_turns: int | None
) -> None:
    run = asyncio.run(play(faults, fallback=fallback, report=REPORT, max_turns=max_turns))
    assert violations(run, REPORT) == [], (faults, [s.reason for s in run.steps])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    faults=st.lists(st.sampled_from(sorted(FAULTS)), max_size=12),
    hooks=st.lists(st.tuples(st.sampled_from(sorted(HOOK_FAULTS)), st.sampled_from(HOOK_EVENTS)), max_size=2),
    interrupt_at=st.one_of(st.none(), st.integers(min_value=1, max_value=25)),
)
def test_a_run_with_bad_hooks_and_an_interrupt_ends_typed_and_its_session_resumes(
    faults: list[str], hooks: list[tuple[str, str]], interrupt_at: int | None
) -> None:
    """The short version of tools/soak_faults.py: MCP crashes and hangs, hooks, SIGINT, then a resume."""
    run = asyncio.run(play(faults, fallback=False, report=REPORT, hooks=hooks, interrupt_at=interrupt_at, resume=True))
    assert violations(run, REPORT) == [], (faults, hooks, interrupt_at, [s.reason for s in run.steps])
    assert run.resumed is not None


def test_the_fuzzer_counts_an_internal_error_end_a_torn_transcript_and_a_failed_resume_as_violations() -> None:
    """internal_error is a terminal state, so a check of terminals alone let a broken watched property pass."""
    broken = FaultRun(
        steps=(),
        final_state="internal_error",
        caps=(),
        result={"type": "result", "terminal_reason": "internal_error", "errors": ["budget broken"]},
        requests=(),
        transcript_problem="the parentUuid chain is broken",
        resumed=FaultRun(
            steps=(),
            final_state="api_error",
            caps=(),
            result={"type": "result", "terminal_reason": "api_error"},
            requests=(),
        ),
    )
    found = violations(broken, REPORT)
    assert any("internal_error" in v for v in found), found
    assert "the stored transcript: the parentUuid chain is broken" in found
    assert "resumed: ended 'api_error', not completed" in found


def test_the_resume_waits_the_default_idle_timeout_not_the_fuzzers_tiny_one(tmp_path: Path) -> None:
    """Found by tools/soak_faults.py under load: the resume's server answers plainly, so a stall of the
    process itself (unscheduled for a quarter second) must not end it in api_error."""
    from queryloop.mockapi.fuzz import _IDLE_TIMEOUT_S, _options, resume_options
    from queryloop.run import defaults

    played = _options(tmp_path, REPORT, fallback=False, max_turns=None, faults=())
    again = resume_options(played)
    assert played.request.idle_timeout_s == _IDLE_TIMEOUT_S
    assert again.request.idle_timeout_s == defaults.idle_timeout_s() > _IDLE_TIMEOUT_S
    assert again.session.resume_from == played.session_paths() and again.prompt == "continue"
