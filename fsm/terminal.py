"""Text someone else wrote, made inert before it reaches a terminal: control characters shown, never obeyed.

Owns :func:`inert`. A model's text, a tool's output, an MCP server's answer or a file's
bytes may hold terminal escape sequences — CSI (``ESC [``: move the cursor, erase what
was printed, recolour), OSC (``ESC ]``: retitle the window, write the clipboard, make
links), or any other C0/C1 control — which a terminal obeys when they are printed raw.
:func:`inert` writes every such character as a visible escape (``ESC`` → ``\\x1b``),
keeping newline and tab; a carriage return before a newline (Windows line ends) is
dropped rather than shown. Every text line and every stderr line built from such text
goes through it (``queryloop.frontends.console``, ``queryloop.frontends.interactive``, ``queryloop.run.sessions``,
the SDK session's warnings). JSON output does not: ``json.dumps`` escapes every C0
control itself. Lives in the engine so that every layer can use the one helper; it
imports nothing.
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
