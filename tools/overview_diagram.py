"""The README's picture of the query loop: one box per layer naming its states, read at README width.

Owns ``diagrams/overview.svg``, drawn with Graphviz from machines/query_loop.yaml: each layer
a box listing its states (each box links to that layer's detailed diagram), one arrow per pair
of layers an edge joins, and every terminal state gathered into one box. It leaves out every
edge's event and reason: ``queryloop diagram`` draws those. It lives outside the engine for now
(issue 54); ``queryloop.fsm.draw`` is its natural home. Run it to regenerate the picture:

    python3 tools/overview_diagram.py            # writes diagrams/overview.svg
    python3 tools/overview_diagram.py --check    # exit 1 when the committed one is stale

tests/engine/test_render_and_cli.py holds the committed picture to a fresh one.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

from queryloop.fsm.draw.ladder import layer_names
from queryloop.fsm.model.load import load_machine
from queryloop.fsm.model.spec import MachineSpec

ROOT = Path(__file__).resolve().parent.parent
MACHINE = ROOT / "machines" / "query_loop.yaml"
TARGET = ROOT / "diagrams" / "overview.svg"
REGENERATE = "python3 tools/overview_diagram.py"
FONT = "Helvetica,Arial,sans-serif"
END = "__ends__"
COLUMN_PX = 800  # about the width GitHub gives a README's picture, in CSS pixels
WORDS = re.compile(r"<(title|text)[^>]*>([^<]*)</\1>")  # what an SVG says, whatever Graphviz's version laid out


def _layer_of(spec: MachineSpec) -> dict[str, str]:
    """Each non-terminal state's layer; the terminal states all map to the one box of ends."""
    return {s.name: END if s.terminal else s.layer for s in spec.states}


def layer_edges(spec: MachineSpec) -> list[tuple[str, str]]:
    """The pairs of layers (or a layer and the ends) some transition joins, in the YAML's order, each once."""
    where = _layer_of(spec)
    pairs: list[tuple[str, str]] = []
    for t in spec.transitions:
        pair = (where[t.source], where[t.dest])
        if pair[0] != pair[1] and pair not in pairs:
            pairs.append(pair)
    return pairs


def _capped(spec: MachineSpec, layer: str) -> int:
    """How many edges out of the layer's states carry a counter: the recoveries that repeat only up to a cap."""
    states = {s.name for s in spec.states if s.layer == layer}
    return sum(1 for t in spec.transitions if t.counter is not None and t.source in states)


def _layer_label(spec: MachineSpec, layer: str) -> str:
    """A layer's box: its name, its states, and how many of its edges are capped."""
    states = [s.name for s in spec.states if s.layer == layer and not s.terminal]
    rows = [f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="11">{html.escape(s)}</FONT></TD></TR>' for s in states]
    capped = _capped(spec, layer)
    if capped:
        plural = "s" if capped > 1 else ""
        rows.append(f'<TR><TD><FONT POINT-SIZE="10" COLOR="#8a4b00">{capped} capped edge{plural}</FONT></TD></TR>')
    head = f"<TR><TD><B>{html.escape(layer)}</B></TD></TR>"
    return f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1">{head}{"".join(rows)}</TABLE>>'


def _edge(a: str, b: str) -> str:
    """An arrow between two layers; the ones into the ends are light, so the loop's own arrows stand out."""
    light = ' [color="#b0bec5", style=dashed]' if b == END else ""
    return f'  "{a}" -> "{b}"{light};'


def to_dot(spec: MachineSpec) -> str:
    """The overview as DOT text (deterministic: the YAML's order)."""
    ends = [s.name for s in spec.states if s.terminal]
    lines = [
        f"digraph {spec.name}_overview {{",
        f'  graph [rankdir=TB, fontname="{FONT}", fontsize=16, labelloc=t, nodesep=0.3, ranksep=0.35,'
        f' label="{spec.name}: its layers and their states (every edge: query_loop.svg)"];',
        f'  node [shape=box, style="rounded,filled", fillcolor="#f5f7fa", fontname="{FONT}", fontsize=13];',
        '  edge [color="#607d8b", arrowsize=0.7];',
        '  start [shape=plaintext, label="prompt", fontsize=12];',
    ]
    for layer in layer_names(spec):
        lines.append(
            f'  "{layer}" [label={_layer_label(spec, layer)}, href="query_loop.{layer}.svg",'
            f' tooltip="the {layer} layer in detail: query_loop.{layer}.svg"];'
        )
    lines.append(
        f'  "{END}" [label="ends\\n({len(ends)} terminal states)", fillcolor="#eceff1",'
        f' tooltip="{html.escape(", ".join(ends))}"];'
    )
    initial = _layer_of(spec)[spec.initial]
    lines.append(f'  start -> "{initial}";')
    lines.extend(_edge(a, b) for a, b in layer_edges(spec))
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_svg(spec: MachineSpec) -> bytes:
    """The overview drawn by Graphviz's ``dot`` as SVG."""
    import graphviz

    data: bytes = graphviz.Source(to_dot(spec)).pipe(format="svg")
    return data


def svg_words(svg: str) -> list[str]:
    """What an SVG says (its titles and texts), sorted: equal for two renders of one DOT text by any Graphviz."""
    return sorted(html.unescape(text) for _, text in WORDS.findall(svg))


def smallest_label_px(svg: str, column_px: float = COLUMN_PX) -> float:
    """The height in CSS pixels of an SVG's smallest text shown in a column ``column_px`` wide (never enlarged).

    A browser shows an ``<img>`` at its own width (an SVG's pt is 4/3 px) unless the column is narrower.
    """
    width_pt = float(re.search(r'<svg width="([0-9.]+)pt"', svg).group(1))  # type: ignore[union-attr]
    view_width = float(re.search(r'viewBox="[-0-9.]+ [-0-9.]+ ([0-9.]+)', svg).group(1))  # type: ignore[union-attr]
    smallest = min(float(size) for size in re.findall(r'font-size="([0-9.]+)"', svg))
    return smallest * min(column_px, width_pt * 4 / 3) / view_width


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed picture is stale")
    args = parser.parse_args(argv)
    spec = load_machine(MACHINE, bind=False).spec
    fresh = render_svg(spec)
    if args.check:
        stale = not TARGET.exists() or svg_words(TARGET.read_text()) != svg_words(fresh.decode())
        if stale:
            print(f"stale: {TARGET.relative_to(ROOT)}; regenerate it with: {REGENERATE}", file=sys.stderr)
        return 1 if stale else 0
    TARGET.write_bytes(fresh)
    px = smallest_label_px(fresh.decode())
    print(f"wrote {TARGET.relative_to(ROOT)}: its smallest label {px:.1f} px at {COLUMN_PX} px wide", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
