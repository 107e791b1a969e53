"""The README stays a two-minute read, and every relative link in it and in docs/ names a file that exists.

The site itself is built by ``tools/test.sh`` (``mkdocs build --strict``: broken links and
anchors are errors there too); these checks need no MkDocs, so ``--fast`` runs them.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.M | re.S)  # fenced blocks and inline code show links, not follow them
README_LIMIT = 10_000  # bytes


def relative_links(page: Path) -> list[str]:
    """The relative link targets in ``page``, outside code, without their anchors."""
    targets = (m.group(1) for m in LINK.finditer(CODE.sub("", page.read_text(encoding="utf-8"))))
    return [t.split("#", 1)[0] for t in targets if "://" not in t and not t.startswith(("#", "mailto:"))]


def _tool(name: str) -> Any:
    """A script of tools/, imported by its path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_at_most_ten_kilobytes() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes: move detail into docs/ (the limit is {README_LIMIT})"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_that_exists(page: Path) -> None:
    broken = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to what does not exist: {broken}"


def test_the_link_reader_finds_links_and_skips_code(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[a](a.md#x) ![b](img/b.svg) [c](https://x.org) `[d](d.md)`\n```\n[e](e.md)\n```\n[f](#top)\n")
    assert relative_links(page) == ["a.md", "img/b.svg"]


def test_the_cli_reference_renders_every_command_from_the_parsers() -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    hooks = _tool("mkdocs_hooks")
    from queryloop.frontends.cli import build_parser

    text = hooks.cli_reference()
    commands = hooks._subcommands(build_parser())
    assert {"check", "diagram", "docs", "rewind", "sessions", "worker", "submit"} <= set(commands)
    for name in commands:
        assert f"## `queryloop {name}`\n\n```text\nusage: queryloop {name}" in text, name
    assert "--fallback-model" in text and hooks.MARKER in (ROOT / "docs" / "cli-reference.md").read_text()


def test_the_checkers_figures_in_the_docs_are_rendered_from_the_checker() -> None:
    """Every ``<!-- figures: NAME -->`` block is what tools/docs_figures.py renders now (run it to rewrite them)."""
    figures = _tool("docs_figures")
    for page in figures.PAGES:
        assert figures.BLOCK.search((ROOT / page).read_text(encoding="utf-8")), f"{page} has no figures block"
    assert figures.stale_pages(write=False) == [], "stale figures: run python tools/docs_figures.py"


def test_the_configuration_page_lists_the_hook_events_the_runtime_fires() -> None:
    from queryloop.handlers.hooks.services.config import HOOK_EVENTS

    page = " ".join((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").split())
    assert f"Hooks ({', '.join(HOOK_EVENTS)}) are real subprocesses" in page


def _differences() -> Any:
    return _tool("differences")


def test_the_differences_page_is_written_from_the_conformance_rows() -> None:
    """docs/differences.md's generated part is what tools/differences.py writes from the rows now."""
    assert _differences().stale(write=False) is False, "docs/differences.md is stale: run python tools/differences.py"


DESIGN_LINK = re.compile(r"\(\[[^\]]+\]\(([a-z-]+\.md)#[a-z0-9-]+\)\)$")


def test_every_by_design_row_ends_its_reason_with_a_link_to_a_docs_page() -> None:
    differences = _differences()
    bad = [
        f"{module.__name__}: {reason!r}"
        for module in differences.modules()
        for reason in differences.designed(module)
        if not (found := DESIGN_LINK.search(reason)) or not (ROOT / "docs" / found.group(1)).is_file()
    ]
    assert bad == [], "a by-design reason ends with ([words](page.md#anchor)) naming a page of docs/"


def test_the_differences_script_groups_rows_by_reason_and_finds_rows_without_a_rows_dict() -> None:
    import types

    import attrs

    @attrs.frozen
    class Row:
        probe: object
        design: str = ""

    differences = _differences()
    module = types.ModuleType("conformance.test_things", "Things beside Claude Code 2.1.235: a probe.")
    why = "a reason ([x](cli.md#a-headless-run))"
    other = "queryloop differs ([x](cli.md#a-headless-run))"
    vars(module).update(
        FIRST={"a": Row(None, why), "b": Row(None)}, SECOND={"c": Row(None, why), "d": Row(None, other)}
    )
    assert differences.topic(module) == "Things"
    reasons = differences.designed(module)
    assert reasons == {why: ["a", "c"], other: ["d"]}
    assert differences._bullet(why, reasons[why]) == f"- A{why[1:]}. Rows: `a`, `c`."
    paired = types.ModuleType("conformance.test_pairs", "Pairs beside Claude Code 2.1.235: a probe.")
    vars(paired).update(ROWS={"e": ("what runs it", Row(None, why))})
    assert differences.designed(paired) == {why: ["e"]}, "a row paired with what runs it is found too"


def _properties_page() -> Any:
    return _tool("properties_page")


def test_the_declared_properties_page_is_written_from_the_shipped_machines() -> None:
    """docs/properties.md is what tools/properties_page.py writes from the machines now."""
    stale = _properties_page().stale(write=False)
    assert stale is False, "docs/properties.md is stale: run python tools/properties_page.py"


def test_a_weakened_property_changes_the_declared_properties_page(tmp_path: Path) -> None:
    """A rename out of an ``ends`` rule, a raised budget and a widened frame each show on the page."""
    import yaml

    page = _properties_page()
    shipped = ROOT / "machines" / "query_loop.yaml"
    document = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    for edge in document["transitions"]:
        if edge.get("reason") == "agent_wait_aborted":
            edge["reason"] = "agent_wait_cancelled"  # out of the `aborted` kind: its rule no longer covers it
        if edge.get("reason") == "stop_hook_continue":
            edge["may_change"] = [*edge["may_change"], "request.max_tokens"]
    document["reason_kinds"]["cancelled"] = "the wait was cancelled"
    document["properties"]["one_reactive_compaction_per_turn"]["at_most"]["max"] = 2
    mutant = tmp_path / "query_loop.yaml"
    mutant.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    before, after = page.render([shipped]).splitlines(), page.render([mutant]).splitlines()
    gone, added = set(before) - set(after), set(after) - set(before)
    rule = next(line for line in gone if line.startswith("| kind `aborted` |"))
    assert "`agent_wait_aborted`" in rule
    assert any(
        line.startswith("| `one_reactive_compaction_per_turn` | `reactive_compact_retry` | `2` |") for line in added
    )
    assert any("`stop_hook_continue`" in line and "`request.max_tokens`" in line for line in added)
