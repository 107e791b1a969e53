"""Text someone else wrote, made inert before it reaches a terminal: control characters shown, never obeyed.

:func:`inert` writes every C0/C1 control but newline and tab as a visible escape. Every text or stderr line built
from such text goes through it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["inert"]

_KEPT: Final = frozenset({"\n", "\t"})
_CONTROLS: Final = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_SHOWN: Final = {code: f"\\x{code:02x}" for code in _CONTROLS if chr(code) not in _KEPT}


def inert(text: str) -> str:
    """``text`` with every C0 and C1 control character but newline and tab (and DEL) written as ``\\xNN``."""
    if text.isprintable():  # the usual case: nothing to change (newline and tab are not "printable" either)
        return text
    return text.replace("\r\n", "\n").translate(_SHOWN)
