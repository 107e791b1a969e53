"""The diagrams show what the machine means: decisions in the order tried, caps, scopes, resets, layers.

A small machine written here pins the drawing conventions; the shipped query loop
is mutated (a scope, a reset, the order of two candidates, a cap, …) and every
mutation must change both the DOT and the Mermaid text of its diagrams.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from queryloop.frontends.cli import main
from queryloop.fsm import MachineSpec, load_machine, parse_machine
from queryloop.fsm.draw.ladder import View, views
from queryloop.fsm.draw.mermaid import to_mermaid
from queryloop.fsm.draw.recovery import recovery_markdown
from queryloop.fsm.draw.render import to_dot
from queryloop.machines import shipped_machines

TOY = """\
schema_version: 1
machine: toy
doc: a worker that retries, waits and gives up
initial: working
params:
  max_tries: {default: 3, check: 1, max: 10, doc: tries of one job}
events:
  finished: the job is done
  failed: the job failed, may work again
  elapsed: the wait is over
  abort: the caller cancelled
guards:
  can_retry: {call: toy.can_retry, doc: the job may be retried}
scopes: [request, turn]
counters:
  tries: {cap: max_tries, scope: request, doc: tries of the current job}
  failures: {cap: 5, scope: run, streak_of: [failed], doc: failures in a row}
  waits: {cap: 2, scope: turn, consecutive: [job_done], doc: waits}
states:
  working: {layer: work, effect: toy.work, emits: [finished, failed]}
  waiting: {layer: wait, effect: toy.wait, emits: [elapsed]}
  done: {terminal: true, result: {is_error: false}}
  broken: {terminal: true, doc: the job failed too often, result: {is_error: true, terminal_reason: gave_up}}
  cancelled: {terminal: true, result: {is_error: true}}
  internal_error: {terminal: true, result: {is_error: true, subtype: error_during_execution}}
transitions:
  - {from: working, event: finished, to: working, reason: job_done, progress: true, counter: failures}
  - {from: working, event: finished, to: done, reason: all_done}
  - from: working
    event: failed
    to: waiting
    reason: retry_later
    guards: [can_retry]
    counter: tries
    resets: [waits]
  - {from: working, event: failed, to: working, reason: retry_now, counter: failures, ends: request}
  - {from: working, event: failed, to: broken, reason: given_up}
  - {from: waiting, event: elapsed, to: working, reason: wait_over, counter: waits}
  - {from: waiting, event: elapsed, to: done, reason: stop_waiting}
  - {from: [working, waiting], event: abort, to: cancelled, reason: job_cancelled}
