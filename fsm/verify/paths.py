"""Shortest event paths through a machine: for every transition, the fewest steps from ``initial`` that take it.

A :class:`Realiser` keeps the search to steps real data can make happen. Runs nothing.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from ..model.spec import MachineSpec, TransitionSpec

__all__ = ["PathPlan", "PlannedPath", "PlannedStep", "Realiser", "plan_paths", "shortest_run"]

W = TypeVar("W", bound=Hashable)
A = TypeVar("A", bound=Hashable)

Edge = tuple[str, str]  # (source state, reason)


@attrs.frozen(kw_only=True)
class PlannedStep:
    """One step of a planned path: ``source --event--> dest`` by ``reason``, and what must hold for it."""

    source: str
    event: str
    reason: str
    dest: str
    transition: TransitionSpec  # the edge taken (its ``do`` says what the step does to the data)
    guards: Mapping[str, bool]  # every guard the engine evaluates for this step, and the value it must return
    open_caps: Mapping[str, bool]  # untracked counters consulted: whether the caller's cap must let the edge fire
    counters: Mapping[str, int]  # the counters before the step (those the search tracks)
    terminal: bool = False
    note: Any = None  # what the realiser chose to make the step happen (its own record)


@attrs.frozen(kw_only=True)
class PlannedPath:
    """A whole run that takes ``target`` (``(source, reason)``) at ``steps[taken_at]``, then ends."""

    target: Edge
    steps: tuple[PlannedStep, ...]
    taken_at: int
    end: Any = None  # the realiser's state after the last step

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(s.reason for s in self.steps)


@attrs.frozen(kw_only=True)
class PathPlan:
    """Every target's path, why each other target has none, and how many nodes the searches explored."""

    machine: str
    params: Mapping[str, Any]
    paths: Mapping[Edge, PlannedPath]
    missing: Mapping[Edge, str]  # target -> why no path was found
    explored: int


class Realiser(Protocol[W]):
    """What makes planned steps happen: a state of its own, advanced along the path.

    ``refuse`` rules a step out whatever the data — an event its state cannot produce
    with these counters — and says why (None: the step may happen); it sees only the
    counters the search tracks and must allow what it cannot rule out. ``advance``
    returns every way it can make ``step`` happen from ``data``: the state after it and
    a note (what it chose, e.g. the answer a server must give); none when it cannot,
    and the search looks for another path. A realiser may also have
    ``lower_bound(target) -> Callable[[W], int] | None``: at least how many steps its data still needs before
    ``target`` can be taken (a guide for the search toward it; it must never say more than the truth).
    """

    def start(self) -> W: ...

    def refuse(self, step: PlannedStep) -> str | None: ...

    def advance(self, data: W, step: PlannedStep) -> Iterable[tuple[W, Any]]: ...


class _Anything:
    """The realiser of the abstract search: every step can happen."""

    def start(self) -> None:
        return None

    def refuse(self, step: PlannedStep) -> str | None:
        return None

    def advance(self, data: None, step: PlannedStep) -> Iterable[tuple[None, object]]:
        return ((None, None),)


_Node = tuple[str, tuple[int, ...], Any]
_Link = tuple[PlannedStep, Any]  # the step and the realiser's note
_Outcome = tuple[TransitionSpec, tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]]


