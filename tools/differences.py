"""docs/differences.md's list of deliberate differences, written from the conformance suite's rows.

Owns the block of docs/differences.md between ``<!-- rows: begin -->`` and ``<!-- rows: end -->``:
every row of every ``tests/conformance/test_*.py`` module (its ``ROWS`` dict, else each dict of rows
in it: anything with a ``probe`` and a ``design``) whose ``design`` is
set becomes a bullet with that reason, grouped by module (headed by the module's topic, the
first words of its docstring, before " beside"); rows that share a reason share a bullet
naming each row. ``python tools/differences.py`` rewrites the block; ``--check`` rewrites
nothing and fails, naming the command, when the page and the rows disagree
(``tests/test_docs.py`` runs it). The rows are read, never run: no Claude Code is needed.

Does not own the rest of the page (its introduction and the hand-written differences no row
pins yet), nor the rows (each module of the suite owns its own).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "differences.md"
SUITE = ROOT / "tests" / "conformance"
BLOCK = re.compile(r"(<!-- rows: begin -->\n)(?P<body>.*?)(<!-- rows: end -->)", re.S)
COMMAND = "python tools/differences.py"
NAMES = frozenset({"queryloop", "env"})  # first words that are names, not the start of a sentence

if str(ROOT / "tools") not in sys.path:  # generated_page, also when a test loads this script by its path
    sys.path.append(str(ROOT / "tools"))
from generated_page import page_main  # noqa: E402


def modules() -> Iterator[ModuleType]:
    """The suite's modules, in file order (imported as pytest imports them: ``conformance.test_…``)."""
    if str(SUITE.parent) not in sys.path:
        sys.path.insert(0, str(SUITE.parent))
    for path in sorted(SUITE.glob("test_*.py")):
        yield importlib.import_module(f"{SUITE.name}.{path.stem}")


def topic(module: ModuleType) -> str:
    """A module's heading: its docstring's first words up to " beside" (else up to ":"), else its name."""
    first = (module.__doc__ or "").strip().split("\n", 1)[0]
    head = first.split(" beside ", 1)[0] if " beside " in first else first.split(":", 1)[0]
    return head.replace("``", "`").strip().rstrip(".") or module.__name__.rsplit(".", 1)[-1]


def _is_row(value: object) -> bool:
    return hasattr(value, "probe") and isinstance(getattr(value, "design", None), str)


def _as_row(value: object) -> object:
    """A row, or the row a module pairs with what it needs to run it (``(web probe, Row)``)."""
    if isinstance(value, tuple):
        return next((item for item in value if _is_row(item)), value)
    return value


def rows(module: ModuleType) -> dict[str, object]:
    """The module's rows: its ``ROWS`` (name → row), else every module-level dict of rows, merged in order."""
    found = getattr(module, "ROWS", None)
    if isinstance(found, dict):
        return {name: _as_row(row) for name, row in found.items()}
    merged: dict[str, object] = {}
    for value in vars(module).values():
        if isinstance(value, dict) and value and all(_is_row(row) for row in value.values()):
            merged.update(value)
    return merged


def designed(module: ModuleType) -> dict[str, list[str]]:
    """The module's by-design reasons, each with the names of its rows, in the rows' order."""
    reasons: dict[str, list[str]] = {}
    for name, row in rows(module).items():
        design = getattr(row, "design", "")
        if design:
            reasons.setdefault(" ".join(design.split()), []).append(name)
    return reasons


def _bullet(reason: str, names: list[str]) -> str:
    rows = ", ".join(f"`{n.replace('`', '')}`" for n in names)
    first = reason.split(" ", 1)[0]
    as_written = first in NAMES or first != first.lower()  # a name keeps its spelling (queryloop, acceptEdits)
    sentence = reason if as_written else reason[0].upper() + reason[1:]
    return f"- {sentence}{'' if sentence.endswith('.') else '.'} Row{'s' if len(names) > 1 else ''}: {rows}."


def render() -> str:
    """The block's body: one section per module with by-design rows, one bullet per reason."""
    parts: list[str] = []
    for module in modules():
        reasons = designed(module)
        if not reasons:
            continue
        where = f"tests/conformance/{module.__name__.rsplit('.', 1)[-1]}.py"
        bullets = "\n".join(_bullet(reason, names) for reason, names in reasons.items())
        parts.append(f"### {topic(module)}\n\nFrom `{where}`:\n\n{bullets}\n")
    return "\n".join(parts)


def stale(*, write: bool) -> bool:
    """Whether the page's block differs from :func:`render`'s; with ``write``, rewrite it."""
    text = PAGE.read_text(encoding="utf-8")
    found = BLOCK.search(text)
    if found is None:
        raise SystemExit(f"{PAGE}: no '<!-- rows: begin -->' … '<!-- rows: end -->' block")
    body = render()
    if found.group("body") == body:
        return False
    if write:
        PAGE.write_text(text[: found.start("body")] + body + text[found.end("body") :], encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    return page_main(argv, doc=__doc__, page=PAGE, command=COMMAND, stale=stale)


if __name__ == "__main__":
    raise SystemExit(main())
