"""Drawing a machine with Graphviz: an overview of its layers, one diagram per layer, one run or many on the graph.

Each picture carries its key (``key``; docs/machines.md), and recorded runs mark it (``marks``). Output is in YAML
order, so committed DOT can be compared in CI.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from html import escape

import graphviz

from ..model.spec import MachineSpec, StateSpec, TransitionSpec
from ..verify.coverage import Coverage
from .key import picture_key
from .ladder import (
    Candidate,
    Decision,
    View,
    counters_met,
    decisions,
    edge_kind,
    instance_of,
    instance_values,
    layer_names,
    template_spec,
    terminal_reason,
)
from .marks import CoverageMarks, Marks, RunMarks
from .mermaid import to_mermaid
from .style import DECISION_FILL, EDGE_STYLE, ERROR_FILL, FAILED, MISSING, OK_FILL, STUB, TAKEN, new_graph, small
from .trace import Trace

__all__ = ["to_dot", "to_mermaid", "to_overview"]


def _tags(t: TransitionSpec) -> list[str]:
    """The flags a candidate row spells out (colour alone is not enough)."""
    return [name for name, on in (("progress", t.progress), (f"ends {t.ends}", t.ends is not None)) if on]


class _Picture:
    """Builds a full, layer or run diagram: states, decision points, edges, and the key above them."""

    def __init__(
        self,
        spec: MachineSpec,
        view: View,
        params: Mapping[str, object] | None,
        trace: Trace | None,
        coverage: Coverage | None = None,
    ):
        self.spec, self.view, self.params = spec, view, params
        self.marks: Marks | None = None
        if trace is not None:
            self.marks = RunMarks(trace)
        elif coverage is not None:
            self.marks = CoverageMarks(coverage)
        every = decisions(spec, params)
        if view.kind == "run" and trace is not None:
            pairs = {(s.source, s.event) for s in trace.steps}
            self.home = [s for s in spec.states if s.name in trace.visited and not (s.terminal and not s.layer)]
            self.decisions = [d for d in every if (d.source, d.event) in pairs]
        else:
            self.home = [s for s in spec.states if view.kind in ("full", "run") or s.layer == view.layer]
            self.decisions = [d for d in every if d.source in {s.name for s in self.home}]
        self.home_names = {s.name for s in self.home}
        self.drawn: list[str] = []  # states of other layers and ends reached, in first-drawn order
        self.heading = ""  # the title, when not the view's (a template's picture)
        self.note = ""  # the text under the title, when not the machine's doc (a template's instances)
        name = spec.name if view.kind != "layer" else f"{spec.name}.{view.layer}"
        self.graph = new_graph(spec, name)

    # -- nodes --
    def _is_stub(self, s: StateSpec) -> bool:
        return s.name not in self.home_names and not (s.terminal and not s.layer)

    def _state_attrs(self, s: StateSpec) -> dict[str, str]:
        out: dict[str, str] = {"tooltip": " ".join(s.doc.split()) or s.name}
        if s.terminal:
            reason = terminal_reason(s)
            label = s.name if reason == s.name else f"{s.name}\\n(terminal_reason {reason})"
            fill = ERROR_FILL if s.result.get("is_error") else OK_FILL
            out.update(label=label, shape="box", style="filled,bold", fillcolor=fill)
        else:
            out.update(shape="box", style="rounded,filled", fillcolor="white", fontsize="14", penwidth="1.5")
        if self._is_stub(s):
            out.update(style="rounded,dashed", color=STUB, fontcolor=STUB, fontsize="9", fillcolor="white")
            out["label"] = f"{s.name}\\n({s.layer or 'no layer'})"
        if self.marks is not None:
            self.marks.mark_state(s, out)
        return out

    def _add_state(self, target: graphviz.Digraph, s: StateSpec) -> None:
        target.node(s.name, **self._state_attrs(s))

    def _reach(self, name: str) -> None:
        if name not in self.home_names and name not in self.drawn:
            self.drawn.append(name)

    # -- edges --
    def _edge_attrs(self, t: TransitionSpec, label: str = "") -> dict[str, str]:
        out = dict(EDGE_STYLE[edge_kind(self.spec, t)])
        if self.marks is not None:
            out.update(self.marks.edge_style(t.source, t.reason))
            label = f"{label} {self.marks.note(t.source, t.reason)}".strip()
        out["fontcolor"] = out["color"]
        if label:
            out["label"] = label
        return out

    def _row(self, c: Candidate) -> str:
        t = c.transition
        lines = [f"<B>{escape(c.reason)}</B> → {escape(c.dest)}", small(escape(c.condition))]
        if c.resets:
            lines.append(small("resets " + escape(", ".join(c.resets)), "#6a1b9a"))
        tags = _tags(t)
        if tags:
            lines.append(small(escape(" · ".join(tags)), EDGE_STYLE["ends"]["color"]))
        bg = ""
        note = self.marks.note(t.source, t.reason) if self.marks is not None else ""
        if self.marks is not None and note:
            colour = self.marks.colour(t.source, t.reason)
            bg = f' BGCOLOR="{"#ffcdd2" if colour in (FAILED, MISSING) else "#ffe0b2"}"'
            lines.append(small(escape(note), colour, 10))
        return (
            f'<TR><TD VALIGN="TOP"{bg}><B>{c.order}</B></TD>'
            f'<TD ALIGN="LEFT" BALIGN="LEFT" PORT="c{c.order}"{bg}>{"<BR/>".join(lines)}</TD></TR>'
        )

    def _decision(self, target: graphviz.Digraph, d: Decision) -> None:
        node = f"d.{d.source}.{d.event}"
        head = f'<TR><TD COLSPAN="2" PORT="h" BGCOLOR="{DECISION_FILL}"><B>{escape(d.event)}</B></TD></TR>'
        rows = "".join(self._row(c) for c in d.candidates)
        label = f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">{head}{rows}</TABLE>>'
        target.node(node, label=label, shape="plain", fontsize="10", tooltip=self.spec.events.get(d.event, d.event))
        into = dict(EDGE_STYLE["abort" if d.event == self.spec.abort_event else "plain"])
        into.update(arrowhead="none", penwidth="1.2")
        if self.marks is not None:
            taken = sum(self.marks.count(d.source, c.reason) for c in d.candidates)
            into.update(self.marks.style(taken > 0))
        self.graph.edge(d.source, f"{node}:h:w", **into)
        for c in d.candidates:
            self._reach(c.dest)
            side = "w" if c.dest == d.source else "e"  # a loop goes straight back to its state
            self.graph.edge(f"{node}:c{c.order}:{side}", c.dest, **self._edge_attrs(c.transition, str(c.order)))

    def _direct(self, by_reason: Mapping[str, list[Decision]]) -> None:
        """Edges without a choice, labelled *event* / reason; several states sharing one meet at a junction."""
        for reason, group in by_reason.items():
            t = group[0].candidates[0].transition
            self._reach(t.dest)
            note = self.marks.group_note([d.source for d in group], reason) if self.marks is not None else ""
            label = f"<<I>{escape(t.event)}</I><BR/>{escape(reason)}{'<BR/>' + escape(note) if note else ''}>"
            if len(group) == 1:
                out = self._edge_attrs(t)
                out["label"] = label
                self.graph.edge(t.source, t.dest, **out)
                continue
            junction = f"j.{reason}"
            colour = EDGE_STYLE[edge_kind(self.spec, t)]["color"]
            self.graph.node(junction, label="", shape="point", width="0.06", color=colour)
            for d in group:
                part = self._edge_attrs(d.candidates[0].transition)
                part.pop("label", None)
                self.graph.edge(d.source, junction, arrowhead="none", **part)
            out = self._edge_attrs(t)
            if self.marks is not None:
                out = dict(EDGE_STYLE[edge_kind(self.spec, t)])
                out.update(self.marks.style(any(self.marks.count(d.source, reason) for d in group)))
                out["fontcolor"] = out["color"]
            out["label"] = label
            self.graph.edge(junction, t.dest, **out)

    def _incoming(self) -> None:
        """Edges from states of other layers into this one, one per (source, target), grey and dashed."""
        pairs: dict[tuple[str, str], list[TransitionSpec]] = {}
        for t in self.spec.transitions:
            if t.source not in self.home_names and t.dest in self.home_names:
                pairs.setdefault((t.source, t.dest), []).append(t)
        for (source, dest), edges in pairs.items():
            self._reach(source)
            label = "<BR/>".join(escape(t.reason) for t in edges)
            out = {"color": STUB, "fontcolor": STUB, "style": "dashed", "label": f"<{label}>"}
            if any(t.progress for t in edges):
                out.update(style="bold", penwidth="2")
            if self.marks is not None and any(self.marks.count(t.source, t.reason) for t in edges):
                out.update(color=TAKEN, fontcolor=TAKEN, penwidth="3")
            self.graph.edge(source, dest, **out)

    def _counters(self) -> tuple[str, ...]:
        if self.view.kind == "full":
            return tuple(c.name for c in self.spec.counters)
        return counters_met(self.spec, self.home_names)

    def _states_and_decisions(self, choices: list[Decision]) -> None:
        g, spec = self.graph, self.spec
        layers = layer_names(spec) if self.view.kind != "layer" else ()
        loose = [s for s in self.home if s.layer not in layers and not (s.terminal and not s.layer)]
        self._grouped(g, loose, [d for d in choices if spec.state(d.source).layer not in layers])
        for layer in layers:
            inside = [s for s in self.home if s.layer == layer]
            if not inside:
                continue
            with g.subgraph(name=f"cluster_{layer}") as sub:
                sub.attr(label=layer, style="rounded,dashed", color="#9e9e9e", fontcolor="#616161", fontsize="14")
                self._grouped(sub, inside, [d for d in choices if spec.state(d.source).layer == layer])

    def _grouped(self, target: graphviz.Digraph, inside: list[StateSpec], choices: list[Decision]) -> None:
        """A layer's states and decisions; a template's instance in a cluster naming it."""
        owner = instance_of(self.spec)
        groups: dict[str, list[StateSpec]] = {}
        for s in inside:
            groups.setdefault(owner[s.name].name if s.name in owner else "", []).append(s)
        for group, states in groups.items():
            names = {s.name for s in states}
            if not group:
                for s in states:
                    self._add_state(target, s)
                for d in choices:
                    if d.source in names:
                        self._decision(target, d)
                continue
            with target.subgraph(name=f"cluster_instance_{group}") as sub:
                template = owner[states[0].name].template
                sub.attr(label=f"{group} · template {template}", style="rounded,dotted", color="#b0bec5", fontsize="11")
                for s in states:
                    self._add_state(sub, s)
                for d in choices:
                    if d.source in names:
                        self._decision(sub, d)

    def build(self) -> graphviz.Digraph:
        g, spec = self.graph, self.spec
        if spec.initial in self.home_names:
            g.node("__start__", label="start", shape="plaintext", fontsize="9", fontcolor="#555555")
            g.edge("__start__", spec.initial, arrowhead="normal")
        self._states_and_decisions([d for d in self.decisions if d.is_choice])
        direct: dict[str, list[Decision]] = {}
        for d in self.decisions:
            if not d.is_choice:
                direct.setdefault(d.candidates[0].reason, []).append(d)
        self._direct(direct)
        if self.view.kind == "layer":
            self._incoming()
        if self.view.kind == "full":
            self.drawn += [s.name for s in spec.states if s.terminal and not s.layer and s.name not in self.drawn]
        for name in self.drawn:
            self._add_state(g, spec.state(name))
        doc = spec.doc if self.view.kind == "full" else self.note
        key = picture_key(spec, self.heading or self._title(), doc, self._counters(), self.params, marks=self.marks)
        g.attr(label=key)
        return g

    def _title(self) -> str:
        title = f"{self.spec.name} · layer {self.view.layer}" if self.view.kind == "layer" else self.spec.name
        return title if self.marks is None else self.marks.title(title)


def to_dot(
    spec: MachineSpec,
    params: Mapping[str, object] | None = None,
    *,
    view: View | None = None,
    trace: Trace | None = None,
    coverage: Coverage | None = None,
) -> graphviz.Digraph:
    """A full, layer or run diagram as a ``graphviz.Digraph`` (``.source`` is the deterministic DOT text).

    ``view`` defaults to the full machine; an overview is :func:`to_overview`'s. With ``trace``, the run is
    overlaid; a ``run`` view draws only the states it visited and the decisions it met. With ``coverage``
    (not with ``trace``), the counts of many runs are overlaid and the edges none took drawn as missing.
    """
    view = view or View(kind="full")
    if view.kind == "run" and trace is None:
        raise ValueError("a run view needs the trace of a run")
    if trace is not None and coverage is not None:
        raise ValueError("overlay one run or the coverage of many, not both")
    if coverage is not None and view.kind == "overview":
        raise ValueError("coverage is drawn per transition: on the full diagram or a layer, not the overview")
    if view.kind == "overview":
        return to_overview(spec, params)
    if view.kind == "template":
        return _template_picture(spec, view.layer, params)
    if view.kind == "layer" and view.layer not in layer_names(spec):
        raise ValueError(f"machine {spec.name!r} has no layer {view.layer!r} (layers: {', '.join(layer_names(spec))})")
    return _Picture(spec, view, params, trace, coverage).build()


def _template_picture(spec: MachineSpec, template: str, params: Mapping[str, object] | None) -> graphviz.Digraph:
    """A template drawn once (each ``{param}`` as written), with what each instance gives its params."""
    picture = _Picture(template_spec(spec, template), View(kind="layer", layer=template), params, None)
    picture.heading = f"{spec.name} · template {template}"
    doc = next(t.doc for t in spec.templates if t.name == template)
    uses = [
        f"{i.name}: " + " · ".join(f"{k}={v}" for k, v in instance_values(i))
        for i in spec.instances
        if i.template == template
    ]
    picture.note = "\n".join([" ".join(doc.split()), "instances:", *uses])
    return picture.build()


# ---- overview -------------------------------------------------------------------------------


def _group_of(s: StateSpec) -> str:
    if s.layer:
        return s.layer
    if s.terminal:
        return "end: error" if s.result.get("is_error") else "end: success"
    return "no layer"


def _group_id(name: str) -> str:
    return "g." + re.sub(r"\W", "_", name)


def to_overview(spec: MachineSpec, params: Mapping[str, object] | None = None) -> graphviz.Digraph:
    """Layers as boxes listing their states; edges between layers aggregated, labelled with their reasons."""
    g = new_graph(spec, f"{spec.name}.overview")
    g.attr(rankdir="TB", ranksep="0.9", nodesep="0.8")
    groups: dict[str, list[StateSpec]] = {}
    for s in spec.states:
        groups.setdefault(_group_of(s), []).append(s)
    internal: dict[str, int] = {}
    between: dict[tuple[str, str, bool], list[TransitionSpec]] = {}
    for t in spec.transitions:
        a, b = _group_of(spec.state(t.source)), _group_of(spec.state(t.dest))
        if a == b:
            internal[a] = internal.get(a, 0) + 1
        else:
            between.setdefault((a, b, t.event == spec.abort_event), []).append(t)
    g.node("__start__", label="start", shape="plaintext", fontsize="9", fontcolor="#555555")
    for name, states in groups.items():
        fill = ERROR_FILL if name == "end: error" else OK_FILL if name == "end: success" else "white"
        rows = [f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="18"><B>{escape(name)}</B></FONT></TD></TR>']
        for s in states:
            mark = " ▶ start" if s.name == spec.initial else ""
            reason = terminal_reason(s)
            shown = s.name if reason == s.name else f"{s.name} ({reason})"
            rows.append(f'<TR><TD ALIGN="LEFT">{escape(shown)}{small(mark) if mark else ""}</TD></TR>')
        if internal.get(name):
            rows.append(f'<TR><TD ALIGN="LEFT">{small(f"{internal[name]} edges inside the layer")}</TD></TR>')
        label = f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1">{"".join(rows)}</TABLE>>'
        g.node(
            _group_id(name),
            label=label,
            shape="box",
            style="rounded,filled",
            fillcolor=fill,
            margin="0.2",
            fontsize="13",
        )
    g.edge("__start__", _group_id(_group_of(spec.state(spec.initial))))
    for (a, b, abort), edges in between.items():
        reasons = list(dict.fromkeys(t.reason for t in edges))
        text = "<BR/>".join(escape(", ".join(reasons[i : i + 2])) for i in range(0, len(reasons), 2))
        out: dict[str, str] = dict(
            EDGE_STYLE["abort"] if abort else EDGE_STYLE["error" if b == "end: error" else "plain"]
        )
        if not abort and any(t.progress for t in edges):
            out.update(EDGE_STYLE["progress"])
        out.update(label=f"<{text}>", fontcolor=out["color"], fontsize="11")
        g.edge(_group_id(a), _group_id(b), **out)
    g.attr(label=picture_key(spec, f"{spec.name} · overview", spec.doc, (), params, overview=True))
    return g
