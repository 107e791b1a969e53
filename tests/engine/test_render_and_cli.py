"""Diagrams are deterministic and current; the CLI reports findings and user errors in one line."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from queryloop.frontends.cli import main
from queryloop.fsm.cli import DiagramFile, add_engine_commands, diagram_files, render_view
from queryloop.fsm.draw.ladder import layer_names
from queryloop.fsm.model.load import load_machine
from queryloop.machines import shipped_machines

ROOT = Path(__file__).resolve().parent.parent.parent
# diagrams/ commits each view twice: the Mermaid text (compared here) and the SVG (its bytes vary with Graphviz)
README_WIDTH_PX = 830  # GitHub's README column, in CSS pixels (an SVG's pt is 4/3 px)


def _tool(name: str) -> ModuleType:
    """A script of tools/, imported by its path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


overview_diagram = _tool("overview_diagram")
svg_words = overview_diagram.svg_words
COMMITTED = diagram_files(shipped_machines(), ["mermaid"], ROOT / "diagrams")


@pytest.mark.parametrize("file", COMMITTED, ids=lambda f: f.target.name)
def test_committed_diagrams_match_a_fresh_render(file: DiagramFile) -> None:
    fresh = render_view(load_machine(file.machine, bind=False).spec, file.view, file.fmt)
    assert file.target.exists() and file.target.read_bytes() == fresh, (
        f"{file.target.relative_to(ROOT)} is stale; regenerate with: queryloop diagram --out diagrams"
    )


def test_every_committed_view_also_has_its_svg_and_nothing_else_is_committed() -> None:
    missing = [str(f.target.with_suffix(".svg").relative_to(ROOT)) for f in COMMITTED]
    missing = [name for name in missing if not (ROOT / name).exists()]
    assert not missing, "regenerate with: queryloop diagram --out diagrams"
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "diagrams/*.dot" in ignored and "diagrams/*.png" in ignored, "DOT and PNG are drawn on request only"


