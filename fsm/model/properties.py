"""The properties a machine declares: proven from the YAML by ``check``, and watched at every step of a run.

Owns what each kind means (docs/machines.md), its static proof, and the run-time
:class:`Watch` that names the property a step would break. Reads only
:mod:`fsm.model.spec` records; runs no handler.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .spec import MachineSpec, PropertySpec, TransitionSpec

__all__ = ["Broken", "Watch", "Watcher", "broken_guard_meanings", "broken_properties", "may_be_positive"]


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
            out.extend(_ends_where_it_should(spec, prop))
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


def _ends_where_it_should(spec: MachineSpec, prop: PropertySpec) -> list[Broken]:
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
    paths: tuple[str, ...] = ()
    """``preceded`` properties: what each says when a step into its states comes first in its scope."""
    path_actions: Mapping[str, tuple[tuple[int, bool, bool, bool], ...]] = attrs.field(factory=dict)
    """Per reason, for each ``preceded`` property it touches: (index, restarts its scope, enters one of its
    ``by``, enters one of its states)."""
    ended: Mapping[str, str] = attrs.field(factory=dict)
    """``ends`` properties: per reason whose edges end where a rule does not allow, what it breaks."""
    by_reason: Mapping[str, _Touched] = attrs.field(
        default=attrs.Factory(lambda self: _by_reason(self), takes_self=True), init=False
    )
    """The four tables above joined per reason, so a step looks its reason up once (a reason no property
    names: one dictionary miss)."""

    @classmethod
    def of(cls, spec: MachineSpec, counter_names: tuple[str, ...]) -> Watcher:
        windows, actions = _windows(spec, counter_names)
        paths, path_actions = _paths(spec)
        return cls(
            windows=windows,
            actions=actions,
            spec=spec,
            zeroed=_zeroed(spec, counter_names),
            paths=paths,
            path_actions=path_actions,
            ended=_ended(spec),
        )

    def watch(self, params: Mapping[str, object], counters: tuple[int, ...] | None = None) -> Watch:
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
            # a restored run may stand past the step a `preceded` property wants first: not blamed for it
            watch._seen = [True] * len(self.paths)
        return watch


class Watch:
    """What one run has done against each watched property; :meth:`broken_by` names what a step would break."""

    __slots__ = ("_by_reason", "_counts", "_limits", "_paths", "_seen", "_windows")

    def __init__(self, watcher: Watcher, limits: tuple[int | None, ...]) -> None:
        self._by_reason = watcher.by_reason
        self._windows = watcher.windows
        self._limits = limits
        self._counts = [0] * len(limits)
        self._paths = watcher.paths
        self._seen = [watcher.spec.initial in p.by for p in watcher.spec.properties if p.kind == "preceded"]

    def broken_by(self, reason: str, counters: tuple[int, ...]) -> str | None:
        """Count a step taken for ``reason`` (``counters``: after it); the first property it breaks, else ``None``."""
        touched = self._by_reason.get(reason)
        if touched is None:
            return None  # no property names the reason
        zeroed, ended, paths, windows = touched
        if zeroed:
            broken = self._not_zeroed(reason, counters, zeroed)
            if broken is not None:
                return broken
        if ended is not None:
            return ended
        if paths:
            broken = self._path_broken(reason, paths)
            if broken is not None:
                return broken
        return self._window_broken(reason, counters, windows) if windows else None

    @staticmethod
    def _not_zeroed(reason: str, counters: tuple[int, ...], zeroed: tuple[tuple[int, str, str], ...]) -> str | None:
        """A ``resets`` property: a counter it wants at 0 after ``reason`` is not."""
        for index, name, said in zeroed:
            if counters[index]:
                return f"{said}: {name} is {counters[index]} after {reason!r}, not 0"
        return None

    def _path_broken(self, reason: str, actions: tuple[tuple[int, bool, bool, bool], ...]) -> str | None:
        """A ``preceded`` property: ``reason`` enters one of its states with no step into its ``by`` first."""
        seen = self._seen
        for i, restarts, marks, checks in actions:
            if restarts:
                seen[i] = False
            if marks:
                seen[i] = True
            if checks and not seen[i]:
                return f"{self._paths[i]}, and {reason!r} enters one of its states"
        return None

    def _window_broken(
        self, reason: str, counters: tuple[int, ...], actions: tuple[tuple[int, bool], ...]
    ) -> str | None:
        """An ``at_most`` or ``in_a_row`` property: the step counted in (or restarting) each window it touches."""
        counts = self._counts
        for i, counting in actions:
            if not counting:
                counts[i] = 0
                continue
            counts[i] += 1
            broken = self._past_window(i, reason, counters)
            if broken is not None:
                return broken
        return None

    def _past_window(self, i: int, reason: str, counters: tuple[int, ...]) -> str | None:
        w, n = self._windows[i], self._counts[i]
        if w.counter is not None:
            if counters[w.counter] > n:
                said = f"its counter is {counters[w.counter]} after {n} in a row"
                return f"property {w.name!r} broken at run time ({w.doc}): {said}"
            return None
        limit = self._limits[i]
        if limit is not None and n > limit:
            return f"property {w.name!r} broken at run time ({w.doc}): {reason!r} taken {n} times, above {limit}"
        return None


# ---- compiling the watcher -------------------------------------------------------------------


def _windows(
    spec: MachineSpec, counter_names: tuple[str, ...]
) -> tuple[tuple[_Window, ...], dict[str, tuple[tuple[int, bool], ...]]]:
    """The ``at_most`` and ``in_a_row`` windows, and per reason what a step for it does to each: count (True)
    or restart (False)."""
    windows: list[_Window] = []
    actions: dict[str, list[tuple[int, bool]]] = {}
    for prop in spec.properties:
        found = _window_of(spec, prop, counter_names)
        if found is None:
            continue
        window, counts, restarts = found
        for reason in counts:
            actions.setdefault(reason, []).append((len(windows), True))
        for reason in restarts - counts:
            actions.setdefault(reason, []).append((len(windows), False))
        windows.append(window)
    return tuple(windows), {r: tuple(a) for r, a in actions.items()}


def _window_of(
    spec: MachineSpec, prop: PropertySpec, counter_names: tuple[str, ...]
) -> tuple[_Window, set[str], set[str]] | None:
    """The window a property is watched with, the reasons it counts and those that restart it (else ``None``)."""
    if prop.kind == "at_most":
        restarts = {t.reason for t in spec.transitions if spec.ends_scope(t, prop.per)}
        return _Window(name=prop.name, doc=prop.doc, most=prop.most, counter=None), set(prop.reasons), restarts
    if prop.kind != "in_a_row" or prop.counter is None:
        return None
    counted = [t for t in spec.transitions if t.counter == prop.counter]
    if prop.reasons:
        restarts = set(prop.reasons)
    else:  # any other outcome of a state that counts it
        events = {t.event for t in counted}
        sources = {t.source for t in counted}
        restarts = {t.reason for t in spec.transitions if t.source in sources and t.event not in events}
    window = _Window(name=prop.name, doc=prop.doc, most=None, counter=counter_names.index(prop.counter))
    return window, {t.reason for t in counted}, restarts


def _zeroed(spec: MachineSpec, counter_names: tuple[str, ...]) -> dict[str, tuple[tuple[int, str, str], ...]]:
    """``resets`` properties: per reason, (counter index, counter, what it breaks) for each counter it zeroes."""
    zeroed: dict[str, list[tuple[int, str, str]]] = {}
    for prop in (p for p in spec.properties if p.kind == "resets"):
        for reason in prop.reasons:
            zeroed.setdefault(reason, []).extend(
                (counter_names.index(c), c, f"property {prop.name!r} broken at run time ({prop.doc})")
                for c in prop.counters
            )
    return {r: tuple(z) for r, z in zeroed.items()}


def _paths(spec: MachineSpec) -> tuple[tuple[str, ...], dict[str, tuple[tuple[int, bool, bool, bool], ...]]]:
    """``preceded`` properties: what each says when broken, and per reason, for each it touches: (index,
    restarts its scope, enters one of its ``by``, enters one of its states)."""
    paths: list[str] = []
    path_actions: dict[str, list[tuple[int, bool, bool, bool]]] = {}
    for prop in (p for p in spec.properties if p.kind == "preceded"):
        for reason in dict.fromkeys(t.reason for t in spec.transitions):
            edges = [t for t in spec.transitions if t.reason == reason]
            restart = any(spec.ends_scope(t, prop.per) for t in edges)
            mark = any(t.dest in prop.by for t in edges)
            check = any(t.dest in prop.states for t in edges)
            if restart or mark or check:
                path_actions.setdefault(reason, []).append((len(paths), restart, mark, check))
        paths.append(
            f"property {prop.name!r} broken at run time ({prop.doc}): no step into "
            f"{', '.join(prop.by)} since the {prop.per} began"
        )
    return tuple(paths), {r: tuple(a) for r, a in path_actions.items()}


_Touched = tuple[
    tuple[tuple[int, str, str], ...], str | None, tuple[tuple[int, bool, bool, bool], ...], tuple[tuple[int, bool], ...]
]
"""What a step for one reason does to the watch: (``zeroed``, ``ended``, ``path_actions``, ``actions``) entries."""


def _by_reason(watcher: Watcher) -> dict[str, _Touched]:
    """The watcher's four per-reason tables joined, for the reasons any of them names."""
    reasons = {*watcher.zeroed, *watcher.ended, *watcher.path_actions, *watcher.actions}
    return {
        r: (
            watcher.zeroed.get(r, ()),
            watcher.ended.get(r),
            watcher.path_actions.get(r, ()),
            watcher.actions.get(r, ()),
        )
        for r in reasons
    }


def _ended(spec: MachineSpec) -> dict[str, str]:
    """``ends`` properties: per reason whose edges end where a rule does not allow, what it breaks (the first)."""
    ended: dict[str, str] = {}
    for prop in (p for p in spec.properties if p.kind == "ends"):
        for b in _ends_where_it_should(spec, prop):
            ended.setdefault(b.reasons[0], f"property {prop.name!r} broken at run time: {b.message}")
    return ended
