"""What a scenario's run tracks along a path of the machine, and whether a scenario can make each step happen.

Owns the realiser ``check``'s search asks (:class:`ScenarioRun`) and :func:`realise`, which the writer follows;
not the table of scripts (replay_events) nor the scenario written (replay).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from queryloop.fsm import MachineSpec, PlannedStep, TransitionSpec
from queryloop.handlers.context import RAPID_TURNS  # a compaction fewer tool turns after the last is rapid

from .replay_events import (
    CHAIN_GUARD,
    CLEARABLE_GUARD,
    CLI_PARAMS,
    FALLBACK_MODELS,
    MAX_GROUPS,
    MODEL,
    OLD_READS,
    QUICK_REQUESTS,
    REFUSED_CALL,
    REPORTS,
    SCRIPT_BY_EVENT,
    SMALL_MODEL,
    SWITCH_MODEL,
    TRACKED_GUARDS,
    refusal_of,
)

__all__ = ["ScenarioRun", "TOOL_TURN_HANDLERS", "TrackedRun", "realise", "step_handler", "unplayable_params"]


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
        if step_handler(step) == SWITCH_MODEL:
            if fixed or used >= len(FALLBACK_MODELS):
                return f"{step.reason!r} switches to the next fallback model, and none is left"
            used += 1
            least = max(least, used)
        if (used, least, fixed) == (self.used, self.least, self.fixed):
            return self
        return _Chain(used=used, least=least, fixed=fixed)


@attrs.frozen
class TrackedRun:
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


def step_handler(step: PlannedStep) -> str:
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
TOOL_TURN_HANDLERS = frozenset({"record_tool_results", "record_tool_results_at_turn_limit"})
_PLAN_ENDS = frozenset({"note_compaction_failure", "surface_prompt_too_long"})
_CLEAR = "clear_old_tool_results"  # the microcompaction's handler
# the steps that change what the run tracks, or read it (any other step leaves it as it was)
_TRACKED_HANDLERS = (
    _NEW_GROUP
    | TOOL_TURN_HANDLERS
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
    {"within_threshold", "over_threshold", "agent_call_waiting", "tools_finished", "no_agent_report", *REPORTS}
)


class _Realiser:
    """What makes each step of a scenario's run happen, from what the run did before it (:class:`TrackedRun`)."""

    def __init__(self, spec: MachineSpec) -> None:
        self.admits = "agent_call_waiting" in spec.events  # Agent calls are admitted one by one (admitting_agents)
        self._kinds: dict[tuple[str, str, tuple[str, ...]], tuple[bool, bool]] = {}

    def options(
        self, run: TrackedRun, step: PlannedStep, *, refused: bool = True
    ) -> list[tuple[TrackedRun, Any]] | str:
        """Every run after ``step`` (with the model that answers it, if a request does), or why none (``refused``:
        whether to ask :func:`refusal_of` first; the search has)."""
        why = refusal_of(step) if refused else None
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
            handler = step_handler(step)
            plain = not tracked and step.event not in _TRACKED_EVENTS and handler not in _TRACKED_HANDLERS
            found = self._kinds[key] = (answered, plain)
        return found

    def _context(self, run: TrackedRun, step: PlannedStep) -> TrackedRun | str:
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

    def _guards(self, run: TrackedRun, step: PlannedStep) -> TrackedRun | str:
        for guard, value in step.guards.items():
            if guard not in TRACKED_GUARDS or guard in (CHAIN_GUARD, "agents_running", CLEARABLE_GUARD):
                continue  # a plain run's (refusal_of), the chain's, the agents' (_agents) and the reads' (_reads)
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

    def _guard(self, run: TrackedRun, step: PlannedStep, guard: str) -> bool | str | None:
        """The value the run gives ``guard`` (None: it reads a count too large to follow; a string: untracked)."""
        if guard == "can_compact":
            return run.groups >= 2 if run.groups else None
        if guard == "refill_thrashing":
            return len(run.gaps) >= 2 and all(g < RAPID_TURNS for g in run.gaps) and run.since < RAPID_TURNS
        if guard == "can_drop_oldest_group":
            return None if run.plan < 0 else run.plan >= 2
        return f"guard {guard!r} is not tracked"

    def _reads(self, run: TrackedRun, step: PlannedStep) -> TrackedRun | str:
        """The reads a microcompaction clears: a tool turn's reads are made big (two files of :data:`BIG_CHARS`,
        about 15 000 tokens) when, at the first check within the threshold after four more tool turns, the
        microcompaction must happen; the reads of those four stay small (else clearing would not pay)."""
        if step.event == "within_threshold":
            clears = bool(step.guards.get(CLEARABLE_GUARD))
            if clears and not (run.fresh and run.reads >= OLD_READS):
                return (
                    f"guard {CLEARABLE_GUARD!r} must be True, but {TRACKED_GUARDS[CLEARABLE_GUARD]} is not this check"
                )
            return attrs.evolve(run, fresh=False, reads=0 if clears else run.reads)
        if step_handler(step) in TOOL_TURN_HANDLERS:
            if run.over:  # on the small window a big read would overflow it: this turn's reads stay small
                return attrs.evolve(run, reads=0, fresh=True)
            return attrs.evolve(run, reads=min(run.reads + 1, OLD_READS), fresh=True)
        if step_handler(step) in ("apply_compaction", "apply_manual_compaction"):
            return attrs.evolve(run, reads=0)
        return run

    def _agents(self, run: TrackedRun, step: PlannedStep) -> TrackedRun | str:
        """A launch (an Agent call of this tool turn), a report, or none: one background sub-agent at a time."""
        running = step.guards.get("agents_running")
        if step.event == "agent_call_waiting":
            if step.reason == REFUSED_CALL:
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
        if step.source == "awaiting_agents" and step.event in REPORTS:
            if not run.agent:
                return "no background sub-agent to wait for"
            return attrs.evolve(run, agent=False, quick=0)
        return run

    def _launched(self, run: TrackedRun, running: bool) -> TrackedRun | str:
        """After a tool turn: whether a sub-agent runs (one this turn's reply started, if none is admitted apart)."""
        if running and not run.agent:
            if self.admits:
                return "agents_running must be True, but this tool turn admitted no Agent call"
            return attrs.evolve(run, agent=True, quick=0)  # this tool turn's reply held an Agent call
        if not running and run.agent:
            return "agents_running must be False, but the run's background sub-agent has not reported"
        return run

    def _effect(self, run: TrackedRun, step: PlannedStep) -> TrackedRun | str:
        """What the step's edge handler does to the groups and the compaction in progress."""
        handler = step_handler(step)
        if handler in _NEW_GROUP:
            return attrs.evolve(run, groups=_more(run.groups))
        if handler in TOOL_TURN_HANDLERS:
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


