"""Transition coverage drawn on the diagrams: ``queryloop diagram --coverage DIR``.

Two runs of ``retry_fetch`` are written by hand, as ``QUERYLOOP_TRACE_DIR`` records them;
the picture must sum each edge's count over the runs, draw the edges no run took as
missing (dashed red, "never taken") and state the figure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from queryloop.frontends.cli import main
from queryloop.fsm import load_machine
from queryloop.fsm.draw.ladder import View
from queryloop.machines import MACHINES_DIR

RETRY_FETCH = MACHINES_DIR / "examples" / "retry_fetch.yaml"
SPEC = load_machine(RETRY_FETCH, bind=False).spec
EDGES = {t.reason: (t.source, t.event, t.reason, t.dest) for t in SPEC.transitions if t.reason != "fetch_aborted"}
MISSING_STYLE = 'color="#d50000" fontcolor="#d50000" penwidth=1.5 style=dashed'


def _recorded(folder: Path, name: str, *reasons: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        {"type": "system", "subtype": "transition", "machine": SPEC.name, "from": s, "event": e, "reason": r, "to": t}
        for s, e, r, t in (EDGES[reason] for reason in reasons)
    ]
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _draw(runs: Path, out: Path, *flags: str) -> int:
    flags = ("--machine", str(RETRY_FETCH), "--out", str(out), "--format", "dot", *flags)
    return main(["diagram", "--coverage", str(runs), *flags])


def _edge_line(dot: str, reason: str) -> str:
    """The DOT line of the edge labelled with ``reason``, or of the one leaving its row of a decision point."""
    source, event, _, _ = EDGES[reason]
    choice = [t.reason for t in SPEC.transitions if (t.source, t.event) == (source, event)]
    start = f'"d.{source}.{event}":c{choice.index(reason) + 1}:' if len(choice) > 1 else f"{reason}<BR/>"
    lines = [line for line in dot.splitlines() if "->" in line and start in line]
    assert len(lines) == 1, (reason, lines)
    return lines[0]


def test_the_taken_edges_show_their_counts_summed_over_the_runs_and_the_others_are_drawn_missing(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    _recorded(runs, "one", "item_fetched", "all_items_stored")
    _recorded(
        runs, "two", "fetch_backoff", "fetch_retry", "item_fetched", "next_item", "item_fetched", "all_items_stored"
    )
    out = tmp_path / "out"
    assert _draw(runs, out) == 0
    dot = (out / f"{SPEC.name}.coverage.dot").read_text()

    assert re.search(r"item_fetched<BR/>×3>", _edge_line(dot, "item_fetched")), "1 + 2 fetches"
    assert "×2" in _edge_line(dot, "all_items_stored") and "×1" in _edge_line(dot, "next_item")
    for reason in ("item_fetched", "all_items_stored", "fetch_backoff", "fetch_retry", "next_item"):
        assert 'color="#ef6c00"' in _edge_line(dot, reason), reason
    for reason in ("retries_exhausted", "fetch_failed"):
        line = _edge_line(dot, reason)
        assert "never taken" in line and MISSING_STYLE in line, reason
    assert "5 of 10 transitions taken (50.0 %) by 2 runs" in dot, "fetch_aborted counts once per source"


def test_each_layer_is_drawn_with_the_coverage_when_asked_for(tmp_path: Path) -> None:
    _recorded(tmp_path / "runs", "one", "item_fetched", "all_items_stored")
    out = tmp_path / "out"
    assert _draw(tmp_path / "runs", out, "--layer", "io") == 0
    assert [p.name for p in out.iterdir()] == [f"{SPEC.name}.coverage{View(kind='layer', layer='io').suffix}.dot"]
    dot = next(out.iterdir()).read_text()
    assert "2 of 10 transitions taken (20.0 %) by 1 run<" in dot and "never taken" in dot


def test_a_directory_without_runs_of_the_machine_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    assert _draw(runs, tmp_path / "out") == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("queryloop: ") and "no recorded run of machine 'retry_fetch'" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
