"""The file tools ``Read``, ``Write`` and ``Edit``: their schemas, descriptions and implementations.

Paths stay inside the working directory and only regular files are opened. Read holds one cut line at a time,
however long the lines; Write and Edit replace the file atomically, keeping its permission bits.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Final

import attrs

from .base import (
    ToolContext,
    ToolError,
    ToolInputError,
    ToolOutput,
    ToolSpec,
    display_path,
    non_regular_kind,
    raise_if_cancelled,
    resolve_inside_cwd,
    threaded,
)
from .images import IMAGE_EXTENSIONS, read_image, read_pdf

__all__ = ["EDIT", "READ", "WRITE"]

READ_DEFAULT_LIMIT: Final = 2000
"""Lines returned by ``Read`` when the model gives no ``limit``."""

READ_MAX_LINE_CHARS: Final = 2000
"""A longer line is cut, so one minified line cannot eat the whole output budget."""

# A NUL byte in the first block is the same binary heuristic git and grep use.
_BINARY_SNIFF_BYTES: Final = 8192

# Room kept below max_output_chars for the closing "continue at offset" note (plus the path).
_NOTE_RESERVE: Final = 160

# The rest of a cut line is skipped in pieces of this many characters.
_SKIP_CHARS: Final = 65536


def _require_file(
    raw: str, ctx: ToolContext, *, missing_hint: str, verb: str, missing: type[ToolError] = ToolError
) -> tuple[Path, str]:
    path = resolve_inside_cwd(raw, ctx)
    shown = display_path(path, ctx)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise missing(f"file {shown} does not exist; {missing_hint}") from None
    if stat.S_ISDIR(mode):
        raise ToolError(f"{shown} is a directory, not a file; use Glob (or Bash `ls`) to list what it contains")
    _refuse_non_regular(mode, shown, verb)
    return path, shown


def _refuse_non_regular(mode: int, shown: str, verb: str) -> None:
    kind = non_regular_kind(mode)
    if kind is not None:
        raise ToolError(f"{shown} is {kind}, not a regular file; {verb} only regular files")


def _open_regular(path: Path, shown: str, verb: str) -> IO[bytes]:
    """``path`` opened for reading — without blocking even if it became a FIFO since it was checked."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _refuse_non_regular(os.fstat(fd).st_mode, shown, verb)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")  # O_NONBLOCK changes nothing for a regular file


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def _lines(text: IO[str], keep: int) -> Iterator[tuple[str, bool]]:
    """Each line's first ``keep`` characters (line end removed) and whether it was longer.

    The rest of a long line is read in pieces and dropped: one huge line never sits
    in memory whole. A text ending in a newline has one more, empty, line after it: the
    file is split on "\n" as Claude Code's Read splits it, so both number the same lines.
    """
    ended = False  # the last line read ended with a newline
    while True:
        raise_if_cancelled()
        head = text.readline(keep)
        if not head:
            if ended:
                yield "", False
            return
        cut = False
        ended = head.endswith("\n")
        if not ended and len(head) == keep:
            while True:  # skip the rest of the line
                rest = text.readline(_SKIP_CHARS)
                if rest.rstrip("\r\n"):
                    cut = True
                ended = rest.endswith("\n")
                if not rest or ended:
                    break
        yield head.rstrip("\r\n"), cut


@attrs.define
class _Page:
    """The lines Read shows of a text file, numbered, and what it says about the rest."""

    numbered: list[str] = attrs.Factory(list)  # as the model sees them
    lines: list[str] = attrs.Factory(list)  # the lines shown, without their numbers (the hooks' ``tool_response``)
    used: int = 0  # characters of ``numbered`` joined
    last_shown: int = 0
    total_seen: int = 0  # the last line number read
    stop_note: str = ""  # why the page stops before the file ends, and how to read on


