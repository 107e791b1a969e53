"""The OS sandbox for the model's Bash commands (bubblewrap on Linux): the wall the permission gate is not.

``policy`` (which calls run inside), ``probe``, ``launch`` (the ``bwrap`` line), ``overlay`` (changes brought back,
checkpointed; ``overlayfs`` mounts it, ``upper`` reads it, ``nofollow`` writes), ``proxy`` and ``bridge`` (the
allowed hosts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

__all__ = [
    "DEFAULT_CAPTURE_BYTES",
    "OverlayChanges",
    "PROXY_PORT",
    "Sandbox",
    "SandboxPolicy",
    "SandboxedCommand",
    "unavailable_reason",
]

if TYPE_CHECKING:
    from .launch import DEFAULT_CAPTURE_BYTES, PROXY_PORT, Sandbox, SandboxedCommand
    from .overlay import OverlayChanges
    from .policy import SandboxPolicy
    from .probe import unavailable_reason
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".launch": ("DEFAULT_CAPTURE_BYTES", "PROXY_PORT", "Sandbox", "SandboxedCommand"),
            ".overlay": ("OverlayChanges",),
            ".policy": ("SandboxPolicy",),
            ".probe": ("unavailable_reason",),
        },
    )
