"""Counterexamples as scenarios: how each event of the query loop is scripted for the embedded server.

Owns :data:`SCRIPT_BY_EVENT`, :data:`PLAIN_GUARDS` and :class:`ScenarioReplayer`, which keeps ``check``'s search to
runs a scenario can play. What each run fixes: docs/checker.md.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import yaml

from queryloop.fsm import Counterexample, MachineSpec, PlannedStep, TransitionSpec
from queryloop.handlers.context import RAPID_TURNS  # a compaction fewer tool turns after the last is rapid

from .scenario import parse_scenario

__all__ = [
    "BIG_CHARS",
    "BIG_FILES",
    "CHILD_HOLD_MS",
    "CHILD_MARK",
    "FALLBACK_MODELS",
    "MAX_GROUPS",
    "MODEL",
    "PLAIN_GUARDS",
    "QUICK_REQUESTS",
    "READ_FILE",
    "REPLY_PAD",
    "REPORT_HOLD_MS",
    "SCRIPT_BY_EVENT",
    "SMALL_MODEL",
    "SWITCH_MODEL",
    "SYSTEM_PAD",
    "TRACKED_GUARDS",
    "Script",
    "ScenarioReplayer",
    "scenario_of",
]

MODEL = "mock-primary"
SMALL_MODEL = "mock-small-context"
"""The primary model of a run that passes the auto-compact threshold (handlers/request/services/models.yaml: an
8 000-token window, 4 096 output tokens at most, so an effective window of 3 904 and a threshold of 3 123)."""
FALLBACK_MODELS = ("mock-fallback-1", "mock-fallback-2", "mock-fallback-3")
"""The fallback chain a scenario may declare, in the order a run switches to them (at most 3, as the CLI takes)."""
SWITCH_MODEL = "switch_to_fallback_model"
"""The edge handler that moves a run to the next model of its chain, for the rest of the run."""
CHAIN_GUARD = "fallback_available"  # decided by the chain a scenario declares, not by a plain run
CLI_PARAMS = ("max_turns", "max_retries")  # params a scenario's `cli` section sets; the rest replay at their defaults
READ_FILE = "counterexample.txt"  # the file a scripted tool call reads
BIG_FILES = ("big-1.txt", "big-2.txt")
"""The files the two Read calls of a tool turn read when a microcompaction must clear their results later."""
BIG_CHARS = 30_000
"""Each big file's characters: its Read result is cut at the tool's 30 000 characters, about 7 500 tokens, so the
two together are past the 10 000 tokens a microcompaction must free."""
FAST = {"retry-after-ms": "1"}  # a scripted failure's wait, scaled down from seconds to a millisecond
SYSTEM_PAD = (
    "This paragraph is padding appended to the system prompt of a replayed counterexample, so that the "
    "system prompt and the tools alone are over the auto-compact threshold of mock-small-context. "
) * 48
"""``cli.append_system_prompt`` of a run on :data:`SMALL_MODEL`: about 2 700 tokens, over the threshold (3 123) by
far with the default system prompt and tools (about 1 900 more)."""
REPLY_PAD = " " + ("This sentence pads a scripted reply, so that its round is over what a compaction keeps. " * 24)
"""Appended to each reply a run on :data:`SMALL_MODEL` keeps: about 540 tokens, over the 390 (a tenth of the
effective window) an auto-compaction keeps verbatim, so it keeps exactly the newest round."""
CHILD_MARK = "Who directs you: the agent that started you"
"""Opens every sub-agent's system prompt context (``queryloop.run.subagents.CHILD_CONTEXT``) and no parent's: the
rules that answer a sub-agent's requests are routed on it."""
CHILD_HOLD_MS = 1500
"""A sub-agent's answer is held this long: the parent's next steps (at most :data:`QUICK_REQUESTS` requests) come
first."""
REPORT_HOLD_MS = CHILD_HOLD_MS + 2500
"""A parent request whose tool turn must find the sub-agent ended is held this long."""
QUICK_REQUESTS = 4
"""Parent requests after a launch during which its sub-agent is surely still running (its answer is held)."""
MAX_GROUPS = 4
"""API-round groups the realiser counts exactly; past it, a decision that needs the count is refused."""
OLD_READS = 5
"""Tool turns a microcompaction needs: the oldest one's results are cleared after four more (it keeps the newest 4)."""
_LAUNCHES = "agent_launches"  # the counter of the Agent calls admitted in this tool turn
_REFUSED_CALL = "agent_launch_refused"  # the reason of an Agent call of agent_call_waiting that starts no agent
_REPORTS = ("agent_completed", "agent_failed")
_CLEARABLE = "old_results_clearable"  # the microcompaction's guard


