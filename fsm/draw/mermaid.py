"""Drawing a machine as Mermaid flowcharts for Markdown pages: the same views as the Graphviz ones.

Owns the Mermaid text only, in YAML order; the wording is :mod:`fsm.draw.ladder`'s, the
Graphviz pictures :mod:`fsm.draw.render`'s. What a picture shows: docs/machines.md, "Diagrams".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..model.spec import MachineSpec, StateSpec, TransitionSpec
from .ladder import (
    EDGE_MEANING,
    Decision,
    View,
    counter_rows,
    counters_met,
    decisions,
    edge_kind,
    instance_of,
    instance_values,
    layer_names,
    source_name,
    template_spec,
    terminal_reason,
)

__all__ = ["to_mermaid"]

_CLASSES = (
    "classDef stub fill:#ffffff,stroke:#8a8a8a,stroke-dasharray:4 3,color:#6a6a6a",
    "classDef ok fill:#d4edda,stroke:#2e7d32",
    "classDef error fill:#f8d7da,stroke:#c62828",
    "classDef decision fill:#fff3cd,stroke:#b08800",
    "classDef key fill:#fafafa,stroke:#bdbdbd,text-align:left",
)
_ARROW = {"progress": "==>", "abort": "-.->"}


def _text(value: str) -> str:
    """Text safe inside a quoted Mermaid label (entity codes for the characters Mermaid reads)."""
    out = value.replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    return out.replace("\n", "<br/>")


def _id(prefix: str, *names: str) -> str:
    return prefix + "_" + "__".join(re.sub(r"\W", "_", n) for n in names)


def _state_node(spec: MachineSpec, s: StateSpec, *, stub: bool = False) -> str:
    sid = _id("st", s.name)
    if s.terminal:
        reason = terminal_reason(s)
        label = s.name if reason == s.name else f"{s.name}\n(terminal_reason {reason})"
        return f'{sid}(["{_text(label)}"]):::{"error" if s.result.get("is_error") else "ok"}'
    if stub:
        return f'{sid}("{_text(s.name)}<br/><i>{_text(s.layer or "no layer")}</i>"):::stub'
    return f'{sid}("{_text(s.name)}")'


def _arrow(spec: MachineSpec, t: TransitionSpec) -> str:
    return _ARROW.get(edge_kind(spec, t), "-->")


def _key(spec: MachineSpec, counters: Iterable[str], params: Mapping[str, object] | None) -> list[str]:
    legend = [
        "<b>legend</b>",
        "rhombus = decision on an event: candidates 1..n tried in YAML order;",
        "the first whose guards hold and whose counter is below its cap is taken (and counts)",
        "==> " + EDGE_MEANING["progress"],
        "-.-> " + EDGE_MEANING["abort"],
        "✓ " + EDGE_MEANING["ends"],
        "dashed box = a state of another layer; rounded = an end (green success, red error)",
    ]
    wanted = set(counters)
    rows = [
        f"{r.name} ≤ {r.cap} · {r.scope} · reset by: {'; '.join(r.reset_by)}"
        for r in counter_rows(spec, params)
        if r.name in wanted
    ]
    lines = [
        "  subgraph key[key]",
        "    direction TB",
        f'    key_legend["{"<br/>".join(_text(x) if i else x for i, x in enumerate(legend))}"]:::key',
    ]
    if rows:
        lines.append(f'    key_counters["<b>counters</b><br/>{"<br/>".join(_text(r) for r in rows)}"]:::key')
    lines.append("  end")
    return lines


def _edge_text(c_order: int | None, t: TransitionSpec, condition: str) -> str:
    head = f"{c_order} · {t.reason}" if c_order is not None else f"{t.event} / {t.reason}"
    parts = [head]
    if condition != "otherwise" or c_order is not None:
        parts.append(condition)
    if t.resets:
        parts.append("resets " + ", ".join(t.resets))
    if t.ends is not None:
        parts.append(f"✓ ends {t.ends}")
    if t.progress:
        parts.append("progress")
    return _text("\n".join(parts))


def _layer_lines(spec: MachineSpec, view: View, params: Mapping[str, object] | None) -> tuple[list[str], list[str]]:
    home = [s for s in spec.states if view.kind == "full" or s.layer == view.layer]
    home_names = {s.name for s in home}
    ds = [d for d in decisions(spec, params) if d.source in home_names]
    nodes = _home_nodes(spec, view, home, ds)
    edges, reached = _decision_edges(spec, ds)
    if view.kind == "layer":
        entering, sources = _entering_edges(spec, home_names)
        edges += entering
        reached += sources
    nodes += _visitor_nodes(spec, view, home_names, reached)
    return nodes, edges


def _home_nodes(spec: MachineSpec, view: View, home: list[StateSpec], ds: list[Decision]) -> list[str]:
    """The start arrow and the view's own states with their decision points, a subgraph per layer in the
    full view (the terminals of no layer are drawn apart, by :func:`_visitor_nodes`)."""
    home_names = {s.name for s in home}
    layers = layer_names(spec) if view.kind == "full" else ()
    nodes = ["  start(( )) --> " + _id("st", spec.initial)] if spec.initial in home_names else []
    choices = [d for d in ds if d.is_choice]
    for layer in (*layers, None):
        inside = [s for s in home if s.layer == layer or (layer is None and s.layer not in layers)]
        inside = [s for s in inside if not (s.terminal and not s.layer)]
        if not inside:
            continue
        if layer:
            nodes.append(f'  subgraph {_id("layer", layer)}["{_text(layer)}"]')
        nodes += _grouped(spec, inside, choices, "    " if layer else "  ")
        if layer:
            nodes.append("  end")
    return nodes


def _decision_edges(spec: MachineSpec, ds: list[Decision]) -> tuple[list[str], list[str]]:
    """The edges out of the view's states (through a decision point where there is a choice), and where
    they go, in order."""
    edges: list[str] = []
    reached: list[str] = []
    for d in ds:
        if not d.is_choice:
            c = d.candidates[0]
            text = _edge_text(None, c.transition, c.condition)
            edges.append(f'  {_id("st", d.source)} {_arrow(spec, c.transition)}|"{text}"| {_id("st", c.dest)}')
            reached.append(c.dest)
            continue
        did = _id("d", d.source, d.event)
        edges.append(f"  {_id('st', d.source)} {'-.-' if d.event == spec.abort_event else '---'} {did}")
        for c in d.candidates:
            text = _edge_text(c.order, c.transition, c.condition)
            edges.append(f'  {did} {_arrow(spec, c.transition)}|"{text}"| {_id("st", c.dest)}')
            reached.append(c.dest)
    return edges, reached


def _entering_edges(spec: MachineSpec, home_names: set[str]) -> tuple[list[str], list[str]]:
    """In a layer's view: one dotted edge per outside state that enters the layer, its reasons on it."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for t in spec.transitions:
        if t.source not in home_names and t.dest in home_names:
            pairs.setdefault((t.source, t.dest), []).append(t.reason)
    edges = [
        f'  {_id("st", source)} -.->|"{_text(", ".join(reasons))}"| {_id("st", dest)}'
        for (source, dest), reasons in pairs.items()
    ]
    return edges, [source for source, _ in pairs]


