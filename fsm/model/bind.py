"""Binding a machine: every dotted name in its declaration resolved, at load time, to the Python it names.

Owns :class:`Machine` (a declaration with its callables), the rules a callable must meet
(docs/machines.md), and :func:`check_observers` for a run's observers. Reads no YAML;
the declaration's own rules are ``rules``'s.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ..errors import SpecError, SpecProblem
from .contract import Uses, reads_of, uses_of
from .problems import Lines, close, line_of
from .spec import MachineSpec

__all__ = ["Machine", "bind_machine", "check_observers"]


@attrs.frozen(kw_only=True)
class Machine:
    """A loaded machine: its declaration plus every Python callable it names, resolved."""

    spec: MachineSpec
    effects: Mapping[str, Callable[..., Any]]  # state name -> async effect
    guards: Mapping[str, Callable[..., bool]]  # guard name -> predicate
    handlers: Mapping[str, Callable[..., Any]]  # transition reason -> edge handler
    exits: Mapping[str, Callable[..., Any]] = attrs.field(factory=dict)  # state name -> exit handler
    invariants: Mapping[str, Callable[..., Any]] = attrs.field(factory=dict)  # invariant name -> (data) -> problem

    @property
    def name(self) -> str:
        return self.spec.name


def bind_machine(spec: MachineSpec, lines: Lines) -> Machine:
    """``spec`` with every callable it names resolved and checked; a :class:`SpecError` lists all that are not."""
    b = _Binder(spec)
    effects, exits = _bind_states(b)
    guards = {
        name: fn
        for name, dotted in spec.guards.items()
        if (fn := b.resolve(dotted, line_of(lines, ("guards", name)), f"guard {name!r}")) is not None
    }
    handlers: dict[str, Callable[..., object]] = {}
    for t in spec.transitions:  # an edge of a reason whose handler did not resolve tries it again (and says so)
        fn = b.resolve(t.do, t.line, f"transition {t.reason!r} `do`") if t.do and t.reason not in handlers else None
        if fn is not None:
            handlers[t.reason] = fn
    invariants = {
        inv.name: fn
        for inv in spec.invariants
        if (fn := b.resolve(inv.call, inv.line, f"invariant {inv.name!r}", arity=1)) is not None
    }
    b.problems.extend(_wait_problems(spec, effects, lines))
    if b.problems:
        raise SpecError(b.problems)
    return Machine(spec=spec, effects=effects, guards=guards, handlers=handlers, exits=exits, invariants=invariants)


def _bind_states(b: _Binder) -> tuple[dict[str, Callable[..., object]], dict[str, Callable[..., object]]]:
    """Each state's effect (async, called as ``(ctx)``) and exit handler (sync, ``(run, event)``)."""
    effects: dict[str, Callable[..., object]] = {}
    exits: dict[str, Callable[..., object]] = {}
    for s in b.spec.states:
        effect = b.resolve(s.effect, s.line, f"state {s.name!r} effect", arity=1, sync=False) if s.effect else None
        if effect is not None:
            effects[s.name] = effect
        exit_ = b.resolve(s.exit, s.line, f"state {s.name!r} exit") if s.exit else None
        if exit_ is not None:
            exits[s.name] = exit_
    return effects, exits


class _Binder:
    """Resolves a machine's dotted names (each imported once) and keeps a problem for each that fails."""

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.problems: list[SpecProblem] = []
        self._cache: dict[str, tuple[Callable[..., Any] | None, str]] = {}

    def resolve(
        self, dotted: str, line: int | None, what: str, *, arity: int = 2, sync: bool = True
    ) -> Callable[..., Any] | None:
        """The callable ``dotted`` names, if it can play ``what``: ``sync`` or not, taking ``arity`` arguments."""
        if dotted not in self._cache:
            self._cache[dotted] = _resolve(dotted)
        fn, why = self._cache[dotted]
        if fn is None:
            fix = None if "did you mean" in why else "fix the dotted name"
            self.problems.append(SpecProblem(self.spec.path, line, f"{what}: {why}", fix))
            return None
        self.problems.extend(_undeclared_reads(self.spec, fn, dotted, line, what))
        wrong = _role_problem(fn, dotted, what, arity=arity, sync=sync)
        if wrong is not None:
            self.problems.append(SpecProblem(self.spec.path, line, *wrong))
            return None
        return fn


def _role_problem(fn: Callable[..., Any], dotted: str, what: str, *, arity: int, sync: bool) -> tuple[str, str] | None:
    """Why ``fn`` cannot play its role (message, fix): async where a step needs it plain, or the other way,
    or not callable with the role's arguments."""
    if sync and inspect.iscoroutinefunction(fn):
        fix = "guards and handlers run inside a step; make it a plain def (effects are the async part)"
        return f"{what} {dotted!r} is an `async def`", fix
    if not sync and not inspect.iscoroutinefunction(fn):
        return f"{what} {dotted!r} is not an `async def`", "effects are awaited; declare it async"
    if not _takes(fn, arity):
        params = ("(ctx)" if what.startswith("state") else "(data)") if arity == 1 else "(run, event)"
        return f"{what} {dotted!r} cannot be called as {params}", f"give it the signature {params}"
    return None


