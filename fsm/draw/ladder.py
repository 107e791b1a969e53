"""A machine's decisions described for people: the wording the diagrams and the recovery page share.

Reads only :mod:`fsm.model.spec` records; draws and writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

import attrs

from ..model.spec import RUN, CounterSpec, InstanceSpec, MachineSpec, StateSpec, TransitionSpec

__all__ = [
    "Candidate",
    "CounterRow",
    "Decision",
    "EDGE_MEANING",
    "EdgeKind",
    "View",
    "cap_text",
    "counter_rows",
    "counters_met",
    "decisions",
    "edge_kind",
    "instance_of",
    "instance_values",
    "layer_names",
    "outcome_text",
    "source_name",
    "template_spec",
    "terminal_reason",
    "views",
]

EdgeKind = Literal["abort", "progress", "error", "ends", "plain"]

EDGE_MEANING: Mapping[EdgeKind, str] = {
    "progress": "progress: forward progress, resets the counters of every scope but the run",
    "ends": "ends a scope: resets its counters and those of the scopes inside it",
    "error": "into an error end",
    "abort": "abort (the user interrupted)",
    "plain": "any other edge",
}


@attrs.frozen(kw_only=True)
class Candidate:
    """One edge of a decision, with its place in the order the engine tries them (1-based)."""

    order: int
    transition: TransitionSpec
    condition: str  # "guard and counter < cap (n)", or "otherwise" for the catch-all
    resets: tuple[str, ...]  # the edge's explicit `resets`, in YAML order

    @property
    def reason(self) -> str:
        return self.transition.reason

    @property
    def dest(self) -> str:
        return self.transition.dest


@attrs.frozen(kw_only=True)
class Decision:
    """What a state does with one event: its candidates in the order tried; the first that may fire is taken."""

    source: str
    event: str
    candidates: tuple[Candidate, ...]

    @property
    def is_choice(self) -> bool:
        """More than one way out, a condition, or a loop back: worth a decision point of its own."""
        only = self.candidates[0].transition
        return len(self.candidates) > 1 or not only.unguarded or only.dest == self.source


@attrs.frozen(kw_only=True)
class CounterRow:
    """A counter as a table row: its cap, its scope, the edges that count it and what resets it."""

    name: str
    cap: str
    scope: str
    counted_by: tuple[str, ...]  # reasons whose edges increment it
    reset_by: tuple[str, ...]  # one phrase per rule that resets it
    doc: str


@attrs.frozen(kw_only=True)
class View:
    """One picture of a machine: its layers (``overview``), everything (``full``), one ``layer``, or one run."""

    kind: Literal["overview", "full", "layer", "run", "template"]
    layer: str = ""  # the layer, or the template (kind ``template``)

    @property
    def suffix(self) -> str:
        """What the view adds to the machine's file name: nothing, ``.<layer>`` or ``.template.<template>``."""
        name = "." + re.sub(r"[^A-Za-z0-9_-]+", "_", self.layer)
        return name if self.kind == "layer" else ".template" + name if self.kind == "template" else ""


def views(spec: MachineSpec) -> tuple[View, ...]:
    """The committed pictures of a machine: overview and one per layer, or one full diagram (< 2 layers);
    then one per template."""
    layers = layer_names(spec)
    templates = tuple(View(kind="template", layer=t.name) for t in spec.templates)
    if len(layers) < 2:
        return (View(kind="full"), *templates)
    return (View(kind="overview"), *(View(kind="layer", layer=name) for name in layers), *templates)


def instance_of(spec: MachineSpec) -> dict[str, InstanceSpec]:
    """The instance each templated state came from (hand-written states are not in it)."""
    return {state: i for i in spec.instances for state in i.states}


def instance_values(instance: InstanceSpec) -> tuple[tuple[str, str], ...]:
    """What an instance gives its template's params, docs left out (a diagram names them, the YAML says them)."""
    out = []
    for name, value in instance.values:
        text = ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        if name != "doc" and not name.endswith("_doc") and text and "\n" not in text:
            out.append((name, text))
    return tuple(out)


def template_spec(spec: MachineSpec, name: str) -> MachineSpec:
    """Template ``name`` as a machine of its own, for drawing it once: its generic states (``{kind}_compacting``)
    in a layer named for it, the states it leaves to as stubs (a param: "per instance"), its counters as declared
    (a param counter: "per instance")."""
    template = next(t for t in spec.templates if t.name == name)
    states = [attrs.evolve(s, layer=name) for s in template.states]
    own = {s.name for s in states}
    for t in template.transitions:
        if t.dest not in own:
            own.add(t.dest)
            real = spec.state_map.get(t.dest)
            states.append(real or StateSpec(name=t.dest, layer="per instance"))
    counters: list[CounterSpec] = []
    for c in dict.fromkeys(n for t in template.transitions for n in (t.counter, *t.resets) if n):
        if "{" in c and not any(t.counter == c for t in template.transitions):
            continue  # a param naming the counters an edge resets, not a counter
        counters.append(spec.counter_map.get(c) or CounterSpec(name=c, cap=c, scope=RUN, doc="per instance"))
    return attrs.evolve(
        spec,
        states=tuple(states),
        transitions=template.transitions,
        counters=tuple(counters),
        properties=(),
        templates=(),
        instances=(),
    )


