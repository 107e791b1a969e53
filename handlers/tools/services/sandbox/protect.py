"""What a sandboxed command may never write, though it lies in the writable working directory.

Owns :data:`PROTECTED_NAMES`, :func:`is_protected` and :func:`existing_protected`. The sandbox
lets a command write its working directory; some files there are run later *outside* the
sandbox — by queryloop's or Claude Code's next start (settings and their hooks, MCP servers,
``CLAUDE.md`` instructions), by the next ``git`` (``.git/config``'s ``core.fsmonitor``,
``.git/hooks/*``), by the user's next shell (``.bashrc``, ``.profile``, ``~/.ssh``). A command
that could write them would escape the sandbox one step later. So, as Claude Code keeps its own
list read-only in its sandbox, these stay read-only here:

- a file or directory named in :data:`PROTECTED_NAMES`, at any depth, with everything under it;
- under a ``.git`` directory, at any depth, anything named ``config`` (or ``config.*``) or
  ``hooks``, with everything under it (a submodule's ``.git/modules/x/config`` too);
- when the working directory is the home directory or one of its ancestors, every entry of the
  home directory whose name starts with a dot.

:func:`existing_protected` finds those that exist, for ``launch`` to bind read-only (the command
gets "Read-only file system", as for any other path it may not write); ``overlay`` refuses, when it
brings the changes out, anything :func:`is_protected` covers — the new files no mount could cover.

Does not own mounting (``launch``) or applying changes (``overlay``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "PROTECTED_NAMES",
    "SandboxRefusal",
    "WalkLimitError",
    "existing_protected",
    "home_within",
    "is_protected",
    "shallow_protected",
]

PROTECTED_NAMES: Final = frozenset(
    {
        # shell start-up files
        ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
        ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
        # programs' own configuration that runs commands
        ".gitconfig", ".gitmodules", ".ripgreprc", ".npmrc", ".envrc", ".ssh", ".vscode", ".idea",
        # Claude Code's and queryloop's settings, hooks, agents, MCP servers and instructions
        ".claude", ".claude.json", ".queryloop", ".mcp.json", "CLAUDE.md", "CLAUDE.local.md",
    }
)  # fmt: skip
"""Names that are read-only inside the sandbox wherever they appear in the working directory."""

_GIT_RUNS: Final = ("config", "hooks")  # under .git: what makes the next git run a program


class SandboxRefusal(Exception):
    """The sandbox cannot give a command every protection it promises, so the command does not run."""


class WalkLimitError(OSError):
    """The working directory has more entries than the sandbox walks: what is protected cannot all be found."""


def home_within(cwd: Path, home: Path | None = None) -> tuple[str, ...] | None:
    """The home directory as components under ``cwd`` when ``cwd`` is it or an ancestor of it; else None."""
    try:
        home = (home if home is not None else Path.home()).resolve()
    except (OSError, RuntimeError):
        return None
    return home.relative_to(cwd).parts if home.is_relative_to(cwd) else None


def is_protected(rel: Sequence[str], *, home: Sequence[str] | None = None) -> bool:
    """Is the path ``rel`` (components under the working directory) protected, or under something that is?"""
    in_git = False
    for name in rel:
        if name in PROTECTED_NAMES:
            return True
        if in_git and (name in _GIT_RUNS or name.startswith("config.")):
            return True
        in_git = in_git or name == ".git"
    if home is not None and len(rel) > len(home) and tuple(rel[: len(home)]) == tuple(home):
        return rel[len(home)].startswith(".")
    return False


def shallow_protected(cwd: Path, *, home: Sequence[str] | None) -> Iterator[Path]:
    """The protected paths that exist where they usually are: the working directory's own entries, its
    ``.git``'s, the home directory's (when it lies within). No walk: each of these folders is listed once."""
    folders = [(), (".git",)]
    if home is not None:
        folders.append(tuple(home))
    for rel in folders:
        try:
            with os.scandir(cwd.joinpath(*rel)) as found:
                names = sorted(entry.name for entry in found)
        except OSError:  # not there, or not a directory
            continue
        for name in names:
            if is_protected((*rel, name), home=home) and not is_protected(rel, home=home):
                yield cwd.joinpath(*rel, name)


def existing_protected(cwd: Path, *, home: Sequence[str] | None, limit: int) -> Iterator[Path]:
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
            if is_protected((*rel, name), home=home):
                yield base / name
            else:
                kept.append(name)
        dirs[:] = kept
        for name in files:
            if is_protected((*rel, name), home=home):
                yield base / name
        seen += len(dirs) + len(files)
        if seen > limit:
            raise WalkLimitError(
                f"the working directory holds more than {limit:,} entries, so the sandbox cannot find every file "
                "it must keep read-only"
            )