@attrs.frozen(kw_only=True)
class Script:
    """How one event is made to happen.

    ``ambient``: a plain offline run takes it on its own (nothing scripted); ``answer``: the
    server answers the request with ``step``; ``reply``: a complete reply arrives, shaped by
    the ``shape`` event after it; ``shape``: the fields of that reply; ``call``: the tool
    turn's reply gets one more Agent call; ``tracked``: the run's tracked data decides whether
    it happens (its model's window, its sub-agent's answer and timing); ``never``: no
    scenario makes it happen (``why``).
    """

    kind: Literal["ambient", "answer", "reply", "shape", "call", "tracked", "never"]
    step: Mapping[str, Any] = attrs.field(factory=dict)
    why: str = ""


def _never(why: str) -> Script:
    return Script(kind="never", why=why)


def _reply(content: Sequence[Mapping[str, object]], stop_reason: str | None = None) -> Script:
    reply: dict[str, object] = {"content": content}
    if stop_reason is not None:
        reply["stop_reason"] = stop_reason
    return Script(kind="shape", step={"reply": reply})


def _error(status: int, message: str | None = None) -> Script:
    error: dict[str, object] = {"status": status, "headers": dict(FAST)}
    if message is not None:
        error["message"] = message
    return Script(kind="answer", step={"error": error})


_AMBIENT = Script(kind="ambient")
_TRACKED = Script(kind="tracked")
_TOO_LONG = "prompt is too long: {n} tokens > 1000 maximum"

SCRIPT_BY_EVENT: Mapping[str, Script] = {
    # session
    "session_new": _AMBIENT,
    "history_restored": _never("needs a stored session (--resume)"),
    "dangling_calls_found": _never("needs a stored session that died mid-call"),
    # mcp
    "tools_in_sync": _AMBIENT,
    "tool_list_changed": _never("needs an MCP server"),
    "servers_down": _never("needs an MCP server"),
    "servers_reconnected": _never("needs an MCP server"),
    "reconnect_failed": _never("needs an MCP server"),
    # hooks
    "prompt_accepted": _AMBIENT,
    "compaction_requested": _never("needs a /compact run"),
    "prompt_blocked": _never("needs a UserPromptSubmit hook"),
    "stopped_by_hook": _never("needs a hook answering continue: false"),
    "stop_accepted": _AMBIENT,
    "stop_blocked": _never("needs a Stop hook"),
    # context: the primary model's window decides (mock-primary: always within; mock-small-context: always over)
    "within_threshold": _TRACKED,
    "over_threshold": _TRACKED,
    "compacted": Script(kind="answer", step={"reply": {"content": [{"text": "Summary: a scripted summary."}]}}),
    "summary_too_long": _error(400, _TOO_LONG),
    "summary_failed_transiently": _error(529),
    "summary_failed": _error(403, "a scripted refusal of the summary request"),
    # request
    "replied": Script(kind="reply"),
    "failed_transiently": _error(500),
    "overloaded": _error(529),
    "model_unavailable": _error(404, "model: {model}"),
    "unauthorized": _error(401),
    "rejected": _error(400, "a scripted invalid request"),
    "context_overflowed": _error(400, _TOO_LONG),
    "media_too_large": _never("needs an image in the request"),
    "stream_broken": Script(kind="answer", step={"reply": {"content": [{"text": "cut"}]}, "cut_after_block": 0}),
    "stream_cut_after_tool_use": _never("a cut after a tool_use block is read as a tool turn by a non-streamed retry"),
    "response_malformed": _never("which fault reads as malformed depends on streaming; not scripted"),
    "elapsed": _AMBIENT,
    # output (each shapes the reply `replied` announced)
    "answered": _reply([{"text": "A scripted answer."}]),
    "answered_unstructured": _never("needs --json-schema, which a scenario's run does not pass"),
    "asked_for_tools": _reply([{"tool_use": {"name": "Read", "input": {"file_path": READ_FILE}}}]),
    "tool_use_malformed": _reply([{"text": "A tool call without its block."}], "tool_use"),
    "truncated": _reply([{"text": "A scripted answer cut"}], "max_tokens"),
    "thought_only": _reply([{"thinking": "Only a thought."}]),
    "refused": _reply([{"text": "No."}], "refusal"),
    "paused": _reply([{"text": "A scripted pause."}], "pause_turn"),
    "budget_spent": _never("needs --max-budget-usd"),
    # tools
    "tools_permitted": _AMBIENT,
    "tools_denied": _never("needs a permission rule that denies"),
    "tools_denied_again": _never("needs a permission rule that denies"),
    "tools_already_done": _never("needs a ledger from an earlier process"),
    "tools_finished": _AMBIENT,
    # agents: the tool turn's reply holds an Agent call; its child is answered by a rule (see the module's doc)
    "agent_call_waiting": Script(kind="call"),
    "agent_calls_admitted": _AMBIENT,
    "agent_completed": _TRACKED,
    "agent_failed": _TRACKED,
    "agent_timed_out": _never("needs a sub-agent past its time limit (30 minutes; a scenario cannot set it)"),
    "no_agent_report": _TRACKED,
    # every state
    "aborted": _never("needs an interrupt"),
}
"""What the server scripts for each event of ``machines/query_loop.yaml`` (an event missing here is not replayable)."""

