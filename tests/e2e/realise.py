"""Model-based end-to-end runs of the query loop: a planned path for every transition, made real.

Owns the query loop's :class:`~queryloop.fsm.verify.paths.Realiser` — what makes each
``(state, event)`` happen (an answer of the embedded server, a hook's verdict, a
permission rule, an abort), what each guard's value takes in the run's data, and what
each edge handler (keyed by its ``do`` name) does to the part of the data that later
guards and thresholds read — then the builder that turns a planned path into one
concrete run (the server's scenario, the agent's options, the hooks' plans, where to
abort), and the two drivers: in-process (:class:`~queryloop.run.agent.AgentRun` over the
real ``anthropic`` SDK against the embedded server on loopback) and the CLI in a
subprocess. A step it does not know how to make happen is never faked: the search then
looks for another path, and a transition no path it can realise takes is a finding.

The data is abstracted as far as the guards need it: the transcript as API-round
groups with token bounds (tool results are tiny or "big", 16 800 characters), the
fallback chain, the escalated cap, whether compaction is on, the compaction history,
the staged collapses and the compaction in progress. Options that a path constrains
(fallback models, an escalated cap, auto-compaction, the threshold, --max-turns) are
fixed lazily, the first time a step needs them. Sizes are chosen so that every
threshold decision holds with a wide margin on ``mock-small-context`` (an 8 000-token
window; ``max_tokens`` 100), and a decision too close to call is refused, not guessed.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import stat
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anthropic
import attrs
import yaml

from queryloop.fsm import Step
from queryloop.fsm.verify.paths import PlannedPath, PlannedStep
from queryloop.handlers.context.compacting import KEEP_RECENT_FRACTION
from queryloop.handlers.context.services.compaction import SUMMARY_MARKER, request_overhead_tokens
from queryloop.handlers.mcp import McpServerConfig
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import AnthropicBackend
from queryloop.handlers.session import SessionPaths
from queryloop.handlers.tools import default_registry
from queryloop.mockapi.scenario import parse_scenario
from queryloop.mockapi.server import MockServer, RecordedRequest
from queryloop.run.agent import AgentRun
from queryloop.run.config import (
    AgentOptions,
    ContextSettings,
    Limits,
    PermissionSettings,
    RequestSettings,
    SessionSettings,
    ToolSettings,
)
from queryloop.run.defaults import DEFAULT_SYSTEM_PROMPT
from queryloop.run.settings import load_settings

from .harness import ROOT, MockApi, run_cli

FLAKY_SERVER = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"

# ---- the run's fixed choices ----------------------------------------------------------------

MODELS = ("mock-small-context", "mock-fallback", "mock-fallback-2", "mock-primary")  # the primary, then fallbacks
WINDOWS = (8_000, 200_000, 200_000, 200_000)  # their context windows (handlers/request/services/models.yaml)
MAX_TOKENS = 100
ESCALATED_MAX_TOKENS = 200
# Write, Edit and Bash are offered (a deny rule for Edit would cover Write too); no Agent: the planned runs start no
# sub-agent (tests/e2e/test_subagents.py takes the agents layer's transitions)
HIDDEN_TOOLS = "Read Glob Grep Agent"
ALLOW = ["Bash(printf:*)", "Write"]  # printf and Write run; anything else asks, and a headless run denies it
BIG_CHARS = 16_800
SMALL_COMMAND = "printf %05d {n}"  # the nth tool turn's: every call differs, so none repeats a completed one
BIG_COMMAND = f"printf %0{BIG_CHARS}d {{n}}"
WRITTEN_FILE = "out-{n}.txt"  # a Write's file (checkpointed first: it does not exist yet)
DENIED_COMMAND = "touch denied-{n}.txt"  # the nth fresh denied call (a repeat keeps the previous n)
BUDGET_USD = 1.0
ABORT_MARK = "plan: abort here"
COMPACT_INSTRUCTIONS = "keep the printed outputs"  # a manual compaction's instructions (/compact …)
THETA = {"low": 0.0005, "high": 1.0}  # the auto-compact threshold of each regime (fraction of the window)
CLI_THETA = {"low": 0.01, "high": 1.0}  # the CLI takes 1..100 %

# ---- token bounds (upper bounds of the small parts; the big result's lower bound) ------------

OVERHEAD = request_overhead_tokens(
    DEFAULT_SYSTEM_PROMPT, tuple(default_registry(["Write", "Edit", "Bash"]).api_definitions())
)
PROMPT_HI = 60
ASSISTANT_HI = 200
RESULT_HI = 150
META_HI = 150  # a hidden continuation or nudge message, Stop-hook feedback
SUMMARY_HI = 400
NOTE_HI = 70  # the summary's list of completed calls it summarised away: its opening
NOTE_CALL_HI = 100  # and one line per call
RESUME_HI = 300  # a resumed session's history: a prompt, an answer or a tool_use and its result
STUB_HI = 150
BIG_LO = BIG_CHARS // 4
MARGIN = 150  # no threshold decision is taken closer than this to the line
MCP_HI = 150  # the MCP server's one tool (echo) in the catalog offered
MCP_STATES = ("syncing_tools", "reconnecting_mcp_servers")

Group = tuple[str, int]  # (kind, upper bound of its small tokens): prompt, summary, small, tool, big, collapsed


@attrs.frozen(kw_only=True)
class Facts:
    """The realiser's view of a run: the options fixed so far and what of the data later steps read."""

    # options, fixed lazily
    fallbacks: int = 0  # fallback models the run needs at least
    fallbacks_exact: bool = False
    escalation: bool | None = None
    auto_compact: bool | None = None
    regime: str | None = None  # "low": every check is over the threshold; "high": only past the window
    max_turns: int = 0  # at least (0: unbounded so far)
    max_turns_exact: bool = False
    # the run so far
    hops: int = 0
    escalated: bool = False
    groups: tuple[Group, ...] = (("prompt", PROMPT_HI),)
    staged: tuple[int, ...] = ()
    plan: tuple[int, int] | None = None  # (older groups, kept groups) of the compaction in progress
    gaps: tuple[int, ...] = ()  # turns between the last compactions (and the start), capped at 3
    since: int = 0  # tool turns since the last compaction, capped at 3
    turn: int = 0
    pending: str = ""  # the gate's decision for this turn's call: allowed / denied / replay
    write: bool = False  # this turn's call is a Write (checkpointed by the gate), not a Bash command
    ran: tuple[tuple[int, int], ...] = ()  # (group, turn) of every completed call the transcript still shows
    hidden: tuple[int, ...] = ()  # turns whose completed call a compaction summarised away (the ledger has it)
    denied_last: bool = False  # the last gate denied every call (their signature is in the run data)
    long_wait: bool = False  # the last failed attempt asked to be retried later than max_retry_after_s
    reacted: bool = False  # a reactive compaction was tried this turn
    resumed: bool = False  # the run continues a stored session (a prompt and an answer, in two groups)
    mcp: str = ""  # the MCP server: "" not decided, "none", "down" (reconnecting), "listed", "up" (offered), "dropped"
    # what the current step's effect produced, for its edge handler
    measured: tuple[int, ...] = ()
    result: str = ""


