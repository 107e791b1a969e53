"""Can bubblewrap start here? Asked once per process, by starting it.

Owns :func:`unavailable_reason`. Does not own what a sandbox does once it starts (``launch``).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys

__all__ = ["unavailable_reason"]


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when bubblewrap starts here; else one line saying why not (asked once per process)."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux (bubblewrap); this is {sys.platform}"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (the `bwrap` program; Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap cannot start: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"bubblewrap cannot start here ({last}); user namespaces may be disabled"
    return None
