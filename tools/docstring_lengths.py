"""How long the modules' docstrings are: the median in words, how many pass a limit, the longest.

``python tools/docstring_lengths.py`` counts the words of ``ast.get_docstring`` for every
module under fsm/, handlers/ and queryloop/ (a module without one counts 0).
"""

from __future__ import annotations

import argparse
import ast
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("fsm", "handlers", "queryloop")


def word_counts(root: Path = ROOT) -> dict[str, int]:
    """Words in each module's docstring, by its path from ``root``."""
    counts: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            counts[str(path.relative_to(root))] = len(doc.split())
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=60, help="count the docstrings over this many words")
    parser.add_argument("--top", type=int, default=15, help="list this many of the longest")
    args = parser.parse_args()
    counts = word_counts()
    over = sum(1 for n in counts.values() if n > args.limit)
    print(f"{len(counts)} modules, median {statistics.median(counts.values()):g} words, {over} over {args.limit}")
    for path, n in sorted(counts.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{n:5d}  {path}")


if __name__ == "__main__":
    main()