class _Moves:
    """The engine's choice of edge with free guards; counters outside ``tracked`` are free choices too."""

    def __init__(self, spec: MachineSpec, caps: Sequence[int | None], tracked: Iterable[str]) -> None:
        self.spec = spec
        self.names = tuple(c.name for c in spec.counters)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.caps = tuple(caps)
        self.tracked = frozenset(n for n in tracked if self.caps[self.index[n]] is not None)
        self.shown = tuple(i for i, n in enumerate(self.names) if n in self.tracked)
        self.groups = spec.candidates()
        self.terminals = frozenset(spec.terminals)
        self.events = {s.name: (*s.emits, spec.abort_event) for s in spec.states if not s.terminal}
        self.resets = {
            (t.source, t.reason): tuple(self.index[c] for c in spec.resets_of(t) if c in self.tracked)
            for t in spec.transitions
        }
        self._outcomes: dict[tuple[str, str, tuple[bool, ...]], tuple[_Outcome, ...]] = {}

    def _capped(self, t: TransitionSpec, counts: tuple[int, ...]) -> bool:
        if t.counter not in self.tracked:
            return False
        i = self.index[t.counter]
        return counts[i] >= (self.caps[i] or 0)

    def _free(self, t: TransitionSpec) -> bool:
        return t.counter is not None and t.counter not in self.tracked

    def outcomes(self, state: str, event: str, counts: tuple[int, ...]) -> tuple[_Outcome, ...]:
        """Every edge ``(state, event)`` can take at ``counts``, with the guard values that choose it."""
        cands = self.groups.get((state, event), ())
        capped = tuple(self._capped(t, counts) for t in cands)
        key = (state, event, capped)
        found = self._outcomes.get(key)
        if found is None:
            found = self._outcomes[key] = self._enumerate(cands, capped)
        return found

    def _enumerate(self, cands: Sequence[TransitionSpec], capped: Sequence[bool]) -> tuple[_Outcome, ...]:
        live = [t for t, c in zip(cands, capped, strict=True) if not c]
        guards = list(dict.fromkeys(g for t in live for g in t.guards))
        opens = list(dict.fromkeys(str(t.counter) for t in live if self._free(t)))
        out: dict[tuple[str, tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]], _Outcome] = {}
        # guards False first: among runs equally short, a search takes the plain edge before one a guard must
        # allow (a counterexample's abstract run asks no guard to hold that it does not need)
        for values in itertools.product((False, True), repeat=len(guards) + len(opens)):
            guard_value = dict(zip(guards, values[: len(guards)], strict=True))
            open_value = dict(zip(opens, values[len(guards) :], strict=True))
            chosen = _choose(live, guard_value, open_value)
            if chosen is not None:
                t, consulted, caps = chosen
                caps = tuple((c, v) for c, v in caps if self.caps[self.index[c]] is None)  # a caller's cap only
                out.setdefault((t.reason, consulted, caps), (t, consulted, caps))
        return tuple(out.values())

    def steps(self, state: str, counts: tuple[int, ...]) -> Iterator[tuple[PlannedStep, tuple[int, ...]]]:
        """Every step from ``(state, counts)`` with the counters after it."""
        shown = {self.names[i]: counts[i] for i in self.shown}
        for event in self.events.get(state, ()):
            for t, guards, opens in self.outcomes(state, event, counts):
                step = PlannedStep(
                    source=state,
                    event=event,
                    reason=t.reason,
                    dest=t.dest,
                    transition=t,
                    guards=dict(guards),
                    open_caps=dict(opens),
                    counters=shown,
                    terminal=t.dest in self.terminals,
                )
                yield step, self._count(t, counts)

    def _count(self, t: TransitionSpec, counts: tuple[int, ...]) -> tuple[int, ...]:
        resets = self.resets[(t.source, t.reason)]
        bumped = t.counter in self.tracked
        if not resets and not bumped:
            return counts
        values = list(counts)
        for r in resets:
            values[r] = 0
        if bumped:
            values[self.index[str(t.counter)]] += 1
        return tuple(values)


def _choose(
    live: Sequence[TransitionSpec], guard_value: Mapping[str, bool], open_value: Mapping[str, bool]
) -> _Outcome | None:
    """The first candidate that fires under these guard values, and the values the engine consulted."""
    guards: dict[str, bool] = {}
    opens: dict[str, bool] = {}
    for t in live:
        if t.counter is not None and t.counter in open_value:
            opens[t.counter] = open_value[t.counter]
            if not open_value[t.counter]:
                continue
        held = True
        for g in t.guards:
            guards[g] = guard_value[g]
            if not guard_value[g]:
                held = False
                break
        if held:
            return t, tuple(guards.items()), tuple(opens.items())
    return None


