"""What SPIN checks, derived from the declaration apart from the engine: each edge's reset set, and the
declared properties as ghost monitors (or why SPIN cannot check one).

Written independently of ``MachineSpec.resets_of`` and the checker's passes; the Promela text is ``promela``'s.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..model.spec import MachineSpec, PropertySpec, TransitionSpec

__all__ = ["LIVENESS", "Monitors", "derived_resets", "property_monitors", "scope_ended"]

LIVENESS = "every_step_ends"  # the name of the LTL formula


def derived_resets(spec: MachineSpec) -> dict[tuple[str, str], frozenset[str]]:
    """Per edge (source state, reason), the counters it sets to 0, by docs/machines.md's rules ("Counters and scopes").

    Written counter by counter, independently of ``MachineSpec.resets_of`` (the engine's and the
    checker's), so that SPIN checks the declared semantics rather than repeating our reading of
    it: a counter is reset by the edges listing it under ``resets``, by the reasons of its
    ``consecutive``, by every other outcome of a state that emits an event of its ``streak_of``,
    and by scope (every declared scope at a ``progress`` edge; at an ``ends:`` edge, its scope and
    those declared before it, inside it) — but scope and streak never reset the edge's own counter.
    """
    emits = {s.name: frozenset(s.emits) for s in spec.states}
    out: dict[tuple[str, str], set[str]] = {(t.source, t.reason): set(t.resets) for t in spec.transitions}
    for c in spec.counters:
        streak = frozenset(c.streak_of)
        for t in spec.transitions:
            if t.reason in c.consecutive:
                out[t.source, t.reason].add(c.name)
            if t.counter == c.name:
                continue
            breaks_streak = bool(streak & emits.get(t.source, frozenset())) and t.event not in streak
            if breaks_streak or scope_ended(spec, t, c.scope):
                out[t.source, t.reason].add(c.name)
    return {edge: frozenset(counters) for edge, counters in out.items()}


@attrs.frozen(kw_only=True)
class _Budget:
    """An ``at_most`` property as a ghost counter: +1 on ``counts``, 0 on ``restarts`` (a new scope)."""

    name: str
    var: str
    counts: frozenset[str]
    restarts: frozenset[str]
    limit: int
    per: str


@attrs.frozen(kw_only=True)
class _Streak:
    """An ``in_a_row`` property as a ghost counter of the steps counting ``counter`` since the streak broke."""

    name: str
    var: str
    counter: str
    counts: frozenset[str]
    restarts: frozenset[str]
    cap: int


@attrs.frozen(kw_only=True)
class _Path:
    """A ``preceded`` property as a ghost bit: 1 once a step enters one of ``by``, 0 where its scope begins;
    a step into one of ``states`` asserts it is 1."""

    name: str
    var: str
    states: frozenset[str]
    by: frozenset[str]
    per: str
    start: int  # its value at the start of a run: 1 if the initial state is one of `by`


@attrs.frozen(kw_only=True)
class Monitors:
    """The declared properties SPIN watches at one setting, and those it cannot (with why)."""

    budgets: tuple[_Budget, ...] = ()
    streaks: tuple[_Streak, ...] = ()
    before: Mapping[str, tuple[tuple[str, str], ...]] = attrs.field(factory=dict)  # reason -> (property, earlier)
    orders: tuple[str, ...] = ()
    zeroed: Mapping[str, tuple[tuple[str, str], ...]] = attrs.field(factory=dict)  # reason -> (property, counter)
    resets: tuple[str, ...] = ()
    paths: tuple[_Path, ...] = ()
    ends: tuple[PropertySpec, ...] = ()
    unchecked: tuple[str, ...] = ()

    @property
    def checked(self) -> tuple[str, ...]:
        return (
            *(f"order {n}" for n in self.orders),
            *(f"at_most {b.name} (at most {b.limit} per {b.per})" for b in self.budgets),
            *(f"in_a_row {s.name}" for s in self.streaks),
            *(f"resets {n}" for n in self.resets),
            *(f"preceded {p.name}" for p in self.paths),
            *(f"ends {p.name}" for p in self.ends),
            f"ltl {LIVENESS}: every step scope reaches the next progress step or an end",
        )


def property_monitors(spec: MachineSpec, values: Mapping[str, object], caps: Mapping[str, int]) -> Monitors:
    """The monitors of ``spec``'s properties at ``values`` (``caps``: the counters tracked, by cap)."""
    collected = _Collected(spec, values, caps)
    for i, prop in enumerate(spec.properties):
        collected.add(prop, f"g{i}_{prop.name}")
    return collected.monitors()


class _Collected:
    """The monitors gathered so far, one property at a time in declaration order (what SPIN cannot check
    is listed in that order too)."""

    def __init__(self, spec: MachineSpec, values: Mapping[str, object], caps: Mapping[str, int]) -> None:
        self.spec, self.values, self.caps = spec, values, caps
        self.budgets: list[_Budget] = []
        self.streaks: list[_Streak] = []
        self.before: dict[str, list[tuple[str, str]]] = {}
        self.orders: list[str] = []
        self.zeroed: dict[str, list[tuple[str, str]]] = {}
        self.resets: list[str] = []
        self.unchecked: list[str] = []
        self.paths: list[_Path] = []
        self.ends: list[PropertySpec] = []

    def add(self, prop: PropertySpec, var: str) -> None:
        """Add the monitor of ``prop`` (``var``: its Promela variable), or why it has none."""
        if prop.kind == "preceded":
            self.paths.append(_path(self.spec, prop, var))
        elif prop.kind == "ends":
            self.ends.append(prop)
        elif prop.kind == "trips":
            self.unchecked.append(
                f"trips {prop.name} (proven from the declaration: the breaker's place, guards and cap)"
            )
        elif prop.kind == "guarded":
            self.unchecked.append(
                f"guarded {prop.name} (a guard is a free choice here: the edge's guard list is the proof)"
            )
        elif prop.kind == "resets":
            self._resets(prop)
        elif prop.kind == "order":
            self._order(prop)
        elif prop.kind == "at_most":
            self._at_most(prop, var)
        else:
            self._in_a_row(prop, var)

    def _resets(self, prop: PropertySpec) -> None:
        untracked = [c for c in prop.counters if c not in self.caps]
        if untracked:
            self.unchecked.append(f"resets {prop.name} ({', '.join(untracked)}: cap unset, untracked)")
        tracked = [c for c in prop.counters if c in self.caps]
        if tracked:
            self.resets.append(prop.name)
            for reason in prop.reasons:
                self.zeroed.setdefault(reason, []).extend((prop.name, c) for c in tracked)

    def _order(self, prop: PropertySpec) -> None:
        self.orders.append(prop.name)
        for later, reason in enumerate(prop.reasons):
            self.before.setdefault(reason, []).extend((prop.name, r) for r in prop.reasons[:later])

    def _at_most(self, prop: PropertySpec, var: str) -> None:
        budget = _budget(self.spec, prop, self.values, var)
        if budget is None:
            self.unchecked.append(f"at_most {prop.name} (its max, {prop.most}, is unset: no bound)")
        else:
            self.budgets.append(budget)

    def _in_a_row(self, prop: PropertySpec, var: str) -> None:
        assert prop.counter is not None
        if prop.counter not in self.caps:
            self.unchecked.append(f"in_a_row {prop.name} ({prop.counter}'s cap is unset: untracked)")
        else:
            self.streaks.append(_streak(self.spec, prop, self.caps[prop.counter], var))

    def monitors(self) -> Monitors:
        return Monitors(
            budgets=tuple(self.budgets),
            streaks=tuple(self.streaks),
            before={r: tuple(v) for r, v in self.before.items()},
            orders=tuple(self.orders),
            zeroed={r: tuple(v) for r, v in self.zeroed.items()},
            resets=tuple(self.resets),
            paths=tuple(self.paths),
            ends=tuple(self.ends),
            unchecked=tuple(self.unchecked),
        )


def _path(spec: MachineSpec, prop: PropertySpec, var: str) -> _Path:
    """A ``preceded`` property's monitor: whether a step into its ``by`` came first in its scope."""
    return _Path(
        name=prop.name,
        var=var,
        states=frozenset(prop.states),
        by=frozenset(prop.by),
        per=prop.per,
        start=int(spec.initial in prop.by),
    )


def _budget(spec: MachineSpec, prop: PropertySpec, values: Mapping[str, object], var: str) -> _Budget | None:
    """A scope ends at a ``progress`` edge and at an ``ends:`` edge of it or of a scope around it; a run never."""
    assert prop.most is not None
    limit = spec.limit_of(prop.most, values)
    if limit is None:
        return None
    counts = frozenset(prop.reasons)
    restarts = frozenset(t.reason for t in spec.transitions if scope_ended(spec, t, prop.per)) - counts
    return _Budget(name=prop.name, var=var, counts=counts, restarts=restarts, limit=max(limit, 0), per=prop.per)


def scope_ended(spec: MachineSpec, t: TransitionSpec, per: str) -> bool:
    """Whether taking ``t`` ends the current ``per`` scope (written apart from ``MachineSpec.ends_scope``)."""
    if per not in spec.scopes:
        return False  # the run, never ended
    return t.progress or (t.ends in spec.scopes and spec.scopes.index(per) <= spec.scopes.index(t.ends))


def _streak(spec: MachineSpec, prop: PropertySpec, cap: int, var: str) -> _Streak:
    """The streak breaks at the edges ``broken_by`` lists, else at every other outcome of a state that counts it."""
    counting = [t for t in spec.transitions if t.counter == prop.counter]
    counts = frozenset(t.reason for t in counting)
    if prop.reasons:
        restarts = frozenset(prop.reasons)
    else:
        outcomes = {(t.source, t.event) for t in counting}
        sources = {s for s, _ in outcomes}
        events = {e for _, e in outcomes}
        restarts = frozenset(t.reason for t in spec.transitions if t.source in sources and t.event not in events)
    assert prop.counter is not None
    return _Streak(name=prop.name, var=var, counter=prop.counter, counts=counts, restarts=restarts - counts, cap=cap)
