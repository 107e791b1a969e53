"""The properties a machine declares: proven from the YAML by ``check``, and watched at every step of a run.

Owns what each kind of property means (``order``, ``at_most``, ``in_a_row``, ``resets``,
``guarded`` — see :class:`~fsm.spec.PropertySpec`), the static proof of each from the
declaration alone, and the run-time :class:`Watch` that counts what a run has done and
names the property a step would break. A static proof is sufficient, not exhaustive: an
``at_most`` holds when one counter counts every edge it names, its cap is at most the
property's bound for every allowed param value (the params' declared ``max`` is used
here) and nothing inside the scope resets it; anything else is reported as unproven,
naming why. The proofs of ``resets`` (the edge's reset set) and ``guarded`` (the edge's
guards) are exact. Reads only :mod:`fsm.spec` records; runs no handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .spec import MachineSpec, PropertySpec, TransitionSpec

__all__ = ["Broken", "Watch", "Watcher", "broken_properties"]


@attrs.frozen(kw_only=True)
class Broken:
    """A declared property the declaration does not keep: which one, why, and the reasons involved."""

    name: str
    message: str
    reasons: tuple[str, ...] = ()


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
        else:
            out.extend(_in_a_row(spec, prop))
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
                    f"{kept} as they were; it must reset them (its scope, `completes_request`/`progress`, or "
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


def _scope_resets(t: TransitionSpec, per: str) -> bool:
    """Whether taking ``t`` begins a new ``per`` scope (so a count per that scope may start again)."""
    if per == "run":
        return False
    if per == "turn":
        return t.progress
    return t.progress or t.completes_request


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
    inside = sorted(
        {t.reason for t in spec.transitions if counter.name in spec.resets_of(t) and not _scope_resets(t, prop.per)}
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
        extra = sorted(r for r in resetting - set(prop.reasons) if not _ends(spec, r))
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


# ---- at run time ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True, slots=True)
class _Window:
    """One ``at_most`` or ``in_a_row`` property as a run watches it.

    ``at_most``: the steps taken for ``counts`` since the last step for ``restarts`` (a new
    scope) may not exceed the bound. ``in_a_row``: the counter may never be more than the
    steps for ``counts`` since the last step for ``restarts`` (another outcome, or a listed
    success): a count in a row, never a count in total.
    """

    name: str
    doc: str
    most: int | str | None  # at_most: the bound; in_a_row: None
    counter: int | None  # in_a_row: the counter's index


@attrs.frozen(kw_only=True, slots=True)
class Watcher:
    """A machine's ``at_most`` and ``in_a_row`` properties compiled for watching runs (build once per machine).

    ``actions`` maps a reason to what a step for it does to each window it touches: count
    (True) or restart (False); a reason no property names costs one dictionary miss.
    """

    windows: tuple[_Window, ...]
    actions: Mapping[str, tuple[tuple[int, bool], ...]]
    spec: MachineSpec
    zeroed: Mapping[str, tuple[tuple[int, str, str], ...]] = attrs.field(factory=dict)
    """``resets`` properties: per reason, (counter index, counter, property) that must be 0 after it."""

    @classmethod
    def of(cls, spec: MachineSpec, counter_names: tuple[str, ...]) -> Watcher:
        windows: list[_Window] = []
        actions: dict[str, list[tuple[int, bool]]] = {}

        def add(window: _Window, counts: set[str], restarts: set[str]) -> None:
            for reason in counts:
                actions.setdefault(reason, []).append((len(windows), True))
            for reason in restarts - counts:
                actions.setdefault(reason, []).append((len(windows), False))
            windows.append(window)

        for prop in spec.properties:
            if prop.kind == "at_most":
                restarts = {t.reason for t in spec.transitions if _scope_resets(t, prop.per)}
                add(_Window(name=prop.name, doc=prop.doc, most=prop.most, counter=None), set(prop.reasons), restarts)
            elif prop.kind == "in_a_row" and prop.counter is not None:
                counted = [t for t in spec.transitions if t.counter == prop.counter]
                if prop.reasons:
                    restarts = set(prop.reasons)
                else:
                    events = {t.event for t in counted}
                    sources = {t.source for t in counted}
                    restarts = {t.reason for t in spec.transitions if t.source in sources and t.event not in events}
                window = _Window(name=prop.name, doc=prop.doc, most=None, counter=counter_names.index(prop.counter))
                add(window, {t.reason for t in counted}, restarts)
        zeroed: dict[str, list[tuple[int, str, str]]] = {}
        for prop in spec.properties:
            if prop.kind == "resets":
                for reason in prop.reasons:
                    zeroed.setdefault(reason, []).extend(
                        (counter_names.index(c), c, f"property {prop.name!r} broken at run time ({prop.doc})")
                        for c in prop.counters
                    )
        return cls(
            windows=tuple(windows),
            actions={r: tuple(a) for r, a in actions.items()},
            spec=spec,
            zeroed={r: tuple(z) for r, z in zeroed.items()},
        )

    def watch(self, params: Mapping[str, Any], counters: tuple[int, ...] | None = None) -> Watch:
        """The watch over one run, with each bound resolved for its params (a null param: no bound).

        ``counters`` are those of a run restored part-way (a snapshot, a resumed session): a streak
        then starts at its counter's value, since the steps before the restore are not seen. A
        budget starts at 0 there, so the watch can only under-count a restored run, never blame it.
        """
        limits = tuple(None if w.most is None else self.spec.limit_of(w.most, params) for w in self.windows)
        watch = Watch(self, limits)
        if counters is not None:
            for i, w in enumerate(self.windows):
                if w.counter is not None:
                    watch._counts[i] = counters[w.counter]
        return watch


class Watch:
    """What one run has done against each watched property; :meth:`broken_by` names what a step would break."""

    __slots__ = ("_actions", "_counts", "_limits", "_windows", "_zeroed")

    def __init__(self, watcher: Watcher, limits: tuple[int | None, ...]) -> None:
        self._actions = watcher.actions
        self._zeroed = watcher.zeroed
        self._windows = watcher.windows
        self._limits = limits
        self._counts = [0] * len(limits)

    def broken_by(self, reason: str, counters: tuple[int, ...]) -> str | None:
        """Count a step taken for ``reason`` (``counters``: after it); the first property it breaks, else ``None``."""
        for index, name, said in self._zeroed.get(reason, ()):
            if counters[index]:
                return f"{said}: {name} is {counters[index]} after {reason!r}, not 0"
        touched = self._actions.get(reason)
        if touched is None:
            return None
        counts = self._counts
        for i, counting in touched:
            if not counting:
                counts[i] = 0
                continue
            counts[i] += 1
            w = self._windows[i]
            if w.counter is not None:
                if counters[w.counter] > counts[i]:
                    return (
                        f"property {w.name!r} broken at run time ({w.doc}): its counter is "
                        f"{counters[w.counter]} after {counts[i]} in a row"
                    )
                continue
            limit = self._limits[i]
            if limit is not None and counts[i] > limit:
                return (
                    f"property {w.name!r} broken at run time ({w.doc}): {reason!r} taken {counts[i]} times, "
                    f"above {limit}"
                )
        return None