Note = tuple[tuple[Any, ...], ...]  # what a step needs: ("main", …), ("read", kind), ("hook", event, action), …
Option = tuple[Facts, Note]


def _window(f: Facts) -> int:
    return WINDOWS[f.hops] - (ESCALATED_MAX_TOKENS if f.escalated else MAX_TOKENS)


def _bounds(g: Group) -> tuple[int, int]:
    kind, small = g
    return (BIG_LO, BIG_LO + small) if kind == "big" else (0, small)


def _estimate(f: Facts) -> tuple[int, int]:
    lo, hi = OVERHEAD, OVERHEAD + (MCP_HI if f.mcp == "up" else 0)
    for g in f.groups:
        glo, ghi = _bounds(g)
        lo += glo
        hi += ghi
    return lo, hi + 2 * len(f.groups) + 10  # per-message rounding and commas


def _thrashing(f: Facts) -> bool:
    return len(f.gaps) >= 2 and all(g < 3 for g in f.gaps[-2:]) and f.since < 3


def _plan(f: Facts) -> tuple[int, int] | None:
    """How plan_compaction splits the groups: the most recent whole ones that fit a tenth of the window are kept."""
    keep = int(_window(f) * KEEP_RECENT_FRACTION)
    kept, total_lo, total_hi = 0, 0, 0
    for g in reversed(f.groups[1:]):
        lo, hi = _bounds(g)
        if kept >= 1:
            if total_hi + hi > keep and total_lo + lo <= keep:
                return None  # too close to call
            if total_lo + lo > keep:
                break
        kept += 1
        total_lo += lo
        total_hi += hi
    return len(f.groups) - kept, kept


def _grow(f: Facts, extra: int) -> Facts:
    """The last group gets a small message more (a hidden prompt, feedback)."""
    kind, small = f.groups[-1]
    return attrs.evolve(f, groups=(*f.groups[:-1], (kind, small + extra)))


