"""Drawing a machine: Graphviz (dot/svg/png) and Mermaid, straight from the declaration.

Owns the visual conventions: states grouped by ``layer`` in clusters, terminal
states drawn distinct, edges labelled ``reason [guards] +counter/cap``, edges
coloured by the layer of the state they leave, ``progress`` edges bold. Output
is deterministic (YAML order) so diagram diffs stay readable. Does not import
the runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import graphviz

from .spec import MachineSpec, TransitionSpec

__all__ = ["edge_label", "to_dot", "to_mermaid"]

_PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def edge_label(spec: MachineSpec, t: TransitionSpec, params: Mapping[str, Any] | None = None) -> str:
    """``reason [guards] +counter/cap`` — what every diagram prints on an edge."""
    label = t.reason
    if t.guards:
        label += " [" + ", ".join(t.guards) + "]"
    if t.counter is not None:
        c = spec.counter_map[t.counter]
        offset = f"{c.cap_offset:+d}" if c.cap_offset else ""
        cap = c.cap if isinstance(c.cap, int) else f"{c.cap}{offset}={spec.cap_of(c, params)}"
        label += f" +{t.counter}/{cap}"
    return label


def _layers(spec: MachineSpec) -> dict[str, str]:
    colours: dict[str, str] = {}
    for s in spec.states:
        if s.layer and s.layer not in colours:
            colours[s.layer] = _PALETTE[len(colours) % len(_PALETTE)]
    return colours


def to_dot(spec: MachineSpec, params: Mapping[str, Any] | None = None) -> graphviz.Digraph:
    """The machine as a ``graphviz.Digraph``; ``.source`` is the deterministic dot text."""
    colours = _layers(spec)
    layer_of = {s.name: s.layer for s in spec.states}
    g = graphviz.Digraph(name=spec.name, comment=f"generated from {spec.path} by `queryloop diagram`; do not edit")
    g.attr(
        rankdir="LR",
        fontname="Helvetica",
        labelloc="t",
        label=f"{spec.name}",
        newrank="true",
        nodesep="0.3",
        ranksep="1.2",
    )
    g.attr("node", fontname="Helvetica", fontsize="11")
    g.attr("edge", fontname="Helvetica", fontsize="9")
    g.node("__start__", label="", shape="point", width="0.15")
    by_layer: dict[str, list[str]] = {}
    for s in spec.states:
        by_layer.setdefault(s.layer, []).append(s.name)

    def add_state(target: graphviz.Digraph, name: str) -> None:
        s = spec.state(name)
        if s.terminal:
            error = bool(s.result.get("is_error"))
            target.node(name, shape="doubleoctagon", style="filled", fillcolor="#f8d7da" if error else "#d4edda")
        else:
            target.node(name, shape="box", style="rounded")

    for layer, names in by_layer.items():
        if not layer:
            for n in names:
                add_state(g, n)
            continue
        with g.subgraph(name=f"cluster_{layer}") as sub:
            sub.attr(label=layer, color=colours[layer], fontcolor=colours[layer], style="dashed")
            for n in names:
                add_state(sub, n)
    g.edge("__start__", spec.initial)
    for t in spec.transitions:
        attrs: dict[str, str] = {"label": edge_label(spec, t, params)}
        if t.progress:
            attrs.update(penwidth="3", style="bold", color="black")
        elif t.counter is not None or t.guards:
            colour = colours.get(layer_of[t.source], "#555555")
            attrs.update(color=colour, fontcolor=colour)
        if t.event == spec.abort_event:
            attrs.update(style="dotted", color="#999999", fontcolor="#999999")
        g.edge(t.source, t.dest, **attrs)
    return g


def to_mermaid(spec: MachineSpec, params: Mapping[str, Any] | None = None) -> str:
    """The machine as a Mermaid ``stateDiagram-v2`` (layers as composite-free notes, YAML order)."""
    lines = ["---", f"title: {spec.name}", "---", "stateDiagram-v2"]
    lines.append(f"    [*] --> {spec.initial}")
    for s in spec.states:
        if s.layer:
            lines.append(f"    {s.name} : {s.name} ({s.layer})")
    for t in spec.transitions:
        label = edge_label(spec, t, params).replace(":", " ")
        if t.progress:
            label += " (progress)"
        lines.append(f"    {t.source} --> {t.dest} : {label}")
    for s in spec.states:
        if s.terminal:
            lines.append(f"    {s.name} --> [*]")
    for s in spec.states:
        if s.terminal and s.result.get("is_error"):
            lines.append(f"    class {s.name} error")
    lines.append("    classDef error fill:#f8d7da")
    return "\n".join(lines) + "\n"
