"""The checker's passes over the graph, for every cap value: reachability, dead ends, shadowed
edges, loopholes in the bounds, and termination per turn and per run (recursive SCC decomposition).

The exhaustive exploration at given caps is ``explore``'s.
"""

from __future__ import annotations

import attrs
import networkx as nx

from ..model.load import INTERNAL_ERROR
from ..model.spec import RUN, MachineSpec, TransitionSpec
from .report import Finding

__all__ = ["graph_pass", "loophole_pass", "run_pass", "shadow_pass", "termination_pass"]


def _few(names: tuple[str, ...], most: int = 8) -> str:
    """``['a', 'b', …]``, at most ``most`` names and how many more."""
    shown = ", ".join(repr(n) for n in names[:most])
    return f"[{shown}, … {len(names) - most} more]" if len(names) > most else f"[{shown}]"


# ---- pass 1: graph ------------------------------------------------------------------------


def graph_pass(spec: MachineSpec) -> list[Finding]:
    out: list[Finding] = []
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_nodes_from(s.name for s in spec.states)
    # an edge counted by a counter whose cap is the literal 0 never fires: what only it reaches is unreachable
    g.add_edges_from((t.source, t.dest) for t in spec.transitions if not spec.never_fires(t))
    reachable = nx.descendants(g, spec.initial) | {spec.initial}
    for dead in spec.transitions:
        if spec.never_fires(dead):
            out.append(
                Finding(
                    check="dead_edge",
                    message=f"transition {dead.reason!r} from {dead.source!r} can never fire: its counter "
                    f"{dead.counter!r} has the literal cap 0 (a setting of 0 belongs to a param a user sets, "
                    "not to the YAML)",
                    states=(dead.source,),
                    reasons=(dead.reason,),
                )
            )
    for s in spec.states:
        if s.name not in reachable and s.name != INTERNAL_ERROR:  # only the engine enters internal_error
            out.append(
                Finding(
                    check="reachability",
                    message=f"state {s.name!r} is unreachable from {spec.initial!r}",
                    states=(s.name,),
                )
            )
    terminals = set(spec.terminals) - {INTERNAL_ERROR}
    if not terminals:
        out.append(Finding(check="termination", message="the machine declares no terminal state; no run can end"))
    # every state has an abort edge to a terminal, so reaching one is only meaningful without it
    calm: nx.DiGraph[str] = nx.DiGraph()
    calm.add_nodes_from(s.name for s in spec.states)
    calm.add_edges_from((t.source, t.dest) for t in spec.transitions if t.event != spec.abort_event)
    can_end: set[str] = set(terminals)
    for t in terminals:
        can_end |= nx.ancestors(calm, t)
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
                    check="dead_end",
                    message=f"state {s.name!r} can never reach a terminal state unless the run is interrupted "
                    f"({spec.abort_event!r})",
                    states=(s.name,),
                )
            )
    return out


def shadow_pass(spec: MachineSpec) -> list[Finding]:
    """Candidates that can never be tried: an earlier one with no counter fires whenever they could."""
    out: list[Finding] = []
    for (source, event), cands in spec.candidates().items():
        for i, t in enumerate(cands):
            earlier = next((e for e in cands[:i] if e.counter is None and set(e.guards) <= set(t.guards)), None)
            if earlier is not None:
                held = f"guards {list(earlier.guards)}" if earlier.guards else "no guard"
                out.append(
                    Finding(
                        check="dead_edge",
                        message=f"transition {t.reason!r} from {source!r} on {event!r} can never fire "
                        f"(shadowed by {earlier.reason!r} above it, which fires whenever it could: {held})",
                        states=(source,),
                        reasons=(t.reason,),
                    )
                )
    return out


