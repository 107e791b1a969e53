"""Running a machine: the async driver that awaits each state's effect and takes its step.

Owns :class:`Runner` and :class:`EffectContext` (docs/internals.md). The step itself is ``program``'s; the
records are ``records``'s. Reads no YAML.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, Generic, TypeVar, cast

import attrs

from ..errors import HandlerError, InternalError, TransitionError
from ..model.load import Machine
from ..model.watch import Watch
from .program import Program, StateBook, handed_fields, rewritten_fields, run_as_seen
from .records import Event, RunFailure, RunState, Step

__all__ = ["EffectContext", "Runner"]

YIELD_EVERY_S = 0.002
"""The longest the driver runs steps without handing the event loop a turn (``Runner.run``)."""

D = TypeVar("D")
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)


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
        self._book = StateBook()
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
            step = await self._one_step(buffer, asyncio.get_running_loop())
        except BaseException:
            program._book.remove_model(self._book)
            raise
        if self.done:
            program._book.remove_model(self._book)
        return [*buffer, step]

    async def _one_step(self, buffer: list[Any], loop: asyncio.AbstractEventLoop) -> Step:
        """The current state's effect and its step; an ``Exception`` of either becomes the step into internal_error.

        ``loop``: the running loop, found once per run by the caller (each lookup is a system call on this Python).
        """
        state_name = self.final.state
        self._saved = None
        handed = self.final
        fields = handed_fields(handed)
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
            task = asyncio.current_task(loop)  # a cancellation request it has not taken back (Task.cancelling)?
            if task is not None and task.cancelling() > 0:
                # the effect caught the cancellation and returned: the run is still cancelled, so the
                # outcome it returned is not taken; the caller's abort edge is (from the data it saved)
                raise asyncio.CancelledError(f"the effect of state {state_name!r} swallowed a cancellation")
            self._saved = None
            return self._advance(event, state_name, fields)  # the fields just found unchanged
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
        changed = rewritten_fields(handed, fields)
        if changed is not None and self.final is handed:
            self.final = run_as_seen(handed, fields)
        return changed

    def _advance(self, event: object, state_name: str, fields: tuple[object, ...]) -> Step:
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
        nxt, step = program.step(self.final, event, self._book, fields)
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
        loop = asyncio.get_running_loop()  # the loop this run is driven on, for each step's check of its task
        try:
            while self.final.state not in terminals:
                if clock() - yielded > YIELD_EVERY_S:  # effects that never wait would keep the loop away
                    await asyncio.sleep(0)
                    yielded = clock()
                step = await self._one_step(buffer, loop)  # taken before anything is yielded: a close keeps it
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
