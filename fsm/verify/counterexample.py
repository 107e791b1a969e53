"""Counterexamples you can run: a checker finding's shortest whole run, when a finite one shows it.

Owns what a run must do to show each kind of finding (docs/checker.md) and the search for
it. A :class:`Replayer` (the program's: the engine knows no server) may restrict it to
scriptable runs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from ..model.properties import broken_properties
from ..model.spec import RUN, MachineSpec, PropertySpec
from .paths import PlannedPath, PlannedStep, Realiser, plan_paths, shortest_run
from .report import CheckReport, Finding

__all__ = ["UNROLL", "MAX_NODES", "Counterexample", "Replayer", "counterexamples", "format_counterexample"]

UNROLL = 3
"""Times an unbounded cycle's loop is taken in its counterexample: enough to see it repeat."""

MAX_NODES = 30_000
"""Configurations one search may visit (about a second): a figure far above its ``max`` has no run that short."""


@attrs.frozen(kw_only=True)
class Counterexample:
    """A finding and the shortest run that shows it (``run`` None: ``why`` says why there is none)."""

    finding: Finding
    shows: str  # what the run shows, in a few words
    run: PlannedPath | None = None
    params: Mapping[str, Any] = attrs.field(factory=dict)
    why: str = ""  # no run: why; a run the replayer cannot script: why not
    replayable: bool = False  # the replayer can script every step of the run

    @property
    def reasons(self) -> tuple[str, ...]:
        return () if self.run is None else self.run.reasons


class Replayer(Protocol):
    """What makes counterexamples replayable: the steps it can script, and the files it writes."""

    def realiser(self, spec: MachineSpec, params: Mapping[str, Any] | None = None) -> Realiser[Any] | None:
        """A realiser refusing the steps it cannot script at ``params`` (None: the defaults), or None: it scripts
        none of this machine's."""

    def unscriptable(
        self, spec: MachineSpec, steps: Sequence[PlannedStep], params: Mapping[str, Any] | None = None
    ) -> str | None:
        """Why ``steps`` cannot be scripted at ``params`` (None: the defaults) — None: they can."""

    def write(self, spec: MachineSpec, example: Counterexample, path: Path) -> Path:
        """Write ``example``'s run as a file to replay at ``path`` (the name without a suffix); the file written."""


# ---- what each finding's run watches ---------------------------------------------------------

Watch = tuple[str, Hashable, Callable[[Any, PlannedStep], Any], Callable[[Any], bool]]  # shows, start, step, shown


def _figure_watch(spec: MachineSpec, name: str, most: int, per: str | None = None) -> Watch:
    effects = frozenset(spec.figures[name])
    weight = {s.name: 1 if s.effect in effects else 0 for s in spec.states}
    per = per or spec.step_scope

    def step(n: int, s: PlannedStep) -> int:
        # an edge ending the scope starts a new one (the state entered counts in it); nothing ends the run
        return min((0 if spec.ends_scope(s.transition, per) else n) + weight[s.dest], most + 1)

    return f"{name} reaches {most + 1} in one {per}", weight[spec.initial], step, lambda n: n > most


def _at_most_watch(spec: MachineSpec, counted: frozenset[str], per: str, limit: int) -> Watch:
    shows = f"{' / '.join(sorted(counted))} taken {limit + 1} times in one {per}"
    if limit == 0:  # the first step of one of them shows it, however deep it lies: searched guided
        return _any_edge_watch(spec, counted, shows)

    def step(n: int, s: PlannedStep) -> int:
        n = 0 if spec.ends_scope(s.transition, per) else n
        return min(n + (s.reason in counted), limit + 1)

    return shows, 0, step, lambda n: n > limit


