"""Bringing a sandboxed command's changes out of an overlayfs upper directory, checkpointed first.

:func:`apply_upper` works out every change, checkpoints the originals, then applies them through descriptors opened
with ``O_NOFOLLOW``, so no symlink is followed (docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, Literal

import attrs

__all__ = [
    "OverlayChanges",
    "PathNote",
    "UnsupportedUpperError",
    "apply_upper",
    "overlay_available",
    "overlay_mount_options",
    "remove_inside",
    "remove_tree",
]

_OPAQUE_XATTRS: Final = ("user.overlay.opaque", "trusted.overlay.opaque")
# With ``userxattr`` the kernel makes neither (redirect_dir=nofollow, no metacopy); a layout that has one
# holds a directory renamed in place or a file whose bytes are still in the lower layer, which a plain
# walk would misread, so it is refused before anything changes.
_UNREADABLE_XATTRS: Final = ("overlay.redirect", "overlay.metacopy")
_UNSAFE_IN_OPTIONS: Final = (",", ":", "\\", "\n", '"')  # separators and escapes of overlay and libmount options
_KEPT_MODE_BITS: Final = 0o1777  # permissions and the sticky bit; never set-user/group-ID
_SETID_BITS: Final = 0o6000
_PARENT_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PROBE_TIMEOUT_S: Final = 10.0
_LISTED_IN_SUMMARY: Final = 3

_Rel = tuple[str, ...]  # a path under the real (or upper) directory, as its components
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


@attrs.frozen(kw_only=True)
class OverlayChanges:
    """What one sandboxed command changed in the working directory, and what its checkpoint covers."""

    changed: tuple[str, ...]  # relative paths written, created or replaced, in walk order
    removed: tuple[str, ...]  # relative paths removed (a removed directory is listed once, not its files)
    checkpointed: tuple[Path, ...]  # absolute paths handed to the checkpoint (bytes before, or absence)
    not_rewindable: tuple[PathNote, ...]  # changes a rewind cannot undo, and why
    skipped: tuple[PathNote, ...] = ()  # what the command made that is not copied out (FIFOs, sockets, devices)
    refused: tuple[PathNote, ...] = ()  # changes to protected paths (``protect``), not brought out
    bytes_checkpointed: int = attrs.field(validator=attrs.validators.ge(0))
    over_cap: bool  # some file's bytes were not checkpointed: the cap was reached
    cap_bytes: int = attrs.field(validator=attrs.validators.ge(0))

    def summary(self) -> str:
        """One line for the tool result: how much changed, and what cannot be rewound."""
        parts = []
        if self.changed:
            parts.append(f"{_files(len(self.changed))} changed")
        if self.removed:
            parts.append(f"{_files(len(self.removed))} removed")
        if not parts:
            line = "no files changed in the working directory"
        elif self.not_rewindable:
            line = f"{' and '.join(parts)} in the working directory; cannot be rewound: {_listing(self.not_rewindable)}"
        else:
            line = f"{' and '.join(parts)} in the working directory (checkpointed for rewind)"
        if self.skipped:
            line += f"; not copied out of the sandbox: {_listing(self.skipped)}"
        if self.refused:
            line += f"; refused, read-only to sandboxed commands: {_listing(self.refused)}"
        return line


def _files(count: int) -> str:
    return "1 file" if count == 1 else f"{count} files"


def _listing(notes: Sequence[PathNote]) -> str:
    shown = ", ".join(f"{note.path} ({note.why})" for note in notes[:_LISTED_IN_SUMMARY])
    rest = len(notes) - _LISTED_IN_SUMMARY
    return f"{shown} and {rest} more" if rest > 0 else shown


def _size(count: int) -> str:
    value, unit = float(count), "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{count} bytes" if unit == "bytes" else f"{value:.3g} {unit}"


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


def _text(rel: _Rel) -> str:
    return "/".join(rel)


# ---- mount options and the probe ----------------------------------------------------------------


def overlay_mount_options(lower: Path, upper: Path, work: Path) -> str | None:
    """The ``-o`` string mounting ``lower`` with ``upper``/``work`` (``userxattr``); None when a path cannot be named.

    A path holding ``,`` ``:`` ``\\`` ``"`` or a newline cannot be written in overlayfs
    options unambiguously; the caller then runs without the overlay. Relative paths are
    made absolute.
    """
    texts = [str(path.absolute()) for path in (lower, upper, work)]
    if any(bad in text for text in texts for bad in _UNSAFE_IN_OPTIONS):
        return None
    return f"lowerdir={texts[0]},upperdir={texts[1]},workdir={texts[2]},userxattr"


def overlay_available(scratch: Path) -> str | None:
    """None when overlayfs mounts in an unprivileged user namespace here (tried for real in ``scratch``), else why not.

    Mounts a small lower directory over itself with ``unshare -rm``, changes one file and
    removes another through it, and checks that the lower directory is untouched and the
    upper one holds the change and a whiteout. Leaves nothing behind in ``scratch``.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        return "util-linux's `unshare` is not installed"
    try:
        base = Path(tempfile.mkdtemp(prefix="overlay-probe-", dir=scratch))
    except OSError as exc:
        return f"cannot make a scratch directory for the overlayfs probe in {scratch}: {exc.strerror or exc}"
    try:
        return _probe(unshare, base)
    finally:
        remove_tree(base)