def _resolve(dotted: str) -> tuple[Callable[..., object] | None, str]:
    """Import ``pkg.module.attr``; return the object or ``None`` with a reason and a hint."""
    module_name, _, attr = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        parent, _, leaf = missing.rpartition(".")
        siblings: list[str] = []
        if parent:
            try:
                pkg = importlib.import_module(parent)
                siblings = [m.name for m in pkgutil.iter_modules(getattr(pkg, "__path__", []))]
            except ImportError:
                siblings = []
        matches = difflib.get_close_matches(leaf, siblings, n=3, cutoff=0.8)
        hint = ("did you mean " + " or ".join(repr(f"{parent}.{m}") for m in matches) + "?") if matches else ""
        return None, f"cannot import module {missing!r}" + (f" ({hint})" if hint else "")
    except Exception as exc:  # the module itself is broken: say so, don't hide it
        return None, f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
    obj = getattr(module, attr, None)
    if obj is None or not callable(obj):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
        hint = close(attr, names)
        return None, f"module {module_name!r} has no callable {attr!r}" + (f" ({hint})" if hint else "")
    return obj, ""


def _takes(fn: Callable[..., Any], arity: int) -> bool:
    """``fn`` can be called with ``arity`` positional arguments."""
    try:
        inspect.signature(fn).bind(*([None] * arity))
    except TypeError:
        return False
    except ValueError:  # no signature available (a builtin): trust it
        return True
    return True


def _wait_problems(spec: MachineSpec, effects: Mapping[str, Callable[..., Any]], lines: Lines) -> list[SpecProblem]:
    """An effect that declares what bounds its sleeps (``uses(waits=...)``) must be counted by a figure with
    ``each_s``, and every such figure must name each of those params: else ``check`` would print a worst-case
    wait below what the effect may sleep (or none at all)."""
    out: list[SpecProblem] = []
    done: set[str] = set()
    for state in spec.states:
        fn = effects.get(state.name)
        declared = None if fn is None or state.effect is None else uses_of(fn)
        if declared is None or not declared.waits or state.effect in done:
            continue
        done.add(str(state.effect))
        counting = [name for name, named in spec.figures.items() if state.effect in named]
        timed = [name for name in counting if name in spec.figure_each_s]
        shown = ", ".join(declared.waits)
        if not timed:
            out.append(
                SpecProblem(
                    spec.path,
                    state.line,
                    f"effect {state.effect!r} sleeps up to {shown} seconds at a time, but no figure with `each_s` "
                    f"counts it{f' ({_few_names(counting)} count it without)' if counting else ''}",
                    f"list it under a figure's `effects` with `each_s: [{shown}]`",
                )
            )
        for name in timed:
            missing = [w for w in declared.waits if w not in spec.figure_each_s[name]]
            if missing:
                out.append(
                    SpecProblem(
                        spec.path,
                        line_of(lines, ("figures", name)),
                        f"figure {name!r} `each_s` leaves out {', '.join(map(repr, missing))}: its effect "
                        f"{state.effect!r} may sleep up to the largest of {shown} seconds at a time (the handler "
                        "declares it), so the worst-case wait printed would be below what a "
                        f"{spec.step_scope} may wait",
                        f"write `each_s: [{shown}]`",
                    )
                )
    return out


def _few_names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _undeclared_reads(
    spec: MachineSpec, fn: Callable[..., Any], dotted: str, line: int | None, what: str
) -> list[SpecProblem]:
    """A problem for every name ``fn`` declares it reads but the machine lacks."""
    declared = uses_of(fn)
    return [] if declared is None else _missing(spec, declared, line, f"{what} {dotted!r}")


def _missing(spec: MachineSpec, declared: Uses, line: int | None, who: str) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    known = {
        "counter": [c.name for c in spec.counters],
        "state": [s.name for s in spec.states],
        "param": [p.name for p in spec.params],
        "reason": [t.reason for t in spec.transitions],
    }
    kinds = (
        ("counter", declared.counters),
        ("state", declared.states),
        ("param", declared.params),
        ("reason", declared.reasons),
    )
    for kind, names in kinds:
        for name in names:
            if name not in known[kind]:
                hint = close(name, known[kind])
                out.append(
                    SpecProblem(
                        spec.path,
                        line,
                        f"{who} reads {kind} {name!r}, which the machine does not declare",
                        hint or f"declare the {kind}, or bind a handler written for this machine",
                    )
                )
    return out


def _name_of(observer: object) -> str:
    return (observer if isinstance(observer, type) else type(observer)).__qualname__


def check_observers(spec: MachineSpec, observers: Iterable[object]) -> None:
    """Refuse observers (or their classes) that compare steps with a state or reason the machine lacks: SpecError.

    Each observer's class declares what it reads with :func:`~queryloop.fsm.model.contract.uses`,
    as handlers do; a rename in the YAML then fails when the observer is attached to a
    run of it, not silently the first time the renamed step goes by.
    """
    problems = [
        problem
        for observer in observers
        for problem in _missing(spec, reads_of(observer), None, f"observer {_name_of(observer)}")
    ]
    if problems:
        raise SpecError(problems)