def _streak_watch(spec: MachineSpec, prop: PropertySpec, reasons: frozenset[str]) -> Watch:
    """``prop``'s counter counted above its streak, or (``reasons`` reset it but break nothing) reset mid-streak.

    The streak is what the run-time watch counts: the counting steps since the last break
    (another outcome of a state it counts in, or exactly ``broken_by``). The value is (the
    counter above 0, the counter above the streak, shown): a break that leaves the counter
    above 0 puts it above the streak, and the next count shows it, as the runtime sees it.
    """
    name = str(prop.counter)
    counted = [t for t in spec.transitions if t.counter == name]
    if prop.reasons:
        breaks = frozenset(prop.reasons)
    else:
        events = {t.event for t in counted}
        sources = {t.source for t in counted}
        breaks = frozenset(t.reason for t in spec.transitions if t.source in sources and t.event not in events)
    resets = frozenset((t.source, t.reason) for t in spec.transitions if name in spec.resets_of(t))
    kept = reasons & breaks  # breaks that leave the counter as it was
    mid = reasons - breaks  # edges that reset it within a streak

    def step(v: tuple[bool, bool, bool], s: PlannedStep) -> tuple[bool, bool, bool]:
        positive, ahead, seen = v
        if seen:
            return v
        t = s.transition
        reset = (t.source, t.reason) in resets
        if t.counter == name:  # counted: the streak goes on; reset first, it starts again at 1
            return True, ahead and not reset, bool(kept) and ahead and not reset
        if not kept and s.reason in mid and positive:
            return False, False, True
        positive = positive and not reset
        return positive, positive if s.reason in breaks else ahead and positive, False

    if kept:
        shows = f"{name} counted again after a break left it above 0"
    else:
        shows = f"{' / '.join(sorted(mid))} taken with {name} above 0, mid-streak"
    return shows, (False, False, False), step, lambda v: v[2]


@attrs.frozen
class _Taken:
    """The step of an edge watch: whether one of the edges ``targets`` has been taken. A run that shows it is a
    run that takes one edge, which the guided search (:func:`~fsm.verify.paths.plan_paths`) finds however deep."""

    targets: frozenset[tuple[str, str]]  # (source, reason)

    def __call__(self, seen: bool, s: PlannedStep) -> bool:
        return seen or (s.source, s.reason) in self.targets


def _edge_watch(source: str, reason: str) -> Watch:
    return f"{reason} taken from {source}", False, _Taken(frozenset({(source, reason)})), bool


def _any_edge_watch(spec: MachineSpec, reasons: frozenset[str], shows: str) -> Watch:
    """One of the edges of ``reasons`` taken (from any state): an ``at_most`` of 0 broken by its first step."""
    targets = frozenset((t.source, t.reason) for t in spec.transitions if t.reason in reasons)
    return shows, False, _Taken(targets), bool


def _kept_watch(reasons: frozenset[str], kept: frozenset[str]) -> Watch:
    def step(seen: bool, s: PlannedStep) -> bool:
        return seen or (s.reason in reasons and any(s.counters.get(c, 0) > 0 for c in kept))

    return f"{' / '.join(sorted(reasons))} taken with {' or '.join(sorted(kept))} above 0", False, step, bool


def _first_watch(spec: MachineSpec, prop: PropertySpec) -> Watch:
    """A ``preceded`` property broken: a step into its states before any into ``by`` in its scope."""
    by, into = frozenset(prop.by), frozenset(prop.states)

    def step(v: tuple[bool, bool], s: PlannedStep) -> tuple[bool, bool]:
        seen, shown = v
        if shown:
            return v
        seen = s.dest in by or (seen and not spec.ends_scope(s.transition, prop.per))
        return seen, s.dest in into and not seen

    shows = f"{', '.join(sorted(into))} entered with no step into {', '.join(sorted(by))} this {prop.per}"
    return shows, (spec.initial in by, False), step, lambda v: v[1]


def _state_watch(states: frozenset[str]) -> Watch:
    def step(seen: bool, s: PlannedStep) -> bool:
        return seen or s.dest in states

    return f"{', '.join(sorted(states))} reached", False, step, bool