class _Search(Generic[W]):
    def __init__(self, spec: MachineSpec, params: Mapping[str, object], realiser: Realiser[W]) -> None:
        self.spec = spec
        self.realiser = realiser
        self.caps = tuple(spec.cap_of(c, params) for c in spec.counters)
        self.moves = _Moves(spec, self.caps, (c.name for c in spec.counters))
        self.start: _Node = (spec.initial, (0,) * len(self.caps), realiser.start())
        self.explored = 0

    def successors(self, node: _Node) -> Iterator[tuple[_Node, _Link]]:
        """Every node one step away, with the step (notes are attached on the way back)."""
        state, counts, data = node
        for step, after in self.moves.steps(state, counts):
            if self.realiser.refuse(step) is not None:
                continue
            for nxt, note in self.realiser.advance(data, step):
                yield (step.dest, after, nxt), (step, note)

    # ---- the relaxed machine: exact distances to the target, the search's guide -----------------
    def distances(
        self, target: Edge, transition: TransitionSpec
    ) -> tuple[dict[tuple[str, tuple[int, ...]], int], list[str]]:
        """Steps to take ``target`` (1 where it can be taken) in the machine tracking only its candidates' counters.

        The other counters are free choices there, so every real path is a path of this
        machine: its distances are lower bounds, the A* search's admissible guide. Also
        returns why the realiser refused the target step wherever the machine offers it.
        """
        relaxed = _Moves(self.spec, self.caps, self._deciding(transition))
        ranges = [range((self.caps[i] or 0) + 1) if i in relaxed.shown else range(1) for i in range(len(self.caps))]
        back: dict[tuple[str, tuple[int, ...]], list[tuple[str, tuple[int, ...]]]] = {}
        dist: dict[tuple[str, tuple[int, ...]], int] = {}
        refusals: list[str] = []
        for state in relaxed.events:
            for counts in itertools.product(*ranges):
                here = (state, counts)
                for step, after in relaxed.steps(state, counts):
                    refusal = self.realiser.refuse(step)
                    if refusal is not None:
                        if (step.source, step.reason) == target and refusal not in refusals:
                            refusals.append(refusal)
                        continue
                    if (step.source, step.reason) == target:
                        dist[here] = 1
                    elif step.dest in relaxed.events:
                        back.setdefault((step.dest, after), []).append(here)
        frontier = list(dist)
        while frontier:
            layer = []
            for node in frontier:
                for prev in back.get(node, ()):
                    if prev not in dist:
                        dist[prev] = dist[node] + 1
                        layer.append(prev)
            frontier = layer
        return dist, refusals

    # ---- A* toward one target, then the shortest way to an end -----------------------------------
    def toward(self, target: Edge, transition: TransitionSpec, max_nodes: int) -> tuple[list[PlannedStep], _Node] | str:
        dist, refusals = self.distances(target, transition)
        deciding = {self.moves.index[n] for n in self._deciding(transition)}
        bound = getattr(self.realiser, "lower_bound", None)  # optional: the steps its own data still needs
        need: Callable[[object], int] | None = bound(target) if bound is not None else None

        def h(node: _Node) -> int | None:
            found = dist.get((node[0], tuple(c if i in deciding else 0 for i, c in enumerate(node[1]))))
            return found if found is None or need is None else max(found, need(node[2]))

        h0 = h(self.start)
        if h0 is None:
            why = "; ".join(refusals) if refusals else "the events it needs never happen on the way to it"
            return f"no run can take it, whatever the data: {why}"
        seq = itertools.count()
        heap: list[tuple[int, int, int, _Node | None, int]] = [(h0, 0, next(seq), self.start, 0)]
        parent: dict[_Node, tuple[_Node, _Link] | None] = {self.start: None}
        best = {self.start: 0}
        goals: dict[int, tuple[_Node, _Link, _Node]] = {}
        closed: set[_Node] = set()
        while heap:
            _, _, key, node, g = heapq.heappop(heap)
            if node is None:
                before, link, child = goals[key]
                self.explored += len(parent)
                return [*_steps_to(parent, before), _noted(link)], child
            if node in closed:
                continue
            closed.add(node)
            if len(parent) > max_nodes:
                self.explored += len(parent)
                return f"no realisable path found within {max_nodes} explored nodes (the search stopped)"
            for child, link in self.successors(node):
                step = link[0]
                if (step.source, step.reason) == target:
                    mark = next(seq)
                    goals[mark] = (node, link, child)
                    heapq.heappush(heap, (g + 1, -(g + 1), mark, None, g + 1))
                    continue
                if step.terminal or child in closed:
                    continue
                rest = h(child)
                if rest is None or best.get(child, g + 2) <= g + 1:
                    continue
                best[child] = g + 1
                parent[child] = (node, link)
                heapq.heappush(heap, (g + 1 + rest, -(g + 1), next(seq), child, g + 1))
        self.explored += len(parent)
        return "no realisable path takes it (every path the machine allows was refused by the realiser)"

    def _deciding(self, transition: TransitionSpec) -> list[str]:
        cands = self.moves.groups[(transition.source, transition.event)]
        return [
            str(t.counter)
            for t in cands[: cands.index(transition) + 1]
            if t.counter is not None and t.counter in self.moves.tracked
        ]

    def finish(self, node: _Node, max_nodes: int) -> tuple[list[PlannedStep], _Node] | None:
        """A shortest realisable continuation from ``node`` to a terminal state, and the node it ends in."""
        if node[0] in self.moves.terminals:
            return [], node
        parent: dict[_Node, tuple[_Node, _Link] | None] = {node: None}
        frontier = [node]
        while frontier and len(parent) <= max_nodes:
            layer: list[_Node] = []
            for current in frontier:
                for child, link in self.successors(current):
                    if child in parent:
                        continue
                    parent[child] = (current, link)
                    if child[0] in self.moves.terminals:
                        self.explored += len(parent)
                        return _steps_to(parent, child), child
                    layer.append(child)
            frontier = layer
        self.explored += len(parent)
        return None


