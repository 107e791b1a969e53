"""Slash commands in a ``-p`` prompt: which prompt is a command, and what one that sends nothing answers.

As in Claude Code 2.1.235, ``/name [argument]`` is never sent to the model, but a prompt that only looks like one
(an existing path, ``/notes.md``) is.
"""

from __future__ import annotations

import os
import re
from typing import Final

import attrs

__all__ = ["COMMANDS", "PrintCommand", "local_answer", "print_command"]

COMMANDS: Final = ("clear", "compact")
"""The commands ``-p`` runs; any other name is refused without a request."""

_COMMAND: Final = re.compile(r"/([A-Za-z0-9][A-Za-z0-9_:-]*)(?:\s+(.*))?", re.DOTALL)


@attrs.frozen(kw_only=True)
class PrintCommand:
    """``/name argument`` read from a prompt."""

    name: str
    argument: str = ""


def print_command(prompt: str) -> PrintCommand | None:
    """The command ``prompt`` holds, or None when it is a prompt for the model."""
    match = _COMMAND.fullmatch(prompt.strip())
    if match is None:
        return None
    name = match.group(1)
    if name.startswith("mcp__") or (name not in COMMANDS and os.path.exists(f"/{name}")):
        return None
    return PrintCommand(name=name, argument=(match.group(2) or "").strip())


def local_answer(command: PrintCommand) -> str | None:
    """The result text of a command that sends nothing ("" for /clear), or None for /compact (a run)."""
    if command.name == "compact":
        return None
    if command.name == "clear":
        return ""  # a -p run has no conversation on screen to clear; the next one starts afresh anyway
    known = ", ".join(f"/{name}" for name in COMMANDS)
    return f"/{command.name} is not a command queryloop -p knows ({known}); nothing was sent"