# ---- the searches ---------------------------------------------------------------------------


def counterexamples(
    spec: MachineSpec,
    report: CheckReport,
    *,
    replayer: Replayer | None = None,
    max_nodes: int = MAX_NODES,
) -> tuple[Counterexample, ...]:
    """A :class:`Counterexample` for every finding of ``report`` on ``spec`` (with or without a run).

    Runs are searched at the params the figures were checked at (``report.at``). With a
    ``replayer``, the shortest run it can script is preferred; when none exists the
    abstract shortest run is kept and ``why`` says which step cannot be scripted.
    """
    at = dict(report.at)
    realiser = replayer.realiser(spec, at) if replayer is not None else None
    broken = {b.message: b for b in broken_properties(spec)}
    props = {p.name: p for p in spec.properties}
    out: list[Counterexample] = []
    for finding in report.findings:
        watch, why = _watch_for(spec, finding, at, broken, props)
        if watch is None:
            out.append(Counterexample(finding=finding, shows="", params=at, why=why))
            continue
        out.append(_search(spec, finding, watch, at, realiser, replayer, max_nodes))
    return tuple(out)


def _watch_for(
    spec: MachineSpec,
    finding: Finding,
    at: Mapping[str, Any],
    broken: Mapping[str, Any],
    props: Mapping[str, PropertySpec],
) -> tuple[Watch | None, str]:
    """What a run showing ``finding`` watches, or None and why no run is searched for."""
    if finding.check == "figure":
        return _figure_finding(spec, finding, at)
    if finding.check == "property" and finding.message in broken:
        prop = props[broken[finding.message].name]
        make = _BY_KIND.get(prop.kind)
        found = make(spec, prop, finding, at) if make is not None else None
        return found or (None, f"no run is searched for a broken {prop.kind} property yet")
    if finding.check == "guard" and finding.states and finding.reasons:  # the edge taken, its guard not asked
        return _edge_watch(finding.states[0], finding.reasons[0]), ""
    if finding.check in ("termination", "progress_bound", "dead_end") and finding.states:
        return _state_watch(frozenset(finding.states)), ""
    if finding.trace:
        return None, "the exploration's own trace (printed with the finding) is the run"
    return None, "no finite run shows it (nothing a run does reaches it)"


def _figure_finding(spec: MachineSpec, finding: Finding, at: Mapping[str, object]) -> tuple[Watch | None, str]:
    """A figure above its ``max`` per step scope, or above its ``max_per_run``."""
    for name, most in spec.figure_max.items():
        if finding.message.startswith(f"figure {name!r} can reach") and f"per {spec.step_scope}" in finding.message:
            return _figure_watch(spec, name, most), ""
    for name, declared in spec.figure_max_per_run.items():
        if finding.message.startswith(f"figure {name!r} can reach") and "per run" in finding.message:
            run_most = spec.limit_of(declared, at)
            if run_most is None:
                return None, f"the limit {declared} is unset at these params"
            return _figure_watch(spec, name, run_most, per=RUN), ""
    return None, "the finding names no declared figure"


PropertyFinding = Callable[[MachineSpec, PropertySpec, Finding, Mapping[str, Any]], "tuple[Watch | None, str] | None"]


def _at_most_finding(
    spec: MachineSpec, prop: PropertySpec, finding: Finding, at: Mapping[str, object]
) -> tuple[Watch | None, str] | None:
    if prop.most is None:
        return None
    limit = spec.limit_of(prop.most, at)
    if limit is None:
        return None, f"the limit {prop.most} is unset at these params"
    return _at_most_watch(spec, frozenset(prop.reasons), prop.per, limit), ""