class QueryLoopRealiser:
    """Makes the query loop's steps happen against the embedded server (``cli``: only what the CLI can set).

    ``mcp``: the runs may have an MCP server (the test server, whose starts work or fail as
    the path needs); without it every request boundary finds no server, which keeps the
    search for the other transitions as small as it was.
    """

    def __init__(self, *, cli: bool = False, mcp: bool = False) -> None:
        self.cli = cli
        self.mcp = mcp
        self.theta = CLI_THETA if cli else THETA
        self.events: dict[tuple[str, str], Callable[[Facts, PlannedStep], list[Option]]] = {}
        for state in ("auto_compacting", "reactive_compacting", "manual_compacting"):
            for event, kind in (
                ("compacted", "ok"),
                ("summary_too_long", "too_long"),
                ("summary_failed_transiently", "transient"),
                ("summary_failed", "failed"),
            ):
                self.events[(state, event)] = _summary(kind)
        for state in (
            "backing_off",
            "backing_off_auto_summary",
            "backing_off_reactive_summary",
            "backing_off_manual_summary",
        ):
            self.events[(state, "elapsed")] = _nothing
        self.events.update(
            {
                ("opening_session", "session_new"): _nothing,
                ("opening_session", "history_restored"): _resume("intact"),
                ("opening_session", "dangling_calls_found"): _resume("dangling"),
                ("syncing_tools", "tools_in_sync"): _mcp_in_sync,
                ("syncing_tools", "tool_list_changed"): _mcp_first_start(True),
                ("syncing_tools", "servers_down"): _mcp_first_start(False),
                ("reconnecting_mcp_servers", "servers_reconnected"): _mcp_reconnect(True),
                ("reconnecting_mcp_servers", "reconnect_failed"): _mcp_reconnect(False),
                ("submitting_prompt", "prompt_accepted"): _prompt("accept"),
                ("submitting_prompt", "prompt_blocked"): _prompt("block"),
                ("submitting_prompt", "stopped_by_hook"): _prompt("stop"),
                ("submitting_prompt", "compaction_requested"): _compaction_requested,
                ("checking_context", "within_threshold"): lambda f, s: self._measure(f, over=False),
                ("checking_context", "over_threshold"): lambda f, s: self._measure(f, over=True),
                ("calling_model", "replied"): _main("reply"),
                ("calling_model", "failed_transiently"): _main("error", 500, "Internal server error", wait=True),
                ("calling_model", "overloaded"): _main("error", 529, "Overloaded", wait=True),
                ("calling_model", "model_unavailable"): _main("error", 404, "model: {model} not found"),
                ("calling_model", "unauthorized"): _main("error", 401, "invalid x-api-key", wait=True),
                ("calling_model", "rejected"): _main("error", 400, "messages: roles must alternate"),
                ("calling_model", "context_overflowed"): _main("error", 400, "prompt is too long"),
                ("calling_model", "media_too_large"): _main("error", 400, "image exceeds 5 MB maximum"),
                ("calling_model", "response_malformed"): _main("malformed"),
                ("calling_model", "stream_broken"): _broken,
                ("calling_model", "stream_cut_after_tool_use"): _main("cut_after_tool"),
                ("gating_tools", "tools_permitted"): _gate("allowed"),
                ("gating_tools", "tools_denied"): _gate("denied"),
                ("gating_tools", "tools_denied_again"): _denied_again,
                ("gating_tools", "tools_already_done"): _replay,
                ("gating_tools", "stopped_by_hook"): lambda f, s: [(f, (("hook", "PreToolUse", "stop"),))],
                # the planned runs offer no Agent tool: every tool turn's admission has no Agent call to admit
                ("admitting_agents", "agent_calls_admitted"): lambda f, s: [(f, ())],
                ("running_tools", "tools_finished"): _tools_finished,
                ("running_tools", "stopped_by_hook"): _post_tool_stop,
                ("running_stop_hooks", "stop_accepted"): _stop_hook("accept"),
                ("running_stop_hooks", "stop_blocked"): _stop_hook("block"),
                ("running_stop_hooks", "stopped_by_hook"): _stop_hook("stop"),
            }
        )
        for kind in (
            "answered",
            "asked_for_tools",
            "tool_use_malformed",
            "truncated",
            "thought_only",
            "refused",
            "paused",
            "budget_spent",
            "context_overflowed",
        ):
            self.events[("reading_reply", kind)] = _read(kind)
        self.guards: dict[str, Callable[[Facts, bool], list[Facts]]] = {
            "fallback_available": _fallback_available,
            "escalation_configured": _escalation_configured,
            "can_compact": _can_compact,
            "refill_thrashing": lambda f, v: [f] if _thrashing(f) == v else [],
            "has_staged_collapses": lambda f, v: [f] if bool(f.staged) == v else [],
            "can_drop_oldest_group": lambda f, v: [f] if (f.plan is not None and f.plan[0] >= 2) == v else [],
            "nothing_older_to_summarise": _nothing_older_to_summarise,
            "can_keep_more_rounds": lambda f, v: [f] if (f.plan is not None and f.plan[0] >= 3) == v else [],
            "retry_after_over_cap": lambda f, v: [f] if f.long_wait == v else [],
            "checkpoint_taken": lambda f, v: [f] if f.write == v else [],
            "agents_running": lambda f, v: [] if v else [f],  # the planned runs start no sub-agent
            # the planned runs ask for no structured output (tests/e2e/test_structured_output.py takes its edges)
            "structured_output_given": lambda f, v: [] if v else [f],
            "structured_output_attempts_spent": lambda f, v: [] if v else [f],
            # the planned runs' histories are far from the 10,000 tokens of old results a microcompaction needs
            "old_results_clearable": lambda f, v: [] if v else [f],
        }
        self.open_caps: dict[str, Callable[[Facts, bool], list[Facts]]] = {
            "turns": _turns_allow,
            # counts only edges agents_running guards, false in every planned run: either way, nothing changes
            "agent_report_turns": lambda f, v: [f],
        }
        self.effects: dict[str | None, Callable[[Facts], Facts | None]] = {
            None: _same,
            "start_session": _same,
            "resume_history": _same,
            "answer_dangling_calls": _same,
            "record_prompt_context": _same,
            "apply_catalog": lambda f: attrs.evolve(f, mcp="up"),
            "start_reconnect": _same,
            "apply_reconnected": lambda f: attrs.evolve(f, mcp="up"),
            "drop_servers": lambda f: attrs.evolve(f, mcp="dropped"),
            "record_hook_stop": _same,
            "record_measurement": lambda f: attrs.evolve(f, staged=f.measured),
            "skip_compaction_breaker_open": lambda f: attrs.evolve(f, staged=f.measured),
            "surface_thrashing": _same,
            "plan_compaction": _plan_compaction,
            "plan_reactive_compaction": _plan_reactive_compaction,
            "plan_manual_compaction": lambda f: attrs.evolve(
                f, plan=(len(f.groups), 0) if len(f.groups) >= 2 else None
            ),
            "apply_manual_compaction": _apply_compaction,
            "surface_manual_compaction_failure": lambda f: attrs.evolve(f, plan=None),
            "keep_more_rounds": lambda f: (
                None if f.plan is None else attrs.evolve(f, plan=(f.plan[0] - 1, f.plan[1] + 1))
            ),
            "apply_compaction": _apply_compaction,
            "drop_oldest_group": _drop_oldest_group,
            "note_compaction_failure": lambda f: attrs.evolve(f, plan=None),
            "note_summary_failure": _same,
            "commit_staged_collapses": _commit_collapses,
            "surface_prompt_too_long": _same,
            "receive_reply": _same,
            "note_failure": _same,
            "switch_to_fallback_model": lambda f: attrs.evolve(f, hops=f.hops + 1),
            "surface_failure": _same,
            "surface_long_retry_after": _same,
            "surface_context_window_exceeded": _same,
            "record_tool_request": lambda f: attrs.evolve(f, groups=(*f.groups, ("tool", ASSISTANT_HI))),
            "record_answer": lambda f: attrs.evolve(f, groups=(*f.groups, ("small", ASSISTANT_HI))),
            "escalate_max_tokens": lambda f: attrs.evolve(f, escalated=True),
            "continue_after_truncation": lambda f: _grow(
                attrs.evolve(f, groups=(*f.groups, ("small", ASSISTANT_HI))), META_HI
            ),
            "surface_truncation": _same,
            "report_malformed_tool_use": lambda f: _grow(
                attrs.evolve(f, groups=(*f.groups, ("small", ASSISTANT_HI))), META_HI
            ),
            "surface_malformed_tool_use": _same,
            "nudge_for_visible_answer": lambda f: _grow(f, META_HI),
            "continue_paused_turn": lambda f: attrs.evolve(f, groups=(*f.groups, ("small", ASSISTANT_HI))),
            "record_over_budget": _same,
            "record_gate": lambda f: attrs.evolve(f, denied_last=f.pending == "denied"),
            "stop_repeated_denial": _same,
            "stop_repeated_replay": _same,
            "close_calls_and_stop": _same,
            "record_tool_results": _record_tool_results,
            "record_tool_results_at_turn_limit": _same,
            "record_tool_results_and_stop": _same,
            "send_stop_feedback": lambda f: _grow(f, META_HI),
            "record_block_limit": _same,
            "close_dangling_tool_uses": _same,
        }

    # ---- the Realiser protocol ----------------------------------------------------------------
    def start(self) -> Facts:
        return Facts()

    def refuse(self, step: PlannedStep) -> str | None:
        """What no data can change: what the realiser does not know, whether a request streams, the CLI's aborts."""
        if step.event == "aborted":  # in process, any state's interrupt is made (advance says how)
            return "the CLI is interrupted only by a signal, whose timing a test cannot fix" if self.cli else None
        return self._setup(step) or self._unknown(step) or _streaming(step)

    def _setup(self, step: PlannedStep) -> str | None:
        """What the runs of this plan cannot set up: the CLI's resumed sessions and /compact, an MCP server."""
        if self.cli and step.source == "opening_session" and step.event != "session_new":
            return "the CLI's planned runs start new sessions (resumed ones are driven in process)"
        if self.cli and step.event == "compaction_requested":
            return "a manual compaction is the interactive session's /compact (driven in process)"
        if step.source in MCP_STATES and step.event not in ("tools_in_sync", "aborted"):
            if self.cli:
                return "the CLI's planned runs have no MCP server (runs with one are driven in process)"
            if not self.mcp:
                return "this plan's runs have no MCP server (the MCP transitions are planned with one)"
        return None

    def _unknown(self, step: PlannedStep) -> str | None:
        """An event, guard, cap or edge handler of the step the realiser does not know."""
        if (step.source, step.event) not in self.events:
            return f"the realiser does not know how to make {step.source!r} emit {step.event!r}"
        unknown = [g for g in step.guards if g not in self.guards] + [
            c for c in step.open_caps if c not in self.open_caps
        ]
        if unknown:
            return f"the realiser does not know what makes {unknown[0]!r} true or false"
        if _handler(step) not in self.effects:
            return f"the realiser does not know what edge handler {step.transition.do!r} does to the run's data"
        return None

    def advance(self, data: Facts, step: PlannedStep) -> Iterable[Option]:
        if step.event == "aborted":
            return self._abort(data, step)
        make = self.events[(step.source, step.event)]  # refuse() vouched for every name the step uses
        effect = self.effects[_handler(step)]
        out: list[Option] = []
        for facts, note in make(data, step):
            options = [facts]
            for guard, value in step.guards.items():
                options = [g for f in options for g in self.guards[guard](f, value)]
            for counter, value in step.open_caps.items():
                options = [g for f in options for g in self.open_caps[counter](f, value)]
            for facts in options:
                after = effect(facts)
                if after is not None:
                    if after.measured or after.result:
                        after = attrs.evolve(after, measured=(), result="")  # the effect's output is spent
                    out.append((after, note))
        return out

    def _abort(self, data: Facts, step: PlannedStep) -> Iterable[Option]:
        if step.source == "opening_session":  # cancelled before the run's first await: reading the session
            return [(data, (("abort_at_start",),))]
        if step.source == "submitting_prompt":
            # Cancelled inside the prompt hooks: SessionStart says so, UserPromptSubmit is where it lands.
            return [(data, (("abort",), ("hook", "SessionStart", "notice"), ("hook", "UserPromptSubmit", "accept")))]
        return [(data, (("abort",),))]

    def _measure(self, f: Facts, *, over: bool) -> list[Option]:
        window = _window(f)
        lo, hi = _estimate(f)
        half = window * 0.5
        if lo > half + MARGIN:
            measured = tuple(i for i, g in enumerate(f.groups[:-2]) if g[0] == "big")
        elif hi < half - MARGIN:
            measured = f.staged
        else:
            return []
        out: list[Option] = []
        for regime in (f.regime,) if f.regime else ("high", "low"):
            line = self.theta[regime] * window
            if (lo > line + MARGIN) if over else (hi < line - MARGIN):
                out.append((attrs.evolve(f, regime=regime, measured=measured), ()))
        return out


