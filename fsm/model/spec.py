"""Records describing a machine, exactly as declared: states, events, transitions, counters, params.

Also their derived lookups (candidates per ``(state, event)``, reset sets). No I/O; ``fsm.model.build`` builds them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

import attrs

__all__ = [
    "CounterSpec",
    "EndRule",
    "InstanceSpec",
    "InvariantSpec",
    "MachineSpec",
    "ParamSpec",
    "ParamType",
    "PropertySpec",
    "RUN",
    "SPAN",
    "Scope",
    "StateSpec",
    "TemplateSpec",
    "TransitionSpec",
]

Scope = str  # a scope the machine declares (``scopes:``), or RUN
RUN = "run"  # the scope every machine has: the whole run, never ended within it
SPAN = "span"  # the one scope of a machine that declares none: from one progress edge to the next


ParamType = Literal["int", "number", "string", "boolean"]


@attrs.frozen(kw_only=True)
class ChildrenSpec:
    """Runs of this same machine that a run starts (``children:``): each admitted by an edge the ``starts``
    counter counts, so at most its cap per step scope (from one progress edge to the next; the engine
    takes no counted edge past its cap), each with at most the ``steps`` param's progress
    steps (its run's bound), ``depth`` levels deep (1: a child starts none). ``queryloop check`` composes the
    figures with them. ``pending`` names the guard that holds while a child a run started is still to be heard
    from: false in a child at the last depth (it starts none), so a child's run is bounded as the machine
    without the edges it guards."""

    name: str
    starts: str  # a counter over the step scope
    steps: str  # an int param
    depth: int = 1
    pending: str | None = None
    admitted: str = ""  # the reason of the edge that admits a start (it counts `starts`): the child starts
    refused: str = ""  # the reason of the edge taken at the cap instead: the call is answered with an error
    doc: str = ""
    line: int | None = None


@attrs.frozen(kw_only=True)
class InvariantSpec:
    """A predicate over the run data (``invariants:``) that holds whenever a run enters one of ``at``: the
    runtime calls ``call`` (dotted) with the new run data on every such step, and a step after which it
    reports a problem ends the run in ``internal_error`` naming it."""

    name: str
    call: str
    at: tuple[str, ...]
    doc: str = ""
    line: int | None = None


@attrs.frozen(kw_only=True)
class ParamSpec:
    """A named default a caller may override.

    ``type`` is declared (``type: int``) or inferred from a non-null default; ``nullable``
    says whether ``None`` (unset, e.g. no turn limit) is an allowed value — declared, or
    true when the default is null. Only a non-nullable ``int`` param bounds a counter for
    every value a caller may give it.
    """

    name: str
    default: Any
    type: ParamType | None = None  # None: untyped (a null default without `type`)
    nullable: bool = False
    check: Any = None  # the smaller value the checker explores with (None: the default)
    most: float | None = None  # the largest value a caller may give (`max:`); None: no limit declared
    doc: str = ""
    line: int | None = None

    def problem_with(self, value: Any) -> str | None:
        """Why ``value`` is not an allowed value of this param (``None`` when it is)."""
        if value is None:
            return None if self.nullable or self.type is None else "may not be null"
        expected = {
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
            "string": lambda v: isinstance(v, str),
            "boolean": lambda v: isinstance(v, bool),
        }
        if self.type is not None and not expected[self.type](value):
            return f"must be {'an' if self.type == 'int' else 'a'} {self.type}{' or null' if self.nullable else ''}"
        if self.type in ("int", "number") and value < 0:
            return "must be 0 or more"
        if self.most is not None and self.type in ("int", "number") and value > self.most:
            return f"must be at most {self.most:g} (its declared `max`)"
        return None


@attrs.frozen(kw_only=True)
class CounterSpec:
    """A per-path budget: incremented by the edges that name it, capped, reset by scope or by edges."""

    name: str
    cap: int | str  # an int, or the name of a param holding the cap
    cap_offset: int = 0  # added to a param cap (e.g. -1: "the Nth turn is the last")
    scope: Scope = SPAN  # the loader puts the step scope here when the YAML leaves it out
    consecutive: tuple[str, ...] = ()  # reasons whose edges reset this counter
    streak_of: tuple[str, ...] = ()  # events it counts in a row: any other outcome of their states resets it
    doc: str = ""
    line: int | None = None


PropertyKind = Literal["order", "at_most", "in_a_row", "resets", "guarded", "preceded", "ends", "trips"]


@attrs.frozen(kw_only=True)
class EndRule:
    """One rule of an ``ends`` property: the edges whose reason is of one of ``kinds`` (ends in
    ``_<kind>``) or is listed in ``reasons``, but for those in ``unless``, go to a terminal state
    whose declared ``result`` holds each of ``result``'s pairs (none: any terminal state)."""

    kinds: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    result: tuple[tuple[str, Any], ...] = ()

    def covers(self, reason: str) -> bool:
        """Whether the rule speaks of the edges of ``reason``."""
        if reason in self.unless:
            return False
        return reason in self.reasons or any(reason.endswith(f"_{kind}") for kind in self.kinds)

    def kept_by(self, state: StateSpec) -> bool:
        """Whether ending in ``state`` keeps the rule."""
        return state.terminal and all(state.result.get(key) == value for key, value in self.result)

    def wanted(self) -> str:
        """What the rule wants, in words."""
        if not self.result:
            return "a terminal state"
        return "a terminal state whose result has " + ", ".join(f"{k}: {v!r}" for k, v in self.result)


@attrs.frozen(kw_only=True)
class PropertySpec:
    """A promise the machine declares, checked by ``check`` and watched at run time.

    * ``order``: wherever two of ``reasons`` are candidates of one decision, they are tried
      in the listed order (escalation before recovery, a breaker before the start it guards);
    * ``at_most``: the edges ``reasons`` are taken at most ``most`` times ``per`` scope — one
      the machine declares, or the run — (``most`` an int, a param, or ``param ± N``);
    * ``in_a_row``: ``counter`` counts in a row: every other outcome of a state it counts
      in resets it — or, with ``reasons``, exactly the edges listed there break the streak;
    * ``resets``: after any of the edges ``reasons``, each of ``counters`` is 0 (a reply
      completes its request: the next request has its whole retry budget);
    * ``guarded``: the edges ``reasons`` are taken only while the guard ``guard`` holds;
    * ``preceded``: a step into one of ``states`` comes after a step into one of ``by`` since the
      ``per`` scope began (every tool run is preceded by the gate in its turn);
    * ``trips``: the breaker edge (``reasons[0]``) is taken on the ``most``-th occurrence in a row of the
      outcome the counted edge tried right before it takes (``most`` an int, a param, or ``param ± N``);
    * ``ends``: each of ``rules`` holds (a terminal's result matches its cause: an interrupt ends
      as one, a spent budget in an error).
    """

    name: str
    kind: PropertyKind
    reasons: tuple[str, ...] = ()
    per: Scope = SPAN  # at_most and preceded: a declared scope or RUN (the YAML always says which)
    most: int | str | None = None
    counter: str | None = None
    counters: tuple[str, ...] = ()  # resets: the counters that are 0 after the edges
    guard: str | None = None  # guarded: the guard every listed edge needs
    states: tuple[str, ...] = ()  # preceded: the states entered only after one of `by`
    by: tuple[str, ...] = ()  # preceded: the states one of which comes first in the scope
    rules: tuple[EndRule, ...] = ()  # ends: where edges of a kind go
    doc: str = ""
    line: int | None = None


@attrs.frozen(kw_only=True)
class InstanceSpec:
    """One use of a template (``instances:``): the states and the reasons of the edges it expanded to.

    The flat ``states`` and ``transitions`` hold them already; this says where they came from,
    for the diagrams, which draw a template once with its instances."""

    name: str
    template: str
    doc: str = ""
    values: tuple[tuple[str, Any], ...] = ()  # (param, value) as the instance gives them, defaults filled in
    states: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class TemplateSpec:
    """A ladder declared once (``templates:``), in its generic form: every ``{param}`` left as written.

    The flat machine never reads it; the diagrams draw it once, beside its instances."""

    name: str
    doc: str = ""
    params: tuple[tuple[str, str], ...] = ()  # (param, doc)
    states: tuple[StateSpec, ...] = ()
    transitions: tuple[TransitionSpec, ...] = ()


@attrs.frozen(kw_only=True)
class StateSpec:
    """A state: either it runs an effect that emits one of ``emits``, or it is terminal."""

    name: str
    doc: str = ""
    layer: str = ""
    effect: str | None = None
    emits: tuple[str, ...] = ()
    exit: str | None = None  # a pure handler run on every edge out of the state, before the edge's `do`
    terminal: bool = False
    result: Mapping[str, Any] = attrs.field(factory=dict)
    line: int | None = None


@attrs.frozen(kw_only=True)
class TransitionSpec:
    """An edge ``source --event--> dest`` with a unique reason, optional guards, counter and handler."""

    source: str
    event: str
    dest: str
    reason: str
    guards: tuple[str, ...] = ()
    counter: str | None = None
    resets: tuple[str, ...] = ()
    do: str | None = None
    changes: tuple[str, ...] = ()  # the contract of `do`: the run data's fields (dotted paths) it must change
    may_change: tuple[str, ...] = ()  # fields `do` may change besides `changes` and `sets` (its frame)
    # fields `do` leaves at a value: (path, literal) or (path, ("was", path)): what that path held before `do`
    sets: tuple[tuple[str, Any], ...] = ()
    progress: bool = False  # a forward step: ends every declared scope
    ends: Scope | None = None  # a declared scope this edge ends (and every scope inside it)
    doc: str = ""
    line: int | None = None

    @property
    def unguarded(self) -> bool:
        return not self.guards and self.counter is None

    @property
    def frame(self) -> tuple[str, ...] | None:
        """The fields ``do`` may change, every other one of the run data left as it was (``None``: no contract,
        so no frame). An edge with ``changes``, ``may_change`` or ``sets`` declares its whole frame."""
        if not (self.changes or self.may_change or self.sets):
            return None
        return tuple(dict.fromkeys((*self.changes, *self.may_change, *(path for path, _ in self.sets))))


@attrs.frozen(kw_only=True)
class MachineSpec:
    """A whole machine declaration, in YAML order. ``path`` is where it was read from."""

    name: str
    path: str
    initial: str
    doc: str = ""
    schema_version: int = 1
    package: str = ""  # dotted names starting with "." are relative to it
    abort_event: str = "abort"
    reason_kinds: Mapping[str, str] = attrs.field(factory=dict)  # kind -> meaning; opts into the naming rules
    params: tuple[ParamSpec, ...] = ()
    events: Mapping[str, str] = attrs.field(factory=dict)  # name -> doc
    guards: Mapping[str, str] = attrs.field(factory=dict)  # guard name -> dotted python name (absolute)
    guard_docs: Mapping[str, str] = attrs.field(factory=dict)
    # guard name -> the reasons of exactly the edges it decides (`decides:`, its declared meaning); absent: undeclared
    guard_decides: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    # what counters and properties are counted over, innermost first; each ends at progress edges and
    # at the edges that end it or a scope around it; RUN, around them all, never ends
    scopes: tuple[str, ...] = (SPAN,)
    counters: tuple[CounterSpec, ...] = ()
    figures: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)  # name -> effects summed by the checker
    figure_max: Mapping[str, int] = attrs.field(factory=dict)  # name -> the most per turn `check` accepts
    # name -> the most per run: an int, a param, or "param + N" / "param - N" (a null param: no limit)
    figure_max_per_run: Mapping[str, int | str] = attrs.field(factory=dict)
    # name -> the most per turn with the runs of this machine the turn starts (`children:`), where that is bounded
    figure_max_with_children: Mapping[str, int] = attrs.field(factory=dict)
    # name -> params (or numbers) whose largest value bounds one invocation's seconds (a wait)
    figure_each_s: Mapping[str, tuple[str | float, ...]] = attrs.field(factory=dict)
    unbounded_by_design: Mapping[str, str] = attrs.field(factory=dict)  # progress reason -> what is unbounded
    progress_bounds: Mapping[str, str] = attrs.field(factory=dict)  # progress reason -> the param that bounds it
    children: tuple[ChildrenSpec, ...] = ()  # runs of this machine a run starts (sub-agents)
    invariants: tuple[InvariantSpec, ...] = ()  # predicates over the run data, watched where a run enters states
    properties: tuple[PropertySpec, ...] = ()
    states: tuple[StateSpec, ...] = ()
    transitions: tuple[TransitionSpec, ...] = ()
    templates: tuple[TemplateSpec, ...] = ()  # ladders declared once (diagrams only: the flat graph holds them)
    instances: tuple[InstanceSpec, ...] = ()  # where templated states and edges came from (diagrams only)

    # ---- derived lookups (cheap, computed on demand) -------------------------------------
    def state(self, name: str) -> StateSpec:
        return self.state_map[name]

    @functools.cached_property
    def state_map(self) -> Mapping[str, StateSpec]:
        return {s.name: s for s in self.states}

    @functools.cached_property
    def counter_map(self) -> Mapping[str, CounterSpec]:
        return {c.name: c for c in self.counters}

    @property
    def param_defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    @property
    def param_check_values(self) -> dict[str, object]:
        """The params the checker explores with: each param's ``check`` value, else its default."""
        return {p.name: p.default if p.check is None else p.check for p in self.params}

    @property
    def terminals(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states if s.terminal)

    def transitions_to(self, reason: str) -> str:
        """Where the edges of ``reason`` go, for a message: ``'state'`` (or several, comma-separated)."""
        return ", ".join(repr(d) for d in dict.fromkeys(t.dest for t in self.transitions if t.reason == reason))

    def candidates(self) -> dict[tuple[str, str], tuple[TransitionSpec, ...]]:
        """Candidate edges per ``(state, event)``, in YAML order (the order they are tried)."""
        groups: dict[tuple[str, str], list[TransitionSpec]] = {}
        for t in self.transitions:
            groups.setdefault((t.source, t.event), []).append(t)
        return {k: tuple(v) for k, v in groups.items()}

    def resets_of(self, t: TransitionSpec) -> frozenset[str]:
        """Every counter taking ``t`` resets: explicit, by ``consecutive``, by ``streak_of``, and by scope."""
        out = set(t.resets)
        emits = self.state_map[t.source].emits if t.source in self.state_map else ()
        for c in self.counters:
            if t.reason in c.consecutive:
                out.add(c.name)
            elif c.streak_of and t.event not in c.streak_of and any(e in emits for e in c.streak_of):
                out.add(c.name)  # another outcome of a state that counts the streak breaks it
            elif self.ends_scope(t, c.scope):
                out.add(c.name)
        if t.counter is not None and t.counter not in t.resets:
            # the edge's own counter is incremented, never reset by its own scope
            out.discard(t.counter)
        return frozenset(out)

    @property
    def step_scope(self) -> str:
        """The widest scope a run ends: the one ended only by progress edges (its figures are "per" it)."""
        return self.scopes[-1]

    def ends_scope(self, t: TransitionSpec, scope: str) -> bool:
        """Whether taking ``t`` ends ``scope`` (so what is counted over it starts again): a progress edge ends
        every declared scope, an ``ends:`` edge its scope and those inside it; nothing ends the run."""
        if scope == RUN or scope not in self.scopes:
            return False
        if t.progress:
            return True
        return t.ends is not None and t.ends in self.scopes and self.scopes.index(scope) <= self.scopes.index(t.ends)

    @functools.cached_property
    def param_map(self) -> Mapping[str, ParamSpec]:
        return {p.name: p for p in self.params}

    def bounds_always(self, counter: CounterSpec) -> bool:
        """Whether ``counter``'s cap is finite for every value a caller may give: an int, or a
        non-nullable ``int`` param."""
        if isinstance(counter.cap, int):
            return True
        param = self.param_map.get(counter.cap)
        return param is not None and param.type == "int" and not param.nullable

    def limit_of(self, limit: int | str, params: Mapping[str, Any]) -> int | None:
        """A figure's ``max_per_run`` under ``params``: an int, ``param``, or ``param ± N`` (``None``: no limit)."""
        if isinstance(limit, int):
            return limit
        name, _, rest = limit.partition(" ")
        value = params.get(name)
        if value is None:
            return None
        sign, _, amount = rest.partition(" ")
        return int(value) + (int(amount) if sign == "+" else -int(amount) if sign == "-" else 0)

    def never_fires(self, t: TransitionSpec) -> bool:
        """True for an edge counted by a counter whose cap is the constant 0: no run takes it, whatever the params."""
        if t.counter is None:
            return False
        cap = self.counter_map[t.counter].cap
        return isinstance(cap, int) and cap <= 0

    def cap_of(self, counter: CounterSpec, params: Mapping[str, Any] | None = None) -> int | None:
        """The counter's cap under ``params`` (defaults when omitted); ``None`` = unbounded."""
        if isinstance(counter.cap, int):
            return counter.cap
        values = self.param_defaults if params is None else params
        value = values.get(counter.cap)
        return None if value is None else max(0, int(value) + counter.cap_offset)
