"""Pass 3: every (state, counters) configuration at given caps, breadth first, with the exact worst
cases per turn and per run over the acyclic product, stuck configurations and edges that never fire.

The passes that hold for every cap value are ``passes``'.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import attrs

from ..model.spec import MachineSpec, TransitionSpec
from .progress import Status
from .report import Finding

__all__ = ["exploration_pass"]

_Config = tuple[str, tuple[int, ...]]
_Cand = tuple[TransitionSpec, int | None, int, tuple[int, ...]]  # edge, counter index (tracked), cap, resets


# the breadth-first loop stays in one frame: it runs once per configuration, about a million at the check values
def exploration_pass(  # noqa: C901
    spec: MachineSpec, params: Mapping[str, object], max_configs: int, status: Status | None = None
) -> tuple[frozenset[_Config], list[Finding], dict[str, int], dict[str, int]]:
    out: list[Finding] = []
    names = [c.name for c in spec.counters]
    index = {n: i for i, n in enumerate(names)}
    caps = [spec.cap_of(c, params) for c in spec.counters]
    groups = spec.candidates()
    plan = _exploration_plan(spec, caps, index, groups)

    zero = (0,) * len(names)
    terminals = frozenset(spec.terminals)
    start: _Config = (spec.initial, zero)
    ids: dict[_Config, int] = {start: 0}
    configs: list[_Config] = [start]
    parent: list[tuple[int, str] | None] = [None]
    succ: list[list[tuple[int, str]]] = [[]]  # non-progress edges only
    segment_starts = {0}
    progress: list[list[tuple[int, str]]] = [[]]  # progress edges only
    fired: set[tuple[str, str]] = set()
    truncated = False

    def trace_to(node: int) -> tuple[str, ...]:
        path: list[str] = []
        cur: int | None = node
        while cur is not None:
            path.append(f"{configs[cur][0]} {_fmt(names, configs[cur][1])}")
            link = parent[cur]
            if link is None:
                break
            cur, reason = link
            path.append(f"  --{reason}-->")
        return tuple(reversed(path))

    status = status or Status()
    status.configs = configs
    head = 0
    while head < len(configs):
        node = head
        head += 1
        state, counts = configs[node]
        steps = plan.get(state)
        if steps is None:
            continue
        for event, orders in steps:
            taken: set[int] = set()  # candidates already followed from this configuration on this event
            for tried in orders:
                took = False
                for t, ci, cap, resets in tried:
                    if ci is not None and counts[ci] >= cap:
                        continue
                    if id(t) in taken:
                        took = True
                        break
                    taken.add(id(t))
                    if resets or ci is not None:
                        nxt = list(counts)
                        for r in resets:
                            nxt[r] = 0
                        if ci is not None:
                            nxt[ci] += 1
                        new_counts = tuple(nxt)
                    else:
                        new_counts = counts
                    # a run that ended is its terminal state: its counters no longer matter
                    cfg: _Config = (t.dest, zero) if t.dest in terminals else (t.dest, new_counts)
                    fired.add((t.source, t.reason))
                    took = True
                    target = ids.get(cfg)
                    if target is None:
                        if len(configs) >= max_configs:
                            truncated = True
                            break
                        target = len(configs)
                        ids[cfg] = target
                        configs.append(cfg)
                        parent.append((node, t.reason))
                        succ.append([])
                        progress.append([])
                    if t.progress:
                        segment_starts.add(target)
                        progress[node].append((target, t.reason))
                    else:
                        succ[node].append((target, t.reason))
                    break  # the first candidate that can fire is taken
                if not took:
                    out.append(
                        Finding(
                            check="stuck",
                            message=f"stuck configuration: in {state!r} {_fmt(names, counts)} "
                            f"no edge can fire on {event!r}",
                            states=(state,),
                            trace=trace_to(node),
                        )
                    )
                    break
    status.phase = "analysing"
    if truncated:
        out.append(
            Finding(
                check="exploration",
                message=f"exploration stopped at {max_configs} configurations; lower the caps with params to check",
            )
        )
    out += _dead_edges(spec, {c[0] for c in configs}, fired, groups, caps, index)
    product = _Product(configs=configs, names=names, succ=succ, progress=progress, segment_starts=segment_starts)
    worst, worst_run, cycle_finding = _product_worst_cases(spec, product)
    out += cycle_finding
    if truncated:
        worst, worst_run = {}, {}  # a cut-off exploration proves no figure
    return frozenset(configs), out, worst, worst_run


def _exploration_plan(
    spec: MachineSpec, caps: list[int | None], index: Mapping[str, int], groups: Mapping[Any, Any]
) -> dict[str, list[tuple[str, tuple[tuple[_Cand, ...], ...]]]]:
    """Per state: [(event, orders), ...]; an order is the candidates whose guards all hold under one
    truth assignment of the decision's guard names (one value per name), in YAML order."""
    plan: dict[str, list[tuple[str, tuple[tuple[_Cand, ...], ...]]]] = {}
    for s in spec.states:
        if s.terminal:
            continue
        plan[s.name] = []
        for event in (*s.emits, spec.abort_event):
            cands = []
            for t in groups.get((s.name, event), ()):
                ci = None if t.counter is None or caps[index[t.counter]] is None else index[t.counter]
                cap = caps[ci] if ci is not None else 0
                cands.append((t, ci, cap or 0, tuple(index[c] for c in spec.resets_of(t))))
            plan[s.name].append((event, _orders(cands, caps, index)))
    return plan


