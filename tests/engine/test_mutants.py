"""Mutation tests of the shipped query loop (issue 10): each mutant must be rejected.

Every mutant is built from the text of ``machines/query_loop.yaml`` — an exact edit of a
unique snippet, or an edit of the parsed data re-dumped, each asserting that what it
mutates is there, so a change of the machine fails here loudly instead of testing
nothing. A mutant is rejected when the loader refuses it (a ``SpecError`` naming the
cause) or when ``check_spec`` reports a finding of the expected ``check`` that names the
mutated reason, counter or param (in its message, reasons or states). The checker runs
without exploration (under a second); the few mutants only exploration can see are
explored at small caps (about a second each). Mutants no pass detects are kept as strict
xfails whose reason says why: fixing the checker turns them into failures to move here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from queryloop.fsm import SpecError, check_spec, parse_machine, read_yaml

pytestmark = pytest.mark.slow  # ~30 s in all: tools/test.sh --fast leaves the module out

SHIPPED = Path(__file__).resolve().parents[2] / "machines" / "query_loop.yaml"
TEXT = SHIPPED.read_text(encoding="utf-8")
DATA = read_yaml(TEXT, str(SHIPPED)).data

# Small caps at which the whole machine explores in about a second (981 configurations);
# the denied-call breaker needs max_denied_call_repeats − 1 = 2 to show its counter's reset.
SMALL_CAPS = {
    "max_retries": 0,
    "overloaded_retries_before_fallback": 0,
    "max_fallback_hops": 0,
    "max_output_recoveries": 0,
    "max_pause_continues": 0,
    "max_auto_compact_failures": 0,
    "max_stop_hook_blocks": 0,
    "max_head_truncations": 0,
    "max_denied_call_repeats": 3,
}

Edit = Callable[[str], str]


# ---- building mutants ------------------------------------------------------------------------


def replace(*pairs: str) -> Edit:
    """Replace each ``old`` snippet (which must occur exactly once) by its ``new`` text."""

    def edit(text: str) -> str:
        for old, new in zip(pairs[::2], pairs[1::2], strict=True):
            assert text.count(old) == 1, f"the shipped machine no longer holds exactly one {old!r}"
            text = text.replace(old, new)
        return text

    return edit


def on_data(change: Callable[[dict[str, Any]], object]) -> Edit:
    """Apply ``change`` to a copy of the parsed machine and dump it back to YAML."""

    def edit(text: str) -> str:
        assert text == TEXT
        data = copy.deepcopy(DATA)
        change(data)
        return yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False)

    return edit


def edge(data: dict[str, Any], reason: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [t for t in data["transitions"] if t["reason"] == reason]
    assert len(found) == 1, f"the shipped machine has no single transition {reason!r}"
    return found[0]


def take(mapping: dict[str, Any], key: str, expected: object) -> None:
    """Remove ``key`` from ``mapping``, asserting it held ``expected``."""
    assert mapping.get(key) == expected, f"expected {key}: {expected!r}, found {mapping.get(key)!r}"
    del mapping[key]


def counter(data: dict[str, Any], name: str, **changes: object) -> None:
    assert name in data["counters"], f"the shipped machine has no counter {name!r}"
    data["counters"][name].update(changes)


def drop_edge(data: dict[str, Any], reason: str) -> None:
    data["transitions"].remove(edge(data, reason))


def swap_edges(data: dict[str, Any], first: str, second: str) -> None:
    ts = data["transitions"]
    i, j = ts.index(edge(data, first)), ts.index(edge(data, second))
    ts[i], ts[j] = ts[j], ts[i]


def stall_after_rejection(data: dict[str, Any]) -> None:
    """A state whose only non-abort edge loops on itself: only the abort event ends the run there."""
    data["states"]["stalling"] = {"effect": ".request.wait_before_retry", "emits": ["elapsed"]}
    edge(data, "request_rejected_surfaced")["to"] = "stalling"
    data["transitions"] += [
        {"from": "stalling", "event": "elapsed", "to": "stalling", "reason": "stall_continue", "progress": True},
        {"from": "stalling", "event": "aborted", "to": "aborted_streaming", "reason": "stall_aborted"},
    ]


def string_cap(data: dict[str, Any]) -> None:
    data["params"]["retry_mode"] = {"default": "fast", "doc": "a string param"}
    counter(data, "api_retries", cap="retry_mode")


def retry_unbounded_by_design(data: dict[str, Any]) -> None:
    edge(data, "api_retry")["progress"] = True
    data["unbounded_by_design"]["api_retry"] = "retries: unbounded by design"


def drop_refill_breaker_and_its_end(data: dict[str, Any]) -> None:
    drop_edge(data, "rapid_refill_breaker")
    del data["states"]["context_thrashed"]


@attrs.frozen
class Mutant:
    id: str
    doc: str
    edit: Edit
    check: str  # the expected finding's `check`, or "load" for a SpecError
    names: tuple[str, ...]  # what that finding (or the SpecError) must name
    explore: Mapping[str, int] | None = None  # explore at these caps (else the symbolic passes only)
    at: Mapping[str, int] | None = None  # the symbolic passes' figures at these params (else the defaults)
    undetected: str | None = None  # why no pass catches it (kept as a strict xfail)


MUTANTS = (
    Mutant(
        "api_retry-without-counter",
        "drop the retry edge's counter",
        on_data(lambda d: take(edge(d, "api_retry"), "counter", "api_retries")),
        "termination",
        ("unbounded recovery cycle", "api_retry", "backing_off"),
    ),
    Mutant(
        "api_retries-reset-inside-its-loop",
        "the retry edge resets its own counter",
        replace(
            "    reason: api_retry\n    counter: api_retries\n",
            "    reason: api_retry\n    counter: api_retries\n    resets: [api_retries]\n",
        ),
        "termination",
        ("'api_retries', 'overload_streak' are reset inside the cycle", "api_retry"),
    ),
    Mutant(
        "api_retry-marked-progress",
        "a retry edge marked `progress: true` (hides the retry storm per turn)",
        on_data(lambda d: edge(d, "api_retry").update(progress=True)),
        "progress_bound",
        ("progress edge(s) ['api_retry'] are not counted by a bounded session counter",),
    ),
    Mutant(
        "exhausted-retry-back-to-checking_context-as-progress",
        "an exhausted retry starts over at checking_context through a progress edge",
        on_data(lambda d: edge(d, "api_retries_exhausted").update(to="checking_context", progress=True)),
        "progress_bound",
        ("progress edge(s) ['api_retries_exhausted'] are not counted", "checking_context"),
    ),
    Mutant(
        "max_retries-null-nullable-int",
        "max_retries defaults to null (type int, nullable)",
        replace(
            "max_retries: {default: 10, check: 2,", "max_retries: {default: null, type: int, nullable: true, check: 2,"
        ),
        "termination",
        ("'api_retries' (cap max_retries, which may be null) bound it only when set", "api_retry"),
    ),
    Mutant(
        "max_retries-null-untyped",
        "max_retries `{default: null, check: 2}`: no type, so a caller's null would pass",
        replace("max_retries: {default: 10, check: 2,", "max_retries: {default: null, check: 2,"),
        "load",
        ("param 'max_retries' caps counter 'api_retries' but has no type",),
    ),
    Mutant(
        "max_retries-default-11-over-figure-max",
        "raise a default so model_requests exceeds its declared max 400",
        replace("max_retries: {default: 10,", "max_retries: {default: 11,"),
        "figure",
        ("figure 'model_requests' can reach 423 per turn", "max_retries=11", "above its declared max 400"),
    ),
    Mutant(
        "api_retries-cap_offset-plus-one",
        "`cap_offset: 1` on api_retries (one retry too many at every max_retries)",
        on_data(lambda d: counter(d, "api_retries", cap_offset=1)),
        "figure",
        ("figure 'model_requests' can reach 413 per turn", "max_retries"),
    ),
    Mutant(
        "cap_offset-on-a-fixed-cap",
        "`cap_offset` on stream_fallbacks, whose cap is the int 1",
        on_data(lambda d: counter(d, "stream_fallbacks", cap_offset=1)),
        "load",
        ("counter 'stream_fallbacks' has `cap_offset` but a fixed cap",),
    ),
    Mutant(
        "stream_fallbacks-cap-0",
        "a fixed cap of 0 makes the stream fallback dead at every param value",
        replace("  stream_fallbacks:\n    cap: 1\n", "  stream_fallbacks:\n    cap: 0\n"),
        "dead_edge",
        ("'stream_fallback'", "its counter 'stream_fallbacks' has cap 0"),
        explore=SMALL_CAPS,
    ),
    Mutant(
        "auto_compact_breaker-before-auto_compact_start",
        "swap auto_compact_start and auto_compact_breaker (same guard: compaction never starts)",
        on_data(lambda d: swap_edges(d, "auto_compact_start", "auto_compact_breaker")),
        "dead_edge",
        ("'auto_compact_start'", "shadowed by 'auto_compact_breaker'"),
    ),
    Mutant(
        "overloaded_backoff-without-counter",
        "drop overload_streak from overloaded_backoff: the model fallback can never fire",
        on_data(lambda d: take(edge(d, "overloaded_backoff"), "counter", "overload_streak")),
        "dead_edge",
        ("'model_fallback'", "shadowed by 'overloaded_backoff'"),
    ),
    Mutant(
        "backing_off-catch-all-deleted",
        "delete the catch-all api_retries_exhausted",
        on_data(lambda d: drop_edge(d, "api_retries_exhausted")),
        "load",
        ("the edges from 'backing_off' on 'elapsed' end with 'api_retry', which is guarded",),
    ),
    Mutant(
        "next_turn-not-unbounded-by-design",
        "remove the `unbounded_by_design` entry of next_turn",
        on_data(lambda d: take(d["unbounded_by_design"], "next_turn", DATA["unbounded_by_design"]["next_turn"])),
        "progress_bound",
        ("progress edge(s) ['next_turn']", "'turns' (cap max_turns, which may be null) bound it only when set"),
    ),
    Mutant(
        "api_retry-listed-unbounded-by-design",
        "list a retry reason under `unbounded_by_design`",
        on_data(lambda d: d["unbounded_by_design"].update(api_retry="retries: unbounded")),
        "load",
        ("`unbounded_by_design` lists 'api_retry', which is not a `progress` edge",),
    ),
    Mutant(
        "repeated_denial_accepted-without-counter",
        "remove the denied-call breaker's counter: the breaker can never fire",
        on_data(lambda d: take(edge(d, "repeated_denial_accepted"), "counter", "denied_call_repeats")),
        "dead_edge",
        ("'repeated_denial_breaker'", "shadowed by 'repeated_denial_accepted'"),
    ),
    Mutant(
        "denied_call_repeats-reset-by-its-own-edge",
        "repeated_denial_accepted resets the counter it counts: it never passes 1, the breaker never fires",
        on_data(lambda d: edge(d, "repeated_denial_accepted").update(resets=["denied_call_repeats"])),
        "dead_edge",
        ("'repeated_denial_breaker'", "no reachable configuration enables it"),
        explore=SMALL_CAPS,
    ),
    Mutant(
        "head-truncation-self-loop-without-counter",
        "drop `counter: head_truncations` from the head-truncation self-loop",
        on_data(lambda d: take(edge(d, "compact_head_truncation_retry"), "counter", "head_truncations")),
        "termination",
        ("via reasons ['compact_head_truncation_retry']", "no edge in it increments a capped counter"),
    ),
    Mutant(
        "auto_summary_retry-without-counter",
        "drop summary_retries from the auto-compaction's summary retry",
        on_data(lambda d: take(edge(d, "auto_summary_retry"), "counter", "summary_retries")),
        "termination",
        ("auto_summary_retry", "backing_off_auto_summary", "no edge in it increments a capped counter"),
    ),
    Mutant(
        "model_fallback-resets-fallback_hops",
        "the fallback self-loop resets its own session counter",
        on_data(lambda d: edge(d, "model_fallback")["resets"].append("fallback_hops")),
        "termination",
        ("'fallback_hops'", "are reset inside the cycle", "model_fallback"),
    ),
    Mutant(
        "stream_fallback-marked-progress",
        "the stream fallback self-loop marked progress (it resets every request and turn budget)",
        on_data(lambda d: edge(d, "stream_fallback").update(progress=True)),
        "progress_bound",
        ("progress edge(s) ['stream_fallback'] are not counted",),
    ),
    Mutant(
        "rapid_refill_breaker-deleted",
        "delete the rapid-refill breaker: its terminal context_thrashed becomes unreachable",
        on_data(lambda d: drop_edge(d, "rapid_refill_breaker")),
        "load",
        ("state 'context_thrashed' is unreachable",),
    ),
    Mutant(
        "abort-edge-into-checking_context",
        "an abort edge into a non-terminal state",
        replace(
            "    to: aborted_streaming\n    reason: prompt_hooks_aborted\n",
            "    to: checking_context\n    reason: prompt_hooks_aborted\n",
        ),
        "load",
        ("abort edge 'prompt_hooks_aborted' goes to 'checking_context', which is not terminal",),
    ),
    Mutant(
        "backing_off-without-emits",
        "an effect state without `emits`",
        replace(
            "    effect: .request.wait_before_retry\n    emits: [elapsed]\n", "    effect: .request.wait_before_retry\n"
        ),
        "load",
        ("state 'backing_off' is neither terminal nor runs an effect with `emits`",),
    ),
    Mutant(
        "state-that-ends-only-when-aborted",
        "a state whose only non-abort edge loops: a terminal is reached from it only by the abort event",
        on_data(stall_after_rejection),
        "dead_end",
        ("state 'stalling' can never reach a terminal state unless the run is interrupted",),
    ),
    Mutant(
        "cap-names-a-string-param",
        "a counter whose cap names a `string` param",
        on_data(string_cap),
        "load",
        ("counter 'api_retries' cap names param 'retry_mode', a string",),
    ),
    Mutant(
        "stop_hook_blocks-scope-turn",
        "stop_hook_blocks made turn-scoped: the cap of 8 blocks per run becomes 8 per tool turn",
        on_data(lambda d: counter(d, "stop_hook_blocks", scope="turn")),
        "figure",
        ("stop_hook_runs", "max_per_run max_stop_hook_blocks + 1"),
    ),
    Mutant(
        "turns-cap_offset-0",
        "`cap_offset: 0` on turns: max_turns + 1 tool turns run (off by one)",
        on_data(lambda d: counter(d, "turns", cap_offset=0)),
        "figure",
        ("tool_turns", "can reach 4 per run", "max_per_run max_turns = 3"),
        at={"max_turns": 3},
    ),
    Mutant(
        "api_retry-progress-and-unbounded-by-design",
        "a retry marked progress AND listed under unbounded_by_design: an endless retry storm",
        on_data(retry_unbounded_by_design),
        "load",
        ("`unbounded_by_design` lists 'api_retry', a recovery (`_retry`)",),
    ),
    Mutant(
        "denied_call_repeats-consecutive-on-its-own-edge",
        "`consecutive: [repeated_denial_accepted]` on the counter that edge counts",
        on_data(lambda d: counter(d, "denied_call_repeats", consecutive=["repeated_denial_accepted"])),
        "load",
        ("counter 'denied_call_repeats' `consecutive` names 'repeated_denial_accepted', the edge that counts it",),
    ),
    # ---- mutants no pass detects (strict xfails; see the reasons) ---------------------------
    Mutant(
        "auto_compact_failures-scope-turn",
        "the auto-compact breaker made turn-scoped: it closes again at every tool turn",
        on_data(lambda d: counter(d, "auto_compact_failures", scope="turn")),
        "termination",
        ("auto_compact_failures",),
        undetected="the checker proves bounds, and no bound depends on this scope: a success resets the counter "
        "anyway, so the compactions per run are unbounded either way (as tool turns are), and the per-turn figures "
        "are the same; what the breaker limits — failed compactions in a row across turns — is not an effect count",
    ),
    Mutant(
        "rapid_refill_breaker-deleted-with-its-terminal",
        "delete the rapid-refill breaker and context_thrashed: compaction may thrash turn after turn",
        on_data(drop_refill_breaker_and_its_end),
        "progress_bound",
        ("rapid_refill_breaker",),
        undetected="thrashing repeats across tool turns, through next_turn (unbounded by design); within a turn "
        "compaction is already bounded, so no pass depends on the breaker",
    ),
)


def _rejection(mutant: Mutant) -> tuple[list[tuple[str, str]], str]:
    """Every finding as (check, its message, reasons and states), and what was run."""
    text = mutant.edit(TEXT)
    assert text != TEXT
    try:
        spec = parse_machine(text, f"<{mutant.id}>", bind=False).spec
    except SpecError as exc:
        return [("load", p.message) for p in exc.problems], "load"
    report = check_spec(spec, mutant.explore or mutant.at, explore=mutant.explore is not None)
    ran = f"explored at {dict(mutant.explore)}" if mutant.explore is not None else f"checked at {mutant.at}"
    return [(f.check, " ".join((f.message, *f.reasons, *f.states))) for f in report.findings], ran


def _params() -> list[Any]:
    return [
        pytest.param(
            m,
            id=m.id,
            marks=[pytest.mark.xfail(strict=True, reason=m.undetected)] if m.undetected else [],
        )
        for m in MUTANTS
    ]


def test_there_are_enough_caught_mutants_with_unique_ids() -> None:
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)
    assert sum(m.undetected is None for m in MUTANTS) >= 22


def test_the_shipped_machine_is_not_rejected() -> None:
    """The control: every finding below comes from a mutation."""
    report = check_spec(parse_machine(TEXT, str(SHIPPED), bind=False).spec, explore=False)
    assert report.ok, [f.message for f in report.findings]


def test_exploration_at_the_small_caps_reports_none_of_the_explored_mutants_findings() -> None:
    spec = parse_machine(TEXT, str(SHIPPED), bind=False).spec
    report = check_spec(spec, SMALL_CAPS, explore=True)
    found = [(f.check, " ".join((f.message, *f.reasons, *f.states))) for f in report.findings]
    for m in MUTANTS:
        if m.explore is not None:
            assert not [c for c, text in found if c == m.check and all(n in text for n in m.names)], m.id


@pytest.mark.parametrize("mutant", _params())
def test_mutant_is_rejected_with_a_finding_naming_it(mutant: Mutant) -> None:
    findings, ran = _rejection(mutant)
    named = [text for check, text in findings if check == mutant.check and all(n in text for n in mutant.names)]
    assert named, (
        f"mutant {mutant.id!r} ({mutant.doc}) {ran}: no {mutant.check!r} finding names {list(mutant.names)}; "
        f"found {findings}"
    )
