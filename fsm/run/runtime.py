"""Running a machine: the frozen run state, the pure ``step`` and the async driver.

Chooses each edge, keeps the counters and the trace, and awaits each effect (docs/internals.md). Reads no YAML.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import sys
import time
import traceback
from collections.abc import AsyncGenerator, Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast

import attrs
import transitions

from ..errors import HandlerError, InternalError, TransitionError
from ..model.load import INTERNAL_ERROR, Machine
from ..model.properties import Watch, Watcher

__all__ = [
    "EffectContext",
    "Event",
    "Program",
    "RunFailure",
    "RunState",
    "Runner",
    "Step",
]

logging.getLogger("transitions").setLevel(logging.WARNING)

YIELD_EVERY_S = 0.002
"""The longest the driver runs steps without handing the event loop a turn (``Runner.run``)."""

D = TypeVar("D")
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)
P_co = TypeVar("P_co", covariant=True)


@attrs.frozen(kw_only=True, slots=True)
class Event(Generic[P_co]):
    """An outcome an effect returns: a declared event name and its payload (a record named for it)."""

    name: str
    data: P_co = None  # type: ignore[assignment]  # an event without a payload carries None


_INT = frozenset((int,))
_last_within: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
"""The last ``(counters, limits)`` pair found within caps: both tuples of ints, immutable and kept
alive here, so the same two objects are within caps for as long as they are held. Most steps
carry the counters over unchanged (the same tuple object, under the same limits): the answer is
then known without a pass. Process-wide, rightly: the answer depends only on the two immutable
tuples it holds, so no run can see another's (a validator sees no run-scoped object to hold it)."""


