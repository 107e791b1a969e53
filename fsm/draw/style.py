"""The Graphviz pictures' look: font, fills, edge styles, the colours runs mark edges with, and HTML-label text.

Shared by ``render``, ``key`` and ``marks``; draws nothing itself.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from html import escape

import graphviz

from ..model.spec import MachineSpec
from .ladder import EdgeKind, source_name

__all__ = [
    "BR",
    "DECISION_FILL",
    "EDGE_STYLE",
    "ERROR_FILL",
    "FADED",
    "FAILED",
    "FONT",
    "MISSING",
    "OK_FILL",
    "STUB",
    "TAKEN",
    "folded",
    "new_graph",
    "small",
]

FONT = "Helvetica"
OK_FILL = "#d4edda"
ERROR_FILL = "#f8d7da"
STUB = "#8a8a8a"
DECISION_FILL = "#fff3cd"
EDGE_STYLE: Mapping[EdgeKind, Mapping[str, str]] = {
    "progress": {"color": "black", "penwidth": "3", "style": "bold"},
    "ends": {"color": "#1565c0", "penwidth": "1.8"},
    "error": {"color": "#c62828"},
    "abort": {"color": "#9e9e9e", "style": "dotted"},
    "plain": {"color": "#424242"},
}
TAKEN = "#ef6c00"
FAILED = "#d50000"
FADED = "#c8c8c8"
MISSING = "#d50000"


def folded(text: str, width: int = 110) -> str:
    """``text`` wrapped at ``width``, each of its lines starting a new one (a doc's folded lines are one)."""
    wrapped = [w for para in text.strip().split("\n") for w in textwrap.wrap(" ".join(para.split()), width)]
    return '<BR ALIGN="LEFT"/>'.join(escape(line) for line in wrapped)


def small(text: str, colour: str = "#555555", size: int = 9) -> str:
    return f'<FONT POINT-SIZE="{size}" COLOR="{colour}">{text}</FONT>'


BR = '<BR ALIGN="LEFT"/>'


def new_graph(spec: MachineSpec, name: str) -> graphviz.Digraph:
    g = graphviz.Digraph(name=name, comment=f"generated from {source_name(spec)} by `queryloop diagram`; do not edit")
    g.attr(rankdir="LR", fontname=FONT, labelloc="t", labeljust="l", newrank="true", nodesep="0.25", ranksep="0.6")
    g.attr("node", fontname=FONT, fontsize="11")
    g.attr("edge", fontname=FONT, fontsize="9", arrowsize="0.7")
    return g