TRACKED_GUARDS: Mapping[str, str] = {
    "fallback_available": "a fallback model of the chain the scenario declares remains",
    "can_compact": "the transcript has at least 2 API-round groups (auto-compaction is on)",
    "refill_thrashing": "the last two compactions each came under 3 tool turns after the one before, and so would this",
    "can_drop_oldest_group": "the part being summarised has at least 2 groups",
    "agents_running": "the run's background sub-agent has not been reported yet",
    "old_results_clearable": (
        f"the first context check after a tool turn whose reads came {OLD_READS - 1} tool turns after those of another,"
        " on a 200 000-token window (the reads of that older turn are made big)"
    ),
}
"""The guards the run's tracked data decides, and how (:class:`_Run`)."""

PLAIN_GUARDS: Mapping[str, bool | None] = {
    "escalation_configured": False,  # no escalated max_tokens
    "has_staged_collapses": False,  # the scripted tool results are far from the 4,000 characters a collapse needs
    "checkpoint_taken": False,  # the scripted calls are a Read and an Agent call
    "retry_after_over_cap": False,  # every scripted retry-after is 1 ms
    "structured_output_given": False,  # a scenario's run asks for no structured output (no --json-schema)
    "structured_output_attempts_spent": False,
    # a reactive compaction: whether one is tried, and what it keeps, reads the API's gap and every round's size
    "nothing_older_to_summarise": None,
    "can_keep_more_rounds": None,
    **dict.fromkeys(TRACKED_GUARDS),
}
"""Each guard's value in a plain offline run of a scenario; None: the run's tracked data decides it (TRACKED_GUARDS)
or, for the others, no scenario fixes it."""


def _refusal(step: PlannedStep) -> str | None:
    """Why no scenario makes ``step`` happen, whatever the run did before it (None: some run may)."""
    script = SCRIPT_BY_EVENT.get(step.event)
    if script is None:
        return f"event {step.event!r} has no script"
    if script.kind == "never":
        return f"event {step.event!r} {script.why}"
    if script.kind == "call" and step.reason != _REFUSED_CALL and step.counters.get(_LAUNCHES, 0) > 0:
        # the first admitted call of the turn runs until a later turn: a second would run beside it
        return "a second Agent call admitted in one tool turn (a scenario times one sub-agent at a time)"
    for guard, value in step.guards.items():
        if guard in TRACKED_GUARDS:
            continue  # the run's data decides it, along the run
        plain = PLAIN_GUARDS.get(guard)
        if plain is None:
            return f"guard {guard!r} must be {value}, which no scenario fixes"
        if plain != value:
            return f"guard {guard!r} must be {value}; a plain offline run has it {plain}"
    for counter, fires in step.open_caps.items():
        if not fires:
            return f"the unset cap of {counter!r} must stop it (set it with --set and a flag)"
    return None


@attrs.frozen
class _Chain:
    """The fallback chain along a run: the models switched to (``used``), the fewest the scenario
    must declare (``least``), and whether that number is fixed (a step needed none left)."""

    used: int = 0
    least: int = 0
    fixed: bool = False

    @property
    def declared(self) -> tuple[str, ...]:
        return FALLBACK_MODELS[: self.least]

    def after(self, step: PlannedStep) -> _Chain | str:
        """The chain after ``step`` (its guard read first, then its edge's switch), or why no chain makes it happen."""
        used, least, fixed = self.used, self.least, self.fixed
        available = step.guards.get(CHAIN_GUARD)
        if available is True:
            if fixed:
                return f"guard {CHAIN_GUARD!r} must be True, but an earlier step needed no fallback model left"
            if used >= len(FALLBACK_MODELS):
                return f"guard {CHAIN_GUARD!r} must be True, but all {len(FALLBACK_MODELS)} fallback models are used"
            least = max(least, used + 1)
        elif available is False:
            if least > used:
                return f"guard {CHAIN_GUARD!r} must be False, but an earlier step needed a fallback model left"
            fixed = True
        if _handler(step) == SWITCH_MODEL:
            if fixed or used >= len(FALLBACK_MODELS):
                return f"{step.reason!r} switches to the next fallback model, and none is left"
            used += 1
            least = max(least, used)
        if (used, least, fixed) == (self.used, self.least, self.fixed):
            return self
        return _Chain(used=used, least=least, fixed=fixed)


