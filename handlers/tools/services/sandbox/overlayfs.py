"""Can overlayfs mount here, and with what options: the probe and the ``-o`` string the sandbox mounts with.

Owns :func:`overlay_mount_options` and :func:`overlay_available`. Does not read what a mounted overlay captured
(``upper``, ``overlay``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from .nofollow import remove_tree
from .upper import is_whiteout

__all__ = ["overlay_available", "overlay_mount_options"]

_UNSAFE_IN_OPTIONS: Final = (",", ":", "\\", "\n", '"')  # separators and escapes of overlay and libmount options
_PROBE_TIMEOUT_S: Final = 10.0


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
    if not (captured and is_whiteout(gone)):
        return "overlayfs mounted but its upper directory does not hold the change and the whiteout expected"
    return None
