"""The properties a machine declares, watched at every step of a run.

Owns :class:`Watcher` (a machine's properties as per-reason tables, built once) and :class:`Watch`, which names
the property a step would break. What each kind means and its static proof: :mod:`fsm.model.properties`.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .properties import ends_where_it_should
from .spec import MachineSpec, PropertySpec

__all__ = ["Watch", "Watcher"]


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
        restarts, counted = windows
        counts = self._counts
        for i in restarts:
            counts[i] = 0
        return self._window_broken(reason, counters, counted) if counted else None

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

    def _window_broken(self, reason: str, counters: tuple[int, ...], counted: tuple[int, ...]) -> str | None:
        """An ``at_most`` or ``in_a_row`` property: the step counted in each window ``counted`` names."""
        counts = self._counts
        for i in counted:
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
    tuple[tuple[int, str, str], ...],
    str | None,
    tuple[tuple[int, bool, bool, bool], ...],
    tuple[tuple[int, ...], tuple[int, ...]],
]
"""What a step for one reason does to the watch: its ``zeroed``, ``ended`` and ``path_actions`` entries, and the
windows its ``actions`` restart and those they count in."""


def _by_reason(watcher: Watcher) -> dict[str, _Touched]:
    """The watcher's four per-reason tables joined, for the reasons any of them names."""
    reasons = {*watcher.zeroed, *watcher.ended, *watcher.path_actions, *watcher.actions}
    return {
        r: (
            watcher.zeroed.get(r, ()),
            watcher.ended.get(r),
            watcher.path_actions.get(r, ()),
            _restarted_and_counted(watcher.actions.get(r, ())),
        )
        for r in reasons
    }


def _restarted_and_counted(actions: tuple[tuple[int, bool], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The windows a reason's ``actions`` restart, and those they count in (each in window order)."""
    return tuple(i for i, counts in actions if not counts), tuple(i for i, counts in actions if counts)


def _ended(spec: MachineSpec) -> dict[str, str]:
    """``ends`` properties: per reason whose edges end where a rule does not allow, what it breaks (the first)."""
    ended: dict[str, str] = {}
    for prop in (p for p in spec.properties if p.kind == "ends"):
        for b in ends_where_it_should(spec, prop):
            ended.setdefault(b.reasons[0], f"property {prop.name!r} broken at run time: {b.message}")
    return ended
