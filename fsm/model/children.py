"""The rules about ``children:``: what starts a child run, what bounds it, and the edges that admit or refuse it.

One function per rule, each returning its problems; ``rules`` runs them in its order.
"""

from __future__ import annotations

from ..errors import SpecProblem
from .problems import Lines, close
from .spec import ChildrenSpec, CounterSpec, MachineSpec

__all__ = ["children_problems"]


def children_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """Each ``children:`` entry: what starts a child, how many steps it may take, its edges, what keeps it pending."""
    return [
        problem
        for child in spec.children
        for problem in (
            *_starts_problems(spec, child),
            *_steps_problems(spec, child),
            *_child_edge_problems(spec, child),
            *_pending_problems(spec, child),
        )
    ]


def _starts_problems(spec: MachineSpec, child: ChildrenSpec) -> list[SpecProblem]:
    """``starts`` names a counter some edge counts, over the step scope and reset by nothing else, whose cap
    every caller gives a value (the composed figures multiply by it: the engine never lets its edges past
    it in one step)."""
    counter = spec.counter_map.get(child.starts)
    if counter is None:
        fix = close(child.starts, spec.counter_map) or "declare a counter its starting edge counts"
        found: tuple[str, str] | None = (f"names counter {child.starts!r}, which is not declared", fix)
    else:
        found = _starts_counter_problem(spec, counter)
    if found is None:
        return []
    message, fix = found
    return [SpecProblem(spec.path, child.line, f"children {child.name!r} `starts` {message}", fix)]


def _starts_counter_problem(spec: MachineSpec, counter: CounterSpec) -> tuple[str, str] | None:
    """What is wrong with the declared counter a ``starts`` names (the message after its name, the fix)."""
    named = f"names counter {counter.name!r}"
    step = spec.step_scope
    if counter.scope != step:
        message = f"{named}, counted per {counter.scope}: the starts of a {step} need a counter over the {step}"
        return message, f"scope: {step}"
    if not any(t.counter == counter.name for t in spec.transitions):
        return f"{named}, which no edge counts", "name the counter on the edge that admits each start (`counter:`)"
    if counter.consecutive or counter.streak_of or any(counter.name in t.resets for t in spec.transitions):
        return (
            f"{named}, which is reset within a {step} (`consecutive`, `streak_of` or an edge's `resets`): its cap "
            "would not bound the starts",
            "count the starts with a counter only its scope resets",
        )
    cap = spec.param_map.get(counter.cap) if isinstance(counter.cap, str) else None
    if cap is not None and cap.nullable:
        return (
            f"{named}, whose cap {counter.cap!r} may be null: the children a step starts need a limit",
            "give the param a default and no `nullable`",
        )
    return None


def _steps_problems(spec: MachineSpec, child: ChildrenSpec) -> list[SpecProblem]:
    """``steps`` names an int param."""
    param = spec.param_map.get(child.steps)
    where = f"children {child.name!r} `steps`"
    if param is None:
        fix = close(child.steps, spec.param_map) or "declare it under `params:` (type: int)"
        return [SpecProblem(spec.path, child.line, f"{where} names param {child.steps!r}, which is not declared", fix)]
    if param.type != "int":
        return [SpecProblem(spec.path, child.line, f"{where} names param {child.steps!r}, not an int", "type: int")]
    return []


def _pending_problems(spec: MachineSpec, child: ChildrenSpec) -> list[SpecProblem]:
    """``pending`` names a declared guard."""
    if child.pending is None or child.pending in spec.guards:
        return []
    return [
        SpecProblem(
            spec.path,
            child.line,
            f"children {child.name!r} `pending` names guard {child.pending!r}, which is not declared",
            close(child.pending, spec.guards) or "name a guard declared under `guards:`",
        )
    ]


def _child_edge_problems(spec: MachineSpec, child: ChildrenSpec) -> list[SpecProblem]:
    """The roles of a ``children:`` entry's edges, tied together: ``admitted`` is the one edge that counts
    ``starts`` (a child starts only there), and ``refused`` is the catch-all of the same decision, tried
    right after it, whose handler answers the call (a ``do`` with a ``changes`` contract): at the cap the
    call gets its answer and starts nothing."""

    def problem(message: str, fix: str) -> SpecProblem:
        return SpecProblem(spec.path, child.line, f"children {child.name!r} {message}", fix)

    reasons = {t.reason for t in spec.transitions}
    out = [
        problem(f"`{role}` names {reason!r}, which is not a reason of this machine", close(reason, reasons) or "")
        for role, reason in (("admitted", child.admitted), ("refused", child.refused))
        if reason not in reasons
    ]
    if out:
        return out
    admitted = [t for t in spec.transitions if t.reason == child.admitted]
    counting = sorted({t.reason for t in spec.transitions if t.counter == child.starts} - {child.admitted})
    if any(t.counter != child.starts for t in admitted):
        counts = admitted[0].counter
        out.append(
            problem(
                f"`starts` names counter {child.starts!r}, which its admitted edge {child.admitted!r} does not "
                f"count ({'it counts ' + repr(counts) if counts else 'it counts none'})",
                "name the counter the admitting edge counts",
            )
        )
    elif counting:
        out.append(
            problem(
                f"`starts` counter {child.starts!r} is counted by {counting} too: only the admitted edge "
                f"{child.admitted!r} may count the starts",
                "count the other edges with a counter of their own",
            )
        )
    candidates = spec.candidates()
    for t in admitted:
        cands = [c.reason for c in candidates[(t.source, t.event)]]
        after = cands[cands.index(t.reason) + 1 :]
        if not after or after[0] != child.refused:
            out.append(
                problem(
                    f"`refused` edge {child.refused!r} is not the candidate tried right after {child.admitted!r} "
                    f"(from {t.source!r} on {t.event!r}: {cands})",
                    "put the refusal right after the admitting edge, in the same decision",
                )
            )
    for t in (t for t in spec.transitions if t.reason == child.refused):
        if t.do is None or not t.changes:
            out.append(
                problem(
                    f"`refused` edge {child.refused!r} has no handler with a `changes` contract: at the cap the "
                    "call would get no answer",
                    "give it a `do` that answers the call and the fields it must change (`changes:`)",
                )
            )
        if not t.unguarded:
            out.append(
                problem(
                    f"`refused` edge {child.refused!r} has guards or a counter: at the cap the call could go "
                    "unanswered",
                    "make it the unguarded catch-all of its decision",
                )
            )
    return out
