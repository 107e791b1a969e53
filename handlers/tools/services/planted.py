"""Does a write plant a file that runs later? The gate's question to ``runs_later``, for a path as it is written.

Owns :func:`write_roots`, :func:`planted_why` and :func:`planted_in_home_or_git`. Each writer asks (file tools in
``permissions``, redirections in ``bash_permissions``); the list itself is ``runs_later``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .matching import CallContext
from .rules import PermissionRules
from .runs_later import RunsLater, runs_later

__all__ = ["planted_in_home_or_git", "planted_why", "write_roots"]


def write_roots(ctx: CallContext, rules: PermissionRules) -> tuple[Path, ...]:
    """The working directories a written path is judged under (``runs_later``), as written and resolved."""
    given = (ctx.cwd, *rules.additional_directories)
    return tuple(dict.fromkeys((*given, *(Path(os.path.realpath(d)) for d in given))))


def planted_why(path: Path, *, roots: Sequence[Path], home: Path) -> str | None:
    """Why writing ``path`` plants a file that runs later — at the path, or where its symlinks lead; else None."""
    path_env = os.environ.get("PATH")
    written = Path(os.path.normpath(path))
    for candidate in dict.fromkeys((written, Path(os.path.realpath(path)))):
        why = runs_later(candidate, roots=roots, home=home, path_env=path_env)
        if why is not None:
            return why if candidate == written else f"it leads to {candidate}, {why}"
    return None


def planted_in_home_or_git(target: str, *, home: bool, git: bool) -> str | None:
    """Why the relative ``target`` would run later written in the home directory (``home``) or in a git directory."""
    parts = Path(os.path.normpath(target)).parts
    git_dirs = frozenset(parts[:depth] for depth in range(len(parts))) if git else frozenset()
    return RunsLater(home=() if home else None, git_dirs=git_dirs).why(parts)
