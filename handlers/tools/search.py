"""The search tools ``Glob`` (files by name pattern) and ``Grep`` (files by content regex).

Owns the glob-pattern dialect (``*``, ``?``, ``**``, ``[...]``, ``{a,b}``), the directory
walk both tools share (VCS directories skipped, symlinked directories not followed,
symlinked files leaving the working directory ignored) and the output formats and caps.
``Grep`` is pure Python (:mod:`re`): no ripgrep needed, Python regex syntax.

Does not own single-file access (``files``) or scheduling (``dispatch``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from .base import (
    ToolContext,
    ToolError,
    ToolOutput,
    ToolSpec,
    display_path,
    resolve_inside_cwd,
    threaded,
    truncate_text,
)

__all__ = ["GLOB", "GREP", "glob_to_regex"]

GLOB_MAX_RESULTS: Final = 100
"""Glob lists at most this many files (the most recently modified)."""

GREP_MAX_LINE_CHARS: Final = 500
"""A matching line longer than this is cut in Grep's content output."""

# Directories that hold version-control internals, never project files.
_SKIPPED_DIRS: Final = frozenset({".git", ".hg", ".svn"})

_BINARY_SNIFF_BYTES: Final = 8192
_MAGIC_CHARS: Final = frozenset("*?[{\\")


def _split_top_level(body: str) -> list[str]:
    """Split a brace body on commas that are not inside nested braces."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(body):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(body[start:index])
            start = index + 1
    parts.append(body[start:])
    return parts


def _matching_brace(pattern: str, start: int) -> int:
    depth = 0
    for index in range(start, len(pattern)):
        if pattern[index] == "{":
            depth += 1
        elif pattern[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _translate(pattern: str) -> str:
    out: list[str] = []
    index = 0
    size = len(pattern)
    while index < size:
        char = pattern[index]
        if pattern.startswith("**/", index):
            out.append("(?:[^/]*/)*")  # zero or more whole directories
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif char == "*":
            out.append("[^/]*")
            index += 1
        elif char == "?":
            out.append("[^/]")
            index += 1
        elif char == "[":
            close = pattern.find("]", index + 2)
            if close == -1:
                out.append(re.escape(char))
                index += 1
                continue
            body = pattern[index + 1 : close]
            negate = body[0] in "!^"
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            index = close + 1
        elif char == "{":
            close = _matching_brace(pattern, index)
            if close == -1:
                out.append(re.escape(char))
                index += 1
                continue
            alternatives = _split_top_level(pattern[index + 1 : close])
            out.append("(?:" + "|".join(_translate(alt) for alt in alternatives) + ")")
            index = close + 1
        elif char == "\\" and index + 1 < size:
            out.append(re.escape(pattern[index + 1]))
            index += 2
        else:
            out.append(re.escape(char))
            index += 1
    return "".join(out)


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob pattern matched against whole ``/``-separated relative paths.

    ``*`` and ``?`` stay within one path component, ``**/`` spans zero or more
    directories, ``[...]`` (``[!...]`` negated) is a character class and ``{a,b}``
    an alternation. Leading dots are not special: ``*`` matches ``.env``.
    """
    try:
        return re.compile(_translate(pattern) + r"\Z", re.DOTALL)
    except re.error as exc:
        raise ToolError(f"glob pattern {pattern!r} is malformed: {exc}") from exc


def _walk_files(root: Path, ctx: ToolContext, max_depth: int | None = None) -> Iterator[Path]:
    """Yield the files below ``root`` in a stable order, without leaving ``ctx.cwd``.

    With ``max_depth``, only files at most that many components below ``root`` are
    yielded (1: ``root``'s own files).
    """
    root_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(name for name in dirnames if name not in _SKIPPED_DIRS)
        if max_depth is not None and len(here.parts) - root_depth >= max_depth - 1:
            dirnames.clear()
        for name in sorted(filenames):
            path = here / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(ctx.cwd) or not target.is_file():
                    continue
            yield path


def _search_root(raw: str | None, ctx: ToolContext) -> Path:
    root = ctx.cwd if raw is None else resolve_inside_cwd(raw, ctx)
    if not root.exists():
        raise ToolError(f"path {display_path(root, ctx)} does not exist")
    return root


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # deleted while we were walking
        return 0.0


def _newest_first(paths: list[Path]) -> list[Path]:
    keyed = sorted(((-_mtime(path), str(path)), path) for path in paths)
    return [path for _key, path in keyed]


