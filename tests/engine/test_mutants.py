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
from queryloop.fsm.model.templates import expand_templates

pytestmark = pytest.mark.slow  # ~30 s in all: tools/test.sh --fast leaves the module out

SHIPPED = Path(__file__).resolve().parents[2] / "machines" / "query_loop.yaml"
TEXT = SHIPPED.read_text(encoding="utf-8")
# the flat machine (templates expanded), so a data edit can reach one instance's edge
DATA = expand_templates(read_yaml(TEXT, str(SHIPPED)))[0].data

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
        {"from": "stalling", "event": "elapsed", "to": "stalling", "reason": "stall_step", "progress": True},
        {"from": "stalling", "event": "aborted", "to": "aborted_streaming", "reason": "stall_aborted"},
    ]


def string_cap(data: dict[str, Any]) -> None:
    data["params"]["retry_mode"] = {"default": "fast", "doc": "a string param"}
    counter(data, "api_retries", cap="retry_mode")


def retry_unbounded_by_design(data: dict[str, Any]) -> None:
    edge(data, "api_retry")["progress"] = True
    data["unbounded_by_design"]["api_retry"] = {"bound": "max_retries", "doc": "retries: unbounded by design"}


def unlist(data: dict[str, Any], reason: str) -> None:
    """Take ``reason`` out of the order properties and the guards' meanings that name it (a mutant deleting its
    edge on purpose)."""
    for prop in data["properties"].values():
        if reason in prop.get("order", ()):
            prop["order"].remove(reason)
    for guard in data["guards"].values():
        if reason in guard.get("decides", ()):
            guard["decides"].remove(reason)
            if not guard["decides"]:
                del guard["decides"]  # a guard no edge asks any more


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


# ---- changes of intent (issue 26): each caught by a declared property, a range or a loophole rule ----


def param(data: dict[str, Any], name: str, **changes: object) -> None:
    assert name in data["params"], f"the shipped machine has no param {name!r}"
    value = data["params"][name]
    data["params"][name] = {**(value if isinstance(value, dict) else {"default": value}), **changes}


def drop_key(data: dict[str, Any], key: str, expected: object) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        take(d, key, expected)

    return change


def figure(data: dict[str, Any], name: str) -> dict[str, Any]:
    assert name in data["figures"], f"the shipped machine has no figure {name!r}"
    found: dict[str, Any] = data["figures"][name]
    return found


def budget_behind_a_zero_cap(data: dict[str, Any]) -> None:
    """The only way to budget_exhausted counted by a counter with the literal cap 0: a run over budget goes on."""
    data["counters"]["budget_stops"] = {"cap": 0, "scope": "turn", "doc": "never more than none"}
    edge(data, "max_budget_reached").update(counter="budget_stops")
    data["transitions"].append(
        {"from": "reading_reply", "event": "budget_spent", "to": "running_stop_hooks", "reason": "budget_accepted"}
    )


def progress_listed(reason: str, bound: str) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        edge(d, reason)["progress"] = True
        d["unbounded_by_design"][reason] = {"bound": bound, "doc": "a user drives it"}

    return change