def loophole_pass(spec: MachineSpec) -> list[Finding]:
    """Bounds that hold only on paper: a cap that is null at the defaults, a loop no figure limits."""
    out: list[Finding] = []
    bounded_by_design = {
        spec.counter_map[t.counter].name for t in spec.transitions if t.reason in spec.progress_bounds and t.counter
    }
    defaults = spec.param_defaults
    for c in spec.counters:
        if isinstance(c.cap, str) and defaults.get(c.cap) is None and c.name not in bounded_by_design:
            out.append(
                Finding(
                    check="null_cap",
                    message=f"counter {c.name!r} bounds nothing at the defaults: its cap {c.cap!r} defaults to null, "
                    "so the budget or breaker it is meant to be is off unless a user sets it",
                    reasons=tuple(t.reason for t in spec.transitions if t.counter == c.name),
                )
            )
    if not spec.figure_max:
        return out  # a machine that declares no per-turn figure promises no figure to check against
    limited = {e for name in spec.figure_max for e in spec.figures[name]}
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_edges_from((t.source, t.dest) for t in spec.transitions if not t.progress and not spec.never_fires(t))
    looping = {n for scc in nx.strongly_connected_components(g) for n in scc if len(scc) > 1 or g.has_edge(n, n)}
    for s in spec.states:
        if s.name in looping and s.effect and s.effect not in limited:
            out.append(
                Finding(
                    check="figure",
                    message=f"state {s.name!r} runs {s.effect!r} in a recovery cycle, but no figure with a `max:` "
                    "sums it: list it in one, so a change that lets it loop more is caught",
                    states=(s.name,),
                )
            )
    return out


# ---- pass 2: termination (recursive SCC decomposition) ----------------------------------


def termination_pass(spec: MachineSpec) -> list[Finding]:
    """Per turn: every cycle of non-progress edges is bounded by a counter for every cap value."""
    return _unbounded_cycles(
        spec,
        [t for t in spec.transitions if not t.progress and not spec.never_fires(t)],
        "unbounded recovery cycle",
        "add a `counter:` with a cap to one of its edges, or mark a real forward step `progress: true`",
    )


def run_pass(spec: MachineSpec) -> list[Finding]:
    """Per run: progress edges bounded too, unless the machine lists them as unbounded by design."""
    per_step = {tuple(sorted(f.states)) for f in termination_pass(spec)}
    fires = [t for t in spec.transitions if not spec.never_fires(t)]
    reach: nx.DiGraph[str] = nx.DiGraph()
    reach.add_node(spec.initial)
    reach.add_edges_from((t.source, t.dest) for t in fires)
    reached = {spec.initial} | nx.descendants(reach, spec.initial)  # a cycle no run reaches bounds no run
    found = _unbounded_cycles(
        spec,
        [t for t in fires if t.reason not in spec.unbounded_by_design and t.source in reached],
        "unbounded run: a cycle",
        f"count one of its progress edges with a `{RUN}` counter whose cap is an int or a non-nullable "
        "int param, or list a progress edge a user drives under `unbounded_by_design:` with what is unbounded",
    )
    return [attrs.evolve(f, check="progress_bound") for f in found if tuple(sorted(f.states)) not in per_step]


def _unbounded_cycles(spec: MachineSpec, edges: list[TransitionSpec], what: str, fix: str) -> list[Finding]:
    counters = spec.counter_map
    capped = {name for name, c in counters.items() if spec.bounds_always(c)}
    maybe = {name for name in counters if name not in capped}  # capped by a param that may be null
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
            nullable = sorted({t.counter for t in inner if t.counter in maybe and t.counter not in reset_inside})
            progress = [t.reason for t in inner if t.progress]
            detail = ""
            if progress:
                detail += f"; progress edge(s) {progress} are not counted by a bounded {RUN} counter"
            if resets:
                detail += f"; counter(s) {', '.join(map(repr, resets))} are reset inside the cycle"
            if nullable:
                caps = ", ".join(f"{c!r} (cap {counters[c].cap}, which may be null)" for c in nullable)
                detail += f"; counter(s) {caps} bound it only when set"
            if not detail:
                detail = "; no edge in it increments a capped counter"
            out.append(
                Finding(
                    check="termination",
                    message=f"{what} through states {_few(states)} via reasons {_few(reasons)}{detail} ({fix})",
                    states=states,
                    reasons=reasons,
                )
            )

    analyse(edges)
    return out