def edge_kind(spec: MachineSpec, t: TransitionSpec) -> EdgeKind:
    """How an edge is styled, most telling first: abort, progress, into an error end, ends a scope."""
    dest = spec.state(t.dest)
    if t.event == spec.abort_event:
        return "abort"
    if t.progress:
        return "progress"
    if dest.terminal and dest.result.get("is_error"):
        return "error"
    return "ends" if t.ends is not None else "plain"


def source_name(spec: MachineSpec) -> str:
    """The machine file as generated files name it: its folder and name, the same wherever it is read from."""
    return "/".join(Path(spec.path).parts[-2:])


def layer_names(spec: MachineSpec) -> tuple[str, ...]:
    """The named layers in the order their first state is declared."""
    out: list[str] = []
    for s in spec.states:
        if s.layer and s.layer not in out:
            out.append(s.layer)
    return tuple(out)


def cap_text(spec: MachineSpec, counter: CounterSpec, params: Mapping[str, object] | None = None) -> str:
    """``3``, ``max_retries (10)``, ``max_turns − 1 (unset: no limit)``: the cap as declared and its value."""
    if isinstance(counter.cap, int):
        return str(counter.cap)
    if "{" in counter.cap:  # a template's counter given by each instance
        return "its cap"
    offset = ""
    if counter.cap_offset:
        offset = f" {'+' if counter.cap_offset > 0 else '−'} {abs(counter.cap_offset)}"
    value = spec.cap_of(counter, params)
    return f"{counter.cap}{offset} ({'unset: no limit' if value is None else value})"


def _condition(spec: MachineSpec, t: TransitionSpec, params: Mapping[str, object] | None) -> str:
    parts = list(t.guards)
    if t.counter is not None:
        parts.append(f"{t.counter} < {cap_text(spec, spec.counter_map[t.counter], params)}")
    return " and ".join(parts) if parts else "otherwise"


def decisions(spec: MachineSpec, params: Mapping[str, object] | None = None) -> tuple[Decision, ...]:
    """Every ``(state, event)`` decision, in the order of its first edge in the YAML."""
    out = []
    for (source, event), edges in spec.candidates().items():
        candidates = tuple(
            Candidate(order=i, transition=t, condition=_condition(spec, t, params), resets=t.resets)
            for i, t in enumerate(edges, start=1)
        )
        out.append(Decision(source=source, event=event, candidates=candidates))
    return tuple(out)


def _reset_rules(spec: MachineSpec, c: CounterSpec) -> tuple[str, ...]:
    rules: list[str] = []
    explicit = [t.reason for t in spec.transitions if c.name in t.resets]
    if explicit:
        rules.append("edges " + ", ".join(dict.fromkeys(explicit)))
    if c.consecutive:
        rules.append("in a row: edges " + ", ".join(c.consecutive))
    if c.streak_of:
        states = [s.name for s in spec.states if any(e in s.emits for e in c.streak_of)]
        rules.append(f"streak: any outcome of {', '.join(states)} but {', '.join(c.streak_of)}")
    if c.scope in spec.scopes:
        wider = spec.scopes[spec.scopes.index(c.scope) :]
        ends = [f"`ends: {s}`" for s in wider if any(t.ends == s for t in spec.transitions)]
        rules.append(f"scope {c.scope}: " + " and ".join(["progress", *ends]) + " edges")
    return tuple(rules) or (f"never (scope {c.scope})",)


def counter_rows(spec: MachineSpec, params: Mapping[str, object] | None = None) -> tuple[CounterRow, ...]:
    """Every counter, in YAML order."""
    return tuple(
        CounterRow(
            name=c.name,
            cap=cap_text(spec, c, params),
            scope=c.scope,
            counted_by=tuple(dict.fromkeys(t.reason for t in spec.transitions if t.counter == c.name)),
            reset_by=_reset_rules(spec, c),
            doc=" ".join(c.doc.split()),
        )
        for c in spec.counters
    )


def counters_met(spec: MachineSpec, states: Iterable[str]) -> tuple[str, ...]:
    """The counters that matter in ``states``: counted or reset by their edges, or counting a streak there."""
    home = set(states)
    names: set[str] = set()
    reasons: set[str] = set()
    for t in spec.transitions:
        if t.source in home:
            reasons.add(t.reason)
            names.update(t.resets)
            if t.counter:
                names.add(t.counter)
    for c in spec.counters:
        if reasons.intersection(c.consecutive) or any(e in spec.state(h).emits for h in home for e in c.streak_of):
            names.add(c.name)
    return tuple(c.name for c in spec.counters if c.name in names)


def terminal_reason(state: StateSpec) -> str:
    """The terminal reason a run ending in ``state`` reports (its ``result`` may rename it)."""
    return str(state.result.get("terminal_reason", state.name))


def outcome_text(spec: MachineSpec, t: TransitionSpec) -> str:
    """What a person sees when ``t`` is taken: the run's end and its result, or what the loop does next."""
    dest = spec.state(t.dest)
    doc = " ".join((t.doc or dest.doc).split())
    if dest.terminal:
        kind = "error" if dest.result.get("is_error") else "success"
        head = f"run ends: {terminal_reason(dest)} ({kind})"
        return f"{head}; {doc}" if doc else head
    return doc or f"continues in {dest.name}"