INTENT_MUTANTS = (
    # progress mislabelled
    Mutant(
        "stop_hook_continue-marked-progress",
        "the Stop-hook continuation marked progress: each block would reset every turn budget",
        on_data(lambda d: edge(d, "stop_hook_continue").update(progress=True)),
        "load",
        ("transition 'stop_hook_continue' is marked `progress` but is a recovery (`_continue`)",),
    ),
    Mutant(
        "malformed-retry-marked-progress",
        "the malformed tool_use retry marked progress",
        on_data(lambda d: edge(d, "malformed_tool_use_retry").update(progress=True)),
        "load",
        ("transition 'malformed_tool_use_retry' is marked `progress` but is a recovery (`_retry`)",),
    ),
    Mutant(
        "nudge-listed-unbounded-by-design",
        "a re-request with no tool turn (the thinking nudge) listed under unbounded_by_design, bounded by max_turns",
        on_data(progress_listed("thinking_only_nudge", "max_turns")),
        "load",
        ("'thinking_only_nudge' is not bounded when 'max_turns' is set", "counter 'thinking_nudges' is capped by 1"),
    ),
    Mutant(
        "next_turn-bound-names-another-param",
        "next_turn's bound names max_retries, which does not cap its counter",
        on_data(lambda d: d["unbounded_by_design"]["next_turn"].update(bound="max_retries")),
        "load",
        ("'next_turn' is not bounded when 'max_retries' is set", "capped by 'max_turns', not by 'max_retries'"),
    ),
    Mutant(
        "next_turn-bound-unknown",
        "next_turn's bound names no param",
        on_data(lambda d: d["unbounded_by_design"]["next_turn"].update(bound="max_tool_turns")),
        "load",
        ("names the bound 'max_tool_turns', which is not a param",),
    ),
    Mutant(
        "turns-reset-by-stop-hook-continue",
        "a Stop-hook block resets the tool-turn count: --max-turns no longer bounds the run",
        on_data(lambda d: edge(d, "stop_hook_continue").update(resets=["turns"])),
        "load",
        ("'next_turn' is not bounded when 'max_turns' is set", "reset by ['stop_hook_continue']"),
    ),
    Mutant(
        "turns-scope-turn",
        "the tool-turn counter made turn-scoped",
        on_data(lambda d: counter(d, "turns", scope="turn")),
        "load",
        ("has scope 'turn': a bound per run needs `run`",),
    ),
    # loops no figure limits
    Mutant(
        "max_mcp_reconnects-a-million",
        "max_mcp_reconnects defaults to 10**6",
        on_data(lambda d: param(d, "max_mcp_reconnects", default=10**6)),
        "load",
        ("param 'max_mcp_reconnects' has the default 1000000, above its declared max 10",),
    ),
    Mutant(
        "max_retry_after_s-a-billion",
        "max_retry_after_s defaults to 10**9 seconds",
        on_data(lambda d: param(d, "max_retry_after_s", default=10**9)),
        "load",
        ("param 'max_retry_after_s' has the default 1000000000, above its declared max 3600",),
    ),
    Mutant(
        "max_retries-without-a-range",
        "max_retries declares no max: any value a caller gives is accepted",
        on_data(lambda d: take(d["params"]["max_retries"], "max", 10)),
        "load",
        ("param 'max_retries' caps a counter but declares no `max`",),
    ),
    Mutant(
        "denial-breaker-off-by-default",
        "max_denied_call_repeats nullable and null by default: the repeated-denial breaker is off",
        on_data(lambda d: param(d, "max_denied_call_repeats", default=None, nullable=True)),
        "null_cap",
        ("counter 'denied_call_repeats' bounds nothing at the defaults",),
    ),
    Mutant(
        "ledger-breaker-off-by-default",
        "max_ledger_replays nullable and null by default: the ledger-replay breaker is off",
        on_data(lambda d: param(d, "max_ledger_replays", default=None, nullable=True)),
        "null_cap",
        ("counter 'ledger_replays' bounds nothing at the defaults",),
    ),
    Mutant(
        "reconnect-figure-deleted",
        "the figure that limits MCP reconnects per turn deleted",
        on_data(lambda d: take(d["figures"], "mcp_reconnects", figure(DATA, "mcp_reconnects"))),
        "figure",
        ("'reconnecting_mcp_servers' runs", "no figure with a `max:` sums it"),
    ),
    Mutant(
        "summary-requests-dropped-from-the-figure",
        "model_requests counts answers only: summary requests loop unseen",
        on_data(lambda d: figure(d, "model_requests").update(effects=[".request.call_model"])),
        "figure",
        ("'auto_compacting' runs", "no figure with a `max:` sums it"),
    ),
    Mutant(
        "waits-figure-without-max",
        "the waits figure loses its max",
        on_data(lambda d: take(figure(d, "waits"), "max", 350)),
        "figure",
        ("'backing_off' runs", "no figure with a `max:` sums it"),
    ),
    # reset semantics changed
    Mutant(
        "mcp_reconnects-reset-on-success",
        "a successful reconnect resets the reconnect count: 3 per turn becomes 3 per outage",
        on_data(lambda d: edge(d, "mcp_reconnect_succeeded").update(resets=["mcp_reconnects"])),
        "property",
        ("mcp_reconnects_per_turn", "reset by ['mcp_reconnect_succeeded'] within a turn"),
    ),
    Mutant(
        "mcp_reconnects-scope-request",
        "the reconnect count made request-scoped: every reply gives it a new budget",
        on_data(lambda d: counter(d, "mcp_reconnects", scope="request")),
        "property",
        ("mcp_reconnects_per_turn", "within a turn"),
    ),
    Mutant(
        "fallback_hops-scope-turn",
        "fallback hops counted per turn instead of per run",
        on_data(lambda d: counter(d, "fallback_hops", scope="turn")),
        "property",
        ("fallback_hops_per_run", "'next_turn'", "] within a run"),
    ),
    Mutant(
        "stop_hook_blocks-reset-per-turn",
        "Stop-hook blocks reset at every tool turn",
        on_data(lambda d: edge(d, "next_turn").update(resets=["stop_hook_blocks"])),
        "property",
        ("stop_hook_blocks_per_run", "reset by ['next_turn']"),
    ),
    Mutant(
        "overload-streak-without-streak_of",
        "overload_streak loses `streak_of`: overloaded answers counted in total, not in a row",
        on_data(lambda d: take(d["counters"]["overload_streak"], "streak_of", ["overloaded"])),
        "property",
        ("overloads_in_a_row", "counts in total, not in a row"),
    ),
    Mutant(
        "denial-streak-without-streak_of",
        "denied_call_repeats loses `streak_of`",
        on_data(lambda d: take(d["counters"]["denied_call_repeats"], "streak_of", ["tools_denied_again"])),
        "property",
        ("denials_in_a_row", "'permission_granted'] do not reset it"),
    ),
    Mutant(
        "ledger-streak-without-streak_of",
        "ledger_replays loses `streak_of`",
        on_data(lambda d: take(d["counters"]["ledger_replays"], "streak_of", ["tools_already_done"])),
        "property",
        ("ledger_replays_in_a_row", "'repeated_denial_accepted'] do not reset it"),
    ),
    Mutant(
        "compaction-failures-without-consecutive",
        "auto_compact_failures loses `consecutive`: a success no longer closes the breaker",
        on_data(
            lambda d: take(
                d["counters"]["auto_compact_failures"],
                "consecutive",
                ["auto_compact_succeeded", "reactive_compact_succeeded"],
            )
        ),
        "property",
        ("compaction_failures_until_success", "do not reset it"),
    ),
    Mutant(
        "compaction-failures-reset-by-a-failure",
        "a failed auto-compaction resets the failure count too",
        on_data(
            lambda d: counter(
                d,
                "auto_compact_failures",
                consecutive=["auto_compact_succeeded", "reactive_compact_succeeded", "auto_compact_failed"],
            )
        ),
        "property",
        ("compaction_failures_until_success", "['auto_compact_failed'] reset it too"),
    ),
    # priority changed
    Mutant(
        "recovery-above-escalation",
        "the hidden continuation tried before the escalated max_tokens",
        on_data(lambda d: swap_edges(d, "max_output_tokens_escalate", "max_output_tokens_recovery")),
        "property",
        ("escalation_before_recovery", "from 'reading_reply' on 'truncated'"),
    ),
    Mutant(
        "refill-breaker-below-compaction-start",
        "the rapid-refill breaker tried after the auto-compaction start",
        on_data(lambda d: swap_edges(d, "rapid_refill_breaker", "auto_compact_start")),
        "property",
        ("refill_breaker_before_compaction",),
    ),
    Mutant(
        "retry-after-cap-below-api_retry",
        "the retry-after cap checked only after retries are spent",
        on_data(lambda d: swap_edges(d, "retry_after_too_long_surfaced", "api_retry")),
        "property",
        ("retry_after_cap_before_retry",),
    ),
    Mutant(
        "fallback-before-same-model-retries",
        "the fallback model tried before the overloaded answers are retried on the same model",
        on_data(lambda d: swap_edges(d, "overloaded_backoff", "model_fallback")),
        "property",
        ("same_model_before_fallback",),
    ),
    Mutant(
        "reactive-compaction-before-collapse-drain",
        "a reactive compaction (a summary request) tried before draining the staged collapses (free)",
        on_data(lambda d: swap_edges(d, "collapse_drain_retry", "reactive_compact_retry")),
        "property",
        ("cheapest_overflow_recovery_first",),
    ),
    # off by one, deletions
    Mutant(
        "mcp_reconnects-cap-plus-one",
        "cap_offset +1 on mcp_reconnects: four reconnects per turn",
        on_data(lambda d: counter(d, "mcp_reconnects", cap_offset=1)),
        "property",
        ("mcp_reconnects_per_turn", "capped at max_mcp_reconnects +1"),
    ),
    Mutant(
        "fallback_hops-cap-plus-one",
        "cap_offset +1 on fallback_hops",
        on_data(lambda d: counter(d, "fallback_hops", cap_offset=1)),
        "property",
        ("fallback_hops_per_run", "capped at max_fallback_hops +1"),
    ),
    Mutant(
        "output_escalations-cap-2",
        "two escalations per turn",
        on_data(lambda d: counter(d, "output_escalations", cap=2)),
        "property",
        ("one_escalation_per_turn", "capped at 2"),
    ),
    Mutant(
        "reactive_compacts-cap-2",
        "two reactive compactions per turn",
        on_data(lambda d: counter(d, "reactive_compacts", cap=2)),
        "property",
        ("one_reactive_compaction_per_turn", "capped at 2"),
    ),
    Mutant(
        "malformed_retries-cap-max_retries",
        "malformed tool_use retried up to max_retries times per turn",
        on_data(lambda d: counter(d, "malformed_retries", cap="max_retries")),
        "property",
        ("one_malformed_retry_per_turn", "capped at max_retries"),
    ),
    Mutant(
        "thinking_nudges-cap-2",
        "two nudges per turn",
        on_data(lambda d: counter(d, "thinking_nudges", cap=2)),
        "property",
        ("one_nudge_per_turn", "capped at 2"),
    ),
    Mutant(
        "head_truncations-cap-plus-one",
        "cap_offset +1 on head_truncations",
        on_data(lambda d: counter(d, "head_truncations", cap_offset=1)),
        "property",
        ("head_truncations_per_turn",),
    ),
    Mutant(
        "pause_continues-cap-max_output_recoveries",
        "pause continuations capped by another param",
        on_data(lambda d: counter(d, "pause_continues", cap="max_output_recoveries")),
        "property",
        ("pause_continues_per_turn", "capped at max_output_recoveries"),
    ),
    Mutant(
        "turns-cap-offset-0-property",
        "`cap_offset: 0` on turns: max_turns follow-up requests, one tool turn too many",
        on_data(lambda d: counter(d, "turns", cap_offset=0)),
        "property",
        ("tool_turns_per_run", "may be more than max_turns - 1"),
    ),
    Mutant(
        "output-recovery-counted-apart",
        "the context-window recovery counted by its own counter: twice the continuations per turn",
        on_data(
            lambda d: (
                d["counters"].update(window_recoveries={"cap": "max_output_recoveries", "scope": "turn", "doc": "x"}),
                edge(d, "context_window_recovery").update(counter="window_recoveries"),
            )
        ),
        "property",
        ("output_recoveries_per_turn", "they are counted by ['output_recoveries', 'window_recoveries']"),
    ),
    # reset semantics and guards stated as properties
    Mutant(
        "reply_received-without-ends-request",
        "a reply no longer completes its request: the next request starts with the retries this one spent",
        on_data(lambda d: take(edge(d, "reply_received"), "ends", "request")),
        "property",
        ("a_reply_completes_its_request", "'reply_received'", "api_retries", "stream_fallbacks"),
    ),
    Mutant(
        "model_fallback-without-its-guard",
        "the overload fallback taken with no fallback model left",
        on_data(lambda d: take(edge(d, "model_fallback"), "guards", ["fallback_available"])),
        "property",
        ("fallback_only_to_a_model_left", "'model_fallback'", "'fallback_available'"),
    ),
    Mutant(
        "model_fallback-guarded-by-another",
        "the overload fallback guarded by another guard than a model left",
        on_data(lambda d: edge(d, "model_fallback").update(guards=["escalation_configured"])),
        "property",
        ("fallback_only_to_a_model_left", "'model_fallback'"),
    ),
    Mutant(
        "resets-property-names-an-undeclared-counter",
        "the reply's property names a counter the machine does not declare",
        on_data(lambda d: d["properties"]["a_reply_completes_its_request"]["resets"].update(counters=["api_retry"])),
        "load",
        ("names the counter 'api_retry', which is not declared",),
    ),
    Mutant(
        "guarded-property-names-an-undeclared-guard",
        "the fallback's property names a guard the machine does not declare",
        on_data(lambda d: d["properties"]["fallback_only_to_a_model_left"]["guarded"].update(by="fallback_left")),
        "load",
        ("names the guard 'fallback_left', which is not declared",),
    ),
    # where an edge may go and what a guard decides (issue 42): path properties and guards' declared meanings
    Mutant(
        "tools_requested-skips-the-gate",
        "the model's tool calls run without the permission gate",
        on_data(lambda d: edge(d, "tools_requested").update(to="running_tools")),
        "property",
        ("tools_run_only_after_the_gate", "'tools_requested'", "'running_tools'"),
    ),
    Mutant(
        "partial_tool_use_kept-skips-the-gate",
        "tool calls kept from a cut stream run without the permission gate",
        on_data(lambda d: edge(d, "partial_tool_use_kept").update(to="running_tools")),
        "property",
        ("tools_run_only_after_the_gate", "'partial_tool_use_kept'"),
    ),
    Mutant(
        "api_retries_exhausted-ends-as-success",
        "spent retries end the run as a success",
        on_data(lambda d: edge(d, "api_retries_exhausted").update(to="completed")),
        "property",
        ("exhausted_ends_in_an_error", "'api_retries_exhausted'", "is_error: True"),
    ),
    Mutant(
        "context_window_exhausted-ends-as-a-refusal",
        "a reply still cut at the context window ends as a (successful) refusal",
        on_data(lambda d: edge(d, "context_window_exhausted").update(to="refusal")),
        "property",
        ("exhausted_ends_in_an_error", "'context_window_exhausted'", "'refusal'"),
    ),
    Mutant(
        "prompt_hook_blocked-sends-the-prompt",
        "a prompt a UserPromptSubmit hook blocked is sent anyway",
        on_data(lambda d: edge(d, "prompt_hook_blocked").update(to="syncing_tools")),
        "property",
        ("a_terminal_matches_its_cause", "'prompt_hook_blocked'", "not a terminal state"),
    ),
    Mutant(
        "request_aborted-ends-as-success",
        "Ctrl-C while the model is awaited is reported as a success",
        on_data(lambda d: edge(d, "request_aborted").update(to="completed")),
        "property",
        ("a_terminal_matches_its_cause", "'request_aborted'", "error_during_execution"),
    ),
    Mutant(
        "retry_after_too_long_surfaced-without-its-guard",
        "every elapsed backoff ends the run as if the retry-after were too long",
        on_data(lambda d: take(edge(d, "retry_after_too_long_surfaced"), "guards", ["retry_after_over_cap"])),
        "guard",
        ("'retry_after_over_cap'", "'retry_after_too_long_surfaced'", "without asking it"),
    ),
    Mutant(
        "rapid_refill_breaker-asks-the-wrong-guard",
        "the refill breaker asks whether old results are clearable instead of whether compaction thrashes",
        on_data(lambda d: edge(d, "rapid_refill_breaker").update(guards=["can_compact", "old_results_clearable"])),
        "guard",
        ("'refill_thrashing'", "'rapid_refill_breaker'"),
    ),
    Mutant(
        "escalation-guard-moved-to-the-recovery",
        "the hidden continuation asks whether escalation is configured; the escalation no longer does",
        on_data(
            lambda d: (
                take(edge(d, "max_output_tokens_escalate"), "guards", ["escalation_configured"]),
                edge(d, "max_output_tokens_recovery").update(guards=["escalation_configured"]),
            )
        ),
        "guard",
        ("'escalation_configured'", "'max_output_tokens_recovery'", "does not list"),
    ),
    Mutant(
        "collapse-drain-and-reactive-compaction-guards-swapped",
        "the collapse drain asks can_compact, the reactive compaction whether collapses are staged",
        on_data(
            lambda d: (
                edge(d, "collapse_drain_retry").update(guards=["can_compact"]),
                edge(d, "reactive_compact_retry").update(guards=["has_staged_collapses"]),
            )
        ),
        "guard",
        ("'has_staged_collapses'", "'collapse_drain_retry'"),
    ),
    # the agents layer (issue 42): what agents_running decides
    Mutant(
        "agent_report_turn-without-agents_running",
        "an accepted answer always waits for a sub-agent report, none running or not",
        on_data(lambda d: take(edge(d, "agent_report_turn"), "guards", ["agents_running"])),
        "guard",
        ("'agents_running'", "'agent_report_turn'", "without asking it"),
    ),
    Mutant(
        "turn_limit_agent_wait-without-agents_running",
        "the tool turn at max_turns waits for a sub-agent's report, none running or not",
        on_data(lambda d: take(edge(d, "turn_limit_agent_wait"), "guards", ["agents_running"])),
        "guard",
        ("'agents_running'", "'turn_limit_agent_wait'", "without asking it"),
    ),
    Mutant(
        "agents_running-asked-for-next_turn-not-next_turn_with_agents",
        "the report collection's guard moved to the plain next turn: reports are collected only with none running",
        on_data(
            lambda d: (
                take(edge(d, "next_turn_with_agents"), "guards", ["agents_running"]),
                edge(d, "next_turn").update(guards=["agents_running"]),
            )
        ),
        "guard",
        ("'agents_running'", "'next_turn'", "does not list"),
    ),
    # the agents layer (issue 42): the per-turn cap of Agent calls is the machine's counter
    Mutant(
        "agent_launch_admitted-uncounted",
        "every Agent call of a turn is admitted: the cap of sub-agents a turn starts is gone",
        on_data(lambda d: edge(d, "agent_launch_admitted").pop("counter")),
        "load",
        ("children 'agents' `starts` names counter 'agent_launches', which no edge counts",),
    ),
    # what may break a streak (issue 51, part 3)
    Mutant(
        "an-agent-edge-breaks-the-denial-and-ledger-streaks",
        "a background agent's empty report resets both streaks: with an agent running the breakers never trip",
        on_data(lambda d: edge(d, "agents_still_running").update(resets=["denied_call_repeats", "ledger_replays"])),
        "property",
        ("denials_in_a_row", "['agents_still_running'] reset it too"),
    ),
    Mutant(
        "an-agent-edge-breaks-the-ledger-streak",
        "a delivered report resets the ledger streak: the ledger breaker trips late or never",
        on_data(lambda d: edge(d, "agent_completion_collected").update(resets=["ledger_replays"])),
        "property",
        ("ledger_replays_in_a_row", "['agent_completion_collected'] reset it too"),
    ),
    # when a breaker trips (issue 51, part 3)
    Mutant(
        "denial-breaker-trips-one-repeat-late",
        "`cap_offset: 0` on denied_call_repeats: the breaker ends the run one repeat later than its limit",
        on_data(lambda d: counter(d, "denied_call_repeats", cap_offset=0)),
        "property",
        ("denial_breaker_trips_at_its_limit", "capped at max_denied_call_repeats, not max_denied_call_repeats - 1"),
    ),
    Mutant(
        "ledger-breaker-trips-one-replay-late",
        "`cap_offset: 0` on ledger_replays: the ledger breaker ends the run one tool turn late",
        on_data(lambda d: counter(d, "ledger_replays", cap_offset=0)),
        "property",
        ("ledger_breaker_trips_at_its_limit", "capped at max_ledger_replays, not max_ledger_replays - 1"),
    ),
    Mutant(
        "compaction-breaker-opens-one-failure-late",
        "`cap_offset: 1` on auto_compact_failures: one auto-compaction more than its limit before the breaker",
        on_data(lambda d: counter(d, "auto_compact_failures", cap_offset=1)),
        "property",
        ("compaction_breaker_opens_after_its_failures", "capped at max_auto_compact_failures +1"),
    ),
    Mutant(
        "denial-breaker-behind-another-candidate",
        "a catch-all acceptance tried before the breaker: the denied calls loop until --max-turns",
        on_data(
            lambda d: d["transitions"].insert(
                d["transitions"].index(edge(d, "repeated_denial_breaker")),
                {
                    "from": "gating_tools",
                    "event": "tools_denied_again",
                    "to": "admitting_agents",
                    "reason": "repeated_denial_kept",
                    "do": ".tools.record_gate",
                },
            )
        ),
        "property",
        ("denial_breaker_trips_at_its_limit", "no counted edge is tried right before it"),
    ),
    # where edges may go, robust to renames (issue 51, part 4)
    Mutant(
        "ctrl-c-while-waiting-renamed-to-an-undeclared-kind",
        "agent_wait_aborted renamed agent_wait_cancelled: `ends` no longer sees it, so it could end as a success",
        replace("    reason: agent_wait_aborted\n", "    reason: agent_wait_cancelled\n"),
        "load",
        ("reason 'agent_wait_cancelled' ends the run (in 'aborted_streaming') but has no declared kind",),
    ),
    Mutant(
        "a-guard-without-decides",
        "has_staged_collapses loses its `decides`: the edge it guards is a free choice to `check`",
        on_data(lambda d: d["guards"]["has_staged_collapses"].pop("decides")),
        "load",
        ("guard 'has_staged_collapses' declares no `decides`",),
    ),
    # which edge starts a child, and that a refusal refuses (issue 51, part 2)
    Mutant(
        "children-starts-names-another-capped-counter",
        "`starts` names malformed_retries (cap 1, per turn): the composed figure would count 1 child a turn",
        on_data(lambda d: d["children"]["agents"].update(starts="malformed_retries")),
        "load",
        (
            "`starts` names counter 'malformed_retries', which its admitted edge 'agent_launch_admitted' does "
            "not count (it counts 'agent_launches')",
        ),
    ),
    Mutant(
        "agent_launch_refused-without-its-handler",
        "the refusal answers nothing: the Agent calls past the cap stay pending and run uncounted",
        on_data(lambda d: [edge(d, "agent_launch_refused").pop(key) for key in ("do", "changes", "may_change")]),
        "load",
        ("`refused` edge 'agent_launch_refused' has no handler with a `changes` contract",),
    ),
    Mutant(
        "children-refused-names-an-edge-of-another-decision",
        "the refused role moved to the admission's way out: nothing answers a call past the cap",
        on_data(lambda d: d["children"]["agents"].update(refused="tool_calls_admitted")),
        "load",
        ("`refused` edge 'tool_calls_admitted' is not the candidate tried right after 'agent_launch_admitted'",),
    ),
    Mutant(
        "a-second-edge-counts-the-starts",
        "another edge counts agent_launches: the starts' counter no longer counts admissions only",
        on_data(lambda d: edge(d, "tool_calls_admitted").update(counter="agent_launches")),
        "load",
        ("`starts` counter 'agent_launches' is counted by ['tool_calls_admitted'] too",),
    ),
    Mutant(
        "agent_launch_refused-loops-back",
        "a refused Agent call is offered to the admission again instead of getting its error",
        on_data(lambda d: edge(d, "agent_launch_refused").update(to="admitting_agents")),
        "termination",
        ("'admitting_agents'", "'agent_launch_refused'"),
    ),
    Mutant(
        "agent_launch_refused-missing",
        "at the cap an Agent call has nowhere to go",
        on_data(lambda d: d["transitions"].remove(edge(d, "agent_launch_refused"))),
        "load",
        ("children 'agents' `refused` names 'agent_launch_refused', which is not a reason of this machine",),
    ),
    Mutant(
        "permitted-calls-skip-the-admission",
        "a permitted turn runs its calls without admitting its Agent calls: sub-agents start uncounted",
        on_data(lambda d: edge(d, "permission_granted").update(to="running_tools")),
        "property",
        ("'agents_start_only_when_admitted'", "'permission_granted'"),
    ),
    Mutant(
        "a-guard-decides-an-edge-that-is-not-there",
        "a guard's meaning names a reason no transition has",
        on_data(lambda d: d["guards"]["fallback_available"].update(decides=["model_fallback", "model_fallbak"])),
        "load",
        ("guard 'fallback_available' `decides` names the reason 'model_fallbak'",),
    ),
    Mutant(
        "budget-behind-a-zero-cap",
        "budget_exhausted reachable only through a counter with the literal cap 0: a run over budget goes on",
        on_data(budget_behind_a_zero_cap),
        "reachability",
        ("state 'budget_exhausted' is unreachable",),
    ),
    Mutant(
        "zero-cap-edge-is-dead",
        "the same: the budget edge itself is reported dead",
        on_data(budget_behind_a_zero_cap),
        "dead_edge",
        ("'max_budget_reached'", "literal cap 0"),
    ),
)

