"""One real run, logged as stream-json by the CLI in a subprocess, drawn on the machine it ran.

The runs are offline: the embedded server plays a scenario. The overlay must show
how often each edge was taken (and at which steps), where the run ended, and for
an error run the step that failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from queryloop.frontends.cli import main
from queryloop.fsm import load_machine
from queryloop.fsm.draw.ladder import View
from queryloop.machines import SCENARIOS_DIR, shipped_machines

OVERLOADED_FOREVER = """\
schema_version: 1
scenario: overloaded_forever
doc: every request is answered 529 and there is no fallback model, so the retries run out
model: mock-primary
default:
  - error: {status: 529}
otherwise: {error: {status: 529}}
"""


def _run(tmp_path: Path, scenario: Path, *flags: str) -> tuple[int, Path]:
    env = {**os.environ, "QUERYLOOP_RETRY_BASE_DELAY_MS": "1"}
    log = tmp_path / f"{scenario.stem}.jsonl"
    cmd = [sys.executable, "-m", "queryloop", "run", "--scenario", str(scenario), "-p", "go"]
    cmd += ["--output-format", "stream-json", "--verbose", *flags]
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd=tmp_path, timeout=120, check=False)
    return proc.returncode, log


def _steps(log: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [x for x in lines if x.get("type") == "system" and x.get("subtype") == "transition"]


def _overlay(tmp_path: Path, log: Path, *flags: str) -> str:
    assert main(["diagram", "--trace", str(log), "--out", str(tmp_path), "--format", "dot", *flags]) == 0
    return (tmp_path / f"{log.stem}.trace.dot").read_text()


def test_a_successful_run_is_drawn_with_each_edge_counted_at_its_steps_and_its_end_marked(tmp_path: Path) -> None:
    rc, log = _run(tmp_path, SCENARIOS_DIR / "fallback_chain.yaml")
    assert rc == 0
    steps = _steps(log)
    dot = _overlay(tmp_path, log)
    numbers: dict[tuple[object, object], list[int]] = {}
    for n, s in enumerate(steps, start=1):
        numbers.setdefault((s["from"], s["reason"]), []).append(n)
    for (_, reason), taken in numbers.items():
        shown = ", ".join(str(n) for n in taken[:4]) + (", …" if len(taken) > 4 else "")
        assert f"×{len(taken)}: step{'s' if len(taken) > 1 else ''} {shown}" in dot, reason
    assert Counter(s["reason"] for s in steps).most_common(1)[0][1] > 1, "the chain repeats an edge"
    end = json.loads(log.read_text().splitlines()[-1])["terminal_reason"]
    assert f"★ the run ended here: {end}" in dot
    assert "✗ failing step" not in dot


def test_an_error_run_highlights_its_last_step_as_the_failing_one(tmp_path: Path) -> None:
    scenario = tmp_path / "overloaded_forever.yaml"
    scenario.write_text(OVERLOADED_FOREVER)
    rc, log = _run(tmp_path, scenario, "--max-retries", "2")
    assert rc == 1
    last = _steps(log)[-1]
    dot = _overlay(tmp_path, log)
    failing = [line for line in dot.splitlines() if "✗ failing step" in line]
    assert failing and all("#d50000" in line for line in failing)
    assert any(f"<B>{last['reason']}</B>" in line or f"{last['reason']}" in line for line in failing)
    end = json.loads(log.read_text().splitlines()[-1])["terminal_reason"]
    assert f"★ the run ended here: {end}" in dot


def test_a_run_can_be_drawn_on_the_whole_machine_or_on_one_layer(tmp_path: Path) -> None:
    rc, log = _run(tmp_path, SCENARIOS_DIR / "hello.yaml")
    assert rc == 0
    whole = _overlay(tmp_path, log, "--whole")
    visited_only = _overlay(tmp_path, log)
    assert len(whole) > len(visited_only), "the whole machine draws the edges the run did not take, faded"
    first = _steps(log)[0]
    layer = load_machine(shipped_machines()[0], bind=False).spec.state(str(first["from"])).layer
    flags = ["--format", "dot", "--layer", layer]
    assert main(["diagram", "--trace", str(log), "--out", str(tmp_path), *flags]) == 0
    assert "×1: step 1" in (tmp_path / f"{log.stem}.trace{View(kind='layer', layer=layer).suffix}.dot").read_text()
    assert main(["diagram", "--trace", str(log), "--out", str(tmp_path), "--layer", "no such layer"]) == 2


def test_a_log_that_is_not_a_run_of_the_machine_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "other.jsonl"
    step = {"type": "system", "subtype": "transition", "from": "nowhere", "event": "e", "reason": "r", "to": "x"}
    log.write_text(json.dumps(step) + "\n")
    assert main(["diagram", "--trace", str(log), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("queryloop: ") and "no machine has every step of this run" in err and "\n" not in err