"""


def _toy(text: str = TOY) -> MachineSpec:
    return parse_machine(text, "machines/toy.yaml", bind=False).spec


def _layer(spec: MachineSpec, name: str) -> str:
    return str(to_dot(spec, view=View(kind="layer", layer=name)).source)


def test_a_machine_with_layers_gets_an_overview_and_one_diagram_per_layer() -> None:
    assert views(_toy()) == (View(kind="overview"), View(kind="layer", layer="work"), View(kind="layer", layer="wait"))
    one_layer = TOY.replace("layer: wait", "layer: work")
    assert views(_toy(one_layer)) == (View(kind="full"),)


def test_each_decision_lists_its_candidates_numbered_in_the_order_they_are_tried() -> None:
    dot = _layer(_toy(), "work")
    first = dot.index("<B>retry_later</B> → waiting")
    second = dot.index("<B>retry_now</B> → working")
    third = dot.index("<B>given_up</B> → broken")
    assert first < second < third
    assert "<B>failed</B>" in dot, "the decision point is headed by its event"
    assert '"d.working.failed":c2:w -> working' in dot, "a self-loop leaves its row back into its state"
    assert '"d.working.failed":c3:e -> broken' in dot


def test_a_candidate_shows_its_guards_and_its_counter_below_the_cap_with_the_param_default() -> None:
    spec = _toy()
    dot = _layer(spec, "work")
    assert "can_retry and tries &lt; max_tries (3)" in dot
    assert "failures &lt; 5" in dot and "otherwise" in dot
    assert "resets waits" in dot
    mermaid = to_mermaid(spec, view=View(kind="layer", layer="work"))
    assert '|"1 · retry_later<br/>can_retry and tries #lt; max_tries (3)<br/>resets waits"| st_waiting' in mermaid


def test_the_counter_table_gives_cap_scope_and_every_rule_that_resets_a_counter() -> None:
    dot = _layer(_toy(), "work")
    assert "max_tries (3)" in dot and ">request<" in dot
    assert "streak: any outcome of working but failed" in dot
    assert "in a row: edges job_done" in dot
    assert "edges retry_later" in dot, "explicit resets name the edges"
    assert "scope request: progress and `ends: request` edges" in dot


def test_progress_scope_ending_abort_and_error_edges_are_drawn_apart_and_explained() -> None:
    dot = _layer(_toy(), "work")
    assert "penwidth=3 style=bold" in dot, "progress"
    assert "ends request" in dot and "#1565c0" in dot
    assert "style=dotted" in dot, "abort"
    assert 'broken [label="broken\\n(terminal_reason gave_up)"' in dot
    for meaning in ("progress", "ends a scope", "into an error end", "abort", "decision: candidates 1..n"):
        assert meaning in dot, f"the legend explains {meaning}"


def test_states_of_other_layers_are_stubs_and_edges_into_the_layer_are_shown() -> None:
    dot = _layer(_toy(), "wait")
    assert 'working [label="working\\n(work)"' in dot and "dashed" in dot
    assert "retry_later" in dot, "the edge from the other layer into this one is labelled with its reason"


def test_the_overview_draws_layers_as_boxes_with_the_edges_between_them_aggregated() -> None:
    spec = _toy()
    dot = str(to_dot(spec, view=View(kind="overview")).source)
    assert '"g.work" -> "g.wait"' in dot and "retry_later" in dot
    assert '"g.end__error"' in dot and "broken (gave_up)" in dot
    mermaid = to_mermaid(spec, view=View(kind="overview"))
    assert "g_work -->" in mermaid and "g_end__error" in mermaid


def test_the_recovery_document_has_one_ladder_per_event_with_order_guard_counter_cap_and_outcome() -> None:
    text = recovery_markdown([_toy()])
    assert "### `failed` — the job failed, may work again" in text
    rows = [line for line in text.splitlines() if "`retry_later`" in line or "`given_up`" in line]
    assert rows[0].startswith("| `working` | 1 | `retry_later` | `can_retry` | `tries` < max_tries (3) | `waiting` |")
    assert "| 3 | `given_up` | otherwise | — | `broken` |" in rows[1]
    assert "run ends: gave_up (error); the job failed too often" in rows[1]


def test_a_template_is_drawn_once_with_what_each_instance_gives_its_params() -> None:
    spec = load_machine(_query_loop(), bind=False).spec
    view = View(kind="template", layer="compaction_ladder")
    assert view in views(spec) and view.suffix == ".template.compaction_ladder"
    mermaid = to_mermaid(spec, view=view)
    assert mermaid.count('st__kind__compacting("{kind}_compacting")') == 1
    assert "auto_compacting" not in mermaid.split("key_instances")[0]
    instances = mermaid.split("key_instances")[1]
    for given in ("auto_compaction: kind=auto", "reactive_compaction: kind=reactive", "failed_to=compaction_failed"):
        assert given in instances
    dot = str(to_dot(spec, view=view).source)
    assert "{kind}_compacting" in dot and "manual_compaction: kind=manual" in dot


def test_an_instance_is_drawn_in_its_layer_as_a_group_naming_its_template() -> None:
    spec = load_machine(_query_loop(), bind=False).spec
    context = View(kind="layer", layer="context")
    mermaid = to_mermaid(spec, view=context)
    head = 'subgraph inst_reactive_compaction["reactive_compaction · template compaction_ladder"]'
    group = mermaid.split(head)[1].split("end")[0]
    assert "st_reactive_compacting(" in group and "st_backing_off_reactive_summary(" in group
    assert "st_auto_compacting(" not in group
    dot = str(to_dot(spec, view=context).source)
    assert "subgraph cluster_instance_reactive_compaction" in dot
    assert "reactive_compaction · template compaction_ladder" in dot


# ---- every meaning-changing edit changes the pictures ---------------------------------------------


def _query_loop() -> Path:
    return shipped_machines()[0]


def _render_all(data: dict[str, Any], path: str) -> tuple[str, str]:
    spec = parse_machine(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), path, bind=False).spec
    dots = "\n".join(str(to_dot(spec, view=v).source) for v in views(spec))
    mermaids = "\n".join(to_mermaid(spec, view=v) for v in views(spec))
    return dots, mermaids


def _counter_scope(data: dict[str, Any]) -> None:
    counter = next(iter(data["counters"].values()))
    scopes = ["request", "turn", "run"]
    counter["scope"] = scopes[(scopes.index(counter.get("scope", "turn")) + 1) % 3]


def _edge_resets(data: dict[str, Any]) -> None:
    edge = next((t for t in data["transitions"] if t.get("resets")), None)
    if edge is not None:
        edge["resets"] = edge["resets"][:-1]
        if not edge["resets"]:
            del edge["resets"]
        return
    edge = data["transitions"][0]
    edge["resets"] = [next(iter(data["counters"]))]


def _candidate_order(data: dict[str, Any]) -> None:
    groups: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(data["transitions"]):
        if "instance" in t:
            continue  # where an instance's edges go, not an edge
        sources = t["from"] if isinstance(t["from"], list) else [t["from"]]
        for s in sources:
            groups.setdefault((s, t["event"]), []).append(i)
    first, second = next(g for g in groups.values() if len(g) >= 3)[:2]
    ts = data["transitions"]
    ts[first], ts[second] = ts[second], ts[first]


def _int_cap(data: dict[str, Any]) -> None:
    counter = next(c for c in data["counters"].values() if isinstance(c["cap"], int))
    counter["cap"] += 1


def _param_cap(data: dict[str, Any]) -> None:
    counter = next(c for c in data["counters"].values() if isinstance(c["cap"], str))
    param = data["params"][counter["cap"]]
    # one less: a default may be at the top of its range (max_retries: 10 of 10)
    if isinstance(param, dict):
        param["default"] = (param.get("default") or 2) - 1
    else:
        data["params"][counter["cap"]] = (param or 2) - 1


def _consecutive(data: dict[str, Any]) -> None:
    counter = next((c for c in data["counters"].values() if c.get("consecutive")), None)
    if counter is not None:
        del counter["consecutive"]
    else:
        next(iter(data["counters"].values()))["consecutive"] = [data["transitions"][0]["reason"]]


def _ends_a_scope(data: dict[str, Any]) -> None:
    edge = next(t for t in data["transitions"] if t.get("ends"))
    del edge["ends"]


def _template_counter(data: dict[str, Any]) -> None:
    edge = next(t for t in data["templates"]["compaction_ladder"]["transitions"] if t.get("counter"))
    edge["counter"] = "summary_retries" if edge["counter"] != "summary_retries" else "head_truncations"


MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "a counter's scope": _counter_scope,
    "an edge's resets": _edge_resets,
    "the order of two candidates": _candidate_order,
    "an int cap": _int_cap,
    "a param cap's default": _param_cap,
    "a counter's consecutive reasons": _consecutive,
    "an edge's ends": _ends_a_scope,
    "a template edge's counter": _template_counter,
}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=str)
def test_every_meaning_changing_edit_of_the_machine_changes_the_dot_and_mermaid_diagrams(mutation: str) -> None:
    path = _query_loop()
    original = yaml.safe_load(path.read_text(encoding="utf-8"))
    mutated = copy.deepcopy(original)
    MUTATIONS[mutation](mutated)
    assert mutated != original
    before_dot, before_mermaid = _render_all(original, str(path))
    after_dot, after_mermaid = _render_all(mutated, str(path))
    assert after_dot != before_dot, f"changing {mutation} left the DOT diagrams byte-identical"
    assert after_mermaid != before_mermaid, f"changing {mutation} left the Mermaid diagrams byte-identical"


def test_a_streak_change_changes_the_diagrams() -> None:
    spec_text = TOY.replace("streak_of: [failed], ", "")
    assert to_mermaid(_toy(spec_text), view=View(kind="layer", layer="work")) != to_mermaid(
        _toy(), view=View(kind="layer", layer="work")
    )
    assert _layer(_toy(spec_text), "work") != _layer(_toy(), "work")


# ---- the command ----------------------------------------------------------------------------------


def test_diagram_writes_the_overview_and_each_layer_and_removes_views_no_longer_drawn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = tmp_path / "toy.yaml"
    machine.write_text(TOY)
    out = tmp_path / "out"
    out.mkdir()
    (out / "toy.gone.dot").write_text("a layer renamed away")
    assert main(["diagram", "--check", "--machine", str(machine), "--out", str(out)]) == 1
    assert "toy.gone.dot (no longer drawn)" in capsys.readouterr().err
    assert (
        main(["diagram", "--machine", str(machine), "--out", str(out), "--format", "dot", "--format", "mermaid"]) == 0
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "toy.dot",
        "toy.mmd",
        "toy.wait.dot",
        "toy.wait.mmd",
        "toy.work.dot",
        "toy.work.mmd",
    ]
    assert main(["diagram", "--check", "--machine", str(machine), "--out", str(out)]) == 0, "svg/png are not compared"


def test_an_unknown_layer_is_a_one_line_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    machine = tmp_path / "toy.yaml"
    machine.write_text(TOY)
    assert main(["diagram", "--machine", str(machine), "--out", str(tmp_path), "--layer", "nope"]) == 2
    assert capsys.readouterr().err.strip() == (
        "queryloop: error: machine 'toy' has no layer 'nope' (layers: work, wait)"
    )
