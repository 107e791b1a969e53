"""What a run uses when nothing names it: the model, the system prompt, the first retry's delay, and the
Claude Code release queryloop behaves as.

Owns only these values, in a module that imports nothing but ``os``, so the program's
``--help`` can show them without loading the agent (``queryloop.run.agent`` re-exports
them). Does not own the models' limits and prices (``queryloop.handlers.request.services.pricing``).
"""

from __future__ import annotations

import os

__all__ = ["CLAUDE_CODE_VERSION", "DEFAULT_MODEL", "DEFAULT_SYSTEM_PROMPT", "retry_base_delay_s"]

# The Claude Code release whose behaviour queryloop follows (its flags, lines and results, observed side
# by side): ``-v`` names it before queryloop's own version, the stream-json ``init`` line as
# ``claude_code_version``, which the Agent SDK checks at start.
CLAUDE_CODE_VERSION = "2.1.235"

DEFAULT_MODEL = "claude-sonnet-4-5"  # when neither a flag, a setting nor a scenario names one

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in the user's directory through tools (Read, Write, Edit, "
    "Bash, Glob, Grep). Use tools when they help, keep changes minimal, and answer concisely."
)


def retry_base_delay_s() -> float:
    """The backoff's first delay: 0.5 s, or ``QUERYLOOP_RETRY_BASE_DELAY_MS`` (tests and demos shorten it)."""
    return float(os.environ.get("QUERYLOOP_RETRY_BASE_DELAY_MS", "500")) / 1000