def test_no_committed_diagram_is_left_over_from_a_layer_that_is_gone(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--check", "--out", str(ROOT / "diagrams")]) == 0, capsys.readouterr().err


def test_the_committed_recovery_document_matches_a_fresh_one(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["docs", "--check", "--out", str(ROOT / "docs/recovery.md")])
    assert rc == 0, capsys.readouterr().err + "\n(regenerate with: queryloop docs)"


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
    fetch = "queryloop.machines.examples.effects.fetch_item"
    assert report["figures_at"]["max_retries"] == 4
    assert report["worst_case_per_turn"][fetch] == 5
    assert report["worst_case_per_run"][fetch] == 15  # 3 items
    assert "explored" not in report


def test_check_explore_prints_the_exact_figures_beside_the_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    machine = str(ROOT / "machines/examples/retry_fetch.yaml")
    rc = main(["check", "--explore", "--machine", machine, "--set", "max_retries=4", "--set", "items=2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "worst case per turn, at max_retries=4, items=2 (a bound for every cap value): fetch_item ≤ 5" in out
    assert "worst case per run, at max_retries=4, items=2: fetch_item ≤ 10" in out
    assert "configurations at max_retries=4 (default 3), items=2 (default 3):" in out
    assert "exact worst case per turn: fetch_item = 5, wait_backoff = 4, store_item = 1" in out


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("max_retrys=4", "--set max_retrys: no checked machine has a param 'max_retrys'; did you mean 'max_retries'?"),
        ("max_retries=abc", '--set max_retries="abc": max_retries must be an int'),
        ("max_retries=null", "--set max_retries=null: max_retries may not be null"),
        ("max_retries=-1", "--set max_retries=-1: max_retries must be 0 or more"),
        ("max_retries", "--set expects NAME=VALUE, got 'max_retries'"),
    ],
)
def test_check_refuses_a_bad_set_with_a_clear_error(
    setting: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["check", "--machine", str(ROOT / "machines/examples/retry_fetch.yaml"), "--set", setting])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"queryloop: error: {message}\n"


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


# the agent program's flags: a prompt, a scenario for the embedded server, its output format
AGENT_FLAGS = re.compile(r"(?<![\w-])(-p|--scenario|--output-format|--verbose)(?![\w-])")


def _helps(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [f"{name} {a.dest}: {a.help}" for name, p in sub.choices.items() for a in p._actions if a.help]


def test_the_engine_commands_name_no_flag_of_the_agent_program() -> None:
    """Mounted by a program of its own, ``check`` and ``diagram`` say nothing of how queryloop replays a run
    or writes its log: the program that mounts them gives those words."""
    parser = argparse.ArgumentParser(prog="fsm")
    add_engine_commands(parser.add_subparsers(), default_machines=shipped_machines)
    said = [h for h in _helps(parser) if AGENT_FLAGS.search(h)]
    assert not said, said


def test_the_program_tells_its_engine_commands_how_it_replays_and_logs_a_run() -> None:
    from queryloop.frontends.cli import build_parser

    helps = " ".join(_helps(build_parser()))
    assert "`queryloop -p replay --scenario FILE --machine MACHINE`" in helps
    assert "`queryloop run --output-format stream-json --verbose` log" in helps


def test_png_diagrams_render_through_dot(tmp_path: Path) -> None:
    machine = str(ROOT / "machines/examples/circuit_breaker.yaml")
    assert main(["diagram", "--machine", machine, "--out", str(tmp_path), "--format", "png"]) == 0
    assert (tmp_path / "circuit_breaker.png").read_bytes()[:4] == b"\x89PNG"


def test_a_bad_set_value_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--set", "nonsense"]) == 2
    assert capsys.readouterr().err.strip() == "queryloop: error: --set expects NAME=VALUE, got 'nonsense'"


def test_the_docs_show_the_overview_as_an_svg_and_load_nothing_from_a_cdn() -> None:
    """Mermaid on the site is drawn by a script the theme fetches from a CDN: offline, a reader saw its source."""
    page = (ROOT / "docs" / "graph.md").read_text()
    assert "](../diagrams/overview.svg)" in page and "](../diagrams/query_loop.svg)" in page
    assert "```mermaid" not in page
    assert "mermaid" not in (ROOT / "mkdocs.yml").read_text().replace("No Mermaid", "")
    for name in ("overview.svg", "query_loop.svg"):
        assert (ROOT / "diagrams" / name).is_file()


SVGS = diagram_files(shipped_machines(), ["svg"], ROOT / "diagrams")


@pytest.mark.parametrize("file", SVGS, ids=lambda f: f.target.name)
def test_each_committed_svg_says_what_a_fresh_render_says(file: DiagramFile) -> None:
    """Graphviz's version moves the shapes, never the words: the SVG's titles and texts are held to its YAML."""
    fresh = render_view(load_machine(file.machine, bind=False).spec, file.view, file.fmt)
    assert svg_words(file.target.read_text()) == svg_words(fresh.decode()), (
        f"{file.target.relative_to(ROOT)} is stale; regenerate with: queryloop diagram --out diagrams"
    )


def test_the_readmes_overview_says_what_a_fresh_render_says(capsys: pytest.CaptureFixture[str]) -> None:
    assert overview_diagram.main(["--check"]) == 0, capsys.readouterr().err


def test_the_readmes_overview_shows_its_smallest_label_at_11_px_or_more_in_an_800_px_column() -> None:
    """The full diagram, shown there before, had its labels 2-4 px high: the README shows the overview instead."""
    px = overview_diagram.smallest_label_px
    assert px((ROOT / "diagrams" / "overview.svg").read_text(), 800) >= 11
    readme = (ROOT / "README.md").read_text()
    assert "](diagrams/query_loop.svg)" in readme and not re.search(r"!\[[^]]*\]\(diagrams/query_loop\.svg\)", readme)


def test_the_readmes_overview_is_readable_at_readme_width_and_links_every_layers_picture() -> None:
    svg = (ROOT / "diagrams" / "overview.svg").read_text()
    width = float(re.search(r'<svg width="([0-9.]+)pt"', svg).group(1))  # type: ignore[union-attr]
    assert width * 4 / 3 <= README_WIDTH_PX, "shown at the README's width, its 11 pt labels would shrink"
    readme = (ROOT / "README.md").read_text()
    assert "](diagrams/overview.svg)" in readme
    spec = load_machine(ROOT / "machines" / "query_loop.yaml", bind=False).spec
    for layer in layer_names(spec):
        assert f"](diagrams/query_loop.{layer}.svg)" in readme, layer
        assert f'href="query_loop.{layer}.svg"' in svg, layer