# Changes that keep every promise: each must pass the same checks with no finding.
HARMLESS = (
    (
        "a-doc-reworded",
        replace("doc: one reactive compaction per turn\n", "doc: at most one reactive compaction per turn\n"),
    ),
    ("reconnects-default-within-range", on_data(lambda d: param(d, "max_mcp_reconnects", default=5))),
    ("mcp_reconnects-cap-minus-one", on_data(lambda d: counter(d, "mcp_reconnects", cap_offset=-1))),
    ("figure-max-at-its-bound", on_data(lambda d: figure(d, "waits").update(max=340))),
    ("a-range-narrowed", on_data(lambda d: param(d, "max_head_truncations", max=6))),
    (
        # at the start of a run every counter is 0: resetting there changes nothing (issue 42's false alarm)
        "run-budgets-reset-where-they-are-always-0",
        on_data(
            lambda d: edge(d, "session_started").update(
                resets=["fallback_hops", "stop_hook_blocks", "auto_compact_failures"]
            )
        ),
    ),
    (
        "a-property-added",
        on_data(
            lambda d: d["properties"].update(
                one_collapse_drain_per_turn={
                    "at_most": {"count": ["collapse_drain_retry"], "per": "turn", "max": 1},
                    "doc": "the staged collapses are drained once per turn",
                }
            )
        ),
    ),
)