def _glob(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    pattern: str = tool_input["pattern"]
    if pattern.startswith("/"):
        raise ToolError(f"glob pattern {pattern!r} is absolute; give the directory in path and a relative pattern")
    root = _search_root(tool_input.get("path"), ctx)
    if not root.is_dir():
        raise ToolError(f"path {display_path(root, ctx)} is a file, not a directory; Glob searches directories")
    regex = glob_to_regex(pattern)

    # Walk only below the pattern's literal leading directories, and no deeper than a
    # pattern without '**' can reach: both cut the walk a lot on big trees.
    components = pattern.split("/")
    literal = 0
    while literal < len(components) - 1 and not _MAGIC_CHARS.intersection(components[literal]):
        literal += 1
    start = root.joinpath(*components[:literal]).resolve() if literal else root
    if not start.is_relative_to(ctx.cwd) or not start.is_dir():
        return ToolOutput(content=f"No files match {pattern!r} in {display_path(root, ctx)}")
    bounded = "**" not in pattern and "{" not in pattern
    depth = len(components) - literal if bounded else None

    matches = [path for path in _walk_files(start, ctx, depth) if regex.match(path.relative_to(root).as_posix())]
    if not matches:
        return ToolOutput(content=f"No files match {pattern!r} in {display_path(root, ctx)}")
    ordered = _newest_first(matches)
    lines = [display_path(path, ctx) for path in ordered[:GLOB_MAX_RESULTS]]
    if len(ordered) > GLOB_MAX_RESULTS:
        lines.append(
            f"[Showing the {GLOB_MAX_RESULTS} most recently modified of {len(ordered)} matching files; "
            "use a narrower pattern or path to see the others]"
        )
    return ToolOutput(content=truncate_text("\n".join(lines), ctx.max_output_chars))


def _read_text(path: Path) -> str | None:
    """The file's text, or ``None`` for a binary or unreadable file (Grep skips those)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        return None
    return data.decode("utf-8", errors="replace")


def _grep(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    pattern: str = tool_input["pattern"]
    mode: str = tool_input.get("output_mode", "files_with_matches")
    flags = re.MULTILINE | (re.IGNORECASE if tool_input.get("-i", False) else 0)
    try:
        regex = re.compile(pattern, flags)
    except re.error as exc:
        raise ToolError(f"pattern {pattern!r} is not a valid Python regular expression: {exc}") from exc
    root = _search_root(tool_input.get("path"), ctx)

    file_glob: str | None = tool_input.get("glob")
    name_filter = glob_to_regex(file_glob) if file_glob else None
    # Like ripgrep: a glob without '/' matches file names, one with '/' matches paths.
    filter_on_path = file_glob is not None and "/" in file_glob

    if root.is_dir():
        candidates: Iterator[Path] = _walk_files(root, ctx)
    else:
        candidates = iter((root,))

    limit = ctx.max_output_chars
    matched_files: list[Path] = []
    out: list[str] = []
    used = 0
    total = 0
    cut_short = False
    for path in candidates:
        if name_filter is not None:
            subject = path.relative_to(root).as_posix() if filter_on_path and root.is_dir() else path.name
            if not name_filter.match(subject):
                continue
        text = _read_text(path)
        if text is None:
            continue
        if mode == "files_with_matches":
            if regex.search(text):
                matched_files.append(path)
            continue
        shown = display_path(path, ctx)
        hits = 0
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.rstrip("\r")
            if not regex.search(line):
                continue
            hits += 1
            if mode == "content":
                if len(line) > GREP_MAX_LINE_CHARS:
                    line = line[:GREP_MAX_LINE_CHARS] + "... [line cut]"
                entry = f"{shown}:{number}:{line}"
                out.append(entry)
                used += len(entry) + 1
                if used > limit:
                    cut_short = True
                    break
        if hits and mode == "count":
            out.append(f"{shown}:{hits}")
            total += hits
        if cut_short:
            break

    where = display_path(root, ctx)
    if mode == "files_with_matches":
        if not matched_files:
            return ToolOutput(content=f"No files under {where} match {pattern!r}")
        listing = [f"Found {len(matched_files)} files"]
        listing.extend(display_path(path, ctx) for path in _newest_first(matched_files))
        return ToolOutput(content=truncate_text("\n".join(listing), limit, hint="narrow the pattern, path or glob"))
    if not out:
        return ToolOutput(content=f"No lines under {where} match {pattern!r}")
    if mode == "count":
        out.append(f"Found {total} matching lines in {len(out)} files")
        return ToolOutput(content=truncate_text("\n".join(out), limit, hint="narrow the pattern, path or glob"))
    body = "\n".join(out)
    if cut_short:
        hint = "more matching lines were not searched for; narrow the pattern, path or glob"
        return ToolOutput(content=truncate_text(body, limit - 200, hint=hint) + f"\n[... {hint} ...]")
    return ToolOutput(content=truncate_text(body, limit, hint="narrow the pattern, path or glob"))


GLOB: Final = ToolSpec(
    name="Glob",
    description=(
        "Find files by name pattern, e.g. `**/*.py` or `src/**/*.{ts,tsx}`. `*` and `?` match "
        "within one path component, `**/` any number of directories, `{a,b}` either choice. "
        "Returns matching file paths relative to the working directory, most recently modified "
        f"first, at most {GLOB_MAX_RESULTS}. VCS directories such as .git are skipped."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern, relative to path."},
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "Directory to search in (default: the working directory).",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    concurrency_safe=True,
    read_only=True,
    idempotent=True,
    run=threaded(_glob),
)

GREP: Final = ToolSpec(
    name="Grep",
    description=(
        "Search file contents with a Python regular expression (`re` syntax; `^`/`$` match at "
        "line boundaries). Searches path (a file or directory, default the working directory), "
        "skipping binary files and VCS directories; glob filters files (e.g. `*.py`, or a pattern "
        "with `/` to match paths). output_mode: `files_with_matches` (default; newest first), "
        "`content` (path:line:text) or `count` (matching lines per file). `-i` ignores case."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression to search for."},
            "path": {"type": "string", "minLength": 1, "description": "File or directory to search in."},
            "glob": {"type": "string", "minLength": 1, "description": "Only search files matching this glob."},
            "output_mode": {
                "type": "string",
                "enum": ["files_with_matches", "content", "count"],
                "default": "files_with_matches",
                "description": "What to return for the matches.",
            },
            "-i": {"type": "boolean", "default": False, "description": "Case-insensitive search."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    concurrency_safe=True,
    read_only=True,
    idempotent=True,
    run=threaded(_grep),
)