@attrs.frozen
class _Run:
    """What later steps of a scenario's run depend on: the chain, the primary model, the transcript's API-round
    groups, the compaction in progress and the ones before, and the background sub-agent."""

    chain: _Chain = _Chain()
    small: bool | None = None  # every check is over the threshold (on SMALL_MODEL, not switched); None: not fixed yet
    groups: int = 1  # API-round groups (1: the prompt's); MAX_GROUPS + 1: too many to follow; 0: not counted
    plan: int = 0  # groups of the part the compaction in progress summarises (0: none; -1: too many to follow)
    gaps: tuple[int, ...] = ()  # tool turns between the last two compactions and the ones before (capped at 3)
    since: int = 0  # tool turns since the last compaction or the start (capped at 3)
    agent: bool = False  # a background sub-agent was launched and not reported yet
    quick: int = 0  # parent requests since its launch (capped at QUICK_REQUESTS + 1)
    reads: int = 0  # tool turns in a row whose reads may be made big (on a 200 000-token window), capped at OLD_READS
    fresh: bool = False  # a tool turn came since the last context check within the threshold

    @property
    def model(self) -> str:
        """The model the run's requests go to now (a switch is for the rest of the run)."""
        if self.chain.used:
            return FALLBACK_MODELS[self.chain.used - 1]
        return SMALL_MODEL if self.small else MODEL

    @property
    def over(self) -> bool:
        """Every context check of the run is over the auto-compact threshold now."""
        return bool(self.small) and not self.chain.used


def _handler(step: PlannedStep) -> str:
    return _handler_of(step.transition)


def _handler_of(t: TransitionSpec) -> str:
    return (t.do or "").rpartition(".")[2]


def _more(groups: int) -> int:
    return min(groups + 1, MAX_GROUPS + 1)


# what each edge handler does to the groups (handlers/output, handlers/tools: a reply kept is a new group)
_NEW_GROUP = frozenset(
    {
        "record_tool_request",
        "record_answer",
        "continue_after_truncation",
        "report_malformed_tool_use",
        "continue_paused_turn",
    }
)
_TOOL_TURN = frozenset({"record_tool_results", "record_tool_results_at_turn_limit"})
_PLAN_ENDS = frozenset({"note_compaction_failure", "surface_prompt_too_long"})
_CLEAR = "clear_old_tool_results"  # the microcompaction's handler
# the steps that change what the run tracks, or read it (any other step leaves it as it was)
_TRACKED_HANDLERS = (
    _NEW_GROUP
    | _TOOL_TURN
    | _PLAN_ENDS
    | {
        "plan_compaction",
        "drop_oldest_group",
        "apply_compaction",
        "apply_manual_compaction",
        SWITCH_MODEL,
        _CLEAR,
    }
)
_TRACKED_EVENTS = frozenset(
    {"within_threshold", "over_threshold", "agent_call_waiting", "tools_finished", "no_agent_report", *_REPORTS}
)


