"""The semantic rules a declaration must follow, one function per rule, run in a fixed order.

Owns :func:`validate_spec` and the rules about states, events, transitions and the graph
they make; the rules about caps and figures are ``caps``', about children ``children``'s,
about names ``naming``'s. Each rule returns its problems; none reads files or imports the
Python a machine names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ..errors import SpecProblem
from .caps import (
    bound_problems,
    counter_problems,
    figure_effect_problems,
    figure_param_problems,
    param_problems,
    progress_problems,
    range_problems,
    scope_problems,
    streak_edge_problems,
    unbounded_problems,
)
from .children import children_problems
from .naming import guard_meaning_problems, naming_problems, property_problems
from .problems import Lines, close, line_of, unknown
from .spec import MachineSpec, StateSpec, TransitionSpec

__all__ = ["INTERNAL_ERROR", "Rule", "validate_spec"]

INTERNAL_ERROR = "internal_error"  # the terminal the engine enters when an effect, guard or handler raises

Rule = Callable[[MachineSpec, Lines], Iterable[SpecProblem]]


def validate_spec(spec: MachineSpec, lines: Lines | None = None) -> list[SpecProblem]:
    """Every semantic rule a declaration must follow; returns the problems (empty = valid).

    The graph's rules run only on a declaration that passes the others: they read its names as declared.
    """
    found = _run(DECLARATION_RULES, spec, lines or {})
    return found or _run(GRAPH_RULES, spec, lines or {})


def _run(rules: Sequence[Rule], spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    return [problem for rule in rules for problem in rule(spec, lines)]


# ---- states, events and transitions ----------------------------------------------------------------------


def _initial_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """``initial`` names a declared state."""
    return unknown(spec.path, "state", spec.initial, spec.state_map, line_of(lines, ("initial",)), "`initial`")


def _abort_event_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """The abort event, which cancelling a run injects, is declared."""
    if spec.abort_event in spec.events:
        return []
    return [
        SpecProblem(
            spec.path,
            line_of(lines, ("abort_event",)) or line_of(lines, ("events",)),
            f"the abort event {spec.abort_event!r} is not declared under `events:`",
            "declare it: cancelling a run injects it into the current state",
        )
    ]


def _invariant_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """An invariant is checked at declared states."""
    return [
        problem
        for inv in spec.invariants
        for state in inv.at
        for problem in unknown(spec.path, "state", state, spec.state_map, inv.line, f"invariant {inv.name!r} `at`")
    ]


def _state_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A terminal state does nothing; every other one runs an effect that emits declared events."""
    return [problem for s in spec.states for problem in _one_state(spec, s)]


def _one_state(spec: MachineSpec, s: StateSpec) -> list[SpecProblem]:
    if s.terminal:
        if s.effect or s.emits or s.exit:
            fix = "a terminal state does nothing; remove them"
            return [SpecProblem(spec.path, s.line, f"terminal state {s.name!r} has an effect, emits or exit", fix)]
        return []
    out: list[SpecProblem] = []
    if s.result:
        fix = "add `terminal: true` or remove `result`"
        out.append(SpecProblem(spec.path, s.line, f"state {s.name!r} has a `result` but is not terminal", fix))
    if not s.effect or not s.emits:
        out.append(
            SpecProblem(
                spec.path,
                s.line,
                f"state {s.name!r} is neither terminal nor runs an effect with `emits`",
                "add `effect:` and `emits:`, or `terminal: true`",
            )
        )
    for e in s.emits:
        out.extend(unknown(spec.path, "event", e, spec.events, s.line, f"state {s.name!r} `emits`"))
    return out


def _transition_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """Each reason names one edge (``from: [a, b]`` is one edge written once), and each edge names declared
    states, event, guards and counters and leaves a state that emits its event."""
    first: dict[str, int | None] = {}
    for t in spec.transitions:
        first.setdefault(t.reason, t.line)
    return [problem for t in spec.transitions for problem in _one_transition(spec, t, first[t.reason])]


