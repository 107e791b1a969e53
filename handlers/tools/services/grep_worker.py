"""Grep's matching, run in a child process that the ``Grep`` tool kills at its deadline.

Python's :mod:`re` backtracks and holds the GIL, so a bad pattern could freeze the process. Standard library only:
one JSON request on stdin, one answer on stdout.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["main", "search"]

_BINARY_SNIFF_BYTES: Final = 8192


def _read_text(path: str) -> str | None:
    """The file's text, or None for a binary, non-regular or unreadable file (Grep skips those)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with open(fd, "rb", closefd=False) as raw:
            data = raw.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        return None
    return data.decode("utf-8", errors="replace")


def search(request: Mapping[str, Any]) -> dict[str, object]:
    """Match ``request["pattern"]`` against ``request["files"]`` (``[path, shown]`` pairs) in ``mode``.

    ``files_with_matches`` answers ``matched`` (indices into ``files``), ``count``
    answers ``counts`` (``[index, matching lines]``), ``content`` answers ``lines``
    (``shown:number:text``, each text cut at ``max_line_chars``) until they pass
    ``limit`` characters, then stops with ``cut_short``.
    """
    regex = re.compile(request["pattern"], request["flags"])
    mode: str = request["mode"]
    limit: int = request["limit"]
    max_line: int = request["max_line_chars"]
    matched: list[int] = []
    counts: list[list[int]] = []
    lines: list[str] = []
    used = 0
    cut_short = False
    for index, (path, shown) in enumerate(request["files"]):
        text = _read_text(path)
        if text is None:
            continue
        if mode == "files_with_matches":
            if regex.search(text):
                matched.append(index)
            continue
        hits = 0
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.rstrip("\r")
            if not regex.search(line):
                continue
            hits += 1
            if mode == "content":
                if len(line) > max_line:
                    line = line[:max_line] + "... [line cut]"
                entry = f"{shown}:{number}:{line}"
                lines.append(entry)
                used += len(entry) + 1
                if used > limit:
                    cut_short = True
                    break
        if hits and mode == "count":
            counts.append([index, hits])
        if cut_short:
            break
    return {"matched": matched, "counts": counts, "lines": lines, "cut_short": cut_short}


def main() -> None:
    """Read the request from stdin, write the answer to stdout."""
    answer = search(json.load(sys.stdin))
    json.dump(answer, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
