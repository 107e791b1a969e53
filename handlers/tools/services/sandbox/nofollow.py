"""Changing directories without following a symlink: the apply's steps on the real directory and removing our own.

Owns :class:`Step` (one planned change), :class:`RealDir` (makes it through descriptors opened with ``O_NOFOLLOW``),
:func:`remove_inside` and :func:`remove_tree`. Does not decide what changes (``upper``, ``overlay``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Literal

import attrs

__all__ = ["RealDir", "Rel", "Step", "remove_inside", "remove_tree"]

_PARENT_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Rel = tuple[str, ...]  # a path under the real (or upper) directory, as its components


@attrs.frozen(kw_only=True)
class Step:
    """One change to the real directory, planned before any is made."""

    action: Literal["remove", "mkdir", "copy", "symlink", "chmod", "touch"]
    rel: Rel
    source: Path | None = None  # copy: the file in the upper directory
    mode: int = 0  # copy, chmod
    target: str = ""  # symlink
    times_ns: tuple[int, int] = (0, 0)  # copy, touch: (atime, mtime)


class RealDir:
    """The real directory, changed only through descriptors opened without following any symlink."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    @contextlib.contextmanager
    def parent(self, rel: Rel) -> Iterator[int]:
        """A descriptor of the directory holding ``rel``, reached one real directory at a time."""
        fd = self.fd
        try:
            for depth, name in enumerate(rel[:-1]):
                try:
                    opened = os.open(name, _PARENT_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):  # ELOOP: a symlink there
                        raise
                    raise self._moved(rel[: depth + 1], exc) from None
                if fd != self.fd:
                    os.close(fd)
                fd = opened
            yield fd
        finally:
            if fd != self.fd:
                os.close(fd)

    def _moved(self, rel: Rel, exc: OSError) -> OSError:
        return OSError(
            exc.errno,
            f"{self.root.joinpath(*rel)} is no longer a directory (changed while the sandbox's changes were applied); "
            "nothing was written through it",
        )

    def apply(self, step: Step) -> None:
        name = step.rel[-1]
        with self.parent(step.rel) as fd:
            if step.action == "remove":
                _remove_at(fd, name)
            elif step.action == "mkdir":
                os.mkdir(name, 0o700, dir_fd=fd)
            elif step.action == "copy":
                assert step.source is not None
                _copy_at(fd, name, step.source, step.mode, step.times_ns)
            elif step.action == "symlink":
                temp = _temp_name()
                os.symlink(step.target, temp, dir_fd=fd)
                _replace_at(fd, temp, name)
            elif step.action == "chmod":
                try:
                    os.chmod(name, step.mode, dir_fd=fd, follow_symlinks=False)
                except (ValueError, NotImplementedError):  # a symlink now: its target is never changed
                    raise self._moved(step.rel, OSError(errno.ELOOP, "symlink")) from None
            else:
                os.utime(name, ns=step.times_ns, dir_fd=fd, follow_symlinks=False)


def remove_inside(real: Path, rel: Rel) -> None:
    """Remove the entry at ``rel`` under ``real``, reached without following a symlink (a directory: all of it)."""
    target = RealDir(real)
    try:
        target.apply(Step(action="remove", rel=rel))
    finally:
        target.close()


def _temp_name() -> str:
    return f".queryloop-apply-{secrets.token_hex(8)}"


def _remove_at(fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=fd)  # descriptor-based: never follows a symlink inside
    else:
        os.unlink(name, dir_fd=fd)


def _replace_at(fd: int, temp: str, name: str) -> None:
    try:
        os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=fd)
        raise


def _copy_at(fd: int, name: str, source: Path, mode: int, times_ns: tuple[int, int]) -> None:
    """Copy ``source`` to ``name`` in directory ``fd`` atomically: a temporary file beside it, then a rename."""
    temp = _temp_name()
    src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        dst = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            with os.fdopen(src, "rb", closefd=False) as reader, os.fdopen(dst, "wb", closefd=False) as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)
            os.fchmod(dst, mode)
            os.utime(dst, ns=times_ns)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=fd)
            raise
        finally:
            os.close(dst)
        _replace_at(fd, temp, name)
    finally:
        os.close(src)


def remove_tree(folder: Path) -> None:
    """Remove a folder the sandbox made, its unreadable parts included, never following a symlink in it.

    A sandboxed command decides what its upper directory holds: directories of mode
    000 or 500 (overlayfs itself makes ``work/work`` mode 000), and symlinks to
    anything. Every real directory in the tree is first made ``0o700`` through a
    descriptor opened with ``O_PATH | O_NOFOLLOW | O_DIRECTORY`` (so a symlink is never
    followed and its target's permissions never change), top down, then the tree is
    removed by :func:`shutil.rmtree`, which does not follow symlinks either. What still
    cannot be removed stays: it is ours, in a temporary directory.
    """
    pending = [str(folder)]
    while pending:
        path = pending.pop()
        if not _make_searchable(path):
            continue
        try:
            with os.scandir(path) as found:
                pending.extend(entry.path for entry in found if entry.is_dir(follow_symlinks=False))
        except OSError:
            continue
    shutil.rmtree(folder, ignore_errors=True)


def _make_searchable(path: str) -> bool:
    """Give the real directory at ``path`` mode 0o700; False when it is not one (a symlink, a file, gone)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        # chmod through the descriptor's /proc link changes the directory it was opened on: fchmod refuses
        # an O_PATH descriptor, and Linux has no lchmod.
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
    except OSError:
        pass
    finally:
        os.close(fd)
    return True