def _order_finding(
    spec: MachineSpec, prop: PropertySpec, finding: Finding, at: Mapping[str, object]
) -> tuple[Watch | None, str] | None:
    """The candidate tried before one the property puts first, taken where both are candidates."""
    listed = finding.reasons
    if len(listed) >= 2:
        rank = {r: i for i, r in enumerate(prop.reasons)}
        early = next((r for i, r in enumerate(listed) if any(rank[r] > rank[q] for q in listed[i + 1 :])), None)
        for (source, _), cands in spec.candidates().items():
            if early is not None and [t.reason for t in cands if t.reason in rank] == list(listed):
                return _edge_watch(source, early), ""
    return None, "no decision tries two of its reasons, so no run shows an order"


def _resets_finding(
    spec: MachineSpec, prop: PropertySpec, finding: Finding, at: Mapping[str, object]
) -> tuple[Watch | None, str] | None:
    """A counter the edge keeps, above 0 when it is taken."""
    taken = [t for t in spec.transitions if t.reason in finding.reasons]
    kept = {c for t in taken for c in prop.counters} - {c for t in taken for c in spec.resets_of(t)}
    return _kept_watch(frozenset(finding.reasons), frozenset(kept)), ""


def _in_a_row_finding(
    spec: MachineSpec, prop: PropertySpec, finding: Finding, at: Mapping[str, object]
) -> tuple[Watch | None, str] | None:
    if prop.counter is None:
        return None
    if not any(t.counter == prop.counter for t in spec.transitions):
        return None, f"no edge counts {prop.counter!r}, so no run counts it"
    return _streak_watch(spec, prop, frozenset(finding.reasons)), ""


def _guarded_finding(
    spec: MachineSpec, prop: PropertySpec, finding: Finding, at: Mapping[str, object]
) -> tuple[Watch | None, str] | None:
    """The edge taken where its guard does not decide it."""
    for t in spec.transitions:
        if t.reason in finding.reasons and prop.guard not in t.guards:
            return _edge_watch(t.source, t.reason), ""
    return None


def _preceded_finding(
    spec: MachineSpec, prop: PropertySpec, finding: Finding, at: Mapping[str, object]
) -> tuple[Watch | None, str] | None:
    """A step into its states with none into ``by`` since the scope began."""
    return _first_watch(spec, prop), ""


def _ends_finding(
    spec: MachineSpec, prop: PropertySpec, finding: Finding, at: Mapping[str, object]
) -> tuple[Watch | None, str] | None:
    """The edge taken: where it goes is the defect."""
    if not finding.states:
        return None
    return _edge_watch(finding.states[0], finding.reasons[0]), ""


_BY_KIND: Mapping[str, PropertyFinding] = {
    "at_most": _at_most_finding,
    "order": _order_finding,
    "resets": _resets_finding,
    "in_a_row": _in_a_row_finding,
    "guarded": _guarded_finding,
    "preceded": _preceded_finding,
    "ends": _ends_finding,
}
"""Per kind of property, the run a broken one is shown by (None: none is searched for)."""


class _Admitted:
    """The realiser of the abstract search (:class:`~fsm.verify.paths.Realiser`): every step may happen, but a
    run waits for a child (the ``pending`` guard of a ``children:`` entry True) only after its ``admitted`` edge
    started one, as a real run does. The YAML does not say which edges report a child, so one admitted stays
    admitted: a real run's waits are among these runs' (a guard free to the checker is not free here)."""

    def __init__(self, spec: MachineSpec) -> None:
        self.needs = {c.pending: c.admitted for c in spec.children if c.pending and c.admitted}
        self.starts = frozenset(self.needs.values())

    def start(self) -> frozenset[str]:
        return frozenset()

    def refuse(self, step: PlannedStep) -> str | None:
        return None

    def advance(self, data: frozenset[str], step: PlannedStep) -> Iterable[tuple[frozenset[str], object]]:
        if any(step.guards.get(g) and self.needs[g] not in data for g in self.needs):
            return ()  # a child waited for, none ever started
        if step.reason in self.starts and step.reason not in data:
            return ((data | {step.reason}, None),)
        return ((data, None),)