def _dead_edges(
    spec: MachineSpec,
    visited: set[str],
    fired: set[tuple[str, str]],
    groups: Mapping[Any, Any],
    caps: list[int | None],
    index: Mapping[str, int],
) -> list[Finding]:
    """Each transition from a state the exploration reached that never fired there."""
    return [
        Finding(
            check="dead_edge",
            message=f"transition {t.reason!r} from {t.source!r} on {t.event!r} can never fire "
            f"({_why_dead(spec, t, groups, caps, index)})",
            states=(t.source,),
            reasons=(t.reason,),
        )
        for t in spec.transitions
        if (t.source, t.reason) not in fired and t.source in visited
    ]


@attrs.frozen
class _Product:
    """The explored (state, counters) product: its configurations and its edges, progress apart."""

    configs: list[_Config]
    names: list[str]
    succ: list[list[tuple[int, str]]]
    progress: list[list[tuple[int, str]]]
    segment_starts: set[int]


def _product_worst_cases(spec: MachineSpec, p: _Product) -> tuple[dict[str, int], dict[str, int], list[Finding]]:
    """The exact worst cases per step and per run, or the product's cycle without a progress edge."""
    order = _topological_order(p.succ)
    if order is None:
        cycle = _find_cycle(p.succ)
        reasons = tuple(reason for _, reason in cycle)
        finding = Finding(
            check="termination",
            message=f"the (state, counters) product has a cycle without a progress edge via reasons {list(reasons)}",
            states=tuple(dict.fromkeys(p.configs[n][0] for n, _ in cycle)),
            reasons=reasons,
            trace=tuple(f"{p.configs[n][0]} {_fmt(p.names, p.configs[n][1])}" for n, _ in cycle),
        )
        return {}, {}, [finding]
    worst = _worst_case(spec, p.configs, p.succ, order, p.segment_starts)
    whole = [a + b for a, b in zip(p.succ, p.progress, strict=True)]
    run_order = _topological_order(whole)
    if run_order is None:  # some run is unbounded at these caps
        return worst, {}, []
    return worst, _worst_case(spec, p.configs, whole, run_order, {0}), []


def _orders(cands: list[_Cand], caps: list[int | None], index: Mapping[str, int]) -> tuple[tuple[_Cand, ...], ...]:
    """The distinct candidate lists one decision can try, one per truth assignment of its guards.

    A guard name has one truth value per decision (the runtime calls a guard once per
    ``(run, event)``: a name cannot be true on one edge and false on the next). The cap of a
    counter whose cap is an unset param is untracked and explored as a free guard of its own.
    """
    names: list[str] = []
    for t, _, _, _ in cands:
        names.extend(_guard_names(t, caps, index))
    names = list(dict.fromkeys(names))
    out: dict[tuple[int, ...], tuple[_Cand, ...]] = {}
    for bits in range(1 << len(names)):
        true = {n for i, n in enumerate(names) if bits >> i & 1}
        chosen = tuple(i for i, c in enumerate(cands) if all(g in true for g in _guard_names(c[0], caps, index)))
        out.setdefault(chosen, tuple(cands[i] for i in chosen))
    return tuple(out.values())


def _guard_names(t: TransitionSpec, caps: list[int | None], index: Mapping[str, int]) -> tuple[str, ...]:
    free_cap = t.counter is not None and caps[index[t.counter]] is None
    return (*t.guards, f"{t.counter} < unset cap") if free_cap else t.guards


