"""Project instructions: the ``CLAUDE.md`` and ``QUERYLOOP.md`` files a run gives the model as context.

Owns which files are read, in which order, their ``@path`` imports and the text they become (docs/configuration.md).
The text is never stored in the transcript.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Literal

import attrs

from queryloop.fsm import UnreadableFileError, read_text_file
from queryloop.handlers.messages import compact_json
from queryloop.handlers.tools import instruction_imports

__all__ = [
    "MEMORY_KINDS",
    "InstructionFile",
    "MemoryKind",
    "instructions_block",
    "instructions_tokens",
    "load_instructions",
    "memory_paths",
]

MemoryKind = Literal["user", "project", "local"]
MEMORY_KINDS: tuple[MemoryKind, ...] = ("user", "project", "local")
"""The kinds of instruction files, which are also ``--setting-sources`` names."""

MAX_IMPORT_DEPTH = 4
"""How many ``@path`` imports deep a file is still read (Claude Code 2.1.235 reads 4)."""

_USER_DIRS = ((".claude", "CLAUDE.md"), (".queryloop", "QUERYLOOP.md"))
_PROJECT_NAMES = ("CLAUDE", "QUERYLOOP")
_DESCRIBED: dict[MemoryKind, str] = {
    "user": "the user's own instructions, for every project",
    "project": "project instructions, kept with the project",
    "local": "the user's private instructions for this project, not shared",
}


@attrs.frozen(kw_only=True)
class InstructionFile:
    """One instruction file as the model is given it: where it is, its kind, and its text."""

    path: Path
    kind: MemoryKind
    content: str
    imported_by: Path | None = None


def load_instructions(
    cwd: Path,
    *,
    home: Path | None = None,
    sources: Collection[MemoryKind] = MEMORY_KINDS,
    skipped: list[str] | None = None,
) -> tuple[InstructionFile, ...]:
    """Every instruction file that applies to a run in ``cwd``, lowest precedence first.

    ``sources`` are the kinds to read (``--setting-sources``). Unreadable and empty
    files are skipped: instructions are optional, a run never fails for them. A file
    that is there but not read (a FIFO, a device, a symlink loop, over the size cap of
    ``queryloop.fsm.read_text_file``, not UTF-8) gets a line in ``skipped``.
    """
    project = cwd.resolve()
    user_home = (home if home is not None else Path.home()).resolve()
    loader = _Loader(project=project, home=user_home)
    if "user" in sources:
        for dot_dir, name in _USER_DIRS:
            loader.add(user_home / dot_dir / name, "user")
            loader.add_rules(user_home / dot_dir / "rules", "user")
    for directory in (*reversed(project.parents), project):
        if "project" in sources:
            for stem in _PROJECT_NAMES:
                folder = directory / f".{stem.lower()}"
                loader.add(directory / f"{stem}.md", "project")
                loader.add(folder / f"{stem}.md", "project")
                loader.add_rules(folder / "rules", "project")
        if "local" in sources:
            for stem in _PROJECT_NAMES:
                loader.add(directory / f"{stem}.local.md", "local")
    if skipped is not None:
        skipped.extend(loader.skipped)
    return tuple(loader.files)


@attrs.define
class _Loader:
    """Reads files in order, each once, following imports depth first."""

    project: Path
    home: Path
    files: list[InstructionFile] = attrs.field(factory=list)
    seen: set[Path] = attrs.field(factory=set)
    skipped: list[str] = attrs.field(factory=list)  # the files that are there and were not read, and why

    def add_rules(self, folder: Path, kind: MemoryKind) -> None:
        try:
            rules = sorted(p for p in folder.rglob("*.md") if p.is_file())
        except OSError:
            return
        for path in rules:
            self.add(path, kind, rule=True)

    def add(
        self, path: Path, kind: MemoryKind, *, rule: bool = False, depth: int = 0, imported_by: Path | None = None
    ) -> None:
        resolved = _resolved(path)
        if resolved is None:
            self.skipped.append(f"instruction file skipped: {path}: is a symlink loop")
            return
        named, path = path, resolved
        if path in self.seen:
            return
        text = _read_text(path, named, self.skipped)
        if text is None:
            return
        front, body = _split_front_matter(text)
        if rule and "paths" in front:
            return  # a rule for some files only: read when those are, not up front
        self.seen.add(path)
        body = body.strip()
        if not body:
            return
        self.files.append(InstructionFile(path=path, kind=kind, content=body, imported_by=imported_by))
        if depth >= MAX_IMPORT_DEPTH:
            return
        for target in instruction_imports(body, base=path.parent, home=self.home):
            resolved = _resolved(target)  # None for a loop: add() says it skipped it
            if kind == "user" or resolved is None or resolved.is_relative_to(self.project):
                self.add(target, kind, depth=depth + 1, imported_by=path)


def _resolved(path: Path) -> Path | None:
    """``path`` with its symlinks resolved; None for a symlink loop (Python raises RuntimeError for one)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _read_text(path: Path, named: Path, skipped: list[str]) -> str | None:
    """The text of ``path`` (``named`` with its symlinks resolved); None when it is missing, binary, or
    cannot be read within the bounds (said in ``skipped``, naming the file as it was named)."""
    try:
        text = read_text_file(path)
    except FileNotFoundError:
        return None
    except UnreadableFileError as exc:
        skipped.append(f"instruction file skipped: {named}: {exc.reason}")
        return None
    return None if "\x00" in text else text


def _split_front_matter(text: str) -> tuple[dict[str, object], str]:
    """(front matter, the rest) of a Markdown file; without front matter ``({}, text)``."""
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        return {}, text
    import yaml  # here: only a file with front matter needs PyYAML

    for end, line in enumerate(lines[1:], start=1):
        if line.rstrip() == "---":
            try:
                front = yaml.safe_load("\n".join(lines[1:end]))
            except yaml.YAMLError:
                return {}, text
            return (front if isinstance(front, dict) else {}), "\n".join(lines[end + 1 :])
    return {}, text


# ---- what the model is given -------------------------------------------------------------


def instructions_block(files: Sequence[InstructionFile]) -> str | None:
    """The one context text the files become (None without files): each file's path, kind and text."""
    if not files:
        return None
    parts = [
        "<project-instructions>",
        "The instruction files of this user and project follow, the more specific last. "
        "Follow them: they take precedence over the default instructions.",
    ]
    for f in files:
        parts.append(f"\n## {f.path} ({_DESCRIBED[f.kind]})\n\n{f.content}")
    parts.append("</project-instructions>")
    return "\n".join(parts)


def instructions_tokens(files: Sequence[InstructionFile]) -> int:
    """The local token estimate the block adds to every request (ceil(chars/4) of its JSON block)."""
    block = instructions_block(files)
    return 0 if block is None else math.ceil(len(compact_json({"type": "text", "text": block})) / 4)


def memory_paths(files: Sequence[InstructionFile]) -> dict[str, list[str]]:
    """The files read, by kind, as the stream-json ``init`` line's ``memory_paths`` shows them."""
    return {kind: [str(f.path) for f in files if f.kind == kind] for kind in MEMORY_KINDS}