class ScenarioRun:
    """The realiser of a scenario's run (:class:`~queryloop.fsm.verify.paths.Realiser`): a step happens only if
    the table scripts it, its fixed guards hold in a plain offline run, and the run's tracked data allows it."""

    def __init__(self, spec: MachineSpec, params: Mapping[str, object] | None = None) -> None:
        self.spec = spec
        self.realiser = _Realiser(spec)
        self.unplayable = unplayable_params(spec, params or {})

    def start(self) -> TrackedRun:
        return TrackedRun()

    def lower_bound(self, target: tuple[str, str]) -> Callable[[TrackedRun], int] | None:
        """For an edge that clears old results: the steps the tool turns it still needs take at least."""
        edges = [t for t in self.spec.transitions if (t.source, t.reason) == target and CLEARABLE_GUARD in t.guards]
        turns = [t for t in self.spec.transitions if _handler_of(t) in TOOL_TURN_HANDLERS]
        if not edges or not turns:
            return None
        ahead = _state_distances(self.spec)
        gap = min(ahead[a.dest].get(b.source, _FAR) + 1 for a in turns for b in turns)
        back = min(ahead[a.dest].get(target[0], _FAR) for a in turns) + 1  # to the check, and the edge itself

        def need(run: TrackedRun) -> int:
            turns_left = max(0, OLD_READS - run.reads) if run.reads < OLD_READS or run.fresh else 1
            return 1 if turns_left == 0 else 1 + (turns_left - 1) * gap + back

        return need

    def refuse(self, step: PlannedStep) -> str | None:
        return self.unplayable or refusal_of(step)

    def advance(self, data: TrackedRun, step: PlannedStep) -> Iterable[tuple[TrackedRun, object]]:
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


def _collected(run: TrackedRun, step: PlannedStep) -> TrackedRun | str:
    """The report a tool turn finds, or none: timed by the requests since the launch (the child's answer is held)."""
    if step.event == "no_agent_report":
        if not run.agent or run.quick > QUICK_REQUESTS:
            return (
                f"the sub-agent may have ended by now ({QUICK_REQUESTS} parent requests after its launch): "
                "its end cannot be timed"
            )
        return run
    if step.event in REPORTS:
        if not run.agent or run.quick == 0:
            return "a sub-agent cannot be timed to end within the tool turn that launched it"
        return attrs.evolve(run, agent=False, quick=0)
    return run


def unplayable_params(spec: MachineSpec, params: Mapping[str, object]) -> str:
    """Why no scenario replays a run at ``params`` ("" when one may): a scenario's ``cli`` section sets only
    :data:`CLI_PARAMS`; every other param replays at the machine's default."""
    defaults = spec.param_defaults
    other = sorted(k for k, v in params.items() if k in defaults and k not in CLI_PARAMS and v != defaults[k])
    if not other:
        return ""
    shown = ", ".join(f"{k}={params[k]}" for k in other)
    return f"a scenario replays at the machine's defaults but for {', '.join(CLI_PARAMS)}; the run is at {shown}"


def realise(spec: MachineSpec, steps: Sequence[PlannedStep]) -> list[TrackedRun]:
    """The run's data before each step and after the last (ValueError: the first step no scenario plays)."""
    realiser = _Realiser(spec)
    layers: list[dict[TrackedRun, TrackedRun | None]] = [{TrackedRun(): None}]
    for i, step in enumerate(steps, 1):
        layer: dict[TrackedRun, TrackedRun | None] = {}
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
    back: TrackedRun | None = next(iter(layers[-1]))
    runs: list[TrackedRun] = []
    for layer in reversed(layers):
        assert back is not None
        runs.append(back)
        back = layer[back]
    runs.reverse()
    return runs
