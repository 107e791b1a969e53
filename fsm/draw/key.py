"""The key above a picture: its title, doc, legend of the conventions it uses, and counter table.

One HTML label, the graph's; the picture itself is ``render``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import TYPE_CHECKING

from ..model.spec import MachineSpec
from .ladder import EDGE_MEANING, counter_rows
from .style import BR, DECISION_FILL, EDGE_STYLE, ERROR_FILL, OK_FILL, STUB, folded, small

if TYPE_CHECKING:
    from .marks import Marks

__all__ = ["picture_key"]


def _legend_entries(overview: bool, marks: Marks | None) -> list[tuple[str, str, str]]:
    """(symbol cell attributes and text, meaning) for every convention a picture uses."""
    if overview:
        entries = [
            ('BORDER="1" STYLE="ROUNDED"', "<B>layer</B>", "a layer and its states; edges inside it are counted"),
        ]
    else:
        entries = [
            ('BORDER="1" STYLE="ROUNDED"', "state", "a state of this picture"),
            (
                f'BORDER="1" STYLE="ROUNDED" COLOR="{STUB}"',
                f'<FONT COLOR="{STUB}">state</FONT>',
                "a state of another layer",
            ),
            (
                f'BORDER="1" BGCOLOR="{DECISION_FILL}"',
                "<B>event</B>",
                f"decision: candidates 1..n tried in YAML order;{BR}the first whose guards hold and whose counter{BR}"
                "is below its cap is taken (and counts)",
            ),
            ("", "<I>event</I>", "an edge without a choice: event / reason"),
        ]
    entries += [
        (f'BORDER="1" BGCOLOR="{OK_FILL}"', "end", "the run ends: success"),
        (f'BORDER="1" BGCOLOR="{ERROR_FILL}"', "end", "the run ends: error"),
    ]
    for kind in ("progress", "ends", "error", "abort", "plain"):
        style = EDGE_STYLE[kind]
        glyph = "· · · ·" if style.get("style") == "dotted" else ("━━━" if kind == "progress" else "───")
        entries.append(("", f'<FONT COLOR="{style["color"]}"><B>{glyph}</B></FONT>', escape(EDGE_MEANING[kind])))
    if marks is not None:
        entries += marks.legend()
    return entries


def _legend(overview: bool, marks: Marks | None, columns: int = 3) -> str:
    entries = _legend_entries(overview, marks)
    rows = []
    for i in range(0, len(entries), columns):
        cells = "".join(
            f'<TD {cell} ALIGN="CENTER">{symbol}</TD><TD ALIGN="LEFT" BALIGN="LEFT">{small(meaning)}</TD>'
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
                f'<TD ALIGN="LEFT" BALIGN="LEFT">{small("<BR/>".join(escape(x) for x in c), "#222222")}</TD>'
                for c in cells
            )
            + "</TR>"
        )
    if len(rows) == 1:
        return ""
    return '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">' + "".join(rows) + "</TABLE>"


def picture_key(
    spec: MachineSpec,
    title: str,
    doc: str,
    counters: Iterable[str],
    params: Mapping[str, object] | None,
    *,
    overview: bool = False,
    marks: Marks | None = None,
) -> str:
    """Title, doc, legend and counter table stacked above the picture (the graph's label)."""
    rows = [f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="20"><B>{escape(title)}</B></FONT></TD></TR>']
    summary = marks.summary() if marks is not None else ""
    if summary:
        rows.append(f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="14"><B>{escape(summary)}</B></FONT></TD></TR>')
    if doc:
        rows.append(f'<TR><TD ALIGN="LEFT" BALIGN="LEFT">{small(folded(doc), "#333333", 11)}</TD></TR>')
    rows.append(f'<TR><TD ALIGN="LEFT">{_legend(overview, marks)}</TD></TR>')
    table = _counter_table(spec, counters, params)
    if table:
        rows.append(f'<TR><TD ALIGN="LEFT">{table}</TD></TR>')
    return f'<<TABLE BORDER="0" CELLSPACING="4">{"".join(rows)}</TABLE>>'