def _search(
    spec: MachineSpec,
    finding: Finding,
    watch: Watch,
    at: Mapping[str, object],
    realiser: Realiser[Any] | None,
    replayer: Replayer | None,
    max_nodes: int,
) -> Counterexample:
    shows = watch[0]
    cycle = finding if finding.check in ("termination", "progress_bound") else None
    finish = finding.check != "dead_end"  # a run into a state that cannot end stops there
    scripted_why = ""
    if realiser is not None:
        found = _shortest(spec, at, watch, realiser, max_nodes, cycle, finish)
        if isinstance(found, PlannedPath):
            return Counterexample(finding=finding, shows=shows, run=found, params=at, replayable=True)
        scripted_why = found
    if "search stopped" in scripted_why and finding.check == "figure":  # the run is long: so is the abstract one
        return Counterexample(finding=finding, shows=shows, params=at, why=_too_long(scripted_why, finding))
    found = _shortest(spec, at, watch, _Admitted(spec), max_nodes, cycle, finish)
    if realiser is not None and "search stopped" in scripted_why and _long(found, realiser) and cycle is None:
        # the scripted search gave up where the run is long (a loop of a dozen retries): look further for one
        scripted = _shortest(spec, at, watch, realiser, max_nodes * SCRIPTED_EFFORT, None, finish)
        if isinstance(scripted, PlannedPath):
            return Counterexample(finding=finding, shows=shows, run=scripted, params=at, replayable=True)
    if isinstance(found, str):
        return Counterexample(finding=finding, shows=shows, params=at, why=_too_long(found, finding))
    why = "" if replayer is None else _why_not(spec, found, at, realiser, replayer, scripted_why)
    return Counterexample(finding=finding, shows=shows + (" (a lasso)" if cycle else ""), run=found, params=at, why=why)


def _why_not(
    spec: MachineSpec,
    found: PlannedPath,
    at: Mapping[str, object],
    realiser: Realiser[Any] | None,
    replayer: Replayer,
    scripted_why: str,
) -> str:
    """Why the replayer cannot script the abstract run: the step that shows it, if that is what it refuses; else
    the first step it cannot script; else what the scripted search said."""
    refused = realiser.refuse(found.steps[found.taken_at]) if realiser is not None else None
    if refused is not None:
        return f"step {found.taken_at + 1} ({found.reasons[found.taken_at]}): {refused}"
    return replayer.unscriptable(spec, found.steps, at) or scripted_why


_PROOFS = ("no run can take it", "no realisable path takes it")  # what the guided search says when it proves none


SCRIPTED_EFFORT = 8
"""How many times :data:`MAX_NODES` a second search for a scripted run may visit, when the first gave up and
the abstract run is long (or not found either): a replayable run is worth the wait (a loop of a dozen
retries lies past the first give-up)."""

LONG_RUN = 8
"""Steps from which an abstract run counts as long: a scripted one may lie past the first search's give-up."""


def _long(found: PlannedPath | str, realiser: Realiser[Any]) -> bool:
    """Whether a scripted run may lie past the first search: the abstract one is long (or was not found
    either), and the replayer can script the step that shows it (if not, no longer search helps)."""
    if isinstance(found, str):
        return True
    return found.taken_at + 1 >= LONG_RUN and realiser.refuse(found.steps[found.taken_at]) is None


def _shortest(
    spec: MachineSpec,
    at: Mapping[str, object],
    watch: Watch,
    realiser: Realiser[Any],
    max_nodes: int,
    cycle: Finding | None,
    finish: bool,
) -> PlannedPath | str:
    """The shortest run ``realiser`` allows that shows ``watch``: an edge taken is searched for guided (A*,
    however deep it lies), any other watch (or an edge the guided search did not reach) breadth-first."""
    _, start, step, shown = watch
    if isinstance(step, _Taken) and cycle is None:
        plan = plan_paths(spec, params=at, realiser=realiser, targets=sorted(step.targets), max_nodes=max_nodes)
        if plan.paths:  # the run that shows it soonest, then the shortest whole run
            return min(plan.paths.values(), key=lambda p: (p.taken_at, len(p.steps), p.reasons))
        missing = list(dict.fromkeys(plan.missing.values()))
        if all(m.startswith(_PROOFS) for m in missing):  # proven: no search finds one
            return "; ".join(missing)
    return _run(spec, at, start, step, shown, realiser, max_nodes, cycle, finish)