def _read_file(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    path, shown = _require_file(
        tool_input["file_path"],
        ctx,
        missing_hint="check the path (Glob finds files by name pattern)",
        verb="Read reads",
    )
    # offset is a 1-based line number; 0 is accepted and means the first line.
    offset: int = max(tool_input.get("offset", 1), 1)
    limit: int = tool_input.get("limit", READ_DEFAULT_LIMIT)
    with _open_regular(path, shown, "Read reads") as raw:
        if path.suffix.lower() in IMAGE_EXTENSIONS:
            return read_image(path, shown, raw, respond=ctx.responses is not None)
        if path.suffix.lower() == ".pdf":
            return read_pdf(path, shown, raw, respond=ctx.responses is not None)
        if _is_binary(raw.read(_BINARY_SNIFF_BYTES)):
            raise ToolError(f"{shown} appears to be a binary file (it contains NUL bytes); Read only shows text")
        raw.seek(0)
        # Split on "\n" only, as Grep numbers lines, so both tools agree on line numbers.
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="\n")
        page = _read_page(text, shown, offset, limit, ctx=ctx, limit_given="limit" in tool_input)
    response = None
    if ctx.responses is not None:
        response = _read_response(str(tool_input["file_path"]), page.lines, offset, page.total_seen)
    return ToolOutput(content=_page_text(page, shown, offset), response=response)


def _read_page(
    text: io.TextIOWrapper, shown: str, offset: int, limit: int, *, ctx: ToolContext, limit_given: bool
) -> _Page:
    """Lines ``offset`` on of ``text``, numbered, up to ``limit`` lines and the output budget."""
    budget = max(ctx.max_output_chars - _NOTE_RESERVE - len(shown), 0)
    page = _Page()
    numbered_lines = enumerate(_lines(text, READ_MAX_LINE_CHARS), start=1)
    for number, (line, cut) in numbered_lines:
        page.total_seen = number
        if number < offset:
            continue
        if number >= offset + limit:
            # The model's own limit needs no note (as in Claude Code); the default one does.
            if not limit_given:
                page.stop_note = (
                    f"[{shown} continues after line {page.last_shown}; "
                    f"call Read with offset={page.last_shown + 1} to see more]"
                )
            break
        # Claude Code's prefix: the line number unpadded, a tab; lines joined by "\n".
        numbered = f"{number}\t{line}... [line cut at {READ_MAX_LINE_CHARS} characters]" if cut else f"{number}\t{line}"
        if page.used + len(numbered) + 1 > budget and page.numbered:
            page.stop_note = (
                f"[output limit of {ctx.max_output_chars} characters reached after line {page.last_shown}; "
                f"call Read with offset={page.last_shown + 1} to continue]"
            )
            break
        page.numbered.append(numbered)
        page.lines.append(line)
        page.used += len(numbered) + 1
        page.last_shown = number
    if ctx.responses is not None:  # a PostToolUse hook is told the file's length: count the lines not shown
        page.total_seen = max((n for n, _ in numbered_lines), default=page.total_seen)
    return page


def _page_text(page: _Page, shown: str, offset: int) -> str:
    """What the model reads: the numbered lines and the stop note, or a note why there are none."""
    # Nothing to show is no error: a note the model reads in a <system-reminder> tag, as Claude Code sends it.
    if page.total_seen == 0:
        return f"<system-reminder>Note: {shown} exists and is empty.</system-reminder>"
    if not page.numbered:
        return (
            f"<system-reminder>Note: offset {offset} is past the end of {shown}, which has {page.total_seen} "
            f"lines; use an offset between 1 and {page.total_seen}.</system-reminder>"
        )
    return "\n".join([*page.numbered, page.stop_note] if page.stop_note else page.numbered)


def _read_response(path: str, lines: list[str], offset: int, total: int) -> dict[str, object]:
    """Read's record for PostToolUse hooks and stream-json, as Claude Code 2.1.235 makes it: the lines shown,
    unnumbered, and the path as the model wrote it."""
    file = {"filePath": path, "content": "\n".join(lines), "numLines": len(lines), "startLine": offset}
    return {"type": "text", "file": {**file, "totalLines": total}}


