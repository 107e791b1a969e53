"""Reading a command's overlayfs upper directory against the real one: the plan of every change, made before any.

Owns :class:`Plan`, :class:`PathNote` (a path and why it is listed) and :class:`UnsupportedUpperError`. Changes
nothing: ``nofollow`` makes the planned steps, ``overlay`` decides what is checkpointed first.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import attrs

from .nofollow import Rel, Step

__all__ = ["PathNote", "Plan", "UnsupportedUpperError", "is_whiteout"]

_OPAQUE_XATTRS: Final = ("user.overlay.opaque", "trusted.overlay.opaque")
# With ``userxattr`` the kernel makes neither (redirect_dir=nofollow, no metacopy); a layout that has one
# holds a directory renamed in place or a file whose bytes are still in the lower layer, which a plain
# walk would misread, so it is refused before anything changes.
_UNREADABLE_XATTRS: Final = ("overlay.redirect", "overlay.metacopy")
_KEPT_MODE_BITS: Final = 0o1777  # permissions and the sticky bit; never set-user/group-ID
_SETID_BITS: Final = 0o6000

# What the real directory has where an upper directory is: a directory (merged with it), nothing (it is
# new), or something else it replaces — then nothing under it can be checkpointed as absent yet: the
# store would read through the file or symlink still there.
_RealSide = Literal["dir", "absent", "replaced"]


class UnsupportedUpperError(OSError):
    """The upper directory holds an overlay layout this apply cannot read (a redirect or a metadata-only copy)."""


@attrs.frozen(kw_only=True)
class PathNote:
    """A path relative to the working directory and why it is listed."""

    path: str
    why: str


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a file"


def _text(rel: Rel) -> str:
    return "/".join(rel)


def is_whiteout(st: os.stat_result) -> bool:
    """Is this entry of an upper directory a whiteout (a 0/0 character device: the command removed it)?"""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: Path) -> bool:
    for name in _OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue  # not set, or xattrs not supported / not readable (trusted.* as a non-root user)
    return False


def _refuse_unreadable(path: Path) -> None:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return
    for name in names:
        if name.startswith(("user.", "trusted.")) and name.split(".", 1)[1] in _UNREADABLE_XATTRS:
            raise UnsupportedUpperError(
                f"{path} carries {name}: the overlay was mounted with redirect_dir or metacopy, which this apply "
                "cannot read; mount it with the options overlay_mount_options gives (userxattr)"
            )


def _same_bytes(first: Path, second: Path) -> bool:
    with open(first, "rb") as one, open(second, "rb") as other:
        while True:
            chunk = one.read(1 << 20)
            if chunk != other.read(1 << 20):
                return False
            if not chunk:
                return True


class Plan:
    """Everything the upper directory asks of the real one, worked out by reading both (no change made)."""

    def __init__(self, upper: Path, real: Path, guard: Callable[[Rel, bool], bool]) -> None:
        self.upper = upper
        self.real = real
        self.guard = guard  # a path (and whether a folder) the command may not change (``protect.is_protected``)
        self.steps: list[Step] = []
        self.late: list[Step] = []  # directory permissions: set last, deepest first (a read-only one stays writable)
        self.changed: list[str] = []
        self.removed: list[str] = []
        self.candidates: list[tuple[Path, int, str]] = []  # (absolute path, bytes to keep (0: absent), rel text)
        self.not_rewindable: list[PathNote] = []
        self.skipped: list[PathNote] = []
        self.refused: list[PathNote] = []

    def _note(self, rel: Rel, why: str) -> None:
        self.not_rewindable.append(PathNote(path=_text(rel), why=why))

    def _real_lstat(self, rel: Rel) -> os.stat_result | None:
        try:
            return os.lstat(self.real.joinpath(*rel))
        except FileNotFoundError:
            return None

    def merge_dir(self, rel: Rel, *, real: _RealSide, opaque: bool) -> None:
        """Plan one upper directory against what the real directory has at ``rel``."""
        with os.scandir(self.upper.joinpath(*rel)) as found:
            entries = sorted(found, key=lambda entry: entry.name)
        names = {entry.name for entry in entries}
        if real == "dir" and opaque:  # the command emptied it (rm -rf, then mkdir): what it did not remake goes
            for name in sorted(os.listdir(self.real.joinpath(*rel))):
                if name not in names:
                    child = (*rel, name)
                    self._remove(child, os.lstat(self.real.joinpath(*child)))  # refused when protected
        for entry in entries:
            child = (*rel, entry.name)
            upper_st = entry.stat(follow_symlinks=False)
            _refuse_unreadable(self.upper.joinpath(*child))
            self._merge_entry(child, upper_st, self._real_lstat(child) if real == "dir" else None, real)

    def _refuse(self, rel: Rel) -> None:
        self.refused.append(PathNote(path=_text(rel), why="protected"))

    def _merge_entry(
        self, rel: Rel, upper_st: os.stat_result, real_st: os.stat_result | None, parent: _RealSide
    ) -> None:
        if self.guard(rel, stat.S_ISDIR(upper_st.st_mode)):  # nothing under it comes out either
            self._refuse(rel)
        elif is_whiteout(upper_st):
            if real_st is not None:
                self._remove(rel, real_st)
        elif stat.S_ISDIR(upper_st.st_mode):
            self._merge_subdir(rel, upper_st, real_st, parent)
        elif stat.S_ISREG(upper_st.st_mode):
            self._merge_file(rel, upper_st, real_st, parent)
        elif stat.S_ISLNK(upper_st.st_mode):
            self._merge_symlink(rel, os.readlink(self.upper.joinpath(*rel)), real_st)
        else:  # the real entry, if any, is left as it is: the command's stand-in does not come out
            self.skipped.append(PathNote(path=_text(rel), why=f"{_kind(upper_st.st_mode)} is not copied"))

    def _merge_subdir(
        self, rel: Rel, upper_st: os.stat_result, real_st: os.stat_result | None, parent: _RealSide
    ) -> None:
        mode = stat.S_IMODE(upper_st.st_mode) & _KEPT_MODE_BITS
        if real_st is not None and stat.S_ISDIR(real_st.st_mode):
            old = stat.S_IMODE(real_st.st_mode)
            if old & _KEPT_MODE_BITS != mode:
                self.late.append(Step(action="chmod", rel=rel, mode=(old & _SETID_BITS) | mode))
                self.changed.append(_text(rel))
                self._note(rel, "a directory's permissions")
            self.merge_dir(rel, real="dir", opaque=_is_opaque(self.upper.joinpath(*rel)))
            return
        if real_st is not None and not self._remove(rel, real_st, replaced_by="a directory"):
            return
        self.steps.append(Step(action="mkdir", rel=rel))
        self.late.append(Step(action="chmod", rel=rel, mode=mode))
        self.changed.append(_text(rel))
        if real_st is None:  # a replaced entry already has its note
            self._note(rel, "a new directory: rewind removes the files in it, not the directory")
        replaced = real_st is not None or parent == "replaced"
        self.merge_dir(rel, real="replaced" if replaced else "absent", opaque=True)

    def _merge_file(
        self, rel: Rel, upper_st: os.stat_result, real_st: os.stat_result | None, parent: _RealSide
    ) -> None:
        source = self.upper.joinpath(*rel)
        path = self.real.joinpath(*rel)
        mode = stat.S_IMODE(upper_st.st_mode) & _KEPT_MODE_BITS
        times = (upper_st.st_atime_ns, upper_st.st_mtime_ns)
        copy = Step(action="copy", rel=rel, source=source, mode=mode, times_ns=times)
        if real_st is not None and stat.S_ISREG(real_st.st_mode):
            same = real_st.st_size == upper_st.st_size and _same_bytes(source, path)
            same_mode = stat.S_IMODE(real_st.st_mode) == mode
            if same and same_mode:  # opened for writing, or touched: only the times to carry over
                if real_st.st_mtime_ns != upper_st.st_mtime_ns:
                    self.steps.append(Step(action="touch", rel=rel, times_ns=times))
                return
            if not same:
                self.candidates.append((path, real_st.st_size, _text(rel)))
            if not same_mode:
                self._note(rel, "its permissions: rewind restores bytes only")
        elif real_st is None and parent != "replaced":
            self.candidates.append((path, 0, _text(rel)))
        elif real_st is None:
            self._note(rel, "a new file in a directory that replaced a file or symlink")
        elif not self._remove(rel, real_st, replaced_by="a file"):
            return
        self.steps.append(copy)
        self.changed.append(_text(rel))

    def _merge_symlink(self, rel: Rel, target: str, real_st: os.stat_result | None) -> None:
        if real_st is not None and stat.S_ISLNK(real_st.st_mode):
            if os.readlink(self.real.joinpath(*rel)) == target:
                return
            self._note(rel, "a symlink's target")  # the new link is renamed over the old one
        elif real_st is not None:
            # a regular file's bytes are checkpointed: rewind writes them back over the symlink
            if not self._remove(rel, real_st, replaced_by="a symlink"):
                return
        else:
            self._note(rel, "a new symlink")
        self.steps.append(Step(action="symlink", rel=rel, target=target))
        self.changed.append(_text(rel))

    def _remove(self, rel: Rel, real_st: os.stat_result, *, replaced_by: str = "") -> bool:
        """Plan removing the real entry at ``rel`` (alone, or to put ``replaced_by`` in its place).

        False, and nothing planned, when it is protected or a directory holding something protected.
        """
        directory = stat.S_ISDIR(real_st.st_mode)
        if self.guard(rel, directory) or (directory and self._holds_guarded(rel)):
            self._refuse(rel)
            return False
        self.steps.append(Step(action="remove", rel=rel))
        if not replaced_by:
            self.removed.append(_text(rel))
        how = f"replaced by {replaced_by}" if replaced_by else "removed"
        if stat.S_ISREG(real_st.st_mode):
            self.candidates.append((self.real.joinpath(*rel), real_st.st_size, _text(rel)))
        elif stat.S_ISDIR(real_st.st_mode):
            self._collect_tree(rel)
            self._note(rel, f"a directory {how}: rewind restores the files in it, not the directory")
        else:
            self._note(rel, f"{_kind(real_st.st_mode)} {how}")
        return True

    def _holds_guarded(self, rel: Rel) -> bool:
        """Does the real directory at ``rel`` hold a protected path (following no symlink)?"""
        for root, dirs, files in os.walk(self.real.joinpath(*rel)):
            under = (*rel, *Path(root).relative_to(self.real.joinpath(*rel)).parts)
            if any(self.guard((*under, name), True) for name in dirs):
                return True
            if any(self.guard((*under, name), False) for name in files):
                return True
        return False

    def _collect_tree(self, rel: Rel) -> None:
        """The regular files under a real directory about to be removed, to checkpoint; the rest, noted."""
        with os.scandir(self.real.joinpath(*rel)) as found:
            entries = sorted(found, key=lambda entry: entry.name)
        for entry in entries:
            child = (*rel, entry.name)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                self._collect_tree(child)
            elif stat.S_ISREG(st.st_mode):
                self.candidates.append((self.real.joinpath(*child), st.st_size, _text(child)))
            else:
                self._note(child, f"{_kind(st.st_mode)} removed")