def _streaming(step: PlannedStep) -> str | None:
    """Whether call_model streams decides two of its events: it streams unless a stream fallback is in force."""
    fallbacks = step.counters.get("stream_fallbacks")
    if fallbacks is None or step.source != "calling_model":
        return None
    if fallbacks > 0 and step.event == "stream_cut_after_tool_use":
        return (
            f"calling_model emits {step.event!r} only for a streamed request, and with stream_fallbacks = "
            f"{fallbacks} call_model sends the request whole (a whole body that breaks off is stream_broken)"
        )
    if fallbacks == 0 and step.event == "response_malformed":
        return "a streamed answer that does not parse is stream_broken; response_malformed is a whole body's"
    return None


# ---- events ---------------------------------------------------------------------------------


def _handler(step: PlannedStep) -> str | None:
    return None if step.transition.do is None else step.transition.do.rpartition(".")[2]


def _same(f: Facts) -> Facts:
    return f


def _nothing(f: Facts, step: PlannedStep) -> list[Option]:
    return [(f, ())]


def _resume(kind: str) -> Callable[[Facts, PlannedStep], list[Option]]:
    """A stored session to resume: its history answered (``intact``) or ending with an unanswered tool_use."""

    def make(f: Facts, step: PlannedStep) -> list[Option]:
        return [(attrs.evolve(_grow(f, RESUME_HI), resumed=True), (("resume", kind),))]

    return make


def _mcp_in_sync(f: Facts, step: PlannedStep) -> list[Option]:
    """No MCP server (decided at the first boundary), or its catalog is offered already, or it was dropped."""
    if f.mcp in ("", "none"):
        return [(attrs.evolve(f, mcp="none"), ())]
    return [(f, ())] if f.mcp in ("up", "dropped") else []


def _mcp_first_start(ok: bool) -> Callable[[Facts, PlannedStep], list[Option]]:
    """The first boundary with an MCP server whose first start works (its tools are new) or fails (it is down)."""

    def make(f: Facts, step: PlannedStep) -> list[Option]:
        if f.mcp != "":
            return []
        return [(attrs.evolve(f, mcp="listed" if ok else "down"), (("mcp", ok),))]

    return make


def _mcp_reconnect(ok: bool) -> Callable[[Facts, PlannedStep], list[Option]]:
    """One more start of the down server: it works (its tools are listed afresh) or fails again."""

    def make(f: Facts, step: PlannedStep) -> list[Option]:
        if f.mcp != "down":
            return []
        return [(attrs.evolve(f, mcp="listed" if ok else "down"), (("mcp", ok),))]

    return make


def _prompt(action: str) -> Callable[[Facts, PlannedStep], list[Option]]:
    def make(f: Facts, step: PlannedStep) -> list[Option]:
        return [(f, (("hook", "SessionStart", "accept"), ("hook", "UserPromptSubmit", action)))]

    return make


def _compaction_requested(f: Facts, step: PlannedStep) -> list[Option]:
    """A run started as a manual compaction (/compact): no prompt; the history, if resumed, is two groups
    (the earlier prompt, then the answer with whatever answered it)."""
    groups: tuple[Group, ...] = (("prompt", RESUME_HI), ("small", RESUME_HI)) if f.resumed else ()
    return [(attrs.evolve(f, groups=groups), (("hook", "SessionStart", "accept"), ("compact",)))]


def _main(
    kind: str, status: int = 0, message: str = "", *, wait: bool = False
) -> Callable[[Facts, PlannedStep], list[Option]]:
    """An answer of the server; ``wait``: also as an error asking to be retried in an hour (over the cap)."""

    def make(f: Facts, step: PlannedStep) -> list[Option]:
        options: list[Option] = [(attrs.evolve(f, long_wait=False), (("main", kind, status, message),))]
        if wait:
            options.append((attrs.evolve(f, long_wait=True), (("main", "error_wait", status, message),)))
        return options

    return make


