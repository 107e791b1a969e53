"""Diagrams are deterministic and current; the CLI reports findings and user errors in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.cli import main
from queryloop.fsm import load_machine, to_dot, to_mermaid
from queryloop.fsm.cli import diagram_targets, render
from queryloop.machines import shipped_machines

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize(
    ("path", "target", "fmt"),
    diagram_targets(shipped_machines(), ["dot", "svg", "mermaid"], ROOT / "diagrams"),
    ids=lambda v: getattr(v, "name", str(v)),
)
def test_committed_diagrams_match_a_fresh_render(path: Path, target: Path, fmt: str) -> None:
    fresh = render(path, fmt)
    assert target.exists() and target.read_bytes() == fresh, (
        f"{target.relative_to(ROOT)} is stale; regenerate with: queryloop diagram --out diagrams"
    )


def test_edge_labels_show_reason_guards_and_counter_with_cap() -> None:
    spec = load_machine(ROOT / "machines/examples/retry_fetch.yaml").spec
    dot = to_dot(spec).source
    assert 'label="fetch_retry +retries/max_retries=3"' in dot
    assert 'label="next_item [has_more_items]" color=black penwidth=3 style=bold' in dot
    assert "cluster_recovery" in dot and "doubleoctagon" in dot
    assert to_dot(spec).source == dot, "rendering is deterministic"
    mermaid = to_mermaid(spec)
    assert "storing --> fetching : next_item [has_more_items] (progress)" in mermaid


def test_check_exits_non_zero_and_names_the_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--machine", str(ROOT / "tests/fixtures/bugs/recovery_loop_without_counter.yaml")])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FINDING [termination] unbounded recovery cycle through states ['calling', 'waiting']" in out


def test_check_json_output_has_figures_and_findings(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "check",
            "--format",
            "json",
            "--machine",
            str(ROOT / "machines/examples/retry_fetch.yaml"),
            "--set",
            "max_retries=4",
        ]
    )
    report = json.loads(capsys.readouterr().out)[0]
    assert rc == 0 and report["ok"] is True
    assert report["worst_case_per_progress_step"]["queryloop.machines.examples.effects.fetch_item"] == 5


def test_a_spec_error_is_printed_with_path_and_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--machine", str(ROOT / "tests/fixtures/bugs/unreachable_state.yaml")])
    assert rc == 1
    assert "unreachable_state.yaml:8: state 'orphan' is unreachable" in capsys.readouterr().out


def test_diagram_check_reports_stale_files_with_the_regenerate_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = str(ROOT / "machines/examples/circuit_breaker.yaml")
    assert main(["diagram", "--machine", machine, "--out", str(tmp_path), "--format", "dot"]) == 0
    assert main(["diagram", "--check", "--machine", machine, "--out", str(tmp_path), "--format", "dot"]) == 0
    (tmp_path / "circuit_breaker.dot").write_text("stale")
    assert main(["diagram", "--check", "--machine", machine, "--out", str(tmp_path), "--format", "dot"]) == 1
    assert "queryloop diagram --out diagrams" in capsys.readouterr().err


def test_png_diagrams_render_through_dot(tmp_path: Path) -> None:
    assert (
        main(
            [
                "diagram",
                "--machine",
                str(ROOT / "machines/examples/circuit_breaker.yaml"),
                "--out",
                str(tmp_path),
                "--format",
                "png",
            ]
        )
        == 0
    )
    assert (tmp_path / "circuit_breaker.png").read_bytes()[:4] == b"\x89PNG"


def test_a_bad_set_value_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--set", "nonsense"]) == 2
    assert capsys.readouterr().err.strip() == "queryloop: error: --set expects NAME=VALUE, got 'nonsense'"