def _visitor_nodes(spec: MachineSpec, view: View, home_names: set[str], reached: list[str]) -> list[str]:
    """The states drawn though not the view's own: outside ones reached or entering (as stubs), and the
    terminals of no layer."""
    extra = [
        n for n in dict.fromkeys(reached) if n not in home_names or (spec.state(n).terminal and not spec.state(n).layer)
    ]
    if view.kind == "full":
        extra += [s.name for s in spec.states if s.terminal and not s.layer and s.name not in extra]
    nodes = []
    for name in extra:
        s = spec.state(name)
        nodes.append("  " + _state_node(spec, s, stub=name not in home_names and not (s.terminal and not s.layer)))
    return nodes


def _grouped(spec: MachineSpec, inside: list[StateSpec], choices: list[Decision], indent: str) -> list[str]:
    """The states (and their decision points) of one layer, a template's instance as a subgraph naming it."""
    owner = instance_of(spec)
    groups: dict[str, list[StateSpec]] = {}
    for s in inside:
        groups.setdefault(owner[s.name].name if s.name in owner else "", []).append(s)
    lines: list[str] = []
    for group, states in groups.items():
        pad = indent + "  " if group else indent
        if group:
            template = next(i.template for i in spec.instances if i.name == group)
            lines.append(f'{indent}subgraph {_id("inst", group)}["{_text(f"{group} · template {template}")}"]')
        names = {s.name for s in states}
        lines += [pad + _state_node(spec, s) for s in states]
        lines += [
            f'{pad}{_id("d", d.source, d.event)}{{"{_text(d.event)}"}}:::decision' for d in choices if d.source in names
        ]
        if group:
            lines.append(indent + "end")
    return lines


