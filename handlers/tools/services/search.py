"""The search tools ``Glob`` (files by name pattern) and ``Grep`` (files by content regex).

The walk opens regular files only and follows no symlinked directory; Grep's matching runs in ``grep_worker``,
killed at the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from .base import (
    ToolContext,
    ToolError,
    ToolOutput,
    ToolSpec,
    display_path,
    in_thread,
    non_regular_kind,
    raise_if_cancelled,
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

_MAGIC_CHARS: Final = frozenset("*?[{\\")

# The matching process: the standard library only (-S: no site-packages), isolated from
# the environment (-I), so it starts in a few tens of milliseconds.
_WORKER: Final = (sys.executable, "-I", "-S", str(Path(__file__).with_name("grep_worker.py")))


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


def _linked_file(entry: os.DirEntry[str], ctx: ToolContext) -> bool:
    """A symlink to a regular file inside the working directory (not a loop, not dangling)."""
    try:
        target = Path(entry.path).resolve()
        return ctx.holds(target) and target.is_file()  # is_file: a regular file, never a FIFO
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError on Python 3.11), or gone meanwhile
        return False


def _walk_files(root: Path, ctx: ToolContext, max_depth: int | None = None) -> Iterator[Path]:
    """Yield the regular files below ``root`` in a stable order, without leaving the working directories.

    Each directory's files come sorted, then its subdirectories, sorted, each in turn.
    With ``max_depth``, only files at most that many components below ``root`` are
    yielded (1: ``root``'s own files). Unreadable directories are skipped.
    """
    pending: list[tuple[Path, int]] = [(root, 0)]
    while pending:
        raise_if_cancelled()
        here, depth = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        subdirectories: list[Path] = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in _SKIPPED_DIRS:
                    subdirectories.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False) or (entry.is_symlink() and _linked_file(entry, ctx)):
                if not ctx.hidden(Path(entry.path)):  # a Read deny rule covers what Grep opens and Glob lists
                    yield Path(entry.path)
        if max_depth is None or depth + 1 < max_depth:
            pending.extend((directory, depth + 1) for directory in reversed(subdirectories))


def _search_root(raw: str | None, ctx: ToolContext) -> Path:
    root = ctx.cwd if raw is None else resolve_inside_cwd(raw, ctx)
    try:
        mode = root.stat().st_mode
    except FileNotFoundError:
        raise ToolError(f"path {display_path(root, ctx)} does not exist") from None
    kind = non_regular_kind(mode)
    if kind is not None:
        raise ToolError(f"path {display_path(root, ctx)} is {kind}, not a regular file or a directory")
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
    try:
        start = root.joinpath(*components[:literal]).resolve() if literal else root
    except (RuntimeError, OSError):  # the literal part runs into a symlink loop
        return ToolOutput(content=f"No files match {pattern!r} in {display_path(root, ctx)}")
    if not ctx.holds(start) or not start.is_dir():
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


def _grep_candidates(tool_input: Mapping[str, Any], ctx: ToolContext) -> tuple[Path, list[Path]]:
    """The search root and the files to search (walked, or the one file given), filtered by ``glob``."""
    root = _search_root(tool_input.get("path"), ctx)
    file_glob: str | None = tool_input.get("glob")
    name_filter = glob_to_regex(file_glob) if file_glob else None
    # Like ripgrep: a glob without '/' matches file names, one with '/' matches paths.
    filter_on_path = file_glob is not None and "/" in file_glob
    if not root.is_dir() and ctx.hidden(root):
        raise ToolError(f"{display_path(root, ctx)} is denied by a Read rule")
    candidates = _walk_files(root, ctx) if root.is_dir() else iter((root,))
    files: list[Path] = []
    for path in candidates:
        if name_filter is not None:
            subject = path.relative_to(root).as_posix() if filter_on_path and root.is_dir() else path.name
            if not name_filter.match(subject):
                continue
        files.append(path)
    return root, files


async def _match_in_worker(request: Mapping[str, object], timeout_s: float, ctx: ToolContext) -> dict[str, Any]:
    """Run ``grep_worker`` on ``request``; kill it past ``timeout_s`` or when cancelled."""
    if timeout_s <= 0:
        raise ToolError(_too_slow(ctx))
    proc = await asyncio.create_subprocess_exec(
        *_WORKER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate(json.dumps(request, ensure_ascii=False).encode("utf-8"))
    except TimeoutError:
        raise ToolError(_too_slow(ctx)) from None
    finally:
        if proc.returncode is None:  # past the deadline, or cancelled: the pattern may be backtracking
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(BaseException):
                await asyncio.shield(proc.wait())
    if proc.returncode != 0:
        detail = err.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["no error message"]
        raise ToolError(f"the search process failed (exit code {proc.returncode}): {detail[0]}")
    answer: dict[str, object] = json.loads(out)
    return answer


def _too_slow(ctx: ToolContext) -> str:
    return (
        f"the search did not finish within {ctx.tool_timeout_s:g} s and was stopped; a pattern with nested "
        "repetition such as (a+)+ can take exponential time: simplify it, or narrow the path or glob"
    )


async def _grep(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    started = time.monotonic()
    pattern: str = tool_input["pattern"]
    mode: str = tool_input.get("output_mode", "files_with_matches")
    flags = re.MULTILINE | (re.IGNORECASE if tool_input.get("-i", False) else 0)
    try:
        re.compile(pattern, flags)
    except re.error as exc:
        raise ToolError(f"pattern {pattern!r} is not a valid Python regular expression: {exc}") from exc
    root, files = await in_thread(lambda: _grep_candidates(tool_input, ctx))
    limit = ctx.max_output_chars
    request = {
        "pattern": pattern,
        "flags": int(flags),
        "mode": mode,
        "files": [[str(path), display_path(path, ctx)] for path in files],
        "limit": limit,
        "max_line_chars": GREP_MAX_LINE_CHARS,
    }
    answer = await _match_in_worker(request, ctx.tool_timeout_s - (time.monotonic() - started), ctx)
    where = display_path(root, ctx)
    if mode == "files_with_matches":
        matched_files = [files[index] for index in answer["matched"]]
        if not matched_files:
            return ToolOutput(content=f"No files under {where} match {pattern!r}")
        listing = [f"Found {len(matched_files)} files"]
        listing.extend(display_path(path, ctx) for path in await in_thread(lambda: _newest_first(matched_files)))
        return ToolOutput(content=truncate_text("\n".join(listing), limit, hint="narrow the pattern, path or glob"))
    if mode == "count":
        counts = [(display_path(files[index], ctx), hits) for index, hits in answer["counts"]]
        if not counts:
            return ToolOutput(content=f"No lines under {where} match {pattern!r}")
        out = [f"{shown}:{hits}" for shown, hits in counts]
        out.append(f"Found {sum(hits for _, hits in counts)} matching lines in {len(counts)} files")
        return ToolOutput(content=truncate_text("\n".join(out), limit, hint="narrow the pattern, path or glob"))
    if not answer["lines"]:
        return ToolOutput(content=f"No lines under {where} match {pattern!r}")
    body = "\n".join(answer["lines"])
    if answer["cut_short"]:
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
    run=_grep,
    own_timeout_s=lambda _input, ctx: ctx.tool_timeout_s,  # the walk and the match, then the worker is killed
)
