"""What a run uses when nothing names it: the model and the system prompt.

Owns only these two values, in a module that imports nothing, so the program's
``--help`` can show them without loading the agent (``queryloop.agent`` re-exports
them). Does not own the models' limits and prices (``queryloop.handlers.request.pricing``).
"""

from __future__ import annotations

__all__ = ["DEFAULT_MODEL", "DEFAULT_SYSTEM_PROMPT"]

DEFAULT_MODEL = "claude-sonnet-4-5"  # when neither a flag, a setting nor a scenario names one

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in the user's directory through tools (Read, Write, Edit, "
    "Bash, Glob, Grep). Use tools when they help, keep changes minimal, and answer concisely."
)