def _one_transition(spec: MachineSpec, t: TransitionSpec, first_line: int | None) -> list[SpecProblem]:
    ctx = f"transition {t.reason!r}"
    out: list[SpecProblem] = []
    if first_line != t.line:
        message = f"reason {t.reason!r} is used twice (first at line {first_line})"
        out.append(SpecProblem(spec.path, t.line, message, "every transition needs its own reason"))
    source = unknown(spec.path, "state", t.source, spec.state_map, t.line, ctx)
    out += source
    out += unknown(spec.path, "state", t.dest, spec.state_map, t.line, ctx)
    event = unknown(spec.path, "event", t.event, spec.events, t.line, ctx)
    out += event
    out += _edge_name_problems(spec, t, ctx)
    if not source:
        out += _source_problems(spec, t, ctx, event_known=not event)
    return out


def _edge_name_problems(spec: MachineSpec, t: TransitionSpec, ctx: str) -> list[SpecProblem]:
    """The guards an edge asks are registered; the counters it counts and resets are declared."""
    out = [
        SpecProblem(
            spec.path,
            t.line,
            f"{ctx} names guard {g!r}, which is not registered",
            close(g, spec.guards) or "register it under `guards:`",
        )
        for g in t.guards
        if g not in spec.guards
    ]
    if t.counter is not None:
        out += unknown(spec.path, "counter", t.counter, spec.counter_map, t.line, ctx)
    for r in t.resets:
        out += unknown(spec.path, "counter", r, spec.counter_map, t.line, f"{ctx} `resets`")
    return out


def _source_problems(spec: MachineSpec, t: TransitionSpec, ctx: str, *, event_known: bool) -> list[SpecProblem]:
    """An edge leaves a state that is not terminal and emits its event (the abort event aside)."""
    source = spec.state_map[t.source]
    if source.terminal:
        fix = "terminal states have no outgoing edges"
        return [SpecProblem(spec.path, t.line, f"{ctx} leaves terminal state {t.source!r}", fix)]
    if event_known and t.event != spec.abort_event and t.event not in source.emits:
        return [
            SpecProblem(
                spec.path,
                t.line,
                f"{ctx} fires on {t.event!r}, which state {t.source!r} never emits",
                f"add it to {t.source!r} `emits`, or fix the event",
            )
        ]
    return []


def _frame_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """An edge that says what its handler changes has a handler, and names each path once."""
    return [problem for t in spec.transitions for problem in _one_frame(spec, t)]


def _one_frame(spec: MachineSpec, t: TransitionSpec) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    if t.changes and t.do is None:
        out.append(
            SpecProblem(
                spec.path,
                t.line,
                f"transition {t.reason!r} promises to change {list(t.changes)} (`changes:`) but has no `do` to "
                "change them",
                "name the edge handler that makes the change in `do:`, or drop the promise",
            )
        )
    elif (t.may_change or t.sets) and t.do is None:
        out.append(
            SpecProblem(
                spec.path,
                t.line,
                f"transition {t.reason!r} declares what its handler changes (`may_change:`, `sets:`) but has no `do`",
                "name the edge handler in `do:`, or drop the frame",
            )
        )
    twice = sorted({*t.changes, *t.may_change} & {path for path, _ in t.sets}) or sorted(
        set(t.changes) & set(t.may_change)
    )
    if twice:
        message = f"transition {t.reason!r} lists {twice} twice (`changes`, `may_change`, `sets`)"
        out.append(SpecProblem(spec.path, t.line, message, "list once"))
    return out


def _abort_edge_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """An abort edge ends the run."""
    states = spec.state_map
    return [
        SpecProblem(
            spec.path,
            t.line,
            f"abort edge {t.reason!r} goes to {t.dest!r}, which is not terminal",
            "an abort ends the run: send it to a terminal state",
        )
        for t in spec.transitions
        if t.event == spec.abort_event and t.dest in states and not states[t.dest].terminal
    ]


