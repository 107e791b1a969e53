"""The command line of a script that writes one generated docs page: rewrite it, or ``--check`` that it is fresh.

Owns :func:`page_main`, shared by ``tools/differences.py`` and ``tools/properties_page.py``. Does not own what
a page holds: each script's ``stale`` renders it and compares.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def page_main(
    argv: Sequence[str] | None, *, doc: str | None, page: Path, command: str, stale: Callable[..., bool]
) -> int:
    """Rewrite ``page`` through ``stale(write=True)``; with ``--check``, write nothing and exit 1 naming ``command``.

    ``doc``, the script's docstring, gives the help's first line.
    """
    parser = argparse.ArgumentParser(description=(doc or "").split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if the page is stale")
    args = parser.parse_args(argv)
    if stale(write=not args.check):
        if args.check:
            print(f"{page.relative_to(ROOT)} is stale: run {command}", file=sys.stderr)
            return 1
        print(f"rewrote {page.relative_to(ROOT)}")
    return 0
