"""The properties a machine declares, proven from the YAML by ``check``.

Owns what each kind means (docs/machines.md) and its static proof; what a run watches
is in :mod:`fsm.model.watch`. Reads only :mod:`fsm.model.spec` records; runs no handler.
"""

from __future__ import annotations

import attrs

from .spec import MachineSpec, PropertySpec, TransitionSpec

__all__ = ["Broken", "broken_guard_meanings", "broken_properties", "ends_where_it_should", "may_be_positive"]


@attrs.frozen(kw_only=True)
class Broken:
    """A declared property the declaration does not keep: which one, why, and the reasons involved."""

    name: str
    message: str
    reasons: tuple[str, ...] = ()
    source: str | None = None  # the state the edge that breaks it leaves, when one edge does


def broken_properties(spec: MachineSpec) -> list[Broken]:
    """Every declared property the machine cannot be shown to keep, for every allowed param value."""
    out: list[Broken] = []
    for prop in spec.properties:
        if prop.kind == "order":
            out.extend(_order(spec, prop))
        elif prop.kind == "at_most":
            out.extend(_at_most(spec, prop))
        elif prop.kind == "resets":
            out.extend(_resets(spec, prop))
        elif prop.kind == "guarded":
            out.extend(_guarded(spec, prop))
        elif prop.kind == "preceded":
            out.extend(_preceded(spec, prop))
        elif prop.kind == "ends":
            out.extend(ends_where_it_should(spec, prop))
        elif prop.kind == "trips":
            out.extend(_trips(spec, prop))
        else:
            out.extend(_in_a_row(spec, prop))
    return out


def broken_guard_meanings(spec: MachineSpec) -> list[Broken]:
    """Exact: a guard that declares the edges it decides (``decides:``) is named by exactly those edges.

    A guard is a free choice to the checker; what it decides is its declared meaning. An edge
    listed without the guard would be taken where the guard would refuse it (a fallback with no
    model left); an edge naming it unlisted is decided by a question asked for another edge."""
    out: list[Broken] = []
    for guard, decided in spec.guard_decides.items():
        doc = spec.guard_docs.get(guard) or guard
        for t in spec.transitions:
            listed, named = t.reason in decided, guard in t.guards
            if listed and not named:
                message = (
                    f"guard {guard!r} ({doc}) decides {t.reason!r}, but that edge (from {t.source!r}) is taken "
                    "without asking it"
                )
            elif named and not listed:
                message = (
                    f"guard {guard!r} ({doc}) decides {t.reason!r} (from {t.source!r}), which its `decides` does "
                    "not list: the question is asked for an edge it does not mean"
                )
            else:
                continue
            out.append(Broken(name=guard, message=message, reasons=(t.reason,), source=t.source))
    return out


