"""The model checker: properties a machine declaration must have, proven from the YAML alone.

Owns three numbered passes over a :class:`~fsm.spec.MachineSpec` (no handler is
ever run; Python guards are treated as free booleans):

1. graph — every state reachable from ``initial``, every state can reach a
   terminal, no non-terminal dead end;
2. termination — every cycle that avoids ``progress`` edges is broken by a capped
   counter incremented and not reset inside it (recursive SCC decomposition);
3. exploration — every reachable (state, counters) configuration over each
   state's ``emits`` (plus the abort event) and both truth values of every guard:
   nothing stuck, counters within caps, the product acyclic once ``progress``
   edges are cut, edges that can never fire, and the worst-case number of effect
   invocations between two progress steps.

Does not import the runtime; findings carry a counterexample trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import networkx as nx

from .spec import MachineSpec, TransitionSpec

__all__ = ["CheckReport", "Finding", "check_spec"]

_Config = tuple[str, tuple[int, ...]]


@attrs.frozen(kw_only=True)
class Finding:
    """One property violation: which pass, what, the states/reasons involved and a counterexample."""

    check: str
    message: str
    states: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    trace: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class CheckReport:
    """What the checker proved or found for one machine, with its figures.

    ``reachable`` holds every explored (state, counters) configuration; counters whose
    cap is unset (unbounded) are always 0 there.
    """

    machine: str
    path: str
    states: int
    transitions: int
    configurations: int
    findings: tuple[Finding, ...]
    worst_case: Mapping[str, int]  # figure or effect -> max invocations between two progress steps
    params: Mapping[str, Any]
    defaults: Mapping[str, Any] = attrs.field(factory=dict)
    reachable: frozenset[tuple[str, tuple[int, ...]]] = attrs.field(factory=frozenset, repr=False, eq=False)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "path": self.path,
            "ok": self.ok,
            "states": self.states,
            "transitions": self.transitions,
            "configurations": self.configurations,
            "worst_case_per_progress_step": dict(self.worst_case),
            "params": dict(self.params),
            "param_defaults": dict(self.defaults),
            "findings": [f.to_json() for f in self.findings],
        }


def check_spec(
    spec: MachineSpec, params: Mapping[str, Any] | None = None, *, max_configs: int = 2_000_000
) -> CheckReport:
    """Run the three passes over ``spec``.

    Caps come from ``params``, else each param's ``check`` value, else its default. Pass 2
    (termination) holds for every cap value; passes 1 and 3 are exact for the caps used,
    which are reported (exploring a small scope keeps the (state, counters) product small).
    """
    values = spec.param_check_values
    values.update(params or {})
    findings = _graph_pass(spec)
    findings += _termination_pass(spec, values)
    explored, more, worst = _exploration_pass(spec, values, max_configs)
    findings += more
    return CheckReport(
        machine=spec.name,
        path=spec.path,
        states=len(spec.states),
        transitions=len(spec.transitions),
        configurations=len(explored),
        reachable=explored,
        findings=tuple(findings),
        worst_case=worst,
        params=values,
        defaults=spec.param_defaults,
    )


# ---- pass 1: graph ------------------------------------------------------------------------


def _graph_pass(spec: MachineSpec) -> list[Finding]:
    out: list[Finding] = []
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_nodes_from(s.name for s in spec.states)
    g.add_edges_from((t.source, t.dest) for t in spec.transitions)
    reachable = nx.descendants(g, spec.initial) | {spec.initial}
    for s in spec.states:
        if s.name not in reachable:
            out.append(
                Finding(
                    check="reachability",
                    message=f"state {s.name!r} is unreachable from {spec.initial!r}",
                    states=(s.name,),
                )
            )
    terminals = set(spec.terminals)
    if not terminals:
        out.append(Finding(check="termination", message="the machine declares no terminal state; no run can end"))
    can_end: set[str] = set(terminals)
    for t in terminals:
        can_end |= nx.ancestors(g, t)
    for s in spec.states:
        if s.terminal:
            continue
        if g.out_degree(s.name) == 0:
            out.append(
                Finding(
                    check="dead_end", message=f"non-terminal state {s.name!r} has no outgoing edge", states=(s.name,)
                )
            )
        elif s.name not in can_end:
            out.append(
                Finding(
                    check="dead_end", message=f"state {s.name!r} can never reach a terminal state", states=(s.name,)
                )
            )
    return out


# ---- pass 2: termination (recursive SCC decomposition) ----------------------------------


def _termination_pass(spec: MachineSpec, params: Mapping[str, Any]) -> list[Finding]:
    counters = spec.counter_map
    capped = {name for name, c in counters.items() if spec.cap_of(c, params) is not None}
    edges = [t for t in spec.transitions if not t.progress]
    out: list[Finding] = []

    def analyse(edges: list[TransitionSpec]) -> None:
        g: nx.MultiDiGraph[str] = nx.MultiDiGraph()
        for t in edges:
            g.add_edge(t.source, t.dest, key=t.reason)
        for scc in nx.strongly_connected_components(g):
            inner = [t for t in edges if t.source in scc and t.dest in scc]
            if not inner:
                continue
            reset_inside: set[str] = set()
            for t in inner:
                reset_inside |= spec.resets_of(t)
            bounding = [t for t in inner if t.counter in capped and t.counter not in reset_inside]
            if bounding:
                analyse([t for t in inner if t not in bounding])
                continue
            states = tuple(s.name for s in spec.states if s.name in scc)
            reasons = tuple(dict.fromkeys(t.reason for t in inner))
            resets = sorted({t.counter for t in inner if t.counter in capped} & reset_inside)
            detail = (
                f"; counter(s) {', '.join(map(repr, resets))} are reset inside the cycle"
                if resets
                else "; no edge in it increments a capped counter"
            )
            out.append(
                Finding(
                    check="termination",
                    message=(
                        f"unbounded recovery cycle through states {list(states)} via reasons {list(reasons)}"
                        f"{detail} (add a `counter:` with a cap to one of its edges, or mark a real forward "
                        "step `progress: true`)"
                    ),
                    states=states,
                    reasons=reasons,
                )
            )

    analyse(edges)
    return out


# ---- pass 3: exhaustive exploration ---------------------------------------------------------


def _exploration_pass(
    spec: MachineSpec, params: Mapping[str, Any], max_configs: int
) -> tuple[frozenset[_Config], list[Finding], dict[str, int]]:
    out: list[Finding] = []
    names = [c.name for c in spec.counters]
    index = {n: i for i, n in enumerate(names)}
    caps = [spec.cap_of(c, params) for c in spec.counters]
    groups = spec.candidates()
    # per state: [(event, [(transition, counter index or None, cap, resets, shadows later ones), ...]), ...]
    plan: dict[str, list[tuple[str, list[tuple[TransitionSpec, int | None, int, tuple[int, ...], bool]]]]] = {}
    for s in spec.states:
        if s.terminal:
            continue
        plan[s.name] = []
        for event in (*s.emits, spec.abort_event):
            cands = []
            for t in groups.get((s.name, event), ()):
                ci = None if t.counter is None or caps[index[t.counter]] is None else index[t.counter]
                cap = caps[ci] if ci is not None else 0
                # a counter whose cap is an unset param is untracked (always 0) but may be capped by a
                # caller who sets the param, so it is a free guard: it does not shadow later candidates
                shadows = not t.guards and (t.counter is None or ci is not None)
                cands.append((t, ci, cap or 0, tuple(index[c] for c in spec.resets_of(t)), shadows))
            plan[s.name].append((event, cands))

    start: _Config = (spec.initial, (0,) * len(names))
    ids: dict[_Config, int] = {start: 0}
    configs: list[_Config] = [start]
    parent: list[tuple[int, str] | None] = [None]
    succ: list[list[tuple[int, str]]] = [[]]  # non-progress edges only
    segment_starts = {0}
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

    head = 0
    while head < len(configs):
        node = head
        head += 1
        state, counts = configs[node]
        steps = plan.get(state)
        if steps is None:
            continue
        for event, cands in steps:
            took = False
            for t, ci, cap, resets, shadows in cands:
                if ci is not None and counts[ci] >= cap:
                    continue
                if resets or ci is not None:
                    nxt = list(counts)
                    for r in resets:
                        nxt[r] = 0
                    if ci is not None:
                        nxt[ci] += 1
                    new_counts = tuple(nxt)
                else:
                    new_counts = counts
                cfg: _Config = (t.dest, new_counts)
                fired.add((t.source, t.reason))
                took = True
                target = ids.get(cfg)
                if target is None:
                    if len(configs) >= max_configs:
                        truncated = True
                        continue
                    target = len(configs)
                    ids[cfg] = target
                    configs.append(cfg)
                    parent.append((node, t.reason))
                    succ.append([])
                if t.progress:
                    segment_starts.add(target)
                else:
                    succ[node].append((target, t.reason))
                if shadows:
                    break  # an unguarded edge always fires: later candidates are shadowed
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
    if truncated:
        out.append(
            Finding(
                check="exploration",
                message=f"exploration stopped at {max_configs} configurations; lower the caps with params to check",
            )
        )
    visited = {c[0] for c in configs}
    for t in spec.transitions:
        if (t.source, t.reason) not in fired and t.source in visited:
            out.append(
                Finding(
                    check="dead_edge",
                    message=f"transition {t.reason!r} from {t.source!r} on {t.event!r} can never fire "
                    f"({_why_dead(spec, t, groups, caps, index)})",
                    states=(t.source,),
                    reasons=(t.reason,),
                )
            )
    order = _topological_order(succ)
    worst: dict[str, int] = {}
    if order is None:
        cycle = _find_cycle(succ)
        reasons = tuple(reason for _, reason in cycle)
        out.append(
            Finding(
                check="termination",
                message="the (state, counters) product has a cycle without a progress edge "
                f"via reasons {list(reasons)}",
                states=tuple(dict.fromkeys(configs[n][0] for n, _ in cycle)),
                reasons=reasons,
                trace=tuple(f"{configs[n][0]} {_fmt(names, configs[n][1])}" for n, _ in cycle),
            )
        )
    else:
        worst = _worst_case(spec, configs, succ, order, segment_starts)
    return frozenset(configs), out, worst


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
    declared figure (a sum over several effects) and per effect."""
    effect_of = {s.name: s.effect for s in spec.states if s.effect}
    figures: dict[str, frozenset[str]] = {name: frozenset(effects) for name, effects in spec.figures.items()}
    for effect in dict.fromkeys(effect_of.values()):
        assert effect is not None
        figures.setdefault(effect, frozenset({effect}))
    worst: dict[str, int] = {}
    for name, effects in figures.items():
        weight = [1 if effect_of.get(state) in effects else 0 for state, _ in configs]
        best = [0] * len(configs)
        for node in reversed(order):
            edges = succ[node]
            best[node] = weight[node] + (max(best[t] for t, _ in edges) if edges else 0)
        worst[name] = max((best[s] for s in starts), default=0)
    return worst


def _why_dead(
    spec: MachineSpec,
    t: TransitionSpec,
    groups: Mapping[tuple[str, str], tuple[TransitionSpec, ...]],
    caps: list[int | None],
    index: Mapping[str, int],
) -> str:
    cands = groups[(t.source, t.event)]
    for earlier in cands[: cands.index(t)]:
        if not earlier.guards and earlier.counter is None:
            return f"shadowed by the unguarded {earlier.reason!r} above it"
    if t.counter is not None and caps[index[t.counter]] == 0:
        return f"its counter {t.counter!r} has cap 0"
    if t.event not in spec.state(t.source).emits and t.event != spec.abort_event:
        return f"{t.source!r} never emits {t.event!r}"
    return "no reachable configuration enables it"


def _fmt(names: list[str], counts: tuple[int, ...]) -> str:
    nonzero = [f"{n}={c}" for n, c in zip(names, counts, strict=True) if c]
    return "{" + ", ".join(nonzero) + "}"
