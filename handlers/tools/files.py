"""The file tools ``Read``, ``Write`` and ``Edit``: their schemas, descriptions and implementations.

Owns how a single file is shown to the model (numbered lines, paging hints) and how it
is changed (whole-file write, exact-string replacement with a uniqueness rule). Every
path goes through :func:`resolve_inside_cwd` first.

Does not own searching (``search``), commands (``bash``) or scheduling
(``dispatch``). Blocking file I/O runs in a worker thread (:func:`threaded`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
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
)

__all__ = ["EDIT", "READ", "WRITE"]

READ_DEFAULT_LIMIT: Final = 2000
"""Lines returned by ``Read`` when the model gives no ``limit``."""

READ_MAX_LINE_CHARS: Final = 2000
"""A longer line is cut, so one minified line cannot eat the whole output budget."""

# A NUL byte in the first block is the same binary heuristic git and grep use.
_BINARY_SNIFF_BYTES: Final = 8192

# Room kept below max_output_chars for the closing "continue at offset" note (plus the path).
_NOTE_RESERVE: Final = 160


def _require_file(raw: str, ctx: ToolContext, *, missing_hint: str) -> tuple[Path, str]:
    path = resolve_inside_cwd(raw, ctx)
    shown = display_path(path, ctx)
    if path.is_dir():
        raise ToolError(f"{shown} is a directory, not a file; use Glob (or Bash `ls`) to list what it contains")
    if not path.exists():
        raise ToolError(f"file {shown} does not exist; {missing_hint}")
    return path, shown


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def _read_file(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    path, shown = _require_file(
        tool_input["file_path"], ctx, missing_hint="check the path (Glob finds files by name pattern)"
    )
    # offset is a 1-based line number; 0 is accepted and means the first line.
    offset: int = max(tool_input.get("offset", 1), 1)
    limit: int = tool_input.get("limit", READ_DEFAULT_LIMIT)
    budget = max(ctx.max_output_chars - _NOTE_RESERVE - len(shown), 0)

    parts: list[str] = []
    used = 0
    last_shown = 0
    stop_note = ""
    total_seen = 0
    with path.open("rb") as raw:
        if _is_binary(raw.read(_BINARY_SNIFF_BYTES)):
            raise ToolError(f"{shown} appears to be a binary file (it contains NUL bytes); Read only shows text")
        raw.seek(0)
        # Split on "\n" only, as Grep numbers lines, so both tools agree on line numbers.
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="\n")
        for number, line in enumerate(text, start=1):
            total_seen = number
            if number < offset:
                continue
            if number >= offset + limit:
                stop_note = (
                    f"[{shown} continues after line {last_shown}; call Read with offset={last_shown + 1} to see more]"
                )
                break
            line = line.rstrip("\r\n")
            if len(line) > READ_MAX_LINE_CHARS:
                line = line[:READ_MAX_LINE_CHARS] + f"... [line cut at {READ_MAX_LINE_CHARS} characters]"
            numbered = f"{number:>6}\t{line}\n"
            if used + len(numbered) > budget and parts:
                stop_note = (
                    f"[output limit of {ctx.max_output_chars} characters reached after line {last_shown}; "
                    f"call Read with offset={last_shown + 1} to continue]"
                )
                break
            parts.append(numbered)
            used += len(numbered)
            last_shown = number

    if total_seen == 0:
        return ToolOutput(content=f"(file {shown} exists but is empty)")
    if not parts:
        raise ToolError(
            f"offset {offset} is past the end of {shown}, which has {total_seen} lines; "
            f"use an offset between 1 and {total_seen}"
        )
    if stop_note:
        parts.append(stop_note)
    return ToolOutput(content="".join(parts))


def _write_file(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    path = resolve_inside_cwd(tool_input["file_path"], ctx)
    shown = display_path(path, ctx)
    content: str = tool_input["content"]
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; Write needs a file path")
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    # newline="" writes the text byte for byte: no newline translation.
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write(content)
    verb = "Overwrote" if existed else "Created"
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return ToolOutput(content=f"{verb} {shown} ({lines} lines, {len(content)} characters)")


def _edit_file(tool_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    path, shown = _require_file(
        tool_input["file_path"], ctx, missing_hint="Edit only changes existing files; use Write to create it"
    )
    old: str = tool_input["old_string"]
    new: str = tool_input["new_string"]
    replace_all: bool = tool_input.get("replace_all", False)
    if not old:
        raise ToolError("old_string is empty; give the exact text to replace (Write replaces a whole file)")
    if old == new:
        raise ToolError("old_string and new_string are identical, so the edit would change nothing")
    try:
        text = path.read_bytes().decode("utf-8")
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
        raise ToolError(
            f"old_string was not found in {shown}. It must match the file exactly, including whitespace "
            "and indentation; Read the file again and copy the text to replace"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {shown}, but must occur exactly once. Include more "
            "surrounding lines to make it unique, or set replace_all to true to replace every occurrence"
        )
    path.write_bytes(text.replace(old, new).encode("utf-8"))
    noun = "occurrence" if count == 1 else "occurrences"
    return ToolOutput(content=f"Edited {shown}: replaced {count} {noun} of old_string")


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
        "are cut. Directories and binary files are refused: use Glob to list files."
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
    idempotent=True,
    run=threaded(_write_file),
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
)
