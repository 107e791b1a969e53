"""What a sandboxed command may never write, though it lies in the writable working directory.

Owns :func:`is_protected`, :func:`existing_protected` and :func:`shallow_protected`: the list of what runs later
(``runs_later``) as read-only mounts for ``launch`` and refusals for ``overlay``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..runs_later import RUNS_LATER_NAMES, RunsLater, home_within

__all__ = [
    "PROTECTED_NAMES",
    "SandboxRefusal",
    "WalkLimitError",
    "existing_protected",
    "home_within",
    "is_protected",
    "shallow_protected",
]

PROTECTED_NAMES = frozenset(RUNS_LATER_NAMES)
"""Names that are read-only inside the sandbox wherever they appear in the working directory."""


class SandboxRefusal(Exception):
    """The sandbox cannot give a command every protection it promises, so the command does not run."""


class WalkLimitError(OSError):
    """The working directory has more entries than the sandbox walks: what is protected cannot all be found."""


def is_protected(
    rel: Sequence[str], *, home: Sequence[str] | None = None, later: RunsLater | None = None, directory: bool = True
) -> bool:
    """Is the path ``rel`` (components under the working directory) protected, or under something that is?

    ``later`` is what runs later there (``runs_later.find_runs_later``); without it, the names alone and
    the home directory at ``home``. A ``.git`` that is not a ``directory`` is protected (it points git
    elsewhere); a ``.git`` folder is not, only its configuration and hooks.
    """
    known = later if later is not None else RunsLater(home=tuple(home) if home is not None else None)
    return known.why(rel, directory=directory) is not None


def _is_dir(path: Path) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def shallow_protected(cwd: Path, *, later: RunsLater) -> Iterator[Path]:
    """The protected paths that exist where they usually are: the working directory's own entries, its
    ``.git``'s and the other git directories', the home directory's (when it lies within), and the
    folders git's configuration or ``PATH`` name. No walk: each of these folders is listed once."""
    listed: list[tuple[str, ...]] = [(), (".git",), *sorted(later.git_dirs)]
    if later.home is not None:
        listed.append(later.home)
    found: dict[Path, None] = {}
    for rel in listed:
        try:
            with os.scandir(cwd.joinpath(*rel)) as entries:
                names = sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries)
        except OSError:  # not there, or not a directory
            continue
        if is_protected(rel, later=later):
            continue
        for name, directory in names:
            if is_protected((*rel, name), later=later, directory=directory):
                found[cwd.joinpath(*rel, name)] = None
    for rel in sorted(later.folders):
        above = any(is_protected(rel[:depth], later=later) for depth in range(1, len(rel)))
        if not above and os.path.lexists(cwd.joinpath(*rel)):
            found[cwd.joinpath(*rel)] = None
    yield from found


def existing_protected(cwd: Path, *, later: RunsLater, limit: int) -> Iterator[Path]:
    """Every protected path that exists under ``cwd`` (the topmost of each subtree), following no symlink.

    A protected symlink is yielded as itself (a mount on it would land on its target); the caller
    decides. Raises :class:`WalkLimitError` past ``limit`` entries: a protection that could not look
    everywhere is not given.
    """
    seen = 0
    for root, dirs, files in os.walk(cwd):
        base = Path(root)
        rel = base.relative_to(cwd).parts
        kept = []
        for name in dirs:
            if is_protected((*rel, name), later=later, directory=name != ".git" or _is_dir(base / name)):
                yield base / name
            else:
                kept.append(name)
        dirs[:] = kept
        for name in files:
            if is_protected((*rel, name), later=later, directory=False):
                yield base / name
        seen += len(dirs) + len(files)
        if seen > limit:
            raise WalkLimitError(
                f"the working directory holds more than {limit:,} entries, so the sandbox cannot find every file "
                "it must keep read-only"
            )