def _broken(f: Facts, step: PlannedStep) -> list[Option]:
    """A streamed answer cut between blocks, or (under the stream fallback) a whole body that breaks off."""
    streamed = step.counters.get("stream_fallbacks", 0) == 0
    return [(attrs.evolve(f, long_wait=False), (("main", "cut" if streamed else "cut_body", 0, ""),))]


def _summary(kind: str) -> Callable[[Facts, PlannedStep], list[Option]]:
    def make(f: Facts, step: PlannedStep) -> list[Option]:
        if step.source == "manual_compacting" and f.plan is None:  # nothing to summarise: no hook, no request
            return [(f, ())] if kind == "failed" else []
        return [(f, (("hook", "PreCompact", "accept"), ("summary", kind)))]

    return make


def _read(kind: str) -> Callable[[Facts, PlannedStep], list[Option]]:
    def make(f: Facts, step: PlannedStep) -> list[Option]:
        return [(f, (("read", kind),))]

    return make


def _gate(decision: str) -> Callable[[Facts, PlannedStep], list[Option]]:
    """The gate's decision; an allowed call is a Bash command or a Write (whose file the gate checkpoints)."""

    def make(f: Facts, step: PlannedStep) -> list[Option]:
        hook = ("hook", "PreToolUse", "accept")
        options = [(attrs.evolve(f, pending=decision, write=False), (hook, ("gate", decision, f.turn)))]
        if decision == "allowed":
            options.append((attrs.evolve(f, pending=decision, write=True), (hook, ("gate", "write", f.turn))))
        return options

    return make


def _replay(f: Facts, step: PlannedStep) -> list[Option]:
    """The model proposes again a completed call a compaction summarised away: the ledger answers it."""
    if not f.hidden:
        return []
    note = (("hook", "PreToolUse", "accept"), ("gate", "replay", f.hidden[0]))
    return [(attrs.evolve(f, pending="replay", write=False), note)]


def _denied_again(f: Facts, step: PlannedStep) -> list[Option]:
    """The model proposes the very call the last gate denied (a fresh denied call is ``tools_denied``)."""
    if not f.denied_last:
        return []
    note = (("hook", "PreToolUse", "accept"), ("gate", "denied_again", f.turn))
    return [(attrs.evolve(f, pending="denied"), note)]


def _tools_finished(f: Facts, step: PlannedStep) -> list[Option]:
    if f.pending in ("denied", "replay"):  # nothing ran: no PostToolUse hook
        return [(attrs.evolve(f, result=f.pending), ())]
    hook = ("hook", "PostToolUse", "accept")
    if f.write:
        return [(attrs.evolve(f, result="small"), (hook, ("result", "small")))]
    return [(attrs.evolve(f, result=size), (hook, ("result", size))) for size in ("small", "big")]


def _post_tool_stop(f: Facts, step: PlannedStep) -> list[Option]:
    if f.pending != "allowed":
        return []  # PostToolUse hooks run only for the calls that ran
    if f.write:
        return [(f, (("hook", "PostToolUse", "stop"),))]
    return [(f, (("hook", "PostToolUse", "stop"), ("result", "small")))]


def _stop_hook(action: str) -> Callable[[Facts, PlannedStep], list[Option]]:
    def make(f: Facts, step: PlannedStep) -> list[Option]:
        return [(f, (("hook", "Stop", action),))]

    return make


# ---- guards and caps --------------------------------------------------------------------------


def _fallback_available(f: Facts, value: bool) -> list[Facts]:
    if value:
        need = max(f.fallbacks, f.hops + 1)
        if need > len(MODELS) - 1 or (f.fallbacks_exact and f.fallbacks < f.hops + 1):
            return []
        return [attrs.evolve(f, fallbacks=need)]
    if f.fallbacks_exact:
        return [f] if f.fallbacks == f.hops else []
    return [attrs.evolve(f, fallbacks=f.hops, fallbacks_exact=True)] if f.fallbacks <= f.hops else []


def _escalation_configured(f: Facts, value: bool) -> list[Facts]:
    if value:
        return [attrs.evolve(f, escalation=True)] if f.escalation is not False and not f.escalated else []
    if f.escalated:
        return [f]
    return [attrs.evolve(f, escalation=False)] if f.escalation is not True else []


def _can_compact(f: Facts, value: bool) -> list[Facts]:
    enough = len(f.groups) >= 2
    if value:
        return [attrs.evolve(f, auto_compact=True)] if enough and f.auto_compact is not False else []
    if not enough:
        return [f]
    return [attrs.evolve(f, auto_compact=False)] if f.auto_compact is not True else []


def _nothing_older_to_summarise(f: Facts, value: bool) -> list[Facts]:
    """Compaction on, none tried this turn, and no round older than the newest (a reactive compaction keeps
    one: the prompt's group and one round are not enough)."""
    few = len(f.groups) < 3 and not f.reacted
    if value:
        return [attrs.evolve(f, auto_compact=True)] if few and f.auto_compact is not False else []
    if not few:
        return [f]
    return [attrs.evolve(f, auto_compact=False)] if f.auto_compact is not True else []


def _turns_allow(f: Facts, value: bool) -> list[Facts]:
    """next_turn fires while turns < max_turns − 1; max_turns_reached once it does not."""
    if value:
        need = f.turn + 2
        if f.max_turns_exact:
            return [f] if f.max_turns >= need else []
        return [attrs.evolve(f, max_turns=max(f.max_turns, need))]
    limit = f.turn + 1
    if f.max_turns_exact:
        return [f] if f.max_turns <= limit else []
    return [attrs.evolve(f, max_turns=limit, max_turns_exact=True)] if f.max_turns <= limit else []


# ---- edge handlers ------------------------------------------------------------------------------


def _plan_compaction(f: Facts) -> Facts | None:
    plan = _plan(f)
    return None if plan is None else attrs.evolve(f, plan=plan)


def _plan_reactive_compaction(f: Facts) -> Facts | None:
    """The newest round kept, the older ones summarised (the realiser's prompt-too-long gives no gap)."""
    return None if len(f.groups) < 3 else attrs.evolve(f, plan=(len(f.groups) - 1, 1), reacted=True)