def _preceded(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    """Exact for the graph (guards and counters free): a search over (state, entered one of ``by`` since the
    scope began) from the initial state finds every edge into ``states`` that can come first."""
    by, into = frozenset(prop.by), frozenset(prop.states)
    start = (spec.initial, spec.initial in by)
    seen = {start}
    todo = [start]
    found: dict[str, str] = {}
    out_of: dict[str, list[TransitionSpec]] = {}
    for t in spec.transitions:
        if not spec.never_fires(t):
            out_of.setdefault(t.source, []).append(t)
    while todo:
        state, was = todo.pop()
        for t in out_of.get(state, ()):
            now = t.dest in by or (was and not spec.ends_scope(t, prop.per))
            if t.dest in into and not now:
                found.setdefault(t.reason, t.source)
            if (t.dest, now) not in seen:
                seen.add((t.dest, now))
                todo.append((t.dest, now))
    return [
        Broken(
            name=prop.name,
            message=f"property {prop.name!r} ({prop.doc}): {reason!r} (from {source!r}) enters "
            f"{spec.transitions_to(reason)} with no step into {sorted(by)} since the {prop.per} began",
            reasons=(reason,),
            source=source,
        )
        for reason, source in sorted(found.items())
    ]


def ends_where_it_should(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    """Exact: every edge a rule covers goes to a terminal state whose result the rule accepts."""
    out: list[Broken] = []
    for t in spec.transitions:
        rule = next((r for r in prop.rules if r.covers(t.reason)), None)
        if rule is None or rule.kept_by(spec.state_map[t.dest]):
            continue
        dest = spec.state_map[t.dest]
        went = f"the terminal state {t.dest!r} (result {dict(dest.result)})" if dest.terminal else f"{t.dest!r}"
        out.append(
            Broken(
                name=prop.name,
                message=f"property {prop.name!r} ({prop.doc}): {t.reason!r} (from {t.source!r}) goes to {went}, "
                f"not {rule.wanted()}",
                reasons=(t.reason,),
                source=t.source,
            )
        )
    return out


def _resets(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    """Exact: each listed edge's reset set (explicit, scope, streak) holds every listed counter."""
    out: list[Broken] = []
    for t in (t for t in spec.transitions if t.reason in prop.reasons):
        kept = [c for c in prop.counters if c not in spec.resets_of(t)]
        if kept:
            out.append(
                Broken(
                    name=prop.name,
                    message=f"property {prop.name!r} ({prop.doc}): {t.reason!r} (from {t.source!r}) leaves "
                    f"{kept} as they were; it must reset them (its scope, ended by `progress` or `ends:`, or "
                    "`resets:`)",
                    reasons=(t.reason,),
                )
            )
    return out


def _guarded(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    """Exact: every listed edge names the guard (the engine takes an edge only while all its guards hold)."""
    return [
        Broken(
            name=prop.name,
            message=f"property {prop.name!r} ({prop.doc}): {t.reason!r} (from {t.source!r}) can be taken without "
            f"its guard {prop.guard!r}",
            reasons=(t.reason,),
        )
        for t in spec.transitions
        if t.reason in prop.reasons and prop.guard not in t.guards
    ]


def _order(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    rank = {r: i for i, r in enumerate(prop.reasons)}
    out: list[Broken] = []
    shared = 0
    for (source, event), cands in spec.candidates().items():
        listed = [t.reason for t in cands if t.reason in rank]
        if len(listed) < 2:
            continue
        shared += 1
        if listed != sorted(listed, key=rank.__getitem__):
            out.append(
                Broken(
                    name=prop.name,
                    message=f"property {prop.name!r} ({prop.doc}): from {source!r} on {event!r} the candidates are "
                    f"tried in the order {listed}, not {[r for r in prop.reasons if r in listed]}",
                    reasons=tuple(listed),
                )
            )
    if not shared:
        out.append(
            Broken(
                name=prop.name,
                message=f"property {prop.name!r} ({prop.doc}): no decision has two of {list(prop.reasons)} "
                "as candidates, so no order between them is kept",
                reasons=prop.reasons,
            )
        )
    return out


def _limit(spec: MachineSpec, value: int | str, offset: int = 0) -> tuple[str | None, int]:
    """A cap or a bound as ``(param, offset)``: ``(None, n)`` for the int ``n``."""
    if isinstance(value, int):
        return None, value + offset
    name, _, rest = value.partition(" ")
    sign, _, amount = rest.partition(" ")
    extra = int(amount) if sign == "+" else -int(amount) if sign == "-" else 0
    return name, extra + offset


def _cap_within(spec: MachineSpec, cap: tuple[str | None, int], most: tuple[str | None, int]) -> bool:
    """Whether ``cap`` ≤ ``most`` for every value a caller may give the params they name."""
    (cap_param, cap_n), (most_param, most_n) = cap, most
    if cap_param == most_param:
        return cap_n <= most_n
    if cap_param is None:  # an int cap against a param bound: the bound's smallest value is 0
        return cap_n <= most_n
    param = spec.param_map[cap_param]
    if most_param is None and param.most is not None and not param.nullable:
        return param.most + cap_n <= most_n
    return False


def _at_most(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    assert prop.most is not None
    edges = [t for t in spec.transitions if t.reason in prop.reasons]
    counters = {t.counter for t in edges if t.counter is not None}
    head = f"property {prop.name!r} ({prop.doc}): {list(prop.reasons)} at most {prop.most} per {prop.per}"
    uncounted = sorted({t.reason for t in edges if t.counter is None})
    if uncounted or len(counters) != 1:
        why = f"{uncounted} counted by no counter" if uncounted else f"they are counted by {sorted(counters)}"
        return [Broken(name=prop.name, message=f"{head} is not proven: {why}", reasons=prop.reasons)]
    counter = spec.counter_map[next(iter(counters))]
    cap = _limit(spec, counter.cap, counter.cap_offset)
    if not _cap_within(spec, cap, _limit(spec, prop.most)):
        shown = counter.cap if not counter.cap_offset else f"{counter.cap} {counter.cap_offset:+d}"
        return [
            Broken(
                name=prop.name,
                message=f"{head} is not kept: their counter {counter.name!r} is capped at {shown}, "
                f"which may be more than {prop.most}",
                reasons=prop.reasons,
            )
        ]
    positive = may_be_positive(spec, counter.name)
    inside = sorted(
        {
            t.reason
            for t in spec.transitions
            if counter.name in spec.resets_of(t) and not spec.ends_scope(t, prop.per) and t.source in positive
        }
    )
    if inside:
        return [
            Broken(
                name=prop.name,
                message=f"{head} is not kept: their counter {counter.name!r} is reset by {inside} within a "
                f"{prop.per}, so the count starts again before the {prop.per} ends",
                reasons=(*prop.reasons, *inside),
            )
        ]
    return []


def _trips(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    """Exact for the declaration: wherever the breaker is a candidate, the one tried right before it is counted
    by a counter whose cap is ``at − 1`` for every param value, and asks no guard the breaker does not (so the
    counted edge is refused only by its cap, and the breaker then fires). The ``at``-th occurrence in a row
    of the outcome is then the breaker's: the counter counts the ``at − 1`` before it (its ``in_a_row``
    property, if declared, says they are in a row)."""
    assert prop.most is not None
    breaker = prop.reasons[0]
    head = f"property {prop.name!r} ({prop.doc}): {breaker!r} trips on occurrence {prop.most} in a row"
    out: list[Broken] = []
    for (source, event), cands in spec.candidates().items():
        names = [t.reason for t in cands]
        if breaker not in names:
            continue
        at = names.index(breaker)
        counted = cands[at - 1] if at else None
        if counted is None or counted.counter is None:
            why = "no counted edge is tried right before it"
        elif not set(cands[at].guards) <= set(counted.guards):
            why = f"it asks {sorted(set(cands[at].guards) - set(counted.guards))}, which {counted.reason!r} does not"
        else:
            counter = spec.counter_map[counted.counter]
            cap = _limit(spec, counter.cap, counter.cap_offset)
            name, n = _limit(spec, prop.most)
            if cap == (name, n - 1):
                continue
            shown = counter.cap if not counter.cap_offset else f"{counter.cap} {counter.cap_offset:+d}"
            why = f"{counted.reason!r} is counted by {counter.name!r}, capped at {shown}, not {prop.most} - 1"
        out.append(
            Broken(
                name=prop.name,
                message=f"{head} is not kept (from {source!r} on {event!r}): {why}",
                reasons=(breaker,),
                source=source,
            )
        )
    return out


def may_be_positive(spec: MachineSpec, counter: str) -> frozenset[str]:
    """The states a run may be in with ``counter`` above 0: those an edge counting it reaches, then every state
    an edge that does not reset it leads on to (guards free; a run starts with every counter at 0).

    A reset where the counter is always 0 changes nothing: it restarts no count and breaks no budget.
    """
    counting = [t.dest for t in spec.transitions if t.counter == counter and not spec.never_fires(t)]
    keeping: dict[str, list[str]] = {}
    for t in spec.transitions:
        if counter not in spec.resets_of(t) and not spec.never_fires(t):
            keeping.setdefault(t.source, []).append(t.dest)
    seen = set(counting)
    todo = list(counting)
    while todo:
        for dest in keeping.get(todo.pop(), ()):
            if dest not in seen:
                seen.add(dest)
                todo.append(dest)
    return frozenset(seen)


def _in_a_row(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
    assert prop.counter is not None
    name = prop.counter
    counted = [t for t in spec.transitions if t.counter == name]
    head = f"property {prop.name!r} ({prop.doc}): {name!r} counts in a row"
    if not counted:
        return [Broken(name=prop.name, message=f"{head} is not kept: no edge counts it")]
    resetting = {t.reason for t in spec.transitions if name in spec.resets_of(t)}
    if prop.reasons:  # exactly these edges break the streak
        missing = sorted(set(prop.reasons) - resetting)
        positive = may_be_positive(spec, name)
        harmful = {t.reason for t in spec.transitions if name in spec.resets_of(t) and t.source in positive}
        extra = sorted(r for r in (resetting & harmful) - set(prop.reasons) if not _ends(spec, r))
        if missing or extra:
            why = "; ".join(
                part
                for part in (
                    f"{missing} do not reset it" if missing else "",
                    f"{extra} reset it too" if extra else "",
                )
                if part
            )
            return [Broken(name=prop.name, message=f"{head} is not kept: {why}", reasons=tuple(missing + extra))]
        return []
    events = {t.event for t in counted}
    sources = {t.source for t in counted}
    kept = sorted(
        t.reason
        for t in spec.transitions
        if t.source in sources
        and t.event not in events
        and t.event != spec.abort_event
        and not spec.state_map[t.dest].terminal
        and t.reason not in resetting
    )
    if kept:
        return [
            Broken(
                name=prop.name,
                message=f"{head} is not kept: {kept} (other outcomes of {sorted(sources)}) do not reset it, "
                "so it counts in total, not in a row",
                reasons=tuple(kept),
            )
        ]
    return []


def _ends(spec: MachineSpec, reason: str) -> bool:
    return all(spec.state_map[t.dest].terminal for t in spec.transitions if t.reason == reason)
