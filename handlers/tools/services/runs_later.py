"""What runs later: the one declared list of files a later program runs or obeys, for every writer.

Owns :data:`RUNS_LATER_NAMES`, :data:`GIT_RUNS`, :class:`RunsLater` (the list for one folder) and
:func:`runs_later`. The file tools ask before writing these, the sandbox keeps them read-only (docs/security.md,
what runs later).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

from queryloop.handlers.session import machine_cache_dir

__all__ = [
    "GIT_RUNS",
    "RUNS_LATER_NAMES",
    "RunsLater",
    "find_runs_later",
    "home_within",
    "instruction_imports",
    "runs_later",
]

_Rel = tuple[str, ...]

_SHELL: Final = "a shell start-up file"
_INSTRUCTIONS: Final = "instructions every run gives the model"
RUNS_LATER_NAMES: Final[Mapping[str, str]] = {
    **dict.fromkeys((".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases", ".profile"), _SHELL),
    **dict.fromkeys((".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout"), _SHELL),
    ".gitconfig": "git's configuration, which can name programs git runs",
    ".gitmodules": "git's submodule configuration",
    ".husky": "git hooks (husky)",
    ".ripgreprc": "ripgrep's configuration",
    ".npmrc": "npm's configuration",
    ".envrc": "a file direnv runs on entering the folder",
    ".ssh": "ssh's configuration and keys",
    ".vscode": "the editor's tasks and settings",
    ".idea": "the editor's run configurations",
    ".claude": "Claude Code's settings, hooks, agents and instructions",
    ".claude.json": "Claude Code's configuration and MCP servers",
    ".queryloop": "queryloop's settings, hooks, agents and instructions",
    ".mcp.json": "the MCP servers a run starts",
    **dict.fromkeys(("CLAUDE.md", "CLAUDE.local.md", "QUERYLOOP.md", "QUERYLOOP.local.md"), _INSTRUCTIONS),
}
"""Names that run later wherever they appear, with everything under them, and why."""

GIT_RUNS: Final[Mapping[str, str]] = {
    "config": "git's configuration, which can name programs git runs",
    "hooks": "git's hooks",
    "commondir": "where git finds a repository's configuration",
}
"""Under a git directory (``.git``, or one a ``.git`` file or ``commondir`` points to): what makes git run a
program. ``config.*`` (``config.worktree``) too."""

# Looked up case-folded: on a file system that ignores case (macOS, Windows) `.Git/Config` is `.git/config`.
_NAMES_FOLDED: Final = {name.casefold(): why for name, why in RUNS_LATER_NAMES.items()}
_GIT_POINTER: Final = "a .git that is not a folder points git at a configuration elsewhere"
_HOME_DOT: Final = "a file in the home directory programs read when they start"
_HOME_BIN: Final = "a folder the login shell puts first on PATH"
_HOOKS_PATH: Final = "git's hooks (core.hooksPath)"
_ON_PATH: Final = "a folder on the run's PATH"
_IMPORTED: Final = "instructions an instruction file imports"
_MACHINES: Final = "queryloop's compiled machines, which every run reads (its cache)"
_MAX_INCLUDES: Final = 10  # git's own limit on nested include.path
_MAX_IMPORT_DEPTH: Final = 4  # as deep as a run follows them (``queryloop.run.memory``)
# Imports followed per look, so a file of thousands of `@x` cannot make every write slow. Who wrote the
# instruction files that import past it already chose the run's instructions: nothing is gained by planting more.
_MAX_IMPORTS: Final = 1000
# The instruction files a working directory or the home directory holds, whose imports are followed here (rule
# folders are not: listing them on every write costs a walk; their files are on the list by their folder).
_INSTRUCTION_FILES: Final = (
    ("CLAUDE.md",), (".claude", "CLAUDE.md"), ("QUERYLOOP.md",), (".queryloop", "QUERYLOOP.md"),
    ("CLAUDE.local.md",), ("QUERYLOOP.local.md",),
)  # fmt: skip
# An import: `@path` at the start of the text or after whitespace; `\ ` escapes a space.
_IMPORT: Final = re.compile(r"(?:^|(?<=\s))@((?:[^\s\\]|\\ )+)")
_FENCE: Final = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE: Final = re.compile(r"`+[^`]*`+")
_MAX_CONFIG_BYTES: Final = 1 << 20


def home_within(root: Path, home: Path | None = None) -> _Rel | None:
    """The home directory as components under ``root`` when ``root`` is it or an ancestor of it; else None."""
    try:
        home = (home if home is not None else Path.home()).resolve()
    except (OSError, RuntimeError):
        return None
    return home.relative_to(root).parts if home.is_relative_to(root) else None


@attrs.frozen(kw_only=True)
class RunsLater:
    """What runs later under one folder (the root), paths given as components under it."""

    home: _Rel | None = None  # the home directory under the root, when the root is it or holds it
    git_dirs: frozenset[_Rel] = frozenset()  # folders git reads as a git directory, though not named .git
    folders: Mapping[_Rel, str] = attrs.field(factory=dict)  # folders all of whose contents run later, and why

    def why(self, rel: Sequence[str], *, directory: bool = False) -> str | None:
        """Why the path ``rel`` (a ``directory`` or not) runs later, or is under something that does; else None."""
        parts = tuple(rel)
        in_git = () in self.git_dirs
        for depth, name in enumerate(parts):
            folded = name.casefold()
            why = _NAMES_FOLDED.get(folded)
            if why is None and in_git:
                why = GIT_RUNS.get(folded) or (GIT_RUNS["config"] if folded.startswith("config.") else None)
            if why is None and folded == ".git" and depth == len(parts) - 1 and not directory:
                why = _GIT_POINTER
            if why is None:
                why = self.folders.get(parts[: depth + 1])
            if why is not None:
                return why
            in_git = in_git or folded == ".git" or parts[: depth + 1] in self.git_dirs
        return self._in_home(parts)

    def _in_home(self, parts: _Rel) -> str | None:
        home = self.home
        if home is None or len(parts) <= len(home) or parts[: len(home)] != home:
            return None
        entry = parts[len(home)]
        if entry.startswith("."):
            return _HOME_DOT
        return _HOME_BIN if entry.casefold() == "bin" else None


def find_runs_later(root: Path, *, home: Path | None = None, path_env: str | None = None) -> RunsLater:
    """What runs later under ``root`` (absolute, resolved): git's pointers and ``core.hooksPath``, ``PATH``'s folders.

    Reads the ``.git`` at ``root`` (or the repository above it): a ``.git`` file's ``gitdir:``
    and a git directory's ``commondir`` are followed, and every configuration git reads there
    (the repository's, ``config.worktree``, the user's and the system's, with their includes) is
    searched for ``core.hooksPath``. ``path_env`` is the run's ``PATH``: its absolute folders under
    ``root`` run later, and so does queryloop's machine cache. A file it cannot read adds nothing.
    """
    user_home = home if home is not None else _user_home()
    top, git_dirs = _repository(root)
    where = str(root)
    folders: dict[_Rel, str] = {}
    for value in _hooks_paths(git_dirs, user_home):
        base = user_home if value.startswith("~/") else top or root
        _add_under(folders, where, os.path.join(base, value[2:] if value.startswith("~/") else value), _HOOKS_PATH)
    for entry in (path_env or "").split(os.pathsep):
        if entry.startswith("/"):
            _add_under(folders, where, entry, _ON_PATH)
    for imported in _imported(root, user_home):
        _add_under(folders, where, str(imported), _IMPORTED)
    _add_under(folders, where, os.path.realpath(machine_cache_dir()), _MACHINES)
    inside = {rel for rel in (_under(where, str(d)) for d in git_dirs) if rel is not None and rel[-1:] != (".git",)}
    return RunsLater(home=home_within(root, user_home), git_dirs=frozenset(inside), folders=folders)


def runs_later(
    path: Path, *, roots: Sequence[Path], home: Path | None = None, path_env: str | None = None
) -> str | None:
    """Why the file ``path`` (absolute) runs later, judged under the innermost of ``roots`` holding it; else None.

    A path under no root is judged under ``/``: then every name of the list counts along its whole
    path, the home directory's rule holds, and every absolute ``PATH`` folder is protected.
    """
    normal = Path(os.path.normpath(path))
    holding = [r for r in roots if normal.is_relative_to(r)]
    root = max(holding, key=lambda r: len(r.parts)) if holding else Path("/")
    later = find_runs_later(root, home=home, path_env=path_env)
    return later.why(normal.relative_to(root).parts)


def instruction_imports(text: str, *, base: Path, home: Path) -> Iterator[Path]:
    """The ``@path`` imports in an instruction file's ``text`` outside fenced and inline code, resolved against
    ``base`` (``~/`` against ``home``): what a run reads as instructions too (``queryloop.run.memory``)."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in _IMPORT.finditer(_INLINE_CODE.sub(" ", line)):
            raw = match.group(1).replace("\\ ", " ")
            yield home / raw[2:] if raw.startswith("~/") else base / raw


def _imported(root: Path, home: Path) -> Iterator[Path]:
    """The files the instruction files in ``root`` and the home directory import, at most as deep as a run reads."""
    seen: set[Path] = set()
    files = [(root.joinpath(*rel), 0) for rel in _INSTRUCTION_FILES]
    files += [(home / ".claude" / "CLAUDE.md", 0), (home / ".queryloop" / "QUERYLOOP.md", 0)]
    while files:
        path, depth = files.pop()
        try:
            with open(path, encoding="utf-8", errors="replace") as file:
                text = file.read(_MAX_CONFIG_BYTES)
        except OSError:  # absent, a folder, unreadable
            continue
        for target in instruction_imports(text, base=path.parent, home=home):
            normal = Path(os.path.normpath(target))
            if normal not in seen and len(seen) < _MAX_IMPORTS:
                seen.add(normal)
                yield normal
                if depth + 1 < _MAX_IMPORT_DEPTH:
                    files.append((normal, depth + 1))


def _user_home() -> Path:
    """The home directory; where none can be found, a path that holds nothing (nothing is read from it)."""
    try:
        return Path.home()
    except (RuntimeError, KeyError, OSError):
        return Path("/nonexistent")


def _under(root: str, path: str) -> _Rel | None:
    """``path``'s components under ``root`` (both absolute; strings: this runs for every PATH entry of every call)."""
    normal = os.path.normpath(path)
    if normal == root:
        return ()
    prefix = root if root.endswith("/") else root + "/"
    return tuple(normal[len(prefix) :].split("/")) if normal.startswith(prefix) else None


def _add_under(folders: dict[_Rel, str], root: str, path: str, why: str) -> None:
    rel = _under(root, path)
    if rel:  # the root itself is never one of them: everything would run later
        folders.setdefault(rel, why)


def _repository(root: Path) -> tuple[Path | None, tuple[Path, ...]]:
    """The work tree's top holding ``root`` (None: none) and the git directories git reads there."""
    folder = str(root)
    while True:
        dot_git = os.path.join(folder, ".git")
        try:
            found = os.stat(dot_git)
        except OSError:  # none here (one stat a level: this runs for every write)
            found = None
        if found is not None and stat.S_ISDIR(found.st_mode):
            return Path(folder), _with_common(Path(dot_git))
        target = _pointer(Path(dot_git), "gitdir:") if found is not None else None
        if target is not None:
            return Path(folder), _with_common(target)
        if folder == os.path.dirname(folder):
            return None, ()
        folder = os.path.dirname(folder)


def _with_common(git_dir: Path) -> tuple[Path, ...]:
    common = _pointer(git_dir / "commondir", "")
    return (git_dir, common) if common is not None else (git_dir,)


def _pointer(path: Path, prefix: str) -> Path | None:
    """The folder a one-line pointer file names (``gitdir: ../x``, or a plain path), relative to the file's folder."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            line = file.readline(4096).strip()
    except OSError:  # absent, a folder, unreadable
        return None
    if not line.startswith(prefix) or not line[len(prefix) :].strip():
        return None
    return Path(os.path.normpath(path.parent / line[len(prefix) :].strip()))


def _hooks_paths(git_dirs: Sequence[Path], home: Path) -> Iterator[str]:
    """Every ``core.hooksPath`` value in the configuration git reads for these git directories."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    files = [Path("/etc/gitconfig"), Path(xdg) / "git" / "config", home / ".gitconfig"]
    for git_dir in git_dirs:
        files += [git_dir / "config", git_dir / "config.worktree"]
    for file in files:
        yield from _config_values(file, home, depth=0)


def _config_values(file: Path, home: Path, *, depth: int) -> Iterator[str]:
    """``core.hooksPath`` in one git configuration file, following ``include.path`` and ``includeIf.*.path``.

    Conditional includes are followed whatever their condition: what might apply is protected.
    """
    try:
        with open(file, encoding="utf-8", errors="replace") as handle:
            text = handle.read(_MAX_CONFIG_BYTES)
    except OSError:
        return
    for section, key, value in _entries(text):
        if section == "core" and key == "hookspath" and value:
            yield value
        elif section in ("include", "includeif") and key == "path" and value and depth < _MAX_INCLUDES:
            included = home / value[2:] if value.startswith("~/") else file.parent / value
            yield from _config_values(included, home, depth=depth + 1)


def _entries(text: str) -> Iterator[tuple[str, str, str]]:
    """(section, key, value) of each ``key = value`` line, section and key lower-cased (a subsection dropped)."""
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            header, _, line = line[1:].partition("]")
            section = header.strip().split(" ", 1)[0].split(".", 1)[0].lower()
            line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, _, value = line.partition("=")
        yield section, key.strip().lower(), _unquoted(value.strip())


def _unquoted(value: str) -> str:
    """A git configuration value as git reads it: quotes removed, escapes kept literal, a comment cut."""
    out: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(char, char))
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char in "#;" and not quoted:
            break
        else:
            out.append(char)
    return "".join(out).strip()
