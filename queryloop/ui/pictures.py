"""The recovery graph in ``queryloop ui``: one SVG per layer, a session's path drawn on it with the engine's overlay.

Keeps each session's last pictures until it takes another step. A session still running is drawn where it is, not
where it ended.
"""

from __future__ import annotations

import shutil
import threading
from html import escape

import graphviz

from queryloop.fsm import MachineSpec, Trace, View, layer_names, to_dot

__all__ = ["NO_DOT", "LayerPictures", "can_draw"]

NO_DOT = (
    "drawing the path needs Graphviz's `dot` program, which is not on PATH: install the graphviz package "
    "(apt-get install graphviz, brew install graphviz, or https://graphviz.org/download)"
)

_ENDED_MARK = "★ the run ended here: "  # how fsm.draw.render labels a trace's last state
_NOW_MARK = "● running, now here: "


def can_draw() -> bool:
    """Whether Graphviz's ``dot``, which draws every picture, is on PATH."""
    return shutil.which("dot") is not None


class LayerPictures:
    """Each layer's SVG for a session's path, drawn once per number of steps (a poll that finds no new step is free)."""

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.layers = layer_names(spec)
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[int, bool, str]] = {}

    def svg(self, session_id: str, layer: str, trace: Trace | None, *, running: bool) -> str:
        """Layer ``layer`` with ``trace`` overlaid (the bare layer when no run of the session recorded its path)."""
        if layer not in self.layers:
            raise KeyError(layer)
        steps = len(trace.steps) if trace is not None else 0
        with self._lock:
            cached = self._cache.get((session_id, layer))
            if cached is not None and cached[:2] == (steps, running):
                return cached[2]
        picture = self._draw(layer, trace, running=running)
        with self._lock:
            self._cache[(session_id, layer)] = (steps, running, picture)
        return picture

    def _draw(self, layer: str, trace: Trace | None, *, running: bool) -> str:
        dot: graphviz.Digraph = to_dot(self.spec, view=View(kind="layer", layer=layer), trace=trace)
        svg = str(dot.pipe(format="svg", encoding="utf-8"))
        if running and trace is not None and trace.final_state is not None:
            now = trace.final_state
            svg = svg.replace(escape(_ENDED_MARK + now, quote=False), escape(_NOW_MARK + now, quote=False))
            svg = svg.replace(escape(f"steps, ended {now} (success)", quote=False), "steps, still running")
        return svg