def _noted(link: _Link) -> PlannedStep:
    step, note = link
    return step if note is None else attrs.evolve(step, note=note)


def _steps_to(parent: Mapping[_Node, tuple[_Node, _Link] | None], node: _Node) -> list[PlannedStep]:
    steps: list[PlannedStep] = []
    entry = parent[node]
    while entry is not None:
        node, link = entry
        steps.append(_noted(link))
        entry = parent[node]
    steps.reverse()
    return steps


def plan_paths(
    spec: MachineSpec,
    *,
    params: Mapping[str, object] | None = None,
    realiser: Realiser[Any] | None = None,
    targets: Iterable[Edge] | None = None,
    max_nodes: int = 500_000,
) -> PathPlan:
    """For every target transition ``(source, reason)`` (default: all), a shortest realisable whole run taking it.

    Caps come from ``params`` over each param's ``check`` value (else its default), as
    the checker's. Without ``realiser`` every event and guard value is possible (the
    abstract paths); with one, only the steps it can make happen. Paths end with a
    shortest continuation to a terminal state. ``max_nodes`` bounds each search; a
    target without a path is listed in ``missing`` with the reason.
    """
    values = spec.param_check_values
    values.update(params or {})
    search: _Search[Any] = _Search(spec, values, realiser or _Anything())
    declared = {(t.source, t.reason): t for t in spec.transitions}
    wanted = list(declared) if targets is None else list(dict.fromkeys(targets))
    paths: dict[Edge, PlannedPath] = {}
    missing: dict[Edge, str] = {}
    for key in wanted:
        transition = declared.get(key)
        if transition is None:
            missing[key] = f"the machine declares no transition {key[1]!r} from {key[0]!r}"
            continue
        found = search.toward(key, transition, max_nodes)
        if isinstance(found, str):
            missing[key] = found
            continue
        steps, child = found
        finished = search.finish(child, max_nodes)
        if finished is None:
            missing[key] = "no realisable run ends after taking it"
            continue
        rest, last = finished
        paths[key] = PlannedPath(target=key, steps=(*steps, *rest), taken_at=len(steps) - 1, end=last[2])
    return PathPlan(machine=spec.name, params=values, paths=paths, missing=missing, explored=search.explored)


def shortest_run(
    spec: MachineSpec,
    *,
    params: Mapping[str, object],
    start: A,
    step: Callable[[A, PlannedStep], A],
    shown: Callable[[A], bool],
    realiser: Realiser[Any] | None = None,
    max_nodes: int = 200_000,
    finish: bool = True,
) -> PlannedPath | str:
    """The shortest run along which a watched value ``shown`` comes to hold, then a shortest way to an end.

    ``start`` is the value before the first step and ``step`` its value after each step (a
    counter of effects per turn, of edges per scope …); the search runs breadth-first over
    (state, counters at ``params``, realiser state, value). The path's ``taken_at`` is the
    step after which ``shown`` first holds; its ``target`` that step's edge. A string says
    why there is none (no run shows it, or the search stopped at ``max_nodes``). Without
    ``finish`` the run stops at that step (a run into a state that cannot end).
    """
    search: _Search[Any] = _Search(spec, params, realiser or _Anything())
    first = (search.start, start)
    if shown(start):
        return "it holds before any step"
    parent: dict[tuple[_Node, A], tuple[tuple[_Node, A], _Link] | None] = {first: None}
    frontier = [first]
    while frontier:
        layer: list[tuple[_Node, A]] = []
        for here in frontier:
            node, value = here
            for child, link in search.successors(node):
                after = step(value, link[0])
                key = (child, after)
                if key in parent:
                    continue
                parent[key] = (here, link)
                if shown(after):
                    steps: list[PlannedStep] = []
                    entry = parent[key]
                    while entry is not None:
                        back, taken = entry
                        steps.append(_noted(taken))
                        entry = parent[back]
                    steps.reverse()
                    target = (steps[-1].source, steps[-1].reason)
                    if not finish:
                        return PlannedPath(target=target, steps=tuple(steps), taken_at=len(steps) - 1, end=child[2])
                    finished = search.finish(child, max_nodes)
                    if finished is None:
                        return "no run ends after the steps that show it"
                    rest, last = finished
                    return PlannedPath(target=target, steps=(*steps, *rest), taken_at=len(steps) - 1, end=last[2])
                if not link[0].terminal:
                    layer.append(key)
            if len(parent) > max_nodes:
                return f"no run found within {max_nodes} explored nodes (the search stopped)"
        frontier = layer
    return "no run the machine allows shows it"