def _probe(unshare: str, base: Path) -> str | None:
    lower, upper, work = base / "lower", base / "upper", base / "work"
    try:
        for folder in (lower, upper, work):
            folder.mkdir()
        (lower / "kept").write_bytes(b"lower\n")
        (lower / "gone").write_bytes(b"lower\n")
    except OSError as exc:
        return f"cannot prepare the overlayfs probe in {base}: {exc.strerror or exc}"
    options = overlay_mount_options(lower, upper, work)
    if options is None:
        return f"the scratch directory's path ({base}) cannot be named in overlayfs options"
    script = 'mount -t overlay overlay -o "$1" "$2" && echo changed > "$2/kept" && rm "$2/gone"'
    try:
        done = subprocess.run(
            [unshare, "-rm", "sh", "-c", script, "sh", options, str(lower)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"mounting overlayfs in a user namespace did not finish in {_PROBE_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"cannot run {unshare}: {exc.strerror or exc}"
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        why = said[-1] if said else f"exit status {done.returncode}"
        return f"overlayfs cannot be mounted in an unprivileged user namespace: {why[:300]}"
    return _probe_result(lower, upper)


def _probe_result(lower: Path, upper: Path) -> str | None:
    try:
        untouched = (lower / "kept").read_bytes() == b"lower\n" and (lower / "gone").exists()
        captured = (upper / "kept").read_bytes() == b"changed\n"
        gone = os.lstat(upper / "gone")
    except OSError as exc:
        return f"overlayfs mounted but did not capture a write in its upper directory: {exc.strerror or exc}"
    if not untouched:
        return "overlayfs mounted but a write reached the lower directory"
    if not (captured and _is_whiteout(gone)):
        return "overlayfs mounted but its upper directory does not hold the change and the whiteout expected"
    return None


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


# ---- reading the upper directory ----------------------------------------------------------------


def _is_whiteout(st: os.stat_result) -> bool:
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


@attrs.frozen(kw_only=True)
class _Step:
    """One change to the real directory, planned before any is made."""

    action: Literal["remove", "mkdir", "copy", "symlink", "chmod", "touch"]
    rel: _Rel
    source: Path | None = None  # copy: the file in the upper directory
    mode: int = 0  # copy, chmod
    target: str = ""  # symlink
    times_ns: tuple[int, int] = (0, 0)  # copy, touch: (atime, mtime)


class _Plan:
    """Everything the upper directory asks of the real one, worked out by reading both (no change made)."""

    def __init__(self, upper: Path, real: Path, guard: Callable[[_Rel, bool], bool]) -> None:
        self.upper = upper
        self.real = real
        self.guard = guard  # a path (and whether a folder) the command may not change (``protect.is_protected``)
        self.steps: list[_Step] = []
        self.late: list[_Step] = []  # directory permissions: set last, deepest first (a read-only one stays writable)
        self.changed: list[str] = []
        self.removed: list[str] = []
        self.candidates: list[tuple[Path, int, str]] = []  # (absolute path, bytes to keep (0: absent), rel text)
        self.not_rewindable: list[PathNote] = []
        self.skipped: list[PathNote] = []
        self.refused: list[PathNote] = []

    def _note(self, rel: _Rel, why: str) -> None:
        self.not_rewindable.append(PathNote(path=_text(rel), why=why))

    def _real_lstat(self, rel: _Rel) -> os.stat_result | None:
        try:
            return os.lstat(self.real.joinpath(*rel))
        except FileNotFoundError:
            return None

    def merge_dir(self, rel: _Rel, *, real: _RealSide, opaque: bool) -> None:
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

    def _refuse(self, rel: _Rel) -> None:
        self.refused.append(PathNote(path=_text(rel), why="protected"))

    def _merge_entry(
        self, rel: _Rel, upper_st: os.stat_result, real_st: os.stat_result | None, parent: _RealSide
    ) -> None:
        if self.guard(rel, stat.S_ISDIR(upper_st.st_mode)):  # nothing under it comes out either
            self._refuse(rel)
        elif _is_whiteout(upper_st):
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
        self, rel: _Rel, upper_st: os.stat_result, real_st: os.stat_result | None, parent: _RealSide
    ) -> None:
        mode = stat.S_IMODE(upper_st.st_mode) & _KEPT_MODE_BITS
        if real_st is not None and stat.S_ISDIR(real_st.st_mode):
            old = stat.S_IMODE(real_st.st_mode)
            if old & _KEPT_MODE_BITS != mode:
                self.late.append(_Step(action="chmod", rel=rel, mode=(old & _SETID_BITS) | mode))
                self.changed.append(_text(rel))
                self._note(rel, "a directory's permissions")
            self.merge_dir(rel, real="dir", opaque=_is_opaque(self.upper.joinpath(*rel)))
            return
        if real_st is not None and not self._remove(rel, real_st, replaced_by="a directory"):
            return
        self.steps.append(_Step(action="mkdir", rel=rel))
        self.late.append(_Step(action="chmod", rel=rel, mode=mode))
        self.changed.append(_text(rel))
        if real_st is None:  # a replaced entry already has its note
            self._note(rel, "a new directory: rewind removes the files in it, not the directory")
        replaced = real_st is not None or parent == "replaced"
        self.merge_dir(rel, real="replaced" if replaced else "absent", opaque=True)

    def _merge_file(
        self, rel: _Rel, upper_st: os.stat_result, real_st: os.stat_result | None, parent: _RealSide
    ) -> None:
        source = self.upper.joinpath(*rel)
        path = self.real.joinpath(*rel)
        mode = stat.S_IMODE(upper_st.st_mode) & _KEPT_MODE_BITS
        times = (upper_st.st_atime_ns, upper_st.st_mtime_ns)
        copy = _Step(action="copy", rel=rel, source=source, mode=mode, times_ns=times)
        if real_st is not None and stat.S_ISREG(real_st.st_mode):
            same = real_st.st_size == upper_st.st_size and _same_bytes(source, path)
            same_mode = stat.S_IMODE(real_st.st_mode) == mode
            if same and same_mode:  # opened for writing, or touched: only the times to carry over
                if real_st.st_mtime_ns != upper_st.st_mtime_ns:
                    self.steps.append(_Step(action="touch", rel=rel, times_ns=times))
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

    def _merge_symlink(self, rel: _Rel, target: str, real_st: os.stat_result | None) -> None:
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
        self.steps.append(_Step(action="symlink", rel=rel, target=target))
        self.changed.append(_text(rel))

    def _remove(self, rel: _Rel, real_st: os.stat_result, *, replaced_by: str = "") -> bool:
        """Plan removing the real entry at ``rel`` (alone, or to put ``replaced_by`` in its place).

        False, and nothing planned, when it is protected or a directory holding something protected.
        """
        directory = stat.S_ISDIR(real_st.st_mode)
        if self.guard(rel, directory) or (directory and self._holds_guarded(rel)):
            self._refuse(rel)
            return False
        self.steps.append(_Step(action="remove", rel=rel))
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

    def _holds_guarded(self, rel: _Rel) -> bool:
        """Does the real directory at ``rel`` hold a protected path (following no symlink)?"""
        for root, dirs, files in os.walk(self.real.joinpath(*rel)):
            under = (*rel, *Path(root).relative_to(self.real.joinpath(*rel)).parts)
            if any(self.guard((*under, name), True) for name in dirs):
                return True
            if any(self.guard((*under, name), False) for name in files):
                return True
        return False

    def _collect_tree(self, rel: _Rel) -> None:
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


def _choose(plan: _Plan, cap_bytes: int) -> tuple[list[Path], int, list[PathNote]]:
    """The paths to checkpoint, in walk order: every absence, and each file's bytes while they fit in the cap.

    A file that does not fit is left out and the next ones still tried, so one large file
    does not cost the checkpoints of the small ones after it.
    """
    chosen: dict[Path, None] = {}
    total = 0
    over: list[PathNote] = []
    for path, size, text in plan.candidates:
        if path in chosen:
            continue
        if total + size <= cap_bytes:
            chosen[path] = None
            total += size
        else:
            over.append(PathNote(path=text, why=f"over the {_size(cap_bytes)} checkpoint cap"))
    return list(chosen), total, over


# ---- changing the real directory ------------------------------------------------------------------


class _RealDir:
    """The real directory, changed only through descriptors opened without following any symlink."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    @contextlib.contextmanager
    def parent(self, rel: _Rel) -> Iterator[int]:
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

    def _moved(self, rel: _Rel, exc: OSError) -> OSError:
        return OSError(
            exc.errno,
            f"{self.root.joinpath(*rel)} is no longer a directory (changed while the sandbox's changes were applied); "
            "nothing was written through it",
        )

    def apply(self, step: _Step) -> None:
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


def remove_inside(real: Path, rel: _Rel) -> None:
    """Remove the entry at ``rel`` under ``real``, reached without following a symlink (a directory: all of it)."""
    target = _RealDir(real)
    try:
        target.apply(_Step(action="remove", rel=rel))
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


# ---- the whole apply ------------------------------------------------------------------------------


def _nothing_guarded(rel: _Rel, directory: bool) -> bool:
    return False


def apply_upper(
    upper: Path,
    real: Path,
    *,
    checkpoint: Callable[[Sequence[Path]], object],
    cap_bytes: int,
    guard: Callable[[_Rel, bool], bool] = _nothing_guarded,
) -> OverlayChanges:
    """Make ``real`` match what a command left in overlay ``upper``, checkpointing the originals first.

    Reads both directories and plans every change first. Then calls ``checkpoint`` once
    (not at all when there is nothing to keep) with absolute paths under ``real`` resolved:
    each regular file whose bytes will be overwritten or removed, while their sizes sum to
    at most ``cap_bytes`` (one that does not fit is left out and listed, later ones still
    tried), and each regular file about to be created, whose absence costs nothing. Only
    then changes ``real``: files copied (a temporary file and a rename each, permissions
    and times kept, set-ID bits dropped), symlinks recreated, whiteouts removing, opaque
    directories emptied of what the command did not remake, a directory replacing a file
    or the reverse. A call over the cap still applies everything. A path ``guard`` covers
    (given its components under ``real`` and whether it is a folder) is not changed, nor
    removed with a directory that holds it, nor replaced: it is listed in ``refused``.

    Raises what ``checkpoint`` raises (an OSError when the store cannot keep the bytes)
    with ``real`` unchanged; :class:`UnsupportedUpperError` for a layout it cannot read,
    also before any change; OSError when a change cannot be made (what was applied
    before it stays). Does not clear ``upper``: the caller does, after this returns or raises.
    """
    if cap_bytes < 0:
        raise ValueError(f"cap_bytes must be at least 0, got {cap_bytes}")
    real = real.resolve(strict=True)
    plan = _Plan(upper, real, guard)
    plan.merge_dir((), real="dir", opaque=False)
    chosen, total, over = _choose(plan, cap_bytes)
    if chosen:
        checkpoint(chosen)
    target = _RealDir(real)
    try:
        for step in [*plan.steps, *sorted(plan.late, key=lambda step: -len(step.rel))]:
            target.apply(step)
    finally:
        target.close()
    return OverlayChanges(
        changed=tuple(plan.changed),
        removed=tuple(plan.removed),
        checkpointed=tuple(chosen),
        not_rewindable=(*over, *plan.not_rewindable),
        skipped=tuple(plan.skipped),
        refused=tuple(plan.refused),
        bytes_checkpointed=total,
        over_cap=bool(over),
        cap_bytes=cap_bytes,
    )