def structured_patch(old: str, new: str) -> list[dict[str, object]]:
    """The hunks turning ``old`` into ``new``, as Claude Code's Write and Edit report them (jsdiff's
    ``structuredPatch``): 3 lines of context, lines prefixed ``' '``, ``'-'`` or ``'+'``, and
    ``\\ No newline at end of file`` after a last line without one."""
    before, after = old.splitlines(keepends=True), new.splitlines(keepends=True)
    hunks = []
    for group in difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(3):
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        shown: list[str] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                shown += _patch_lines(" ", before[a1:a2])
                continue
            shown += _patch_lines("-", before[a1:a2]) + _patch_lines("+", after[b1:b2])
        hunks.append({"oldStart": i1 + 1, "oldLines": i2 - i1, "newStart": j1 + 1, "newLines": j2 - j1, "lines": shown})
    return hunks


def _patch_lines(prefix: str, lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        out.append(prefix + line.rstrip("\r\n"))
        if not line.endswith("\n"):
            out.append("\\ No newline at end of file")
    return out


def _temporary_beside(path: Path) -> tuple[int, Path]:
    """A new, empty file in ``path``'s directory (mode 0666 less the umask), opened for writing."""
    while True:
        candidate = path.with_name(f".{path.name[:200]}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), candidate
        except FileExistsError:
            continue


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every filesystem allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _replace_atomically(path: Path, data: bytes, shown: str) -> None:
    """Make ``data`` the content of ``path`` with one rename: temporary file, fsync, rename.

    An existing file keeps its permission bits (and its owner, where this process may
    set it). A call stopped meanwhile (cancelled, past its deadline) renames nothing.
    """
    try:
        old: os.stat_result | None = path.stat()
    except FileNotFoundError:
        old = None
    try:
        fd, temporary = _temporary_beside(path)
    except OSError as exc:
        raise ToolError(f"writing {shown} failed ({exc.strerror or exc}); the file is unchanged") from exc
    try:
        with open(fd, "wb") as out:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                created = os.fstat(fd)
                if (old.st_uid, old.st_gid) != (created.st_uid, created.st_gid):
                    with contextlib.suppress(OSError):  # only a privileged process may give a file away
                        os.fchown(fd, old.st_uid, old.st_gid)
            out.write(data)
            out.flush()
            os.fsync(fd)
        raise_if_cancelled()  # the model was told the call did not finish: change nothing
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise ToolError(f"writing {shown} failed ({exc.strerror or exc}); the file is unchanged") from exc
        raise
    _fsync_directory(path.parent)


def _write_file(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    path = resolve_inside_cwd(tool_input["file_path"], ctx)
    shown = display_path(path, ctx)
    content: str = tool_input["content"]
    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise ToolError(f"{shown} is a directory; Write needs a file path")
    if mode is not None:
        _refuse_non_regular(mode, shown, "Write replaces")
    original = None
    if mode is not None and ctx.responses is not None:  # a PostToolUse hook is told what the file held
        with _open_regular(path, shown, "Write replaces") as raw:
            original = raw.read().decode("utf-8", errors="replace")
    path.parent.mkdir(parents=True, exist_ok=True)
    # The text is written byte for byte: no newline translation.
    _replace_atomically(path, content.encode("utf-8"), shown)
    verb = "Overwrote" if mode is not None else "Created"
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    response = None
    if ctx.responses is not None:  # Claude Code 2.1.235's record, as its PostToolUse hooks get it
        patch = structured_patch(original, content) if original is not None else []
        response = {
            "type": "update" if mode is not None else "create",
            "filePath": str(tool_input["file_path"]),  # as the model wrote it (probed)
            "content": content,
            "structuredPatch": patch,
            "originalFile": original,
            "userModified": False,
        }
    return ToolOutput(content=f"{verb} {shown} ({lines} lines, {len(content)} characters)", response=response)


def _edit_file(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    path, shown = _require_file(
        tool_input["file_path"],
        ctx,
        missing_hint="Edit only changes existing files; use Write to create it",
        verb="Edit changes",
        missing=ToolInputError,  # Claude Code: Read's missing file is a plain error, Edit's a refused input
    )
    old: str = tool_input["old_string"]
    new: str = tool_input["new_string"]
    replace_all: bool = tool_input.get("replace_all", False)
    if not old:
        raise ToolInputError("old_string is empty; give the exact text to replace (Write replaces a whole file)")
    if old == new:
        raise ToolInputError("old_string and new_string are identical, so the edit would change nothing")
    with _open_regular(path, shown, "Edit changes") as raw:
        data = raw.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not valid UTF-8 ({exc.reason} at byte {exc.start}); Edit only changes UTF-8 text"
        ) from exc

    count = text.count(old)
    if count == 0 and "\r" not in old and "\n" in old and "\r\n" in text:
        # Read shows CRLF files with plain newlines, so the model copies them that way.
        old = old.replace("\n", "\r\n")
        new = new.replace("\r\n", "\n").replace("\n", "\r\n")
        count = text.count(old)
    if count == 0:
        raise ToolInputError(
            f"old_string was not found in {shown}. It must match the file exactly, including whitespace "
            "and indentation; Read the file again and copy the text to replace"
        )
    if count > 1 and not replace_all:
        raise ToolInputError(
            f"old_string occurs {count} times in {shown}, but must occur exactly once. Include more "
            "surrounding lines to make it unique, or set replace_all to true to replace every occurrence"
        )
    changed = text.replace(old, new)
    _replace_atomically(path, changed.encode("utf-8"), shown)
    noun = "occurrence" if count == 1 else "occurrences"
    response = None
    if ctx.responses is not None:  # Claude Code 2.1.235's record, as its PostToolUse hooks get it
        response = {
            "filePath": str(tool_input["file_path"]),  # as the model wrote it (probed)
            "oldString": tool_input["old_string"],
            "newString": tool_input["new_string"],
            "originalFile": text,
            "structuredPatch": structured_patch(text, changed),
            "userModified": False,
            "replaceAll": replace_all,
        }
    return ToolOutput(content=f"Edited {shown}: replaced {count} {noun} of old_string", response=response)


_FILE_PATH: Final = {
    "type": "string",
    "minLength": 1,
    "description": "Path of the file: absolute, or relative to the working directory. Must be inside it.",
}

READ: Final = ToolSpec(
    name="Read",
    description=(
        "Read a text file from the working directory. Lines are returned numbered like `cat -n` "
        "(line number, tab, text); the numbers are not part of the file. By default up to "
        f"{READ_DEFAULT_LIMIT} lines from the start are returned; use offset (1-based first line) "
        f"and limit to page through longer files. Lines longer than {READ_MAX_LINE_CHARS} characters "
        "are cut. A PNG, JPEG, GIF or WebP image is shown to you as an image, a PDF as a document. Directories and "
        "other binary files are refused: use Glob to list files."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "file_path": _FILE_PATH,
            "offset": {"type": "integer", "minimum": 0, "description": "1-based line number to start at."},
            "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return."},
        },
        "required": ["file_path"],
        "additionalProperties": False,
    },
    concurrency_safe=True,
    read_only=True,
    idempotent=True,
    run=threaded(_read_file),
)

WRITE: Final = ToolSpec(
    name="Write",
    description=(
        "Write a file in the working directory, replacing it entirely if it exists and creating "
        "missing parent directories. Prefer Edit for changing part of an existing file; Read a "
        "file before overwriting it."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "file_path": _FILE_PATH,
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["file_path", "content"],
        "additionalProperties": False,
    },
    concurrency_safe=False,
    read_only=False,
    idempotent=False,  # the file may have changed since: writing it again is another change
    run=threaded(_write_file),
    changes_file="file_path",
)

EDIT: Final = ToolSpec(
    name="Edit",
    description=(
        "Replace exact text in an existing file. old_string must match the file exactly (whitespace "
        "and indentation included, without Read's line-number prefix) and occur exactly once, "
        "unless replace_all is true, in which case every occurrence is replaced. new_string must "
        "differ from old_string."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "file_path": _FILE_PATH,
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace every occurrence instead of requiring exactly one.",
            },
        },
        "required": ["file_path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    concurrency_safe=False,
    read_only=False,
    idempotent=False,
    run=threaded(_edit_file),
    changes_file="file_path",
)