@pytest.mark.parametrize(("name", "edit"), HARMLESS, ids=[h[0] for h in HARMLESS])
def test_a_harmless_change_is_accepted(name: str, edit: Edit) -> None:
    text = edit(TEXT)
    assert text != TEXT
    report = check_spec(parse_machine(text, f"<{name}>", bind=False).spec, explore=False)
    assert report.ok, [f.message for f in report.findings]


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
        on_data(lambda d: edge(d, "api_retry").update(resets=["api_retries"])),
        "termination",
        ("'api_retries', 'overload_streak' are reset inside the cycle", "api_retry"),
    ),
    Mutant(
        "retry_ladder-resets-its-counter",
        "the retry template's retry edge resets its own counter: every instance loops",
        replace('        counter: "{counter}"\n', '        counter: "{counter}"\n        resets: ["{counter}"]\n'),
        "termination",
        ("'summary_retries' are reset inside the cycle", "manual_summary_retry"),
    ),
    Mutant(
        "compaction_ladder-shrink-without-counter",
        "the compaction template's shrink edge loses its counter: every instance's shrink loops",
        replace(" counter: head_truncations,", ""),
        "termination",
        ("unbounded recovery cycle", "compact_head_truncation_retry"),
    ),
    Mutant(
        "api_retry-marked-progress",
        "a retry edge marked `progress: true` (hides the retry storm per turn)",
        on_data(lambda d: edge(d, "api_retry").update(progress=True)),
        "load",
        ("transition 'api_retry' is marked `progress` but is a recovery (`_retry`)",),
    ),
    Mutant(
        "exhausted-retry-back-to-checking_context-as-progress",
        "an exhausted retry starts over at checking_context through a progress edge",
        on_data(lambda d: edge(d, "api_retries_exhausted").update(to="checking_context", progress=True)),
        "load",
        ("transition 'api_retries_exhausted' is marked `progress` but is a recovery (`_exhausted`)",),
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
        "raise a default (and its range) so model_requests exceeds its declared max 400",
        replace("max_retries: {default: 10, check: 2, max: 10,", "max_retries: {default: 11, check: 2, max: 11,"),
        "figure",
        ("figure 'model_requests' can reach 423 per turn", "max_retries=11", "above its declared max 400"),
    ),
    Mutant(
        "max_retries-range-widened",
        "widen max_retries' range to 200: a run would take values the request figures do not hold for (issue 51)",
        on_data(lambda d: param(d, "max_retries", max=200)),
        "figure",
        ("figure 'model_requests' may reach", "for a value a run accepts", "above its declared max 400"),
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
        ("'stream_fallback'", "its counter 'stream_fallbacks' has the literal cap 0"),
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
        on_data(lambda d: (drop_edge(d, "api_retries_exhausted"), unlist(d, "api_retries_exhausted"))),
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
        on_data(lambda d: d["unbounded_by_design"].update(api_retry={"bound": "max_retries", "doc": "retries"})),
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
        "load",
        ("transition 'stream_fallback' is marked `progress` but is a recovery (`_fallback`)",),
    ),
    Mutant(
        "rapid_refill_breaker-deleted",
        "delete the rapid-refill breaker: its terminal context_thrashed becomes unreachable",
        on_data(lambda d: (drop_edge(d, "rapid_refill_breaker"), unlist(d, "rapid_refill_breaker"))),
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
        on_data(lambda d: d["states"]["backing_off"].pop("emits")),
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
        "property",
        ("stop_hook_blocks_per_run", "is reset by", "next_turn"),
    ),
    Mutant(
        "turns-cap_offset-0",
        "`cap_offset: 0` on turns: max_turns + 1 tool turns run (off by one); the tool_turns figure has no "
        "max_per_run since turns past max_turns wait for sub-agents' reports (turn_limit_agent_wait), so the "
        "per-run property names it",
        on_data(lambda d: counter(d, "turns", cap_offset=0)),
        "property",
        ("tool_turns_per_run", "capped at max_turns, which may be more than max_turns - 1"),
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
    Mutant(
        "auto_compact_failures-scope-turn",
        "the auto-compact breaker made turn-scoped: it closes again at every tool turn",
        on_data(lambda d: counter(d, "auto_compact_failures", scope="turn")),
        "property",
        ("compaction_failures_until_success", "'next_turn'", "] reset it too"),
    ),
    Mutant(
        "rapid_refill_breaker-deleted-with-its-terminal",
        "delete the rapid-refill breaker and context_thrashed: compaction may thrash turn after turn",
        on_data(drop_refill_breaker_and_its_end),
        "load",
        ("property 'refill_breaker_before_compaction' names the reason 'rapid_refill_breaker'",),
    ),
    *INTENT_MUTANTS,
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
    assert sum(m.undetected is None for m in MUTANTS) >= 60


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