def _counters_within_caps(instance: RunState[Any], attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    global _last_within
    limits = instance.limits
    last = _last_within
    if value is last[0] and limits is last[1]:
        return  # these very tuples were found within caps (a step that changed no counter)
    if len(value) == len(limits) and (not value or min(value) >= 0) and all(map(operator.le, value, limits)):
        if type(value) is tuple and type(limits) is tuple and {*map(type, value), *map(type, limits)} == _INT:
            _last_within = (value, limits)  # tuples of ints only: immutable, so the answer cannot change
        return  # the fast path: one C-level pass per step
    for name, count, cap in zip(instance.counter_names, value, instance.caps, strict=True):
        if count < 0 or (cap is not None and count > cap):
            raise InternalError(f"counter {name!r} = {count} is outside 0..{cap}; the engine must never allow this")


# RunState and Step are built on every step, so unlike the other records their fields may also be given by
# position, in the order declared: the engine's step does, since parsing nine keywords cost about a sixth of a
# step (issue 53). Everyone else names them; tests/engine/test_runtime.py pins the order.
@attrs.frozen(slots=True)
class RunState(Generic[D]):
    """Everything one run is, replaced whole at every step (``attrs.evolve``), never mutated.

    ``data`` is the application's own frozen record (the agent's transcript view,
    model, …); the engine only carries it to handlers and effects.
    """

    machine: str
    state: str
    counter_names: tuple[str, ...]
    caps: tuple[int | None, ...]
    limits: tuple[int, ...]  # caps with unbounded (None) as sys.maxsize, for the validator's fast path
    counters: tuple[int, ...] = attrs.field(validator=_counters_within_caps)
    params: Mapping[str, Any]
    data: D
    steps: int = 0

    def count(self, name: str) -> int:
        """The current value of the counter ``name``."""
        return self.counters[self.counter_names.index(name)]

    def cap(self, name: str) -> int | None:
        """The cap of the counter ``name`` in this run (None: unbounded)."""
        return self.caps[self.counter_names.index(name)]

    def counter_dict(self) -> dict[str, int]:
        return dict(zip(self.counter_names, self.counters, strict=True))


@attrs.frozen(slots=True)  # fields by position in the engine's step (see RunState)
class Step:
    """One taken transition, as recorded in the trace and yielded by the driver."""

    index: int
    source: str
    event: str
    reason: str
    dest: str
    progress: bool
    counter_names: tuple[str, ...]
    counters: tuple[int, ...]
    terminal: bool

    def counter_dict(self) -> dict[str, int]:
        return dict(zip(self.counter_names, self.counters, strict=True))


@attrs.frozen(kw_only=True, slots=True)
class RunFailure:
    """Why a run ended in ``internal_error``: the exception an effect, guard or handler raised, and its traceback."""

    exception: Exception
    traceback: str  # formatted, with the original cause chained

    @property
    def message(self) -> str:
        return str(self.exception)


_WATCHED_FIELDS = ("state", "counters", "steps", "data", "params", "caps", "limits")
"""The run state's fields an effect, exit or edge handler is handed and may not rewrite in place."""


def _fields(run: RunState[Any]) -> tuple[object, ...]:
    """``run``'s fields as handed to an effect or handler, to see afterwards that none was rewritten in place."""
    return (run.state, run.counters, run.steps, run.data, run.params, run.caps, run.limits)


def _rewritten(run: RunState[Any], seen: tuple[object, ...]) -> str | None:
    """The fields of ``run`` no longer the objects ``seen`` held (a frozen record rewritten in place), else None.

    A record is frozen against ``run.x = y``, not against ``object.__setattr__``: an effect that reset
    the counters that way would give a request its whole budget again, unnoticed by the caps."""
    now = _fields(run)
    if all(map(operator.is_, now, seen)):
        return None  # the common case, one C-level pass
    return ", ".join(name for name, a, b in zip(_WATCHED_FIELDS, now, seen, strict=True) if a is not b)


def _as_seen(run: RunState[D], seen: tuple[Any, ...]) -> RunState[D]:
    """The run state as it was before it was rewritten in place (``seen``: its fields then)."""
    state, counters, steps, data, params, caps, limits = seen
    return attrs.evolve(
        run, state=state, counters=counters, steps=steps, data=data, params=params, caps=caps, limits=limits
    )


def _field(data: Any, path: str) -> object:
    """The field of the run data at the dotted ``path`` (``mcp.down``; a number indexes a sequence)."""
    for name in path.split("."):
        data = data[int(name)] if name.isdigit() else getattr(data, name)
    return data


Frame = Mapping[str, "Frame | bool"]  # only True as a bool
"""The fields an edge handler may change, as a tree: a name mapped to True may change whole, one mapped to a
tree only in the fields that tree names."""


def _frame_of(paths: tuple[str, ...]) -> Frame:
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        *head, last = path.split(".")
        for name in head:
            nxt = node.setdefault(name, {})
            if nxt is True:
                break
            node = nxt
        else:
            node[last] = True
    return tree


def _outside_frame(before: object, after: object, frame: Frame, prefix: str = "") -> list[str]:
    """The fields (dotted) that differ between ``before`` and ``after`` outside ``frame``.

    Only attrs records are looked into; a field the frame names but the record lacks is a HandlerError
    (the contract names what is not there)."""
    if before is after:
        return []
    kind = type(before)
    fields = getattr(kind, "__attrs_attrs__", None)
    if fields is None or type(after) is not kind:  # not a record to look into: the field as a whole
        return [prefix.rstrip(".") or "the run data"] if before != after else []
    names = {f.name for f in fields}
    unknown = [name for name in frame if name not in names]
    if unknown:
        raise HandlerError(f"its frame names {prefix}{unknown[0]}, which the run data lacks")
    out: list[str] = []
    for name in names:
        old, new = getattr(before, name), getattr(after, name)
        if old is new:
            continue
        sub = frame.get(name)
        if sub is True:
            continue
        out.extend(_outside_frame(old, new, sub if isinstance(sub, Mapping) else {}, f"{prefix}{name}."))
    return sorted(out)


@attrs.frozen(slots=True)
class _Edge:
    source: str
    reason: str
    dest: str
    guards: tuple[tuple[str, Callable[..., bool]], ...]  # (name, function), in the YAML's order
    counter: int | None
    resets: tuple[int, ...]
    handler: Callable[..., Any] | None
    progress: bool
    what: str  # how an error of its handler names it (built once, not at every step)
    target: transitions.State | None = None  # the bookkeeping machine's state it registered for (source, reason)
    changes: tuple[str, ...] = ()  # its handler's contract: the run data's fields (dotted paths) it must change
    frame: Frame | None = None  # what its handler may change (None: no frame declared)
    sets: tuple[tuple[str, Any], ...] = ()  # fields its handler leaves at a value (or ("was", path): an old one)
    # (name, doc, predicate over the new run data) of each invariant that holds where the edge goes
    invariants: tuple[tuple[str, str, Callable[[Any], Any]], ...] = ()


def _paths(frame: Frame, prefix: str = "") -> list[str]:
    """The dotted fields a frame names, for a message."""
    out: list[str] = []
    for name, sub in frame.items():
        out.extend(
            [prefix + name] if sub is True else _paths(sub, f"{prefix}{name}.") if isinstance(sub, Mapping) else []
        )
    return out


class _Book:
    """The model object ``transitions`` keeps the current state on (bookkeeping only)."""

    state: str


class Program:
    """A loaded machine compiled for execution: candidate edges per ``(state, event)``.

    Build it once per machine and reuse it for every run.
    """

    def __init__(self, machine: Machine) -> None:
        spec = machine.spec
        self.machine = machine
        self.spec = spec
        self.counter_names = tuple(c.name for c in spec.counters)
        index = {n: i for i, n in enumerate(self.counter_names)}
        self.terminals = frozenset(spec.terminals)
        self.results = {s.name: dict(s.result) for s in spec.states if s.terminal}
        self.emits = {s.name: frozenset(s.emits) for s in spec.states}
        self.abort_event = spec.abort_event
        self.exits = dict(machine.exits)
        # how an error of each state's exit names it (built once, not at every step)
        self._exit_what = {state.name: f"exit handler of state {state.name!r}" for state in spec.states}
        # the declared at_most / in_a_row properties, watched at every step (None: the machine declares none)
        self.watcher = Watcher.of(spec, self.counter_names) if spec.properties else None
        self.edges: dict[tuple[str, str], tuple[_Edge, ...]] = {}
        invariants: dict[str, list[tuple[str, str, Callable[[object], object]]]] = {}
        for inv in spec.invariants:
            for state in inv.at:
                invariants.setdefault(state, []).append((inv.name, inv.doc, machine.invariants[inv.name]))
        for key, cands in spec.candidates().items():
            self.edges[key] = tuple(
                _Edge(
                    source=t.source,
                    reason=t.reason,
                    dest=t.dest,
                    guards=tuple((g, machine.guards[g]) for g in t.guards),
                    counter=None if t.counter is None else index[t.counter],
                    resets=tuple(sorted(index[c] for c in spec.resets_of(t))),
                    handler=machine.handlers.get(t.reason),
                    progress=t.progress,
                    what=f"edge handler of {t.reason!r}",
                    changes=t.changes,
                    frame=None if t.frame is None else _frame_of(t.frame),
                    sets=t.sets,
                    invariants=tuple(invariants.get(t.dest, ())),
                )
                for t in cands
            )
        self._book = transitions.Machine(
            model=None,
            states=[s.name for s in spec.states],
            initial=spec.initial,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )
        for t in spec.transitions:
            self._book.add_transition(trigger=t.reason, source=t.source, dest=t.dest)
        registered = {
            (source, reason): event.transitions[source][0].dest
            for reason, event in self._book.events.items()
            for source in event.transitions
        }
        # each candidate edge's target as the machine registered it for (source, reason): looked up once
        # here and kept on the edge, so an edge the machine did not register cannot even be built, and a
        # step only sets the state
        for key, edges in self.edges.items():
            for edge in edges:
                dest = registered.get((edge.source, edge.reason))
                if edge.source != key[0] or dest != edge.dest:
                    raise InternalError(
                        f"the bookkeeping machine has no step {key[0]!r} --{edge.reason}--> {edge.dest!r}"
                    )
            self.edges[key] = tuple(attrs.evolve(e, target=self._book.get_state(e.dest)) for e in edges)

    def _bookkeep(self, book: _Book, source: str, edge: _Edge) -> None:
        """Take the same step on the ``transitions`` machine; a step it does not declare is an engine bug.

        The step is checked against the ``Transition`` objects the machine registered for
        ``(source, reason)`` (the target state kept on the edge when the program was built) and
        the model's state is set through the machine. Its callback dispatch is not used: no
        callbacks are registered (effects and handlers run outside the transition, by design),
        so it would only cost time on every step.
        """
        target = edge.target if book.state == source and edge.source == source else None
        if target is None or target.value != edge.dest:
            raise InternalError(
                f"undeclared step {book.state!r} --{edge.reason}--> {edge.dest!r} (the run is in {source!r})"
            )
        self._book.set_state(target, book)
        if book.state != edge.dest:
            raise InternalError(f"bookkeeping is in {book.state!r} after {edge.reason!r}, expected {edge.dest!r}")

    def _enrol(self, book: _Book, state: str) -> None:
        """Register ``book`` with the bookkeeping machine, in ``state`` (set through the machine, which
        refuses a state it does not have).

        ``transitions.Machine.add_model`` would also give the model a trigger method per event and
        a test per state, about a hundred attributes for the query loop on every run; nothing calls
        them (steps go through ``_bookkeep``), so a run of few steps paid for them in vain.
        """
        self._book.set_state(state, book)
        self._book.models.append(book)

    def initial_state(self, data: object = None, params: Mapping[str, object] | None = None) -> RunState[Any]:
        """A fresh run state at ``initial`` with zeroed counters and resolved caps."""
        values = self.spec.param_defaults
        declared = self.spec.param_map
        for key, value in (params or {}).items():
            if key not in values:
                raise TransitionError(
                    f"{self.spec.path}: unknown param {key!r}; known: {', '.join(sorted(values)) or 'none'}"
                )
            problem = declared[key].problem_with(value)
            if problem is not None:
                raise TransitionError(f"{self.spec.path}: param {key!r} {problem}, not {value!r}")
            values[key] = value
        caps = tuple(self.spec.cap_of(c, values) for c in self.spec.counters)
        return RunState(
            machine=self.spec.name,
            state=self.spec.initial,
            counter_names=self.counter_names,
            caps=caps,
            limits=tuple(sys.maxsize if c is None else c for c in caps),
            counters=(0,) * len(caps),
            params=MappingProxyType(values),  # read-only: no effect, guard or handler may change a cap mid-run
            data=data,
        )

    def snapshot(self, run: RunState[Any]) -> dict[str, object]:
        """Everything of ``run`` but its data, as plain JSON values (the caller serialises the data)."""
        return {
            "machine": run.machine,
            "state": run.state,
            "counters": run.counter_dict(),
            "params": dict(run.params),
            "steps": run.steps,
        }

    def restore(self, snapshot: Mapping[str, Any], data: D) -> RunState[D]:
        """The run state :meth:`snapshot` took, with ``data``; refuses one from another machine or over its caps."""
        if snapshot.get("machine") != self.spec.name or snapshot.get("state") not in self.spec.state_map:
            raise TransitionError(
                f"the snapshot is of machine {snapshot.get('machine')!r} in state {snapshot.get('state')!r}, "
                f"not a state of {self.spec.name!r}"
            )
        counts = dict(snapshot.get("counters") or {})
        if set(counts) != set(self.counter_names):
            raise TransitionError(
                f"the snapshot's counters {sorted(counts)} are not the machine's {sorted(self.counter_names)}"
            )
        fresh = self.initial_state(data, snapshot.get("params") or {})
        return RunState(
            machine=fresh.machine,
            state=snapshot["state"],
            counter_names=fresh.counter_names,
            caps=fresh.caps,
            limits=fresh.limits,
            counters=tuple(int(counts[n]) for n in self.counter_names),
            params=fresh.params,
            data=data,
            steps=int(snapshot.get("steps", 0)),
        )

    def choose(self, run: RunState[Any], event: Event[object]) -> _Edge:
        """The first candidate for ``(run.state, event)`` whose counter is under cap and guards hold.

        Each guard named in the decision is called at most once, however many candidates name
        it (the answer is kept for the rest of the decision), and must answer a ``bool``: a
        coroutine, ``None`` or any other value is a handler error, never taken as true.
        """
        cands = self.edges.get((run.state, event.name))
        if cands is None:
            raise TransitionError(f"state {run.state!r} has no transition on event {event.name!r}")
        counters, caps = run.counters, run.caps
        answers: dict[str, bool] | None = None
        for edge in cands:
            if edge.counter is not None:
                cap = caps[edge.counter]
                if cap is not None and counters[edge.counter] >= cap:
                    continue
            for name, guard in edge.guards:
                if answers is None:
                    answers = {}
                ok = answers.get(name)
                if ok is None:
                    ok = answers[name] = self._ask(name, guard, edge, run, event)
                if not ok:
                    break
            else:
                return edge
        raise TransitionError(
            f"no candidate edge could fire from {run.state!r} on {event.name!r} (all guarded or capped)"
        )

    @staticmethod
    def _ask(name: str, guard: Callable[..., Any], edge: _Edge, run: RunState[Any], event: Event[object]) -> bool:
        """One guard's answer, which must be a ``bool``."""
        try:
            ok = guard(run, event)
        except Exception as exc:
            raise HandlerError(f"guard of transition {edge.reason!r} raised {type(exc).__name__}: {exc}") from exc
        if ok is not True and ok is not False:
            if asyncio.iscoroutine(ok):
                ok.close()  # never awaited: close it so Python does not warn about it later
            raise HandlerError(
                f"guard {name!r} (of transition {edge.reason!r}) returned {type(ok).__name__} {ok!r:.80}; "
                "a guard answers True or False (a guard is synchronous and pure: it may not be async)"
            )
        return ok

    @staticmethod
    def _apply(fn: Callable[..., Any], what: str, run: RunState[Any], event: Event[object]) -> object:
        """``fn(run, event)``: the new run data, checked to be data (not a run state, not None for data)."""
        try:
            data = fn(run, event)
        except Exception as exc:
            raise HandlerError(f"{what} raised {type(exc).__name__}: {exc}") from exc
        old = run.data
        if isinstance(data, RunState) or (old is not None and not isinstance(data, type(old))):
            got = "a RunState" if isinstance(data, RunState) else f"{type(data).__name__} {data!r:.80}"
            raise HandlerError(
                f"{what} returned {got}; exits and edge handlers return the new run data only "
                f"(a {type(old).__name__}, e.g. `return run.data` when nothing changes): the engine builds the "
                "next run state (the machine chooses the state and owns the counters)"
            )
        return data

    @staticmethod
    def _kept_promise(edge: _Edge, before: object, after: object) -> None:
        """Refuse a handler that left a field its edge's contract (``changes:``) says it changes (a HandlerError)."""
        kept = []
        for path in edge.changes:
            try:
                old, new = _field(before, path), _field(after, path)
            except AttributeError as exc:
                raise HandlerError(f"{edge.what}: its contract names {path!r}, which the run data lacks") from exc
            if new is old or new == old:
                kept.append(path)
        if kept:
            raise HandlerError(
                f"{edge.what} left {', '.join(kept)} as it was; its edge's contract (`changes:`) says it changes "
                f"{'it' if len(kept) == 1 else 'them'} (a run that goes on without the change may loop, "
                "or end where it should not)"
            )

    @staticmethod
    def _kept_frame(edge: _Edge, before: object, after: object) -> None:
        """Refuse a handler that changed a field outside its edge's frame, or left one of ``sets`` at another value."""
        assert edge.frame is not None
        try:
            outside = _outside_frame(before, after, edge.frame)
        except HandlerError as exc:
            raise HandlerError(f"{edge.what}: {exc}") from None
        if outside:
            raise HandlerError(
                f"{edge.what} changed {', '.join(outside)}, outside its frame (`changes`, `may_change`, `sets`: "
                f"{', '.join(_paths(edge.frame))}); a handler changes only what its edge says"
            )
        for path, value in edge.sets:
            try:
                wanted = _field(before, value[1]) if isinstance(value, tuple) else value
                now = _field(after, path)
            except (AttributeError, IndexError) as exc:
                raise HandlerError(f"{edge.what}: its `sets` names {path!r} or {value!r}, which it lacks") from exc
            if now != wanted:
                said = f"what {value[1]} was ({wanted!r:.60})" if isinstance(value, tuple) else repr(wanted)
                raise HandlerError(f"{edge.what} left {path} at {now!r:.60}; its edge's contract (`sets:`) says {said}")

    @staticmethod
    def _invariants_hold(edge: _Edge, data: object) -> None:
        """Refuse a step into a state after which one of its invariants reports a problem."""
        for name, doc, holds in edge.invariants:
            try:
                problem = holds(data)
            except Exception as exc:
                raise HandlerError(f"invariant {name!r} raised {type(exc).__name__}: {exc}") from exc
            if problem is not None:
                raise HandlerError(
                    f"invariant {name!r} ({doc}) broken after {edge.reason!r} into {edge.dest!r}: {problem}"
                )

    @staticmethod
    def _unchanged(run: RunState[Any], seen: tuple[object, ...], what: str) -> None:
        """Refuse a handler that rewrote, in place, the run state it was handed (a HandlerError)."""
        changed = _rewritten(run, seen)
        if changed is not None:
            raise HandlerError(
                f"{what} rewrote the run state it was given ({changed}); a run state is replaced whole by the "
                "engine, never changed in place (handlers return the new run data, the machine owns the counters)"
            )

    def step(self, run: RunState[Any], event: Event[object], book: _Book | None = None) -> tuple[RunState[Any], Step]:
        """Take one transition: choose the edge, run the state's exit and the edge's handler, update counters.

        The exit and the handler each return the new run data; the next run state is built
        here. Pure but for ``book``.
        """
        edge = self.choose(run, event)
        data = run.data
        exit_handler = self.exits.get(run.state)
        fields = _fields(run) if exit_handler is not None or edge.handler is not None else ()
        if exit_handler is not None:
            data = self._apply(exit_handler, self._exit_what[run.state], run, event)
            self._unchanged(run, fields, self._exit_what[run.state])
        if edge.handler is not None:
            seen = run if data is run.data else attrs.evolve(run, data=data)  # the exit changed the data
            handed = fields if seen is run else _fields(seen)
            data = self._apply(edge.handler, edge.what, seen, event)
            self._unchanged(seen, handed, edge.what)
            if seen is not run:  # else the check just made
                self._unchanged(run, fields, edge.what)
            if edge.changes:
                self._kept_promise(edge, seen.data, data)
            if edge.frame is not None:
                self._kept_frame(edge, seen.data, data)
        if edge.invariants:
            self._invariants_hold(edge, data)
        counters = run.counters
        if edge.resets or edge.counter is not None:
            values = list(counters)
            for i in edge.resets:
                values[i] = 0
            if edge.counter is not None:
                values[edge.counter] += 1
            fresh = tuple(values)
            if fresh != counters:  # resets of counters already at 0 change nothing: the same tuple goes on
                counters = fresh
        if book is not None:
            self._bookkeep(book, run.state, edge)
        # by position, in field order (machine, state, counter_names, caps, limits, counters, params, data, steps)
        nxt: RunState[object] = RunState(
            run.machine, edge.dest, run.counter_names, run.caps, run.limits, counters, run.params, data, run.steps + 1
        )
        # (index, source, event, reason, dest, progress, counter_names, counters, terminal)
        step = Step(
            run.steps,
            run.state,
            event.name,
            edge.reason,
            edge.dest,
            edge.progress,
            self.counter_names,
            counters,
            edge.dest in self.terminals,
        )
        return nxt, step

    def fail(self, run: RunState[Any], book: _Book | None = None) -> tuple[RunState[Any], Step]:
        """The engine's own step into ``internal_error`` (not a YAML transition): data and counters unchanged."""
        if run.state in self.terminals:
            raise InternalError(f"a run that ended in {run.state!r} cannot fail afterwards")
        if book is not None:
            self._book.set_state(INTERNAL_ERROR, book)
        step = Step(
            index=run.steps,
            source=run.state,
            event=INTERNAL_ERROR,
            reason=INTERNAL_ERROR,
            dest=INTERNAL_ERROR,
            progress=False,
            counter_names=self.counter_names,
            counters=run.counters,
            terminal=True,
        )
        nxt = attrs.evolve(run, state=INTERNAL_ERROR, steps=run.steps + 1)
        return nxt, step


class EffectContext(Generic[D, S_co]):
    """What an effect sees: the run state, the caller's services, and ``publish`` for progress."""

    __slots__ = ("_buffer", "_keep", "_live", "_program", "run", "services")

    def __init__(
        self,
        program: Program,
        run: RunState[D],
        services: S_co,
        buffer: list[Any],
        live: Callable[[Any], None] | None = None,
        keep: Callable[[D | Callable[[], D]], None] | None = None,
    ) -> None:
        self._program = program
        self.run = run
        self.services = services
        self._buffer = buffer
        self._live = live
        self._keep = keep

    def save(self, data: D | Callable[[], D]) -> None:
        """The run data as it stands part-way through this effect: what the abort edge sees if the run is
        cancelled before the effect returns (work already done is then not reported as undone).

        The event the effect returns still starts from the run state it was given; only an
        abort reads what was saved, and only until the effect's step is taken. A function
        instead of the data is called only if the abort edge is taken, so nothing is built on
        the common path; it builds the data from what the effect has done by then.
        """
        if self._keep is not None:
            self._keep(data)

    def next_reason(self, event: str) -> str:
        """The reason of the edge the machine would take if the effect returned ``event`` (no payload) now.

        For an effect whose work only matters on one path (a backoff sleep before a retry
        the machine may refuse): it asks the machine instead of re-deriving its caps.
        """
        return self._program.choose(self.run, Event(name=event)).reason

    def publish(self, item: object) -> None:
        """Hand ``item`` to the caller: live to ``on_publish`` if set, else yielded after the effect."""
        if self._live is not None:
            self._live(item)
        else:
            self._buffer.append(item)


class Runner(Generic[D, S]):
    """Drives one run: ``async for item in runner.run(): ...`` yields each :class:`Step` and
    whatever effects publish (unless ``on_publish`` takes them live), until a terminal state.

    Cancelling the iterating task, or closing the generator, takes the machine's abort edge
    from the current state (one step, straight into a terminal state; no effect runs), records
    it (``final``, ``trace``, ``on_step``) and re-raises — from the data the cancelled effect
    saved last (:meth:`EffectContext.save`), if it saved any: nothing is yielded while cancelling,
    and a cancellation is never swallowed. An exception in an effect, guard, exit or edge
    handler is the engine's step into ``internal_error``; the run then ends normally with the
    exception and its traceback in ``error``. ``CancelledError``, ``KeyboardInterrupt`` and
    ``SystemExit`` are never swallowed: each takes the abort edge first and is raised again, so
    a run always ends in a terminal state. An effect that catches its cancellation and returns
    an event anyway does not carry the run on: the task is still cancelled, so the abort edge
    is taken instead of the event's; one interrupted again in the abort edge's own handler still
    ends the run (in ``internal_error``) before the interrupt goes on. An effect, exit or edge
    handler that rewrites the run state it was handed in place (``object.__setattr__`` on the
    frozen record: its counters reset, say) ends the run in ``internal_error``, which keeps the
    state as it was handed. ``on_step`` is told every step as it is taken, however
    the run is driven (``run``, ``step_once``, the abort edge): the place to record a run's path.
    """

    def __init__(
        self,
        program: Program | Machine,
        *,
        data: D | None = None,
        services: S | None = None,
        params: Mapping[str, object] | None = None,
        state: RunState[D] | None = None,
        on_publish: Callable[[Any], None] | None = None,
        on_step: Callable[[Step], None] | None = None,
    ) -> None:
        self.program = program if isinstance(program, Program) else Program(program)
        self.services = cast(S, services)  # None only for machines whose effects use no services
        self.on_publish = on_publish
        self.on_step = on_step
        self.final: RunState[D] = state if state is not None else self.program.initial_state(data, params)
        watcher = self.program.watcher
        self._watch: Watch | None = (
            None if watcher is None else watcher.watch(self.final.params, None if state is None else state.counters)
        )
        self._trace: list[Step] = []
        self._book = _Book()
        self.aborted = False
        self.error: RunFailure | None = None  # set when the run ended in internal_error
        # what the running effect saved (EffectContext.save), for the abort edge: the data, or how to build it
        self._saved: D | Callable[[], D] | None = None

    @property
    def trace(self) -> tuple[Step, ...]:
        return tuple(self._trace)

    @property
    def done(self) -> bool:
        return self.final.state in self.program.terminals

    @property
    def result(self) -> Mapping[str, object]:
        """The terminal state's declared ``result`` mapping (empty until the run ends)."""
        return self.program.results.get(self.final.state, {})

    async def step_once(self) -> list[object]:
        """Run the current state's effect and take its one step: the items it published, then the :class:`Step`.

        For callers that drive a run step by step (a snapshot after every step, a debugger).
        Unlike :meth:`run` it does not take the abort edge when cancelled. An exception of the
        machine's Python is, as in :meth:`run`, the step into ``internal_error``.
        """
        if self.done:
            raise TransitionError(f"the run has ended in {self.final.state!r}")
        program = self.program
        if self._book not in program._book.models:
            program._enrol(self._book, self.final.state)
        buffer: list[object] = []
        try:
            step = await self._one_step(buffer)
        except BaseException:
            program._book.remove_model(self._book)
            raise
        if self.done:
            program._book.remove_model(self._book)
        return [*buffer, step]

    async def _one_step(self, buffer: list[Any]) -> Step:
        """The current state's effect and its step; an ``Exception`` of either becomes the step into internal_error."""
        state_name = self.final.state
        self._saved = None
        handed = self.final
        fields = _fields(handed)
        try:
            ctx = EffectContext(self.program, handed, self.services, buffer, self.on_publish, self._save)
            try:  # the effect, awaited here rather than in a coroutine of its own (one fewer per step)
                event = await self.program.machine.effects[state_name](ctx)
            except asyncio.CancelledError:
                self._restore(handed, fields)
                raise
            except Exception as exc:
                self._restore(handed, fields)
                raise HandlerError(f"effect of state {state_name!r} raised {type(exc).__name__}: {exc}") from exc
            except BaseException:
                self._restore(handed, fields)
                raise
            changed = self._restore(handed, fields)
            if changed is not None:
                raise HandlerError(
                    f"effect of state {state_name!r} rewrote the run state it was given ({changed}); an effect "
                    "returns one event, and only the machine's step changes the run state"
                )
            task = asyncio.current_task()  # a cancellation request it has not taken back (Task.cancelling)?
            if task is not None and task.cancelling() > 0:
                # the effect caught the cancellation and returned: the run is still cancelled, so the
                # outcome it returned is not taken; the caller's abort edge is (from the data it saved)
                raise asyncio.CancelledError(f"the effect of state {state_name!r} swallowed a cancellation")
            self._saved = None
            return self._advance(event, state_name)
        except Exception as exc:
            self._saved = None
            return self._fail(exc)
        except (KeyboardInterrupt, SystemExit):
            # not the machine's failure and never swallowed, but the run still ends in a terminal state
            self._abort()
            raise

    def _save(self, data: D | Callable[[], D]) -> None:
        self._saved = data

    def _restore(self, handed: RunState[D], fields: tuple[object, ...]) -> str | None:
        """What of the run state an effect was handed it rewrote in place (None: nothing); the run then goes
        on from the state as it was handed (the step into internal_error keeps the true counters)."""
        changed = _rewritten(handed, fields)
        if changed is not None and self.final is handed:
            self.final = _as_seen(handed, fields)
        return changed

    def _advance(self, event: object, state_name: str) -> Step:
        program = self.program
        if isinstance(event, str):
            event = Event(name=event)
        if not isinstance(event, Event):
            raise HandlerError(f"effect of state {state_name!r} returned {event!r}; expected an Event or an event name")
        name = event.name
        if name == program.abort_event:
            raise HandlerError(
                f"effect of state {state_name!r} returned the abort event {name!r}; "
                "only cancelling the run takes the abort edges"
            )
        if name not in program.emits[state_name]:
            raise HandlerError(
                f"effect of state {state_name!r} returned event {name!r}, which the state does not "
                f"declare in `emits` ({', '.join(sorted(program.emits[state_name]))})"
            )
        nxt, step = program.step(self.final, event, self._book)
        if self._watch is not None:
            broken = self._watch.broken_by(step.reason, step.counters)
            if broken is not None:  # the step is not taken: the run ends in internal_error, naming the property
                raise InternalError(broken)
        self.final = nxt  # what _take does, here on the path every step takes
        self._trace.append(step)
        if self.on_step is not None:
            self.on_step(step)
        return step

    def _take(self, taken: tuple[RunState[Any], Step]) -> Step:
        self.final, step = taken
        self._trace.append(step)
        if self.on_step is not None:
            self.on_step(step)
        return step

    def _fail(self, exc: Exception) -> Step:
        """The step into ``internal_error``, with ``exc`` and its traceback kept in :attr:`error`."""
        if self.done:
            raise exc  # the run had already ended (e.g. ``on_step`` raised on its last step): not the machine's
        self.error = RunFailure(exception=exc, traceback="".join(traceback.format_exception(exc)))
        return self._take(self.program.fail(self.final, self._book))

    async def run(self) -> AsyncGenerator[Any, None]:
        """The driver: ``event = await effect(run); run = step(run, event)`` until terminal.

        Items an effect publishes are handed to ``on_publish`` at once when the runner has
        one (live progress such as streamed text), else yielded right after the effect
        returns, before its step. The effect is awaited in the iterating task itself: no
        extra task per step, and cancelling that task cancels the effect where it waits.
        The driver hands the event loop a turn at least every :data:`YIELD_EVERY_S` (between
        steps), so a cancellation or a signal lands even when the effects never wait.
        """
        program = self.program
        terminals = program.terminals
        program._enrol(self._book, self.final.state)
        buffer: list[object] = []
        clock = time.monotonic
        yielded = clock()
        try:
            while self.final.state not in terminals:
                if clock() - yielded > YIELD_EVERY_S:  # effects that never wait would keep the loop away
                    await asyncio.sleep(0)
                    yielded = clock()
                step = await self._one_step(buffer)  # taken before anything is yielded: a close keeps it
                if buffer:
                    items = buffer[:]
                    buffer.clear()
                    for item in items:
                        yield item
                yield step
        except (asyncio.CancelledError, GeneratorExit, KeyboardInterrupt, SystemExit):
            self._abort()  # recorded, never yielded
            raise
        finally:
            if self._book in program._book.models:
                program._book.remove_model(self._book)

    def _abort_edge(self) -> str:
        """How a failure of the abort edge from where the run stands names it."""
        try:
            reason = self.program.choose(self.final, Event(name=self.program.abort_event)).reason
        except Exception:  # no abort edge chosen: the failure was choosing it
            return "the abort edge"
        return f"the abort edge {reason!r} (its state's exit or its handler)"

    def _abort(self) -> None:
        """Take the machine's abort edge from wherever the run stands: one step, straight into a terminal state.

        The loader holds every abort edge to a terminal target, so no effect runs on this path;
        an exception of the state's exit or the edge's handler is the step into internal_error.
        """
        if self.done:
            return
        self.aborted = True
        try:
            saved, self._saved = self._saved, None
            if saved is not None:  # the effect got part of its work done before it was cancelled
                self.final = attrs.evolve(self.final, data=saved() if callable(saved) else saved)
            self._take(self.program.step(self.final, Event(name=self.program.abort_event), self._book))
        except Exception as exc:
            self._fail(exc)
        except BaseException as exc:
            # interrupted again while cleaning up (a second Ctrl-C in the abort edge's handler): the run
            # still ends, in internal_error, and the interrupt goes on (never swallowed)
            if not self.done:
                failure = HandlerError(f"{self._abort_edge()} was interrupted by {type(exc).__name__}")
                failure.__cause__ = exc
                self._fail(failure)
            raise
        if not self.done:
            raise InternalError(f"the abort edge did not reach a terminal state (now in {self.final.state!r})")
