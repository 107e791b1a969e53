"""Text files someone else wrote, read within bounds: regular files only, never blocking, size capped.

Owns :func:`read_text_file`, :func:`read_file_bytes`, :class:`UnreadableFileError` and :data:`MAX_TEXT_FILE_BYTES`.
Why (a FIFO, ``/dev/zero``, a huge file): docs/security.md. A missing file stays ``FileNotFoundError``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["MAX_TEXT_FILE_BYTES", "UnreadableFileError", "read_file_bytes", "read_text_file"]

MAX_TEXT_FILE_BYTES: Final = 1 << 20
"""1 MiB: far more than any settings, definition or instruction file needs (a quarter of a million
tokens of text), and little enough to hold in memory while it is parsed."""

_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UnreadableFileError(ValueError):
    """A file that is there but cannot be read as text within the bounds; ``reason`` says why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def read_text_file(path: Path, *, limit: int = MAX_TEXT_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (symlinks followed), at most ``limit`` bytes.

    Raises ``FileNotFoundError`` when nothing is there and :class:`UnreadableFileError` otherwise.
    """
    data = read_file_bytes(path, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(path, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_file_bytes(path: Path, *, limit: int | None) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed), at most ``limit`` of them (None: no cap, for
    files this program wrote itself, which only their kind can make dangerous). Raises as :func:`read_text_file`."""
    fd = _open(path)
    try:
        return _read_capped(fd, path, limit)
    finally:
        os.close(fd)


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path)) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnreadableFileError(path, "is a symlink loop (too many levels of symbolic links)") from None
        raise UnreadableFileError(path, f"cannot be read ({exc.strerror or exc})") from None


def _read_capped(fd: int, path: Path, limit: int | None) -> bytes:
    mode = os.fstat(fd).st_mode
    for test, kind in _KINDS:
        if test(mode):
            raise UnreadableFileError(path, f"is {kind}, not a regular file")
    if not stat.S_ISREG(mode):
        raise UnreadableFileError(path, "is not a regular file")
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := os.read(fd, 1 << 16 if limit is None else min(1 << 16, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:
                raise UnreadableFileError(path, f"is larger than {_size(limit)}, the cap on a file read here")
    except OSError as exc:
        raise UnreadableFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    return b"".join(chunks)


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"
