"""The decomposition: a figure's worst case per turn and per run from the machine's structure, over its
strongly connected components, each cycle charged to the counters that bound it (docs/machines.md).

Generic over :class:`~fsm.verify.algebra.Algebra`: the same walk gives numbers or expressions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import attrs
import networkx as nx

from ..model.spec import MachineSpec, TransitionSpec
from .algebra import Algebra, V

__all__ = ["Memo", "effective_resets", "figure", "figure_effects"]


def figure_effects(spec: MachineSpec) -> dict[str, frozenset[str]]:
    figures = {name: frozenset(effects) for name, effects in spec.figures.items()}
    for s in spec.states:
        if s.effect:
            figures.setdefault(s.effect, frozenset({s.effect}))
    return figures


@attrs.define
class Memo:
    """What the decomposition finds from the structure alone, kept across the figures of one
    machine: a figure changes only the weights, so each edge set is decomposed once."""

    spec: MachineSpec
    splits: dict[tuple[str, ...], _Split] = attrs.field(factory=dict)
    parts: dict[tuple[str, ...], _Part] = attrs.field(factory=dict)
    never_reset: frozenset[str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.never_reset = frozenset(c.name for c in self.spec.counters) - effective_resets(self.spec)

    def split(self, edges: list[TransitionSpec], nodes: list[str]) -> _Split:
        key = (*nodes, "|", *(t.reason for t in edges))
        found = self.splits.get(key)
        if found is None:
            found = self.splits[key] = _Split.of(edges, nodes)
        return found

    def part(self, inner: list[TransitionSpec]) -> _Part:
        key = tuple(t.reason for t in inner)
        found = self.parts.get(key)
        if found is None:
            found = self.parts[key] = _Part.of(self.spec, inner)
        return found


def effective_resets(spec: MachineSpec) -> frozenset[str]:
    """The counters some edge resets where they may be above 0: a run budget is decided by what a reset does,
    not by where one is written. A reset on an edge leaving a state no walk reaches from an edge counting the
    counter without a reset of it in between (the counter is always 0 there) changes no run."""
    out: set[str] = set()
    for c in spec.counters:
        resetting = [t for t in spec.transitions if c.name in spec.resets_of(t)]
        if resetting and _above_zero_at(spec, c.name) & {t.source for t in resetting}:
            out.add(c.name)
    return frozenset(out)


def _above_zero_at(spec: MachineSpec, counter: str) -> set[str]:
    """The states where ``counter`` may be above 0: reached from an edge that counts it, through edges that do
    not reset it (an edge that counts it leaves it at 1 or more, whatever it resets)."""
    seen = {t.dest for t in spec.transitions if t.counter == counter}
    todo = list(seen)
    while todo:
        here = todo.pop()
        for t in spec.transitions:
            if t.source == here and t.dest not in seen and counter not in spec.resets_of(t):
                seen.add(t.dest)
                todo.append(t.dest)
    return seen


@attrs.frozen
class _Split:
    """An edge set's strongly connected components: their states (in node order), the edges inside
    each, the edges entering each from another, and the components in topological order."""

    comp_of: Mapping[str, int]
    states: Mapping[int, list[str]]
    inner: Mapping[int, list[TransitionSpec]]
    entering: Mapping[int, list[tuple[str, str]]]
    topo: list[int]

    @classmethod
    def of(cls, edges: list[TransitionSpec], nodes: list[str]) -> _Split:
        g: nx.MultiDiGraph[str] = nx.MultiDiGraph()
        g.add_nodes_from(nodes)
        for t in edges:
            g.add_edge(t.source, t.dest, key=t.reason)
        dag = nx.condensation(g)
        members: Mapping[int, set[str]] = nx.get_node_attributes(dag, "members")
        comp_of: Mapping[str, int] = dag.graph["mapping"]
        inner: dict[int, list[TransitionSpec]] = {comp: [] for comp in members}
        entering: dict[int, list[tuple[str, str]]] = {}
        for t in edges:
            if comp_of[t.source] == comp_of[t.dest]:
                inner[comp_of[t.source]].append(t)
            else:
                entering.setdefault(comp_of[t.dest], []).append((t.source, t.dest))
        return cls(
            comp_of=comp_of,
            states={comp: [n for n in nodes if n in states] for comp, states in members.items()},
            inner=inner,
            entering=entering,
            topo=list(nx.topological_sort(dag)),
        )


@attrs.frozen
class _Part:
    """One component's bounding edges (counting a counter no edge inside resets), the plain
    self-loops among them, the rest, and the edges left without them."""

    bounding: list[TransitionSpec]
    plain: list[TransitionSpec]
    rest: list[TransitionSpec]
    residual: list[TransitionSpec]

    @classmethod
    def of(cls, spec: MachineSpec, inner: list[TransitionSpec]) -> _Part:
        reset_inside: set[str] = set()
        for t in inner:
            reset_inside |= spec.resets_of(t)
        bounding = [t for t in inner if t.counter is not None and t.counter not in reset_inside]
        plain = [t for t in bounding if t.source == t.dest and not spec.resets_of(t)]
        return cls(
            bounding=bounding,
            plain=plain,
            rest=[t for t in bounding if t not in plain],
            residual=[t for t in inner if t not in bounding],
        )


def figure(
    spec: MachineSpec, effects: frozenset[str], alg: Algebra[V], memo: Memo, *, per_run: bool
) -> tuple[V, V | None]:
    """The figure of ``effects`` per turn, and per run (``None`` unless ``per_run``)."""
    weight = {s.name: 1 if s.effect in effects else 0 for s in spec.states}
    nodes = list(spec.state_map)
    # An edge whose counter's cap is 0 is never taken: it joins nothing, not even a cycle. (A number at given
    # caps knows which caps are 0 there; an expression knows only the literal ones.)
    taken = [t for t in spec.transitions if alg.fires(t)]
    step_edges = [t for t in taken if not t.progress]
    starts = list(dict.fromkeys([spec.initial, *(t.dest for t in taken if t.progress)]))
    pairs = _pairs(spec, step_edges, nodes, weight, alg, memo)
    per_step = alg.max(value for (v, _), value in pairs.items() if v in starts)
    if not per_run:
        return per_step, None
    pairs = _pairs(spec, taken, nodes, weight, alg, memo)
    whole = alg.max(value for (v, _), value in pairs.items() if v == spec.initial)
    # Also: a run is at most 1 + (progress steps) turns, when every progress edge is counted by a
    # counter nothing resets (the sum of those caps bounds the progress steps).
    counted = [t.counter for t in spec.transitions if t.progress]
    if all(c is not None and c in memo.never_reset for c in counted):
        steps = alg.add(alg.cap(spec.counter_map[c]) for c in dict.fromkeys(counted) if c is not None)
        return per_step, alg.min((whole, alg.mul(alg.add((alg.const(1), steps)), per_step)))
    return per_step, whole


def _pairs(
    spec: MachineSpec,
    edges: list[TransitionSpec],
    nodes: list[str],
    weight: Mapping[str, int],
    alg: Algebra[V],
    memo: Memo,
) -> dict[tuple[str, str], V]:
    """``(v, w) ->`` a bound of the weight of a walk from ``v`` to ``w`` over ``edges`` (both ends counted);
    a pair no walk joins is absent."""
    split = memo.split(edges, nodes)
    inside: dict[int, dict[str, list[tuple[str, V]]]] = {}  # component -> v -> [(w, pair bound)]
    for comp, order in split.states.items():
        inner = split.inner[comp]
        pairs = (
            _component_pairs(spec, inner, order, weight, alg, memo)
            if inner
            else {(order[0], order[0]): alg.const(weight[order[0]])}
        )
        by_start: dict[str, list[tuple[str, V]]] = {}
        for (a, w), value in pairs.items():
            by_start.setdefault(a, []).append((w, value))
        inside[comp] = by_start
    rank = {comp: i for i, comp in enumerate(split.topo)}
    out: dict[tuple[str, str], V] = {}
    for v in nodes:
        reach: dict[str, V] = dict(inside[split.comp_of[v]].get(v, ()))
        for comp in split.topo[rank[split.comp_of[v]] + 1 :]:
            into: dict[str, list[V]] = {}
            for x, y in split.entering.get(comp, ()):
                if x in reach:
                    into.setdefault(y, []).append(reach[x])
            if not into:
                continue
            found: dict[str, list[V]] = {}
            for a, values in into.items():
                best = alg.max(values)
                for w, value in inside[comp].get(a, ()):
                    found.setdefault(w, []).append(alg.add((best, value)))
            for w, values in found.items():
                reach[w] = alg.max(values)
        for w, value in reach.items():
            out[(v, w)] = value
    return out


def _component_pairs(
    spec: MachineSpec,
    inner: list[TransitionSpec],
    states: list[str],
    weight: Mapping[str, int],
    alg: Algebra[V],
    memo: Memo,
) -> dict[tuple[str, str], V]:
    """Pair bounds inside one strongly connected component (docs/machines.md)."""
    part = memo.part(inner)
    if not part.bounding:
        endless = alg.const(math.inf if any(weight[s] for s in states) else 0)
        return {(v, w): endless for v in states for w in states}
    residual = _pairs(spec, part.residual, states, weight, alg, memo)
    # A bounding self-loop that resets nothing returns where it left with every other budget as it
    # was: taking it out of a walk leaves a walk the rest of the analysis bounds, so its traversals
    # only add their target's weight, at most cap times — they cut no piece.
    loops: dict[str, V] = {}
    for t in part.plain:
        assert t.counter is not None
        loops[t.counter] = alg.max((loops.get(t.counter, alg.const(0)), alg.const(weight[t.dest])))
    looped = alg.add(alg.mul(alg.cap(spec.counter_map[c]), value) for c, value in loops.items())
    bounding = part.rest
    if not bounding:
        return {pair: alg.add((value, looped)) for pair, value in residual.items()}
    targets = list(dict.fromkeys(t.dest for t in bounding))
    counted: dict[str, list[TransitionSpec]] = {}
    for t in bounding:
        assert t.counter is not None
        counted.setdefault(t.counter, []).append(t)
    # A walk v → w crossing K ≥ 1 bounding edges b1..bK is: a first piece v → src(b1), K−1 middle
    # pieces target(b_i) → src(b_i+1), a last piece target(bK) → w. A middle piece is charged either
    # to the edge that ends it ("before") or to the one that starts it ("after"); each charging gives
    # a bound (a counter c is crossed at most cap(c) times), and the smaller of the two holds.
    before, after = _charges(residual, counted, targets, bounding, alg)

    def middle(charge: Mapping[str, V]) -> V:
        return alg.add(alg.mul(alg.cap(spec.counter_map[c]), value) for c, value in charge.items())

    gates = {t.counter: alg.cap(spec.counter_map[t.counter]) for t in bounding if t.counter is not None}

    def possible(t: TransitionSpec, value: V) -> V:
        """``value`` when ``t`` can be crossed at all (its cap is not 0), else nothing."""
        assert t.counter is not None
        return alg.when(gates[t.counter], value)

    first, last = _piece_ends(states, bounding, residual, (before, after), alg, possible)
    return _walks(states, residual, (first, last), (middle(before), middle(after)), looped, alg)


def _charges(
    residual: Mapping[tuple[str, str], V],
    counted: Mapping[str, list[TransitionSpec]],
    targets: list[str],
    bounding: list[TransitionSpec],
    alg: Algebra[V],
) -> tuple[dict[str, V], dict[str, V]]:
    """Each counter's charge for a middle piece, charged to the edge that ends it (before) or starts it (after).

    A charge is at least 0: a pair no walk joins at some caps (an edge whose cap is 0 there) is -∞ in
    ``residual``, and a charge of -∞ subtracted from the first (or last) piece made the bound +∞."""
    zero = alg.const(0)
    before: dict[str, V] = {}
    after: dict[str, V] = {}
    for counter, ts in counted.items():
        pieces = [residual[(a, t.source)] for t in ts for a in targets if (a, t.source) in residual]
        if pieces:
            before[counter] = alg.max((*pieces, zero))
        pieces = [residual[(t.dest, b.source)] for t in ts for b in bounding if (t.dest, b.source) in residual]
        if pieces:
            after[counter] = alg.max((*pieces, zero))
    return before, after


_Ends = dict[str, tuple[V, V]]  # a state -> (charged before, charged after)


def _piece_ends(
    states: list[str],
    bounding: list[TransitionSpec],
    residual: Mapping[tuple[str, str], V],
    charges: tuple[Mapping[str, V], Mapping[str, V]],
    alg: Algebra[V],
    possible: Callable[[TransitionSpec, V], V],
) -> tuple[_Ends[V], _Ends[V]]:
    """The first piece depends on v alone and the last on w alone: each side's maxima once per state."""
    before, after = charges
    zero = alg.const(0)
    first: _Ends[V] = {}
    last: _Ends[V] = {}
    for v in states:
        starts = [(t, residual[(v, t.source)]) for t in bounding if (v, t.source) in residual]
        if starts:
            first[v] = (
                alg.max(possible(t, alg.sub(p, before.get(t.counter or "", zero))) for t, p in starts),
                alg.max(possible(t, p) for t, p in starts),
            )
        ends = [(t, residual[(t.dest, v)]) for t in bounding if (t.dest, v) in residual]
        if ends:
            last[v] = (
                alg.max(possible(t, p) for t, p in ends),
                alg.max(possible(t, alg.sub(p, after.get(t.counter or "", zero))) for t, p in ends),
            )
    return first, last


def _walks(
    states: list[str],
    residual: Mapping[tuple[str, str], V],
    ends: tuple[_Ends[V], _Ends[V]],
    middles: tuple[V, V],
    looped: V,
    alg: Algebra[V],
) -> dict[tuple[str, str], V]:
    """Each pair's bound: the walk with no bounding edge, or the smaller of the two chargings, plus the loops."""
    (first, last), (middle_before, middle_after) = ends, middles
    out: dict[tuple[str, str], V] = {}
    for v in states:
        for w in states:
            candidates = [residual[(v, w)]] if (v, w) in residual else []
            if v in first and w in last:
                (start_before, start_after), (end_before, end_after) = first[v], last[w]
                # charged before: b1's own charge is not paid (its piece is the first one);
                # charged after: bK's own charge is not paid (its piece is the last one)
                by_before = alg.add((start_before, middle_before, end_before))
                by_after = alg.add((start_after, middle_after, end_after))
                candidates.append(alg.min((by_before, by_after)))
            if candidates:
                out[(v, w)] = alg.add((alg.max(candidates), looped))
    return out
