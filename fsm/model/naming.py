"""The rules about names: each stands for one kind of thing, follows the convention, and names what exists.

The convention is docs/machines.md's ("Naming"), held when a machine declares
``reason_kinds``. One function per rule, each returning its problems; ``rules`` runs them in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..errors import SpecProblem
from .problems import Lines, close, line_of
from .spec import MachineSpec, PropertySpec, TransitionSpec

__all__ = ["guard_meaning_problems", "naming_problems", "property_problems"]


def naming_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """No name stands for two kinds of thing; with ``reason_kinds``, names follow the convention."""
    out = _two_kinds_problems(spec, lines)
    if not spec.reason_kinds:
        return out
    suffixes = tuple(f"_{k}" for k in spec.reason_kinds)
    ladder = _unkinded_ladder_edges(spec, suffixes)
    ending = _unkinded_ending_edges(spec, suffixes, {t.reason for t in ladder})
    return [
        *out,
        *_activity_problems(spec),
        *(
            SpecProblem(
                spec.path,
                t.line,
                f"reason {t.reason!r} of a recovery ladder has no declared kind",
                "end it with one of: " + ", ".join(suffixes),
            )
            for t in ladder
        ),
        *(
            SpecProblem(
                spec.path,
                t.line,
                f"reason {t.reason!r} ends the run (in {t.dest!r}) but has no declared kind: an `ends` "
                "property, which matches declared kinds, would not see it",
                "end it with one of: " + ", ".join(suffixes) + " (or declare its kind under `reason_kinds:`)",
            )
            for t in ending
        ),
    ]


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _two_kinds_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A name given to a param, counter, guard, state, event or reason is given to nothing of another kind."""
    claims = [
        *((p.name, "param", p.line) for p in spec.params),
        *((c.name, "counter", c.line) for c in spec.counters),
        *((g, "guard", line_of(lines, ("guards", g))) for g in spec.guards),
        *((s.name, "state", s.line) for s in spec.states),
        *((e, "event", line_of(lines, ("events", e))) for e in spec.events),
        *((t.reason, "reason", t.line) for t in spec.transitions),
    ]
    out: list[SpecProblem] = []
    first: dict[str, tuple[str, int | None]] = {}
    for name, kind, line in claims:
        was, was_line = first.setdefault(name, (kind, line))
        if was != kind:
            where = f" (line {was_line})" if was_line else ""
            out.append(
                SpecProblem(
                    spec.path,
                    line,
                    f"{name!r} is both {_a(was)}{where} and {_a(kind)}",
                    "rename one: a name stands for one kind of thing",
                )
            )
    return out


def _activity_problems(spec: MachineSpec) -> list[SpecProblem]:
    """A state a run stays in while something happens is named as an activity."""
    return [
        SpecProblem(
            spec.path,
            s.line,
            f"state {s.name!r} is not named as an activity",
            "name what it does: `calling_model`, `backing_off`",
        )
        for s in spec.states
        if not s.terminal and not any(word.endswith("ing") for word in s.name.split("_"))
    ]


def _unkinded_ladder_edges(spec: MachineSpec, suffixes: tuple[str, ...]) -> list[TransitionSpec]:
    """The first edge of each reason that is counted, or tried after a counted one, without a declared kind."""
    found: dict[str, TransitionSpec] = {}
    for cands in spec.candidates().values():
        counted = False
        for t in cands:
            counted = counted or (t.counter is not None and not t.progress)
            if counted and not t.reason.endswith(suffixes):
                found.setdefault(t.reason, t)
    return list(found.values())


def _unkinded_ending_edges(spec: MachineSpec, suffixes: tuple[str, ...], reported: set[str]) -> list[TransitionSpec]:
    """With an ``ends`` property (it sees an edge by its declared kind): the first edge of each reason not
    yet ``reported`` that ends the run without a declared kind."""
    if not any(p.kind == "ends" for p in spec.properties):
        return []
    found: dict[str, TransitionSpec] = {}
    for t in spec.transitions:
        state = spec.state_map.get(t.dest)
        if state is not None and state.terminal and not t.reason.endswith(suffixes) and t.reason not in reported:
            found.setdefault(t.reason, t)
    return list(found.values())


def property_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A declared property names reasons, counters and params that exist (whether it holds is ``check``'s)."""
    reasons = {t.reason for t in spec.transitions}
    return [problem for prop in spec.properties for problem in _one_property(spec, prop, reasons)]


def _one_property(spec: MachineSpec, prop: PropertySpec, reasons: set[str]) -> list[SpecProblem]:
    """Per kind of name, in this order: the names the property gives, what declares them, and the fix."""
    counters = (*((prop.counter,) if prop.counter is not None else ()), *prop.counters)
    param = (prop.most.partition(" ")[0],) if isinstance(prop.most, str) else ()
    named: Sequence[tuple[str, Iterable[str], Iterable[str], str]] = (
        ("reason", prop.reasons, reasons, "name reasons of this machine's transitions"),
        ("counter", counters, spec.counter_map, "name a counter declared under `counters:`"),
        ("state", (*prop.states, *prop.by), spec.state_map, "name a state declared under `states:`"),
        ("reason kind", (k for r in prop.rules for k in r.kinds), spec.reason_kinds, _KIND_FIX),
        ("guard", () if prop.guard is None else (prop.guard,), spec.guards, "name a guard declared under `guards:`"),
        ("param", param, spec.param_map, "name a declared param"),
    )
    return [
        SpecProblem(
            spec.path,
            prop.line,
            f"property {prop.name!r} names the {what} {name!r}, "
            + ("which no transition has" if what == "reason" else "which is not declared"),
            close(name, declared) or fix,
        )
        for what, names, declared, fix in named
        for name in names
        if name not in declared
    ]


_KIND_FIX = "name a kind declared under `reason_kinds:`"


def guard_meaning_problems(spec: MachineSpec, lines: Lines) -> list[SpecProblem]:
    """A guard's ``decides`` names reasons of this machine's transitions (whether they name it is ``check``'s);
    in the convention's machines every guard an edge asks says what it decides."""
    reasons = {t.reason for t in spec.transitions}
    undecided = [] if not spec.reason_kinds else _undecided_guards(spec)
    return [
        *(
            SpecProblem(
                spec.path,
                line_of(lines, ("guards", guard)),
                f"guard {guard!r} declares no `decides`: the edges it decides would be a free choice to `check`",
                "list the reasons of exactly the edges that ask it (`decides: [...]`)",
            )
            for guard in undecided
        ),
        *(
            SpecProblem(
                spec.path,
                line_of(lines, ("guards", guard)),
                f"guard {guard!r} `decides` names the reason {reason!r}, which no transition has",
                close(reason, reasons) or "name reasons of this machine's transitions",
            )
            for guard, decided in spec.guard_decides.items()
            for reason in decided
            if reason not in reasons
        ),
    ]


def _undecided_guards(spec: MachineSpec) -> list[str]:
    return [
        guard
        for guard in spec.guards
        if guard not in spec.guard_decides and any(guard in t.guards for t in spec.transitions)
    ]
