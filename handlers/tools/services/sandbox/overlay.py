"""Bringing a sandboxed command's changes out of an overlayfs upper directory, checkpointed first.

:func:`apply_upper` works out every change (``upper``), checkpoints the originals, then applies them through
descriptors opened with ``O_NOFOLLOW`` (``nofollow``), so no symlink is followed (docs/security.md). Owns
:class:`OverlayChanges`, what came out. Mounting the overlay: ``overlayfs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

# remove_tree, overlay_available, overlay_mount_options and UnsupportedUpperError are not used here: they stay
# importable from this module, as before it was split (the tests import them from here)
from .nofollow import RealDir, Rel, remove_tree
from .overlayfs import overlay_available, overlay_mount_options
from .upper import PathNote, Plan, UnsupportedUpperError

__all__ = [
    "OverlayChanges",
    "PathNote",
    "UnsupportedUpperError",
    "apply_upper",
    "overlay_available",
    "overlay_mount_options",
    "remove_tree",
]

_LISTED_IN_SUMMARY: Final = 3


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


def _choose(plan: Plan, cap_bytes: int) -> tuple[list[Path], int, list[PathNote]]:
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


def _nothing_guarded(rel: Rel, directory: bool) -> bool:
    return False


def apply_upper(
    upper: Path,
    real: Path,
    *,
    checkpoint: Callable[[Sequence[Path]], object],
    cap_bytes: int,
    guard: Callable[[Rel, bool], bool] = _nothing_guarded,
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
    plan = Plan(upper, real, guard)
    plan.merge_dir((), real="dir", opaque=False)
    chosen, total, over = _choose(plan, cap_bytes)
    if chosen:
        checkpoint(chosen)
    target = RealDir(real)
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
