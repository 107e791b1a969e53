"""Drawing a machine with Graphviz: an overview of its layers, one diagram per layer, one run or many on the graph.

Each picture carries its legend (docs/machines.md). Output is in YAML order, so committed DOT can be compared in CI.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping
from html import escape

import graphviz

from ..model.spec import MachineSpec, StateSpec, TransitionSpec
from ..verify.coverage import Coverage
from .ladder import (
    EDGE_MEANING,
    Candidate,
    Decision,
    EdgeKind,
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
from .mermaid import to_mermaid
from .trace import Trace

__all__ = ["to_dot", "to_mermaid", "to_overview"]

_FONT = "Helvetica"
_OK_FILL = "#d4edda"
_ERROR_FILL = "#f8d7da"
_STUB = "#8a8a8a"
_DECISION_FILL = "#fff3cd"
_EDGE: Mapping[EdgeKind, Mapping[str, str]] = {
    "progress": {"color": "black", "penwidth": "3", "style": "bold"},
    "ends": {"color": "#1565c0", "penwidth": "1.8"},
    "error": {"color": "#c62828"},
    "abort": {"color": "#9e9e9e", "style": "dotted"},
    "plain": {"color": "#424242"},
}
_TAKEN = "#ef6c00"
_FAILED = "#d50000"
_FADED = "#c8c8c8"
_MISSING = "#d50000"


def _tags(t: TransitionSpec) -> list[str]:
    """The flags a candidate row spells out (colour alone is not enough)."""
    return [name for name, on in (("progress", t.progress), (f"ends {t.ends}", t.ends is not None)) if on]


def _lines(text: str, width: int = 110) -> str:
    """``text`` wrapped at ``width``, each of its lines starting a new one (a doc's folded lines are one)."""
    wrapped = [w for para in text.strip().split("\n") for w in textwrap.wrap(" ".join(para.split()), width)]
    return '<BR ALIGN="LEFT"/>'.join(escape(line) for line in wrapped)


def _small(text: str, colour: str = "#555555", size: int = 9) -> str:
    return f'<FONT POINT-SIZE="{size}" COLOR="{colour}">{text}</FONT>'


# ---- the key: legend and counter table -------------------------------------------------------


_BR = '<BR ALIGN="LEFT"/>'


def _legend_entries(overview: bool, marks: _Marks | None) -> list[tuple[str, str, str]]:
    """(symbol cell attributes and text, meaning) for every convention a picture uses."""
    if overview:
        entries = [
            ('BORDER="1" STYLE="ROUNDED"', "<B>layer</B>", "a layer and its states; edges inside it are counted"),
        ]
    else:
        entries = [
            ('BORDER="1" STYLE="ROUNDED"', "state", "a state of this picture"),
            (
                f'BORDER="1" STYLE="ROUNDED" COLOR="{_STUB}"',
                f'<FONT COLOR="{_STUB}">state</FONT>',
                "a state of another layer",
            ),
            (
                f'BORDER="1" BGCOLOR="{_DECISION_FILL}"',
                "<B>event</B>",
                f"decision: candidates 1..n tried in YAML order;{_BR}the first whose guards hold and whose counter{_BR}"
                "is below its cap is taken (and counts)",
            ),
            ("", "<I>event</I>", "an edge without a choice: event / reason"),
        ]
    entries += [
        (f'BORDER="1" BGCOLOR="{_OK_FILL}"', "end", "the run ends: success"),
        (f'BORDER="1" BGCOLOR="{_ERROR_FILL}"', "end", "the run ends: error"),
    ]
    for kind in ("progress", "ends", "error", "abort", "plain"):
        style = _EDGE[kind]
        glyph = "· · · ·" if style.get("style") == "dotted" else ("━━━" if kind == "progress" else "───")
        entries.append(("", f'<FONT COLOR="{style["color"]}"><B>{glyph}</B></FONT>', escape(EDGE_MEANING[kind])))
    if marks is not None:
        entries += marks.legend()
    return entries


def _legend(overview: bool, marks: _Marks | None, columns: int = 3) -> str:
    entries = _legend_entries(overview, marks)
    rows = []
    for i in range(0, len(entries), columns):
        cells = "".join(
            f'<TD {cell} ALIGN="CENTER">{symbol}</TD><TD ALIGN="LEFT" BALIGN="LEFT">{_small(meaning)}</TD>'
            for cell, symbol, meaning in entries[i : i + columns]
        )
        rows.append(f"<TR>{cells}</TR>")
    return '<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="3" CELLPADDING="2">' + "".join(rows) + "</TABLE>"


def _counter_table(spec: MachineSpec, names: Iterable[str], params: Mapping[str, object] | None) -> str:
    wanted = set(names)
    heads = ("counter", "cap", "scope", "counted by", "reset by")
    rows = ["<TR>" + "".join(f'<TD ALIGN="LEFT" BGCOLOR="#eeeeee"><B>{h}</B></TD>' for h in heads) + "</TR>"]
    for r in counter_rows(spec, params):
        if r.name not in wanted:
            continue
        cells = ((r.name,), (r.cap,), (r.scope,), r.counted_by, r.reset_by)
        rows.append(
            "<TR>"
            + "".join(
                f'<TD ALIGN="LEFT" BALIGN="LEFT">{_small("<BR/>".join(escape(x) for x in c), "#222222")}</TD>'
                for c in cells
            )
            + "</TR>"
        )
    if len(rows) == 1:
        return ""
    return '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">' + "".join(rows) + "</TABLE>"


def _key(
    spec: MachineSpec,
    title: str,
    doc: str,
    counters: Iterable[str],
    params: Mapping[str, object] | None,
    *,
    overview: bool = False,
    marks: _Marks | None = None,
) -> str:
    """Title, doc, legend and counter table stacked above the picture (the graph's label)."""
    rows = [f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="20"><B>{escape(title)}</B></FONT></TD></TR>']
    summary = marks.summary() if marks is not None else ""
    if summary:
        rows.append(f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="14"><B>{escape(summary)}</B></FONT></TD></TR>')
    if doc:
        rows.append(f'<TR><TD ALIGN="LEFT" BALIGN="LEFT">{_small(_lines(doc), "#333333", 11)}</TD></TR>')
    rows.append(f'<TR><TD ALIGN="LEFT">{_legend(overview, marks)}</TD></TR>')
    table = _counter_table(spec, counters, params)
    if table:
        rows.append(f'<TR><TD ALIGN="LEFT">{table}</TD></TR>')
    return f'<<TABLE BORDER="0" CELLSPACING="4">{"".join(rows)}</TABLE>>'


def _new_graph(spec: MachineSpec, name: str) -> graphviz.Digraph:
    g = graphviz.Digraph(name=name, comment=f"generated from {source_name(spec)} by `queryloop diagram`; do not edit")
    g.attr(rankdir="LR", fontname=_FONT, labelloc="t", labeljust="l", newrank="true", nodesep="0.25", ranksep="0.6")
    g.attr("node", fontname=_FONT, fontsize="11")
    g.attr("edge", fontname=_FONT, fontsize="9", arrowsize="0.7")
    return g


# ---- layer and full diagrams ----------------------------------------------------------------


class _Marks:
    """How recorded runs mark the picture: how often each ``(source, reason)`` edge was taken."""

    def __init__(self, counts: Mapping[tuple[str, str], int]) -> None:
        self.counts = counts
        self.visited = frozenset(s for (s, _), n in counts.items() if n)

    def count(self, source: str, reason: str) -> int:
        return self.counts.get((source, reason), 0)

    def note(self, source: str, reason: str) -> str:
        n = self.count(source, reason)
        return f"×{n}" if n else ""

    def colour(self, source: str, reason: str) -> str:
        return _TAKEN if self.count(source, reason) else _FADED

    def group_note(self, sources: Iterable[str], reason: str) -> str:
        """The note of an edge several sources share (drawn through a junction)."""
        return " ".join(n for n in (self.note(source, reason) for source in sources) if n)

    def style(self, taken: bool, colour: str | None = None) -> dict[str, str]:
        """What an edge's marking changes: colour and width (an edge no run took is faded)."""
        colour = colour or (_TAKEN if taken else _FADED)
        return {"color": colour, "penwidth": "1" if colour == _FADED else "4" if colour == _FAILED else "3"}

    def edge_style(self, source: str, reason: str) -> dict[str, str]:
        return self.style(self.count(source, reason) > 0, self.colour(source, reason))

    def mark_state(self, s: StateSpec, out: dict[str, str]) -> None:
        if s.name in self.visited:
            out.update(penwidth="3", color=_TAKEN)
        elif not s.terminal:
            out.update(color=_FADED, fontcolor="#9e9e9e")

    def title(self, title: str) -> str:
        return title

    def summary(self) -> str:
        return ""

    def legend(self) -> list[tuple[str, str, str]]:
        return []


class _RunMarks(_Marks):
    """One run: the steps each edge was taken at, the state it ended in, and the step that failed."""

    def __init__(self, trace: Trace) -> None:
        super().__init__(trace.edge_counts())
        self.trace = trace
        self.visited = trace.visited
        self.steps: dict[tuple[str, str], list[int]] = {}
        for step in trace.steps:
            self.steps.setdefault((step.source, step.reason), []).append(step.number)
        failing = trace.failing_step
        self.failing = (failing.source, failing.reason) if failing else None

    def note(self, source: str, reason: str) -> str:
        """``×2: steps 3, 5`` (at most four step numbers), ``✗`` on the failing step."""
        numbers = self.steps.get((source, reason), [])
        if not numbers:
            return ""
        shown = ", ".join(str(n) for n in numbers[:4]) + (", …" if len(numbers) > 4 else "")
        text = f"×{len(numbers)}: step{'s' if len(numbers) > 1 else ''} {shown}"
        return text + ("  ✗ failing step" if (source, reason) == self.failing else "")

    def colour(self, source: str, reason: str) -> str:
        if (source, reason) == self.failing:
            return _FAILED
        return super().colour(source, reason)

    def mark_state(self, s: StateSpec, out: dict[str, str]) -> None:
        trace = self.trace
        if s.name == trace.final_state:
            ended = trace.terminal_reason or s.name
            out.update(penwidth="5", color=_FAILED if trace.is_error else "#2e7d32")
            out["label"] = out.get("label", s.name) + f"\\n★ the run ended here: {ended}"
        else:
            super().mark_state(s, out)

    def title(self, title: str) -> str:
        t = self.trace
        end = t.terminal_reason or t.final_state or "?"
        return f"{title} · the run {t.path}: {len(t.steps)} steps, ended {end} ({'error' if t.is_error else 'success'})"

    def legend(self) -> list[tuple[str, str, str]]:
        return [
            ("", f'<FONT COLOR="{_TAKEN}"><B>━━━</B></FONT>', "taken by the run: ×count: step numbers"),
            ("", f'<FONT COLOR="{_FAILED}"><B>━━━</B></FONT>', "the failing step (the last of an error run)"),
            ("", f'<FONT COLOR="{_FADED}"><B>───</B></FONT>', "not taken by the run"),
            ('BORDER="3"', "★", "where the run ended"),
        ]


class _CoverageMarks(_Marks):
    """Many runs: each edge's count summed over them; the edges none took dashed red, as missing."""

    def __init__(self, cov: Coverage) -> None:
        super().__init__(cov.taken)
        self.cov = cov
        self.visited |= frozenset(t.dest for t in cov.edges if self.count(t.source, t.reason))

    def note(self, source: str, reason: str) -> str:
        return super().note(source, reason) or "never taken"

    def colour(self, source: str, reason: str) -> str:
        return _TAKEN if self.count(source, reason) else _MISSING

    def group_note(self, sources: Iterable[str], reason: str) -> str:
        n = sum(self.count(source, reason) for source in sources)
        return f"×{n}" if n else "never taken"

    def style(self, taken: bool, colour: str | None = None) -> dict[str, str]:
        if taken:
            return {"color": colour or _TAKEN, "penwidth": "3"}
        return {"color": _MISSING, "penwidth": "1.5", "style": "dashed"}

    def title(self, title: str) -> str:
        return f"{title} · transition coverage"

    def summary(self) -> str:
        c = self.cov
        runs = f"{c.runs} run{'s' if c.runs != 1 else ''}"
        text = f"{c.covered} of {c.total} transitions taken ({c.percent:.1f} %) by {runs}"
        ignored = sum(c.foreign.values())
        if ignored:
            text += f"; {ignored} recorded step{'s' if ignored != 1 else ''} not in this machine ignored"
        return text

    def legend(self) -> list[tuple[str, str, str]]:
        return [
            ("", f'<FONT COLOR="{_TAKEN}"><B>━━━</B></FONT>', "taken by the recorded runs: ×count, summed"),
            ("", f'<FONT COLOR="{_MISSING}"><B>╌╌╌</B></FONT>', "never taken by any recorded run (missing)"),
        ]


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
        self.marks: _Marks | None = None
        if trace is not None:
            self.marks = _RunMarks(trace)
        elif coverage is not None:
            self.marks = _CoverageMarks(coverage)
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
        self.graph = _new_graph(spec, name)

    # -- nodes --
    def _is_stub(self, s: StateSpec) -> bool:
        return s.name not in self.home_names and not (s.terminal and not s.layer)

    def _state_attrs(self, s: StateSpec) -> dict[str, str]:
        out: dict[str, str] = {"tooltip": " ".join(s.doc.split()) or s.name}
        if s.terminal:
            reason = terminal_reason(s)
            label = s.name if reason == s.name else f"{s.name}\\n(terminal_reason {reason})"
            fill = _ERROR_FILL if s.result.get("is_error") else _OK_FILL
            out.update(label=label, shape="box", style="filled,bold", fillcolor=fill)
        else:
            out.update(shape="box", style="rounded,filled", fillcolor="white", fontsize="14", penwidth="1.5")
        if self._is_stub(s):
            out.update(style="rounded,dashed", color=_STUB, fontcolor=_STUB, fontsize="9", fillcolor="white")
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
        out = dict(_EDGE[edge_kind(self.spec, t)])
        if self.marks is not None:
            out.update(self.marks.edge_style(t.source, t.reason))
            label = f"{label} {self.marks.note(t.source, t.reason)}".strip()
        out["fontcolor"] = out["color"]
        if label:
            out["label"] = label
        return out

    def _row(self, c: Candidate) -> str:
        t = c.transition
        lines = [f"<B>{escape(c.reason)}</B> → {escape(c.dest)}", _small(escape(c.condition))]
        if c.resets:
            lines.append(_small("resets " + escape(", ".join(c.resets)), "#6a1b9a"))
        tags = _tags(t)
        if tags:
            lines.append(_small(escape(" · ".join(tags)), _EDGE["ends"]["color"]))
        bg = ""
        note = self.marks.note(t.source, t.reason) if self.marks is not None else ""
        if self.marks is not None and note:
            colour = self.marks.colour(t.source, t.reason)
            bg = f' BGCOLOR="{"#ffcdd2" if colour in (_FAILED, _MISSING) else "#ffe0b2"}"'
            lines.append(_small(escape(note), colour, 10))
        return (
            f'<TR><TD VALIGN="TOP"{bg}><B>{c.order}</B></TD>'
            f'<TD ALIGN="LEFT" BALIGN="LEFT" PORT="c{c.order}"{bg}>{"<BR/>".join(lines)}</TD></TR>'
        )

    def _decision(self, target: graphviz.Digraph, d: Decision) -> None:
        node = f"d.{d.source}.{d.event}"
        head = f'<TR><TD COLSPAN="2" PORT="h" BGCOLOR="{_DECISION_FILL}"><B>{escape(d.event)}</B></TD></TR>'
        rows = "".join(self._row(c) for c in d.candidates)
        label = f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">{head}{rows}</TABLE>>'
        target.node(node, label=label, shape="plain", fontsize="10", tooltip=self.spec.events.get(d.event, d.event))
        into = dict(_EDGE["abort" if d.event == self.spec.abort_event else "plain"])
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
            colour = _EDGE[edge_kind(self.spec, t)]["color"]
            self.graph.node(junction, label="", shape="point", width="0.06", color=colour)
            for d in group:
                part = self._edge_attrs(d.candidates[0].transition)
                part.pop("label", None)
                self.graph.edge(d.source, junction, arrowhead="none", **part)
            out = self._edge_attrs(t)
            if self.marks is not None:
                out = dict(_EDGE[edge_kind(self.spec, t)])
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
            out = {"color": _STUB, "fontcolor": _STUB, "style": "dashed", "label": f"<{label}>"}
            if any(t.progress for t in edges):
                out.update(style="bold", penwidth="2")
            if self.marks is not None and any(self.marks.count(t.source, t.reason) for t in edges):
                out.update(color=_TAKEN, fontcolor=_TAKEN, penwidth="3")
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
        key = _key(spec, self.heading or self._title(), doc, self._counters(), self.params, marks=self.marks)
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
    g = _new_graph(spec, f"{spec.name}.overview")
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
        fill = _ERROR_FILL if name == "end: error" else _OK_FILL if name == "end: success" else "white"
        rows = [f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="18"><B>{escape(name)}</B></FONT></TD></TR>']
        for s in states:
            mark = " ▶ start" if s.name == spec.initial else ""
            reason = terminal_reason(s)
            shown = s.name if reason == s.name else f"{s.name} ({reason})"
            rows.append(f'<TR><TD ALIGN="LEFT">{escape(shown)}{_small(mark) if mark else ""}</TD></TR>')
        if internal.get(name):
            rows.append(f'<TR><TD ALIGN="LEFT">{_small(f"{internal[name]} edges inside the layer")}</TD></TR>')
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
        out: dict[str, str] = dict(_EDGE["abort"] if abort else _EDGE["error" if b == "end: error" else "plain"])
        if not abort and any(t.progress for t in edges):
            out.update(_EDGE["progress"])
        out.update(label=f"<{text}>", fontcolor=out["color"], fontsize="11")
        g.edge(_group_id(a), _group_id(b), **out)
    g.attr(label=_key(spec, f"{spec.name} · overview", spec.doc, (), params, overview=True))
    return g
