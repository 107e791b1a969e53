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

from collections import deque
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
    worst_case: Mapping[str, int]  # effect -> max invocations between two progress steps
    params: Mapping[str, Any]
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
            "findings": [f.to_json() for f in self.findings],
        }


def check_spec(spec: MachineSpec, params: Mapping[str, Any] | None = None, *, max_configs: int = 2_000_000) -> CheckReport:
    """Run the three passes over ``spec`` with caps from ``params`` (defaults when omitted)."""
    values = spec.param_defaults
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
            out.append(Finding(check="reachability", message=f"state {s.name!r} is unreachable from {spec.initial!r}", states=(s.name,)))
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
            out.append(Finding(check="dead_end", message=f"non-terminal state {s.name!r} has no outgoing edge", states=(s.name,)))
        elif s.name not in can_end:
            out.append(Finding(check="dead_end", message=f"state {s.name!r} can never reach a terminal state", states=(s.name,)))
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
                        f"{detail} (add a `counter:` with a cap to one of its edges, or mark a real forward step `progress: true`)"
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
    states = spec.state_map
    groups = spec.candidates()
    compiled: dict[tuple[str, str], list[tuple[TransitionSpec, int | None, tuple[int, ...]]]] = {
        key: [
            (t, None if t.counter is None or caps[index[t.counter]] is None else index[t.counter], tuple(index[c] for c in spec.resets_of(t)))
            for t in cands
        ]
        for key, cands in groups.items()
    }
    start: _Config = (spec.initial, (0,) * len(names))
    parent: dict[_Config, tuple[_Config, str] | None] = {start: None}
    fired: set[tuple[str, str]] = set()
    product: nx.DiGraph[_Config] = nx.DiGraph()
    product.add_node(start)
    segment_starts = {start}
    queue = deque([start])
    truncated = False

    def trace_to(cfg: _Config) -> tuple[str, ...]:
        path: list[str] = []
        cur: _Config | None = cfg
        while cur is not None:
            link = parent[cur]
            path.append(f"{cur[0]} {_fmt(names, cur[1])}")
            if link is None:
                break
            cur, reason = link
            path.append(f"  --{reason}-->")
        return tuple(reversed(path))

    while queue:
        cfg = queue.popleft()
        state, counts = cfg
        if states[state].terminal:
            continue
        for event in (*states[state].emits, spec.abort_event):
            took = False
            for t, ci, resets in compiled.get((state, event), []):
                if ci is not None and counts[ci] >= caps[ci]:  # type: ignore[operator]
                    continue
                nxt = list(counts)
                for r in resets:
                    nxt[r] = 0
                if ci is not None:
                    nxt[ci] += 1
                    if nxt[ci] > caps[ci]:  # type: ignore[operator]
                        out.append(Finding(check="caps", message=f"counter {names[ci]!r} exceeds its cap on {t.reason!r}", reasons=(t.reason,), trace=trace_to(cfg)))
                succ: _Config = (t.dest, tuple(nxt))
                fired.add((t.source, t.reason))
                took = True
                if t.progress:
                    segment_starts.add(succ)
                    product.add_node(succ)
                else:
                    product.add_edge(cfg, succ, reason=t.reason)
                if succ not in parent:
                    if len(parent) >= max_configs:
                        truncated = True
                        continue
                    parent[succ] = (cfg, t.reason)
                    queue.append(succ)
                if not t.guards:
                    break  # an unguarded edge always fires when under cap: later candidates are shadowed
            if not took:
                out.append(
                    Finding(
                        check="stuck",
                        message=f"stuck configuration: in {state!r} {_fmt(names, counts)} no edge can fire on {event!r}",
                        states=(state,),
                        trace=trace_to(cfg),
                    )
                )
    if truncated:
        out.append(Finding(check="exploration", message=f"exploration stopped at {max_configs} configurations; lower the caps with params to check"))
    visited = {c[0] for c in parent}
    for t in spec.transitions:
        if (t.source, t.reason) not in fired and t.source in visited:
            out.append(
                Finding(
                    check="dead_edge",
                    message=f"transition {t.reason!r} from {t.source!r} on {t.event!r} can never fire ({_why_dead(spec, t, groups, caps, index)})",
                    states=(t.source,),
                    reasons=(t.reason,),
                )
            )
    worst: dict[str, int] = {}
    try:
        cycle = nx.find_cycle(product)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle is not None:
        reasons = tuple(product.edges[u, v]["reason"] for u, v in cycle)
        out.append(
            Finding(
                check="termination",
                message=f"the (state, counters) product has a cycle without a progress edge via reasons {list(reasons)}",
                states=tuple(dict.fromkeys(u[0] for u, _ in cycle)),
                reasons=reasons,
                trace=tuple(f"{u[0]} {_fmt(names, u[1])}" for u, _ in cycle),
            )
        )
    else:
        worst = _worst_case(spec, product, segment_starts)
    return frozenset(parent), out, worst


def _worst_case(spec: MachineSpec, product: nx.DiGraph[_Config], starts: set[_Config]) -> dict[str, int]:
    """Longest path (in effect invocations) from a segment start, per effect, over the acyclic product."""
    effects = {s.name: s.effect for s in spec.states if s.effect}
    order = list(reversed(list(nx.topological_sort(product))))
    worst: dict[str, int] = {}
    for effect in dict.fromkeys(effects.values()):
        assert effect is not None
        best: dict[_Config, int] = {}
        for node in order:
            here = 1 if effects.get(node[0]) == effect else 0
            best[node] = here + max((best[s] for s in product.successors(node)), default=0)
        worst[effect] = max((best.get(s, 0) for s in starts), default=0)
    return worst


def _why_dead(spec: MachineSpec, t: TransitionSpec, groups: Mapping[tuple[str, str], tuple[TransitionSpec, ...]], caps: list[int | None], index: Mapping[str, int]) -> str:
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
