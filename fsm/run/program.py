"""A machine compiled for running: each edge's candidates, the pure step, and the checks of what handlers return.

Owns :class:`Program`: choosing an edge, running its exit and handler, the counters and the bookkeeping.
The records are ``records``'s; awaiting effects is ``runtime``'s.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import attrs
import transitions

from ..errors import HandlerError, InternalError, TransitionError
from ..model.load import INTERNAL_ERROR, Machine
from ..model.watch import Watcher
from .records import Event, RunState, Step

__all__ = ["Program", "StateBook", "handed_fields", "rewritten_fields", "run_as_seen"]

logging.getLogger("transitions").setLevel(logging.WARNING)

D = TypeVar("D")


_WATCHED_FIELDS = ("state", "counters", "steps", "data", "params", "caps", "limits")
"""The run state's fields an effect, exit or edge handler is handed and may not rewrite in place."""


def handed_fields(run: RunState[Any]) -> tuple[object, ...]:
    """``run``'s fields as handed to an effect or handler, to see afterwards that none was rewritten in place."""
    return (run.state, run.counters, run.steps, run.data, run.params, run.caps, run.limits)


def rewritten_fields(run: RunState[Any], seen: tuple[object, ...]) -> str | None:
    """The fields of ``run`` no longer the objects ``seen`` held (a frozen record rewritten in place), else None.

    A record is frozen against ``run.x = y``, not against ``object.__setattr__``: an effect that reset
    the counters that way would give a request its whole budget again, unnoticed by the caps."""
    state, counters, steps, data, params, caps, limits = seen
    if (
        run.data is data
        and run.counters is counters
        and run.state is state
        and run.steps is steps
        and run.params is params
        and run.caps is caps
        and run.limits is limits
    ):
        return None  # the common case: compared in place, no tuple of the fields built
    now = handed_fields(run)
    return ", ".join(name for name, a, b in zip(_WATCHED_FIELDS, now, seen, strict=True) if a is not b)


def run_as_seen(run: RunState[D], seen: tuple[Any, ...]) -> RunState[D]:
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


def _counted(edge: _Edge, counters: tuple[int, ...]) -> tuple[int, ...]:
    """``counters`` after ``edge`` resets and counts; the same tuple when nothing changes (resets of zeros)."""
    values = list(counters)
    for i in edge.resets:
        values[i] = 0
    if edge.counter is not None:
        values[edge.counter] += 1
    fresh = tuple(values)
    return counters if fresh == counters else fresh


class StateBook:
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

    def _bookkeep(self, book: StateBook, source: str, edge: _Edge) -> None:
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

    def _enrol(self, book: StateBook, state: str) -> None:
        """Register ``book`` with the bookkeeping machine, in ``state`` (set through the machine, which
        refuses a state it does not have).

        ``transitions.Machine.add_model`` would also give the model a trigger method per event and
        a test per state, about a hundred attributes for the query loop on every run; nothing calls
        them (steps go through ``_bookkeep``), so a run of few steps paid for them in vain.
        """
        self._book.set_state(state, book)
        self._book.models.append(book)

    def run_params(self, params: Mapping[str, object] | None = None) -> Mapping[str, object]:
        """``params`` over the YAML's defaults, each checked against its declaration, read-only."""
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
        return MappingProxyType(values)  # read-only: no effect, guard or handler may change a cap mid-run

    def initial_state(self, data: object = None, params: Mapping[str, object] | None = None) -> RunState[Any]:
        """A fresh run state at ``initial`` with zeroed counters and resolved caps."""
        values = self.run_params(params)
        caps = tuple(self.spec.cap_of(c, values) for c in self.spec.counters)
        return RunState(
            machine=self.spec.name,
            state=self.spec.initial,
            counter_names=self.counter_names,
            caps=caps,
            limits=tuple(sys.maxsize if c is None else c for c in caps),
            counters=(0,) * len(caps),
            params=values,
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
        changed = rewritten_fields(run, seen)
        if changed is not None:
            raise HandlerError(
                f"{what} rewrote the run state it was given ({changed}); a run state is replaced whole by the "
                "engine, never changed in place (handlers return the new run data, the machine owns the counters)"
            )

    def step(
        self,
        run: RunState[Any],
        event: Event[object],
        book: StateBook | None = None,
        fields: tuple[object, ...] | None = None,
    ) -> tuple[RunState[Any], Step]:
        """Take one transition: choose the edge, run the state's exit and the edge's handler, update counters.

        The exit and the handler each return the new run data; the next run state is built
        here. Pure but for ``book``. ``fields``: ``handed_fields(run)`` when the caller has just
        taken them (the runner, before the effect), so the step need not take them again.
        """
        edge = self.choose(run, event)
        data = run.data
        exit_handler = self.exits.get(run.state)
        if fields is None:
            fields = handed_fields(run) if exit_handler is not None or edge.handler is not None else ()
        if exit_handler is not None:
            data = self._apply(exit_handler, self._exit_what[run.state], run, event)
            self._unchanged(run, fields, self._exit_what[run.state])
        if edge.handler is not None:
            seen = run if data is run.data else attrs.evolve(run, data=data)  # the exit changed the data
            handed = fields if seen is run else handed_fields(seen)
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
            counters = _counted(edge, counters)
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

    def fail(self, run: RunState[Any], book: StateBook | None = None) -> tuple[RunState[Any], Step]:
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
