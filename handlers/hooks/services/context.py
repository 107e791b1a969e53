"""What hooks tell the model, labelled: never text the user seems to have written, never part of a tool's output.

Owns the notes made of a hook outcome, each with Claude Code 2.1.235's marker (``PostToolUse:<tool> hook``, …), and
the ``<system-reminder>`` block that carries them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .results import HookOutcome

if TYPE_CHECKING:
    from anthropic.types import TextBlockParam

__all__ = ["context_notes", "reminder_block", "tool_hook_notes"]


def context_notes(outcome: HookOutcome | None, marker: str, *, output_marker: str | None = None) -> tuple[str, ...]:
    """The outcome's ``additionalContext`` after ``marker``, then its plain stdout after ``output_marker``."""
    if outcome is None:
        return ()
    said = tuple(f"{marker} additional context: {text}" for text in outcome.additional_context)
    shown = output_marker or marker
    return said + tuple(f"{shown} output: {text}" for text in outcome.output)


def tool_hook_notes(outcome: HookOutcome | None, tool_name: str) -> tuple[str, ...]:
    """A tool hook's notes for the model: a PostToolUse block's reasons first, then the added context."""
    if outcome is None:
        return ()
    marker = f"{outcome.event}:{tool_name} hook"
    blocked = outcome.event == "PostToolUse" and (outcome.blocked or outcome.decision == "block")
    reasons = tuple(f"{marker} blocked: {reason}" for reason in outcome.block_reasons) if blocked else ()
    return reasons + context_notes(outcome, marker)


def reminder_block(notes: Iterable[str]) -> TextBlockParam | None:
    """One text block holding the notes inside ``<system-reminder>`` tags; None for no notes."""
    text = "\n\n".join(notes)
    return {"type": "text", "text": f"<system-reminder>\n{text}\n</system-reminder>"} if text else None
