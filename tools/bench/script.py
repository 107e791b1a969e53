"""The benchmark agent's fixed words, shared by every implementation of it and by the fake server's script.

Imports nothing heavy, so a process that only starts others (``peers/run.py``) stays
small: on Linux a child's ``ru_maxrss`` starts from its parent's high-water mark.
"""

from __future__ import annotations

__all__ = ["FINAL_TEXT", "NOOP_DESCRIPTION", "NOOP_NAME", "NOTE", "PROMPT", "SYSTEM"]

PROMPT = "Call the noop tool until told otherwise, then say done."
SYSTEM = "You are a benchmark agent."  # the peers' system prompt; queryloop and the bare SDK loop send queryloop's
NOOP_NAME = "noop"
NOOP_DESCRIPTION = "Does nothing and says so."
NOTE = "again"  # the no-op tool's one argument, as every scripted model calls it
FINAL_TEXT = "done"