def _instances_key(spec: MachineSpec, template: str) -> list[str]:
    """The key node listing a template's instances and what each gives its params."""
    rows = [
        f"{i.name}: " + " · ".join(f"{k}={v}" for k, v in instance_values(i))
        for i in spec.instances
        if i.template == template
    ]
    return [f'    key_instances["<b>instances</b><br/>{"<br/>".join(_text(r) for r in rows)}"]:::key']


def _counters_of(spec: MachineSpec, view: View) -> tuple[str, ...]:
    if view.kind != "layer":
        return tuple(c.name for c in spec.counters)
    return counters_met(spec, (s.name for s in spec.states if s.layer == view.layer))


def _overview_lines(spec: MachineSpec) -> tuple[list[str], list[str]]:
    def group(s: StateSpec) -> str:
        if s.layer:
            return s.layer
        if s.terminal:
            return "end: error" if s.result.get("is_error") else "end: success"
        return "no layer"

    groups: dict[str, list[StateSpec]] = {}
    for s in spec.states:
        groups.setdefault(group(s), []).append(s)
    nodes = ["  start(( )) --> " + _id("g", group(spec.state(spec.initial)))]
    for name, states in groups.items():
        listed = "<br/>".join(_text(s.name) for s in states)
        cls = ":::error" if name == "end: error" else ":::ok" if name == "end: success" else ""
        nodes.append(f'  {_id("g", name)}["<b>{_text(name)}</b><br/>{listed}"]{cls}')
    between: dict[tuple[str, str, bool], list[TransitionSpec]] = {}
    for t in spec.transitions:
        a, b = group(spec.state(t.source)), group(spec.state(t.dest))
        if a != b:
            between.setdefault((a, b, t.event == spec.abort_event), []).append(t)
    edges = []
    for (a, b, abort), ts in between.items():
        arrow = "-.->" if abort else "==>" if any(t.progress for t in ts) else "-->"
        reasons = ", ".join(dict.fromkeys(t.reason for t in ts))
        edges.append(f'  {_id("g", a)} {arrow}|"{_text(reasons)}"| {_id("g", b)}')
    return nodes, edges


def to_mermaid(spec: MachineSpec, params: Mapping[str, object] | None = None, *, view: View | None = None) -> str:
    """The Mermaid flowchart of a view of ``spec`` (default: the full machine), as text."""
    view = view or View(kind="full")
    if view.kind == "template":
        return _template_mermaid(spec, view.layer, params)
    if view.kind == "layer" and view.layer not in layer_names(spec):
        raise ValueError(f"machine {spec.name!r} has no layer {view.layer!r} (layers: {', '.join(layer_names(spec))})")
    title = {"full": spec.name, "overview": f"{spec.name} · overview"}.get(
        view.kind, f"{spec.name} · layer {view.layer}"
    )
    lines = [
        "---",
        f"title: {title}",
        "---",
        "flowchart LR",
        f"  %% generated from {source_name(spec)} by `queryloop diagram`; do not edit",
    ]
    nodes, edges = _overview_lines(spec) if view.kind == "overview" else _layer_lines(spec, view, params)
    lines += nodes + edges + _key(spec, _counters_of(spec, view), params)
    lines += ["  " + c for c in _CLASSES]
    return "\n".join(lines) + "\n"


def _template_mermaid(spec: MachineSpec, template: str, params: Mapping[str, object] | None) -> str:
    """A template drawn once (each ``{param}`` as written), its instances listed in the key."""
    drawn = template_spec(spec, template)
    view = View(kind="layer", layer=template)
    nodes, edges = _layer_lines(drawn, view, params)
    key = _key(drawn, _counters_of(drawn, view), params)
    lines = [
        "---",
        f"title: {spec.name} · template {template}",
        "---",
        "flowchart LR",
        f"  %% generated from {source_name(spec)} by `queryloop diagram`; do not edit",
        *nodes,
        *edges,
        *key[:-1],
        *_instances_key(spec, template),
        key[-1],
    ]
    lines += ["  " + c for c in _CLASSES]
    return "\n".join(lines) + "\n"