def _too_long(why: str, finding: Finding) -> str:
    if "search stopped" not in why or finding.check != "figure":
        return why
    return f"{why}; a run past a large max is long (--explore finds the exact worst case at small caps)"


def _run(
    spec: MachineSpec,
    at: Mapping[str, object],
    start: Hashable,
    step: Callable[[Any, PlannedStep], Any],
    shown: Callable[[Any], bool],
    realiser: Realiser[Any] | None,
    max_nodes: int,
    cycle: Finding | None,
    finish: bool,
) -> PlannedPath | str:
    found = shortest_run(
        spec, params=at, start=start, step=step, shown=shown, realiser=realiser, max_nodes=max_nodes, finish=finish
    )
    if isinstance(found, str) or cycle is None:
        return found
    return _lasso(spec, at, found, cycle, realiser, max_nodes)


def _lasso(
    spec: MachineSpec,
    at: Mapping[str, object],
    entry: PlannedPath,
    cycle: Finding,
    realiser: Realiser[Any] | None,
    max_nodes: int,
) -> PlannedPath | str:
    """The run into the cycle, then a shortest loop through its edges back to where it entered, :data:`UNROLL` times."""
    head = entry.steps[: entry.taken_at + 1]
    into = head[-1].dest
    inner = frozenset(cycle.reasons)
    states = frozenset(cycle.states)
    prefix = tuple(s.reason for s in head)

    # the loop: a shortest path from `into` back to `into` over the cycle's own edges, taken UNROLL times
    def step(done: tuple[int, int], s: PlannedStep) -> tuple[int, int]:
        loops, length = done
        if s.reason not in inner or s.dest not in states or loops >= UNROLL:
            return (-1, 0)
        return (loops + 1, 0) if s.dest == into else (loops, length + 1)

    def on_path(s: PlannedStep, k: int) -> bool:
        return k < len(prefix) and s.reason == prefix[k]

    # replay the prefix exactly (each step matched by reason), then the loops
    def full(state: tuple[int, tuple[int, int]], s: PlannedStep) -> tuple[int, tuple[int, int]]:
        k, done = state
        if k < 0 or done[0] < 0:
            return (-1, (-1, 0))
        if k < len(prefix):
            return (k + 1, done) if on_path(s, k) else (-1, (-1, 0))
        return (k, step(done, s))

    looped = shortest_run(
        spec,
        params=at,
        start=(0, (0, 0)),
        step=full,
        shown=lambda v: v[0] == len(prefix) and v[1][0] >= UNROLL,
        realiser=realiser,
        max_nodes=max_nodes,
    )
    if isinstance(looped, str):
        return f"the cycle cannot be taken {UNROLL} times in a row after entering it ({looped})"
    return looped


# ---- text -----------------------------------------------------------------------------------


def format_counterexample(example: Counterexample) -> list[str]:
    """The lines ``check`` prints under a finding: the run's reasons in order, the one that shows it marked."""
    if example.run is None:
        return [f"      no counterexample: {example.why}"] if example.why else []
    run = example.run
    head = f"      shortest run that shows it ({example.shows}; {len(run.steps)} steps):"
    reasons = [f"*{r}*" if i == run.taken_at else r for i, r in enumerate(run.reasons)]
    lines = [head, "        " + " → ".join(reasons)]
    if example.why:
        lines.append(f"        not replayable: {example.why}")
    return lines