class _Realiser:
    """What makes each step of a scenario's run happen, from what the run did before it (:class:`_Run`)."""

    def __init__(self, spec: MachineSpec) -> None:
        self.admits = "agent_call_waiting" in spec.events  # Agent calls are admitted one by one (admitting_agents)
        self._kinds: dict[tuple[str, str, tuple[str, ...]], tuple[bool, bool]] = {}

    def options(self, run: _Run, step: PlannedStep, *, refused: bool = True) -> list[tuple[_Run, Any]] | str:
        """Every run after ``step`` (with the model that answers it, if a request does), or why none (``refused``:
        whether to ask :func:`_refusal` first; the search has)."""
        why = _refusal(step) if refused else None
        if why is not None:
            return why
        answered, plain = self._kind(step)
        if plain and not (answered and run.agent):
            return [(run, run.model if answered else None)]  # the step changes nothing the run tracks
        chain = run.chain.after(step)
        if isinstance(chain, str):
            return chain
        after = run
        for stage in (self._context, self._guards, self._reads, self._agents, self._effect):  # each may refuse it
            staged = stage(after, step)
            if isinstance(staged, str):
                return staged
            after = staged
        if answered and after.agent:
            after = attrs.evolve(after, quick=min(after.quick + 1, QUICK_REQUESTS + 1))
        if chain is not run.chain:
            after = attrs.evolve(after, chain=chain)
            if chain.used and after.small:  # on a fallback model every check is within: as if the primary were
                after = attrs.evolve(after, small=False)
        if after.small is False and (after.since or after.gaps or after.groups):
            # read only at over_threshold, never on a 200 000-token window: a count of every round would tell apart
            # runs that differ in nothing a later step reads (and the searches would not end)
            after = attrs.evolve(after, since=0, gaps=(), groups=0)
        return [(after, run.model if answered else None)]

    def _kind(self, step: PlannedStep) -> tuple[bool, bool]:
        """Whether a request answers ``step``, and whether it is plain: no tracked guard, event or handler."""
        key = (step.source, step.reason, tuple(step.guards))  # the guards consulted, those of earlier candidates too
        found = self._kinds.get(key)
        if found is None:
            answered = SCRIPT_BY_EVENT[step.event].kind in ("answer", "shape")
            tracked = set(step.guards) & set(TRACKED_GUARDS)
            handler = _handler(step)
            plain = not tracked and step.event not in _TRACKED_EVENTS and handler not in _TRACKED_HANDLERS
            found = self._kinds[key] = (answered, plain)
        return found

    def _context(self, run: _Run, step: PlannedStep) -> _Run | str:
        """The threshold's decision: fixed by the primary model (at the first check), then by the current one."""
        if step.event not in ("within_threshold", "over_threshold"):
            return run
        over = step.event == "over_threshold"
        if run.small is None:
            return attrs.evolve(run, small=over)
        if run.over == over:
            return run
        if over:
            return f"{run.model}'s window is 200 000 tokens: no scripted transcript reaches its auto-compact threshold"
        return f"on {SMALL_MODEL} every request is over the auto-compact threshold (the system prompt is padded)"

    def _guards(self, run: _Run, step: PlannedStep) -> _Run | str:
        for guard, value in step.guards.items():
            if guard not in TRACKED_GUARDS or guard in (CHAIN_GUARD, "agents_running", _CLEARABLE):
                continue  # a plain run's (_refusal), the chain's, the agents' (_agents) and the reads' (_reads)
            held = self._guard(run, step, guard)
            if held is None and not run.groups:
                return f"guard {guard!r} reads the count of rounds, which a run on {MODEL} does not keep"
            if held is None:
                return f"guard {guard!r} reads a count of groups past {MAX_GROUPS}, too many to follow"
            if isinstance(held, str):
                return held
            if held != value:
                return f"guard {guard!r} must be {value}, but the run has it {held} ({TRACKED_GUARDS[guard]})"
        return run

    def _guard(self, run: _Run, step: PlannedStep, guard: str) -> bool | str | None:
        """The value the run gives ``guard`` (None: it reads a count too large to follow; a string: untracked)."""
        if guard == "can_compact":
            return run.groups >= 2 if run.groups else None
        if guard == "refill_thrashing":
            return len(run.gaps) >= 2 and all(g < RAPID_TURNS for g in run.gaps) and run.since < RAPID_TURNS
        if guard == "can_drop_oldest_group":
            return None if run.plan < 0 else run.plan >= 2
        return f"guard {guard!r} is not tracked"

    def _reads(self, run: _Run, step: PlannedStep) -> _Run | str:
        """The reads a microcompaction clears: a tool turn's reads are made big (two files of :data:`BIG_CHARS`,
        about 15 000 tokens) when, at the first check within the threshold after four more tool turns, the
        microcompaction must happen; the reads of those four stay small (else clearing would not pay)."""
        if step.event == "within_threshold":
            clears = bool(step.guards.get(_CLEARABLE))
            if clears and not (run.fresh and run.reads >= OLD_READS):
                return f"guard {_CLEARABLE!r} must be True, but {TRACKED_GUARDS[_CLEARABLE]} is not this check"
            return attrs.evolve(run, fresh=False, reads=0 if clears else run.reads)
        if _handler(step) in _TOOL_TURN:
            if run.over:  # on the small window a big read would overflow it: this turn's reads stay small
                return attrs.evolve(run, reads=0, fresh=True)
            return attrs.evolve(run, reads=min(run.reads + 1, OLD_READS), fresh=True)
        if _handler(step) in ("apply_compaction", "apply_manual_compaction"):
            return attrs.evolve(run, reads=0)
        return run

    def _agents(self, run: _Run, step: PlannedStep) -> _Run | str:
        """A launch (an Agent call of this tool turn), a report, or none: one background sub-agent at a time."""
        running = step.guards.get("agents_running")
        if step.event == "agent_call_waiting":
            if step.reason == _REFUSED_CALL:
                return run  # at the cap: the call gets an error, no agent starts
            if run.agent:
                return "a second background sub-agent while one runs (a scenario times one at a time)"
            return attrs.evolve(run, agent=True, quick=0)
        if step.event == "tools_finished" and running is not None:
            return self._launched(run, running)
        if running is not None and running != run.agent:
            return f"agents_running must be {running}, but the run has it {run.agent}"
        if step.source == "collecting_agent_reports":
            return _collected(run, step)
        if step.source == "awaiting_agents" and step.event in _REPORTS:
            if not run.agent:
                return "no background sub-agent to wait for"
            return attrs.evolve(run, agent=False, quick=0)
        return run

    def _launched(self, run: _Run, running: bool) -> _Run | str:
        """After a tool turn: whether a sub-agent runs (one this turn's reply started, if none is admitted apart)."""
        if running and not run.agent:
            if self.admits:
                return "agents_running must be True, but this tool turn admitted no Agent call"
            return attrs.evolve(run, agent=True, quick=0)  # this tool turn's reply held an Agent call
        if not running and run.agent:
            return "agents_running must be False, but the run's background sub-agent has not reported"
        return run

    def _effect(self, run: _Run, step: PlannedStep) -> _Run | str:
        """What the step's edge handler does to the groups and the compaction in progress."""
        handler = _handler(step)
        if handler in _NEW_GROUP:
            return attrs.evolve(run, groups=_more(run.groups))
        if handler in _TOOL_TURN:
            return attrs.evolve(run, since=min(run.since + 1, RAPID_TURNS))
        if handler == "plan_compaction":
            return attrs.evolve(run, plan=run.groups - 1 if 0 < run.groups <= MAX_GROUPS else -1)
        if handler == "drop_oldest_group":
            if run.plan < 2:
                return "no group of the summarised part to drop"
            return attrs.evolve(run, plan=run.plan - min(max(1, run.plan // 3), run.plan - 1))
        if handler in ("apply_compaction", "apply_manual_compaction"):
            # the summary, then the newest group (every round is over what is kept: REPLY_PAD)
            if run.plan == 0:
                return "a compaction applied with none planned"
            return attrs.evolve(run, groups=2, plan=0, gaps=(*run.gaps, run.since)[-2:], since=0)
        if handler in _PLAN_ENDS:
            return attrs.evolve(run, plan=0)
        return run


class _ScenarioRun:
    """The realiser of a scenario's run (:class:`~queryloop.fsm.verify.paths.Realiser`): a step happens only if
    the table scripts it, its fixed guards hold in a plain offline run, and the run's tracked data allows it."""

    def __init__(self, spec: MachineSpec, params: Mapping[str, object] | None = None) -> None:
        self.spec = spec
        self.realiser = _Realiser(spec)
        self.unplayable = _unplayable_params(spec, params or {})

    def start(self) -> _Run:
        return _Run()

    def lower_bound(self, target: tuple[str, str]) -> Callable[[_Run], int] | None:
        """For an edge that clears old results: the steps the tool turns it still needs take at least."""
        edges = [t for t in self.spec.transitions if (t.source, t.reason) == target and _CLEARABLE in t.guards]
        turns = [t for t in self.spec.transitions if _handler_of(t) in _TOOL_TURN]
        if not edges or not turns:
            return None
        ahead = _state_distances(self.spec)
        gap = min(ahead[a.dest].get(b.source, _FAR) + 1 for a in turns for b in turns)
        back = min(ahead[a.dest].get(target[0], _FAR) for a in turns) + 1  # to the check, and the edge itself

        def need(run: _Run) -> int:
            turns_left = max(0, OLD_READS - run.reads) if run.reads < OLD_READS or run.fresh else 1
            return 1 if turns_left == 0 else 1 + (turns_left - 1) * gap + back

        return need

    def refuse(self, step: PlannedStep) -> str | None:
        return self.unplayable or _refusal(step)

    def advance(self, data: _Run, step: PlannedStep) -> Iterable[tuple[_Run, object]]:
        found = self.realiser.options(data, step, refused=False)  # the search asked refuse() first
        return () if isinstance(found, str) else found  # the note: the model that answers the step


_FAR = 10**6  # a distance past any path: a state that does not lead there


def _state_distances(spec: MachineSpec) -> dict[str, dict[str, int]]:
    """The fewest edges from each state to each state it leads to (counters, guards and events all free)."""
    ahead: dict[str, set[str]] = {}
    for t in spec.transitions:
        ahead.setdefault(t.source, set()).add(t.dest)
    out: dict[str, dict[str, int]] = {}
    for start in spec.state_map:
        dist = {start: 0}
        frontier = [start]
        while frontier:
            layer = []
            for here in frontier:
                for n in sorted(ahead.get(here, ())):
                    if n not in dist:
                        dist[n] = dist[here] + 1
                        layer.append(n)
            frontier = layer
        out[start] = dist
    return out


def _collected(run: _Run, step: PlannedStep) -> _Run | str:
    """The report a tool turn finds, or none: timed by the requests since the launch (the child's answer is held)."""
    if step.event == "no_agent_report":
        if not run.agent or run.quick > QUICK_REQUESTS:
            return (
                f"the sub-agent may have ended by now ({QUICK_REQUESTS} parent requests after its launch): "
                "its end cannot be timed"
            )
        return run
    if step.event in _REPORTS:
        if not run.agent or run.quick == 0:
            return "a sub-agent cannot be timed to end within the tool turn that launched it"
        return attrs.evolve(run, agent=False, quick=0)
    return run


def _unplayable_params(spec: MachineSpec, params: Mapping[str, object]) -> str:
    """Why no scenario replays a run at ``params`` ("" when one may): a scenario's ``cli`` section sets only
    :data:`CLI_PARAMS`; every other param replays at the machine's default."""
    defaults = spec.param_defaults
    other = sorted(k for k, v in params.items() if k in defaults and k not in CLI_PARAMS and v != defaults[k])
    if not other:
        return ""
    shown = ", ".join(f"{k}={params[k]}" for k in other)
    return f"a scenario replays at the machine's defaults but for {', '.join(CLI_PARAMS)}; the run is at {shown}"


def _realise(spec: MachineSpec, steps: Sequence[PlannedStep]) -> list[_Run]:
    """The run's data before each step and after the last (ValueError: the first step no scenario plays)."""
    realiser = _Realiser(spec)
    layers: list[dict[_Run, _Run | None]] = [{_Run(): None}]
    for i, step in enumerate(steps, 1):
        layer: dict[_Run, _Run | None] = {}
        why = ""
        for run in layers[-1]:
            found = realiser.options(run, step)
            if isinstance(found, str):
                why = why or found
                continue
            for after, _ in found:
                layer.setdefault(after, run)
        if not layer:
            raise ValueError(f"step {i} ({step.reason}): {why}")
        layers.append(layer)
    back: _Run | None = next(iter(layers[-1]))
    runs: list[_Run] = []
    for layer in reversed(layers):
        assert back is not None
        runs.append(back)
        back = layer[back]
    runs.reverse()
    return runs


def _agent_call(n: int) -> dict[str, object]:
    prompt = f"[sub-agent {n}] Answer in one line."
    description = f"counterexample sub-agent {n}"
    return {
        "tool_use": {
            "name": "Agent",
            "input": {"description": description, "prompt": prompt, "run_in_background": True},
        }
    }


def _child_rule(n: int) -> dict[str, object]:
    """The rule answering sub-agent ``n``'s one request: an answer (its report: completed), held."""
    when = {"system_contains": CHILD_MARK, "first_user_contains": f"[sub-agent {n}]"}
    return {
        "when": when,
        "times": 1,
        "reply": {"content": [{"text": f"Sub-agent {n}'s scripted answer."}]},
        "delay_ms": CHILD_HOLD_MS,
    }


def _read_big(content: list[dict[str, Any]]) -> None:
    """A tool turn's reply ``content`` with its Read call replaced by two reading :data:`BIG_FILES`."""
    at = next(i for i, b in enumerate(content) if b.get("tool_use", {}).get("name") == "Read")
    content[at : at + 1] = [{"tool_use": {"name": "Read", "input": {"file_path": name}}} for name in BIG_FILES]


def _big_text() -> str:
    """A file of :data:`BIG_CHARS` characters in lines of 100 (its Read result is cut at the tool's limit)."""
    line = "This line pads a file a scripted tool turn reads, so that a microcompaction later clears its result."
    return "".join(f"{line[:99]}\n" for _ in range(BIG_CHARS // 100))


def _padded(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` (a reply the transcript keeps) with :data:`REPLY_PAD` in its first text or thinking block."""
    content = answer["reply"]["content"]
    first = content[0] if content else {}
    for key in ("text", "thinking"):
        if key in first:
            first[key] += REPLY_PAD
            return answer
    content.insert(0, {"text": REPLY_PAD.strip()})
    return answer


@attrs.frozen(kw_only=True)
class _Written:
    """What a run's scenario holds: each model's answers, the sub-agents' rules, and the run's end."""

    end: _Run
    primary: str
    answers: dict[str, list[dict[str, Any]]]
    rules: list[dict[str, Any]]
    agents: int
    big: bool = False  # a tool turn reads the big files (a microcompaction clears them)


class _Writer:
    """Writes a scenario's answers and rules step by step, along the run's data before and after each step."""

    def __init__(self, small: bool) -> None:
        self.small = small
        self.primary = SMALL_MODEL if small else MODEL
        self.answers: dict[str, list[dict[str, Any]]] = {self.primary: []}
        self.rules: list[dict[str, Any]] = []
        self.pending = False  # a reply was announced; the next event shapes it
        self.tool_reply: list[dict[str, Any]] = []  # the content of this tool turn's reply (an Agent call may join)
        self.last: dict[str, Any] = {}  # the last answer of the parent's requests (held when a report comes after)
        self.child: dict[str, Any] = {}
        self.agents = 0
        self.turns: list[list[dict[str, Any]]] = []  # each tool turn's reply content, in order
        self.big = False

    def step(self, i: int, step: PlannedStep, before: _Run, after: _Run) -> None:
        self._answer(i, step, before)
        self._agents(step, before, after)
        if _handler(step) in _TOOL_TURN:
            self.turns.append(self.tool_reply)
        if step.guards.get(_CLEARABLE):  # the turn OLD_READS back reads big files: now they are cleared
            _read_big(self.turns[-OLD_READS])
            self.big = True

    def _answer(self, i: int, step: PlannedStep, before: _Run) -> None:
        """The server's answer to the step's request, if one answers it."""
        script = SCRIPT_BY_EVENT[step.event]
        if self.pending and script.kind != "shape":
            raise ValueError(f"step {i + 1} ({step.reason}): a reply must be shaped by the event after it")
        if script.kind == "reply":
            self.pending = True
            return
        if script.kind not in ("shape", "answer"):
            return
        if script.kind == "shape" and not self.pending:
            raise ValueError(f"step {i + 1} ({step.reason}): {step.event!r} follows no reply")
        last = copy.deepcopy(dict(script.step))
        self.last = _padded(last) if script.kind == "shape" and self.small else last
        model = FALLBACK_MODELS[before.chain.used - 1] if before.chain.used else self.primary
        self.answers.setdefault(model, []).append(self.last)
        self.pending = False
        if step.event == "asked_for_tools":
            self.tool_reply = self.last["reply"]["content"]

    def _agents(self, step: PlannedStep, before: _Run, after: _Run) -> None:
        """An Agent call joining this tool turn's reply, its child's rule, and its report's timing."""
        launched = after.agent and not before.agent
        if step.event == "agent_call_waiting" or launched:
            self.agents += 1
            self.tool_reply.append(_agent_call(self.agents))
            if launched:
                self.child = _child_rule(self.agents)
                self.rules.append(self.child)
        if before.agent and not after.agent:  # its report
            if step.event == "agent_failed":
                del self.child["reply"]
                self.child["error"] = {"status": 400, "message": "a scripted invalid request of a sub-agent"}
            if step.source == "collecting_agent_reports":
                self.last["delay_ms"] = REPORT_HOLD_MS  # the tool turn after it finds the sub-agent ended


def _script(spec: MachineSpec, steps: Sequence[PlannedStep]) -> _Written:
    """Each model's scripted answers along ``steps``, the sub-agents' rules, and the run at the end (ValueError:
    the first step no scenario plays)."""
    runs = _realise(spec, steps)
    small = next((s.event == "over_threshold" for s in steps if s.source == "checking_context"), False)
    writer = _Writer(small)
    for i, step in enumerate(steps):
        writer.step(i, step, runs[i], runs[i + 1])
    return _Written(
        end=runs[-1],
        primary=writer.primary,
        answers=writer.answers,
        rules=writer.rules,
        agents=writer.agents,
        big=writer.big,
    )


def scenario_of(spec: MachineSpec, example: Counterexample, *, name: str) -> dict[str, object]:
    """``example``'s run as a scenario document (raises ValueError naming the first step no scenario plays).

    The primary model answers until the run switches; each fallback model it declares then
    answers the requests that go to it, in order; each sub-agent's one request is answered by a rule.
    """
    if example.run is None:
        raise ValueError(f"no run to write: {example.why}")
    unplayable = _unplayable_params(spec, example.params)
    if unplayable:
        raise ValueError(unplayable)
    written = _script(spec, example.run.steps)
    end, primary = written.end, written.primary
    reasons = " ".join(example.run.reasons)
    tools = ["Read", "Agent"] if written.agents else ["Read"]
    cli: dict[str, object] = {"prompt": "Replay the counterexample.", "allowed_tools": tools}
    if primary == SMALL_MODEL:
        cli["append_system_prompt"] = SYSTEM_PAD
    defaults = spec.param_defaults
    for param in CLI_PARAMS:  # a run searched at `--set max_turns=N` replays at N
        value = example.params.get(param)
        if param in defaults and value is not None and value != defaults[param]:
            cli[param] = value
    document: dict[str, object] = {
        "schema_version": 1,
        "scenario": name,
        "doc": f"counterexample of `queryloop check` on {spec.path}: {example.shows}. "
        f"Finding: {example.finding.message} Reasons: {reasons}",
        "model": primary,
    }
    declared = end.chain.declared
    if declared:
        document["fallback_models"] = list(declared)
    files = {READ_FILE: "read by the scripted tool call\n"}
    if written.big:
        files.update(dict.fromkeys(BIG_FILES, _big_text()))
    document.update({"cli": cli, "files": files})
    if written.rules:  # a sub-agent's further request (it diverged) fails it rather than eat the parent's answers
        diverged = {"status": 400, "message": "the counterexample's script is exhausted: the sub-agent diverged"}
        document["rules"] = [*written.rules, {"when": {"system_contains": CHILD_MARK}, "error": diverged}]
    document.update(
        {
            "models": {model: written.answers.get(model, []) for model in (primary, *declared)},
            "otherwise": {
                "error": {"status": 500, "message": "the counterexample's script is exhausted: the run diverged"}
            },
        }
    )
    return document


@attrs.define
class ScenarioReplayer:
    """The program's :class:`~queryloop.fsm.verify.counterexample.Replayer`: scenarios for the embedded server."""

    def realiser(self, spec: MachineSpec, params: Mapping[str, object] | None = None) -> _ScenarioRun:
        return _ScenarioRun(spec, params)

    def unscriptable(
        self, spec: MachineSpec, steps: Sequence[PlannedStep], params: Mapping[str, object] | None = None
    ) -> str | None:
        unplayable = _unplayable_params(spec, params or {})
        if unplayable:
            return unplayable
        try:
            _script(spec, steps)
        except ValueError as exc:
            return str(exc)
        return None

    def write(self, spec: MachineSpec, example: Counterexample, path: Path) -> Path:
        document = scenario_of(spec, example, name=path.name)
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
        out = path.with_suffix(".yaml")
        parse_scenario(text, str(out))  # a file the server cannot play is never written
        out.write_text(text, encoding="utf-8")
        return out