def _internal_error_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """Every machine declares the terminal ``internal_error``, which no transition enters (only the engine)."""
    fix = (
        "add under `states:`: `internal_error: {terminal: true, result: {is_error: true, "
        "subtype: error_during_execution}}` — the engine ends a run there when an effect, guard or handler raises"
    )
    state = spec.state_map.get(INTERNAL_ERROR)
    if state is None:
        return [SpecProblem(spec.path, line_of(lines, ("states",)), "no state `internal_error` is declared", fix)]
    out: list[SpecProblem] = []
    result = state.result
    if not state.terminal or result.get("is_error") is not True or result.get("subtype") != "error_during_execution":
        out.append(
            SpecProblem(
                spec.path,
                state.line,
                "state `internal_error` must be terminal with `result: {is_error: true, "
                "subtype: error_during_execution}`",
                fix,
            )
        )
    out.extend(
        SpecProblem(
            spec.path,
            t.line,
            f"transition {t.reason!r} goes to `internal_error`, which only the engine enters",
            "send it to another terminal state",
        )
        for t in spec.transitions
        if t.dest == INTERNAL_ERROR
    )
    return out


# ---- the graph (its names all declared) ------------------------------------------------------------------


def _handled_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """Every event a state emits, and the abort event, has an edge out of it."""
    groups = spec.candidates()
    return [
        _unhandled(spec, s, e)
        for s in spec.states
        if not s.terminal
        for e in (*s.emits, spec.abort_event)
        if (s.name, e) not in groups
    ]


def _unhandled(spec: MachineSpec, s: StateSpec, event: str) -> SpecProblem:
    if event == spec.abort_event:
        return SpecProblem(
            spec.path,
            s.line,
            f"state {s.name!r} has no transition for the abort event {event!r}",
            "add an edge to a terminal state so a cancelled run still ends",
        )
    return SpecProblem(
        spec.path,
        s.line,
        f"state {s.name!r} emits {event!r} but no transition handles it",
        f"add a transition from {s.name!r} on {event!r}",
    )


def _catch_all_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """The last edge tried for a (state, event) fires whatever the guards say."""
    return [
        SpecProblem(
            spec.path,
            cands[-1].line,
            f"the edges from {source!r} on {event!r} end with {cands[-1].reason!r}, which is guarded",
            "the last candidate must be an unguarded catch-all (no guards, no counter)",
        )
        for (source, event), cands in spec.candidates().items()
        if not cands[-1].unguarded
    ]


def _reachable_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """Every state but ``internal_error`` (only the engine enters it) is reachable from the initial one."""
    reachable = _reachable(spec)
    return [
        SpecProblem(
            spec.path,
            s.line,
            f"state {s.name!r} is unreachable from {spec.initial!r}",
            "add a transition into it or remove it",
        )
        for s in spec.states
        if s.name not in reachable and s.name != INTERNAL_ERROR
    ]


def _reachable(spec: MachineSpec) -> set[str]:
    """The states some run can enter from the initial one (a plain search: every run loads a machine, and
    networkx, which the checker uses, would cost it more to import than the whole load)."""
    successors: dict[str, list[str]] = {}
    for t in spec.transitions:
        successors.setdefault(t.source, []).append(t.dest)
    seen = {spec.initial}
    todo = [spec.initial]
    while todo:
        for dest in successors.get(todo.pop(), ()):
            if dest not in seen:
                seen.add(dest)
                todo.append(dest)
    return seen


# In this order: a declaration's problems are listed as these rules find them.
DECLARATION_RULES: tuple[Rule, ...] = (
    figure_effect_problems,
    _initial_problems,
    _abort_event_problems,
    param_problems,
    counter_problems,
    figure_param_problems,
    streak_edge_problems,
    _frame_problems,
    _invariant_problems,
    progress_problems,
    range_problems,
    bound_problems,
    property_problems,
    guard_meaning_problems,
    children_problems,
    scope_problems,
    unbounded_problems,
    _state_problems,
    _transition_problems,
    _abort_edge_problems,
    _internal_error_problems,
    naming_problems,
)
GRAPH_RULES: tuple[Rule, ...] = (_handled_problems, _catch_all_problems, _reachable_problems)