def _apply_compaction(f: Facts) -> Facts | None:
    if f.plan is None:
        return None
    cut = len(f.groups) - f.plan[1]
    kept = f.groups[cut:]
    hidden = (*f.hidden, *(turn for group, turn in f.ran if group < cut))
    summary = SUMMARY_HI + (NOTE_HI + NOTE_CALL_HI * len(hidden) if hidden else 0)
    return attrs.evolve(
        f,
        groups=(("summary", summary), *kept),
        ran=tuple((group - cut + 1, turn) for group, turn in f.ran if group >= cut),
        hidden=hidden,
        staged=(),
        plan=None,
        gaps=(*f.gaps, f.since)[-2:],
        since=0,
    )


def _drop_oldest_group(f: Facts) -> Facts | None:
    if f.plan is None:
        return None
    older, kept = f.plan
    return attrs.evolve(f, plan=(older - min(max(1, older // 3), older - 1), kept))


def _commit_collapses(f: Facts) -> Facts:
    groups = list(f.groups)
    for i in f.staged:
        groups[i] = ("collapsed", groups[i][1] + STUB_HI)
    return attrs.evolve(f, groups=tuple(groups), staged=())


def _record_tool_results(f: Facts) -> Facts | None:
    kind, small = f.groups[-1]
    if kind != "tool" or not f.result:
        return None
    size = "big" if f.result == "big" else "small"
    ran = ((len(f.groups) - 1, f.turn),) if f.pending == "allowed" else ()
    return attrs.evolve(
        f,
        groups=(*f.groups[:-1], (size, small + RESULT_HI)),
        ran=(*f.ran, *ran),
        write=False,
        turn=f.turn + 1,
        since=min(3, f.since + 1),
        pending="",
        reacted=False,
    )


# ---- from a planned path to a concrete run ----------------------------------------------------


@attrs.frozen(kw_only=True)
class RunPlan:
    """One concrete run: what the server answers, the options, the hooks' plans, where to abort."""

    path: PlannedPath
    scenario: dict[str, Any]
    options: dict[str, Any]  # AgentOptions fields (and params) beyond the prompt, model and cwd
    hooks: dict[str, list[str]]  # hook event -> one action per invocation ("accept" when it has nothing to say)
    abort_after: int | None  # interrupt the run after this many steps
    abort_how: str = "close"  # close the run's generator; "hooks": cancel inside the prompt hooks; "start": at once
    resume: str | None = None  # a stored session the run resumes: "intact", or "dangling" (an unanswered tool_use)
    mcp_starts: tuple[bool, ...] = ()  # an MCP server whose starts succeed or fail in this order (none if empty)

    @property
    def reasons(self) -> list[str]:
        return list(self.path.reasons)

    @property
    def scenario_yaml(self) -> str:
        plain = json.loads(json.dumps(self.scenario))  # no shared objects: the scenario reader refuses YAML aliases
        return yaml.safe_dump(plain, sort_keys=False, width=1000)


def _reply(kind: str, tool: Mapping[str, Any] | None) -> dict[str, Any]:
    text = {"text": "done"}
    replies: dict[str, dict[str, Any]] = {
        "answered": {"content": [text]},
        "tool_use_malformed": {"content": [{"text": "let me run that"}], "stop_reason": "tool_use"},
        "truncated": {"content": [{"text": "part "}], "stop_reason": "max_tokens"},
        "thought_only": {"content": [{"thinking": "hmm"}]},
        "refused": {"content": [{"text": "I won't."}], "stop_reason": "refusal"},
        "paused": {"content": [{"text": "working "}], "stop_reason": "pause_turn"},
        "budget_spent": {"content": [text], "usage": {"input_tokens": 1_000_000, "output_tokens": 10}},
        "context_overflowed": {"content": [{"text": "partial"}], "stop_reason": "model_context_window_exceeded"},
    }
    if kind == "asked_for_tools":
        return {"content": [{"tool_use": tool if tool is not None else _tool_call("allowed", "small")}]}
    return replies[kind]


def _tool_call(decision: str, size: str, denials: int = 0, turn: int = 0, write: bool = False) -> dict[str, Any]:
    if decision in ("denied", "denied_again"):
        command = DENIED_COMMAND.format(n=denials)
    elif write:
        return {"name": "Write", "input": {"file_path": WRITTEN_FILE.format(n=turn), "content": "x"}}
    else:
        command = (BIG_COMMAND if size == "big" else SMALL_COMMAND).format(n=turn)
    return {"name": "Bash", "input": {"command": command}}


class _Builder:
    """Walks a planned path's notes in order and writes the server's script, hooks and options."""

    def __init__(self, path: PlannedPath) -> None:
        self.path = path
        self.steps: dict[str, list[dict[str, Any]]] = {}
        self.summaries: list[dict[str, Any]] = []
        self.hooks: dict[str, list[str]] = {}
        self.reply: dict[str, Any] | None = None  # the last reply step, until reading_reply says what it is
        self.tool: dict[str, Any] | None = None  # the last tool_use block, until the gate and the run say which
        self.decision = "allowed"
        self.write = False  # the allowed call is a Write
        self.turn = 0  # the tool turn of the call being decided
        self.calls: dict[int, dict[str, Any]] = {}  # every tool turn's call, for a replay of it
        self.denials = 0  # fresh denied calls so far: each is another command, a repeat reuses the last
        self.budget = False
        self.abort_after: int | None = None
        self.abort_how = "close"
        self.resume: str | None = None
        self.mcp_starts: list[bool] = []
        self.compact: str | None = None  # the run is a manual compaction with these instructions

    def build(self, cli: bool, params: Mapping[str, Any]) -> RunPlan:
        hops = 0
        for index, step in enumerate(self.path.steps):
            model = MODELS[hops]
            for action in step.note or ():
                self.apply(index, model, action)
            if _handler(step) == "switch_to_fallback_model":
                hops += 1
        self.finish_reply()
        end: Facts = self.path.end
        scenario: dict[str, Any] = {
            "schema_version": 1,
            "scenario": f"{self.path.target[0]}-{self.path.target[1]}",
            "model": MODELS[0],
            "fallback_models": list(MODELS[1 : 1 + end.fallbacks]),
            "rules": [{"when": {"last_user_contains": SUMMARY_MARKER}, "times": 1, **s} for s in self.summaries],
            "models": {m: steps for m, steps in self.steps.items()},
            "otherwise": {"error": {"status": 400, "message": "unplanned request: the run left its planned path"}},
        }
        if not scenario["rules"]:
            del scenario["rules"]
        theta = (CLI_THETA if cli else THETA)[end.regime or "high"]
        options: dict[str, Any] = {
            "fallback_models": tuple(MODELS[1 : 1 + end.fallbacks]),
            "max_turns": end.max_turns if end.max_turns_exact else None,
            "max_retries": params["max_retries"],
            "max_budget_usd": BUDGET_USD if self.budget else None,
            "max_tokens": MAX_TOKENS,
            "escalated_max_tokens": ESCALATED_MAX_TOKENS if end.escalation else None,
            "auto_compact": end.auto_compact is not False,
            "auto_compact_threshold": theta,
            "params": {k: v for k, v in params.items() if k not in ("max_turns", "max_retries")},
            "compact": self.compact,
        }
        hooks = {e: acts for e, acts in self.hooks.items() if any(a != "accept" for a in acts)}
        if "SessionStart" in hooks and "UserPromptSubmit" not in hooks:
            hooks["UserPromptSubmit"] = self.hooks["UserPromptSubmit"]  # where the cancellation lands
        return RunPlan(
            path=self.path,
            scenario=scenario,
            options=options,
            hooks=hooks,
            abort_after=self.abort_after,
            abort_how=self.abort_how,
            resume=self.resume,
            mcp_starts=tuple(self.mcp_starts),
        )

    def apply(self, index: int, model: str, action: tuple[Any, ...]) -> None:
        kind = action[0]
        if kind == "hook":
            self.hooks.setdefault(action[1], []).append(action[2])
        elif kind in ("abort", "abort_at_start"):
            self.abort(index, kind)
        elif kind == "resume":
            self.resume = action[1]
        elif kind == "mcp":
            self.mcp_starts.append(action[1])
        elif kind == "compact":
            self.compact = COMPACT_INSTRUCTIONS
        elif kind == "main":
            self.main(model, action[1], action[2], action[3])
        elif kind == "read":
            self.read(action[1])
        elif kind == "gate":
            self.gate(action[1], action[2])
        elif kind == "result":
            self.set_tool(action[1])
        elif kind == "summary":
            self.summaries.append(_summary_step(action[1]))

    def abort(self, index: int, kind: str) -> None:
        """Where the run is interrupted: after ``index`` steps, closed, inside the prompt hooks, or at its start."""
        self.abort_after = index
        if kind == "abort_at_start":
            self.abort_how = "start"
        else:
            self.abort_how = "hooks" if self.path.steps[index].source == "submitting_prompt" else "close"

    def gate(self, decision: str, turn: int) -> None:
        """The gate's decision on the turn's call: allowed (a Bash command or a Write), denied, or a replay."""
        self.turn = turn
        if decision == "replay":  # the very call of that turn again
            self.decision, self.write = "replay", False
            if self.tool is not None:
                self.tool.clear()
                self.tool.update(json.loads(json.dumps(self.calls[self.turn])))
            return
        self.decision = "allowed" if decision == "write" else decision
        self.write = decision == "write"
        self.denials += self.decision == "denied"
        self.set_tool("small")

    def main(self, model: str, kind: str, status: int, message: str) -> None:
        self.finish_reply()
        steps = self.steps.setdefault(model, [])
        if kind == "error":
            steps.append({"error": {"status": status, "message": message}})
        elif kind == "error_wait":  # asks to be retried in an hour: over max_retry_after_s (60)
            steps.append({"error": {"status": status, "message": message, "headers": {"retry-after": "3600"}}})
        elif kind == "malformed":
            steps.append({"reply": {"content": [{"text": "x"}]}, "malformed": "json"})
        elif kind == "cut":
            steps.append(
                {"reply": {"content": [{"text": "first part"}, {"text": "second part"}]}, "cut_after_block": 1}
            )
        elif kind == "cut_body":
            steps.append({"reply": {"content": [{"text": "a whole body"}]}, "cut_body": True})
        elif kind == "cut_after_tool":
            self.tool = _tool_call("allowed", "small")
            content = [{"tool_use": self.tool}, {"text": "never sent whole"}]
            steps.append({"reply": {"content": content}, "cut_after_block": 1})
        else:  # a reply, whose meaning reading_reply says next
            self.reply = {"reply": {"content": [{"text": "done"}]}}
            steps.append(self.reply)

    def read(self, kind: str) -> None:
        assert self.reply is not None, "reading_reply without a reply"
        if kind == "asked_for_tools":
            self.tool = _tool_call("allowed", "small")
        self.reply["reply"] = _reply(kind, self.tool)
        if kind == "budget_spent":
            self.budget = True
        self.reply = None

    def set_tool(self, size: str) -> None:
        if self.tool is not None:
            self.tool.clear()
            self.tool.update(_tool_call(self.decision, size, self.denials, self.turn, self.write))
            self.calls[self.turn] = self.tool

    def finish_reply(self) -> None:
        self.reply = None  # a reply no step read (the run was interrupted first) stays a plain answer


def _summary_step(kind: str) -> dict[str, Any]:
    if kind == "ok":
        return {"reply": {"content": [{"text": "Summary: the user asked for outputs; they were printed."}]}}
    if kind == "too_long":  # no gap: a reactive compaction then keeps one more round
        return {"error": {"status": 400, "message": "prompt is too long"}}
    if kind == "transient":
        return {"error": {"status": 529}}
    return {"error": {"status": 403, "message": "summariser forbidden"}}


def build_run(path: PlannedPath, *, params: Mapping[str, Any], cli: bool = False) -> RunPlan:
    """The concrete run that takes ``path``: the server's scenario, options, hooks and abort point."""
    return _Builder(path).build(cli, params)


# ---- hooks and settings ---------------------------------------------------------------------------

_HOOK_SCRIPT = """#!/usr/bin/env bash
cat > /dev/null
dir={dir}
n=$(cat "$dir/count" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$dir/count"
case "$(sed -n "${{n}}p" "$dir/plan")" in
  block) echo "blocked by the plan" >&2; exit 2 ;;
  stop) echo '{{"continue": false, "stopReason": "stopped by the plan"}}' ;;
  notice) echo '{{"systemMessage": "{mark}"}}' ;;
  *) exit 0 ;;
esac
"""


def settings_json(plan: RunPlan, home: Path) -> str:
    """The run's settings: the permission rules, and one plan-driven hook per event that needs one."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, actions in plan.hooks.items():
        folder = home / f"hook-{event}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "plan").write_text("".join(f"{a}\n" for a in actions))
        script = folder / "hook.sh"
        script.write_text(_HOOK_SCRIPT.format(dir=shlex.quote(str(folder)), mark=ABORT_MARK))
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        entry: dict[str, Any] = {"hooks": [{"type": "command", "command": str(script)}]}
        if event in ("PreToolUse", "PostToolUse"):
            entry["matcher"] = "*"
        hooks[event] = [entry]
    return json.dumps({"permissions": {"allow": ALLOW}, "hooks": hooks})


def stored_session(kind: str, cwd: Path, home: Path) -> SessionPaths:
    """A session as an earlier run left it: a prompt and its answer, or a tool_use the run died before answering."""
    paths = SessionPaths(home=home / "sessions", cwd=cwd, session_id=str(uuid.uuid4()))
    answer: list[dict[str, Any]] = [{"type": "text", "text": "an earlier answer"}]
    if kind == "dangling":
        answer.append({"type": "tool_use", "id": "toolu_earlier", "name": "Bash", "input": {"command": "true"}})
    entries = [("user", "an earlier prompt"), ("assistant", answer)]
    paths.transcript.parent.mkdir(parents=True, exist_ok=True)
    parent = None
    with paths.transcript.open("w", encoding="utf-8") as out:
        for role, content in entries:
            entry = {"type": role, "uuid": str(uuid.uuid4()), "parentUuid": parent, "sessionId": paths.session_id}
            out.write(json.dumps({**entry, "message": {"role": role, "content": content}}) + "\n")
            parent = entry["uuid"]
    return paths


def agent_options(plan: RunPlan, cwd: Path, home: Path) -> AgentOptions:
    settings = load_settings(cwd=cwd, home=home, settings_arg=settings_json(plan, home))
    rules = settings.permissions.to_rules(cwd=cwd, disallowed_tools=HIDDEN_TOOLS)
    session: dict[str, Any] = {"home": home / "sessions"}
    if plan.resume is not None:
        stored = stored_session(plan.resume, cwd, home)
        session.update(session_id=stored.session_id, stored_as=stored, resume_from=stored, start_source="resume")
    planned = plan.options
    tools = (
        ToolSettings(mcp_servers=(mcp_server(plan.mcp_starts, home / "mcp"),)) if plan.mcp_starts else ToolSettings()
    )
    return AgentOptions(
        prompt="go",
        cwd=cwd,
        hooks=settings.hooks,
        compact=planned["compact"],
        request=RequestSettings(
            model=MODELS[0],
            retry_base_delay_s=0.001,
            **{k: planned[k] for k in ("fallback_models", "max_tokens", "escalated_max_tokens")},
        ),
        limits=Limits(**{k: planned[k] for k in ("max_turns", "max_retries", "max_budget_usd", "params")}),
        context=ContextSettings(
            auto_compact=planned["auto_compact"], auto_compact_threshold=planned["auto_compact_threshold"]
        ),
        tools=tools,
        permissions=PermissionSettings(rules=rules, mode="default"),
        session=SessionSettings(**session),
    )


def mcp_server(starts: Sequence[bool], folder: Path) -> McpServerConfig:
    """The test MCP server offering one tool (echo), its starts failing or working as ``starts`` says."""
    folder.mkdir(parents=True, exist_ok=True)
    fail = [n for n, ok in enumerate(starts, start=1) if not ok]
    (folder / "plan.json").write_text(json.dumps({"fail_starts": fail, "tools": ["echo"]}))
    return McpServerConfig(name="flaky", command=sys.executable, args=(str(FLAKY_SERVER), str(folder)))


# ---- driving a run ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Played:
    """What a run did: its reasons, its result and the server's log."""

    reasons: list[str]
    result: dict[str, Any]
    requests: Sequence[RecordedRequest]


async def _play(plan: RunPlan, cwd: Path, home: Path) -> Played:
    task = asyncio.current_task()
    assert task is not None

    class CancelAtMark:
        def observe(self, item: object) -> None:
            if isinstance(item, Notice) and ABORT_MARK in item.text:
                task.cancel()  # lands at the next await of the prompt hooks' effect: the UserPromptSubmit hook

    async with MockServer(parse_scenario(plan.scenario_yaml, "<planned scenario>")) as server:
        client = anthropic.AsyncAnthropic(api_key="test-key", base_url=server.url, max_retries=0)
        try:
            run = AgentRun(
                agent_options(plan, cwd, home),
                AnthropicBackend(client),
                observers=(CancelAtMark(),) if plan.abort_how == "hooks" else (),
            )
            events = run.events()
            if plan.abort_how == "start":
                task.cancel()  # lands at the run's first await: opening the session
            try:
                async for item in events:
                    if (
                        isinstance(item, Step)
                        and plan.abort_how == "close"
                        and plan.abort_after is not None
                        and len(run.steps) == plan.abort_after
                    ):
                        await events.aclose()  # the machine takes its abort edge from the state just entered
                        break
            except asyncio.CancelledError:
                task.uncancel()
        finally:
            await client.close()
        return Played(reasons=[s.reason for s in run.steps], result=run.result(), requests=list(server.requests))


def play_in_process(plan: RunPlan, cwd: Path, home: Path) -> Played:
    """Drive ``plan`` through :class:`AgentRun` and the real SDK against the embedded server."""
    return asyncio.run(_play(plan, cwd, home))


def play_cli(plan: RunPlan, cwd: Path, home: Path) -> Played:
    """Drive ``plan`` through ``queryloop run`` in a subprocess (stream-json), the server in this process."""
    options = plan.options
    args = [
        "-p",
        "go",
        "--model",
        MODELS[0],
        "--permission-mode",
        "default",
        "--settings",
        settings_json(plan, home),
        "--disallowed-tools",
        HIDDEN_TOOLS,
        "--max-retries",
        str(options["max_retries"]),
        "--max-output-tokens",
        str(options["max_tokens"]),
        "--auto-compact-threshold",
        f"{options['auto_compact_threshold'] * 100:g}",
    ]
    if options["fallback_models"]:
        args += ["--fallback-model", ",".join(options["fallback_models"])]
    if options["max_turns"] is not None:
        args += ["--max-turns", str(options["max_turns"])]
    if options["max_budget_usd"] is not None:
        args += ["--max-budget-usd", str(options["max_budget_usd"])]
    if options["escalated_max_tokens"] is not None:
        args += ["--escalated-max-output-tokens", str(options["escalated_max_tokens"])]
    if not options["auto_compact"]:
        args.append("--no-auto-compact")
    with MockApi(plan.scenario_yaml) as api:
        run = run_cli(args, api=api, cwd=cwd)
        requests = list(api.server.requests)
    result = run.result if run.lines and run.lines[-1].get("type") == "result" else {"stderr": run.stderr}
    return Played(reasons=run.all_reasons, result=result, requests=requests)
