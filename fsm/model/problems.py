"""How a declaration's problem points at its cause: the line of a node, the names close to a misspelt one.

Shared by building, validating and binding a machine; owns no rule of its own.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SpecProblem

__all__ = ["Lines", "close", "line_of", "unknown"]

Lines = Mapping[tuple[Any, ...], int]
"""The line of every node of a declaration, keyed by its path of keys and indexes."""


def line_of(lines: Lines, path: Iterable[object]) -> int | None:
    """The line of the node at ``path``, else of its nearest enclosing node."""
    p = tuple(path)
    while p not in lines and p:
        p = p[:-1]
    return lines.get(p)


def close(name: str, options: Iterable[str]) -> str:
    """``did you mean 'x'?`` for the declared names close to ``name``, else ``""``."""
    matches = difflib.get_close_matches(name, list(options), n=3, cutoff=0.8)
    if not matches:
        return ""
    return "did you mean " + " or ".join(repr(m) for m in matches) + "?"


def unknown(
    path: str, kind: str, name: str, options: Iterable[str], line: int | None, context: str
) -> list[SpecProblem]:
    """The problem of ``context`` naming a ``kind`` not among ``options`` (none when it is)."""
    if name in options:
        return []
    fix = close(name, options) or f"declare it under `{kind}s:`"
    return [SpecProblem(path, line, f"{context} names {kind} {name!r}, which is not declared", fix)]