def _topological_order(succ: list[list[tuple[int, str]]]) -> list[int] | None:
    """Kahn's algorithm over the non-progress product; ``None`` when it has a cycle."""
    indegree = [0] * len(succ)
    for edges in succ:
        for target, _ in edges:
            indegree[target] += 1
    order = [n for n, d in enumerate(indegree) if d == 0]
    i = 0
    while i < len(order):
        for target, _ in succ[order[i]]:
            indegree[target] -= 1
            if indegree[target] == 0:
                order.append(target)
        i += 1
    return order if len(order) == len(succ) else None


def _find_cycle(succ: list[list[tuple[int, str]]]) -> list[tuple[int, str]]:
    """One cycle of the product as (node, reason of the edge leaving it), by iterative DFS."""
    colour = [0] * len(succ)  # 0 new, 1 on stack, 2 done
    for root in range(len(succ)):
        if colour[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[tuple[int, str]] = []
        colour[root] = 1
        while stack:
            node, i = stack[-1]
            if i < len(succ[node]):
                stack[-1] = (node, i + 1)
                target, reason = succ[node][i]
                if colour[target] == 1:
                    path.append((node, reason))
                    start = next(k for k, (n, _) in enumerate(path) if n == target)
                    return path[start:]
                if colour[target] == 0:
                    colour[target] = 1
                    path.append((node, reason))
                    stack.append((target, 0))
            else:
                colour[node] = 2
                stack.pop()
                if path:
                    path.pop()
    return []


def _worst_case(
    spec: MachineSpec, configs: list[_Config], succ: list[list[tuple[int, str]]], order: list[int], starts: set[int]
) -> dict[str, int]:
    """Longest path (in effect invocations) from a segment start over the acyclic product, per
    declared figure (a sum over several effects) and per effect.

    One pass for every figure: a configuration's worst cases are one tuple, a lane per
    distinct set of effects, combined lane-wise (``map``) from its successors' tuples, so a
    configuration that adds nothing and has one successor shares that successor's tuple."""
    effect_of = {s.name: s.effect for s in spec.states if s.effect}
    figures: dict[str, frozenset[str]] = {name: frozenset(effects) for name, effects in spec.figures.items()}
    for effect in dict.fromkeys(effect_of.values()):
        assert effect is not None
        figures.setdefault(effect, frozenset({effect}))
    lanes = list(dict.fromkeys(figures.values()))  # figures of the same effects share a lane
    nothing = (0,) * len(lanes)
    weights: dict[str, tuple[int, ...] | None] = {}  # per state; None: it adds nothing to any figure
    for state in spec.state_map:
        lane = tuple(1 if effect_of.get(state) in effects else 0 for effects in lanes)
        weights[state] = lane if any(lane) else None
    adds = [weights[state] for state, _ in configs]
    best: list[tuple[int, ...]] = [nothing] * len(configs)
    for node in reversed(order):
        edges = succ[node]
        if not edges:
            found = nothing
        elif len(edges) == 1:
            found = best[edges[0][0]]
        else:
            found = tuple(map(max, *[best[t] for t, _ in edges]))
        w = adds[node]
        best[node] = found if w is None else tuple(map(operator.add, w, found))
    tops = [best[s] for s in starts]
    top = nothing if not tops else tops[0] if len(tops) == 1 else tuple(map(max, *tops))
    return {name: top[lanes.index(effects)] for name, effects in figures.items()}


def _why_dead(
    spec: MachineSpec,
    t: TransitionSpec,
    groups: Mapping[tuple[str, str], tuple[TransitionSpec, ...]],
    caps: list[int | None],
    index: Mapping[str, int],
) -> str:
    cands = groups[(t.source, t.event)]
    for earlier in cands[: cands.index(t)]:
        if earlier.counter is None and set(earlier.guards) <= set(t.guards):
            held = f"guards {list(earlier.guards)}" if earlier.guards else "no guard"
            return f"shadowed by {earlier.reason!r} above it, which fires whenever it could ({held})"
    if t.counter is not None and caps[index[t.counter]] == 0:
        return f"its counter {t.counter!r} has cap 0"
    if t.event not in spec.state(t.source).emits and t.event != spec.abort_event:
        return f"{t.source!r} never emits {t.event!r}"
    return "no reachable configuration enables it"


def _fmt(names: list[str], counts: tuple[int, ...]) -> str:
    nonzero = [f"{n}={c}" for n, c in zip(names, counts, strict=True) if c]
    return "{" + ", ".join(nonzero) + "}"
