"""The output layer: what a complete reply does — the answer, max_tokens continuations, nudges, pause_turn.

Its edges leave ``calling_model`` on a complete reply. Here: the slice of the run
data it owns (``data``) and the edge handlers (``replies``).
"""

from .data import OutputData, OutputRun
from .replies import (
    CONTINUE_PROMPT,
    NUDGE_PROMPT,
    continue_after_truncation,
    continue_paused_turn,
    drop_malformed_reply,
    escalate_max_tokens,
    escalation_configured,
    nudge_for_visible_answer,
    record_answer,
    record_over_budget,
    surface_malformed_tool_use,
    surface_truncation,
)

__all__ = [
    "CONTINUE_PROMPT",
    "NUDGE_PROMPT",
    "OutputData",
    "OutputRun",
    "continue_after_truncation",
    "continue_paused_turn",
    "drop_malformed_reply",
    "escalate_max_tokens",
    "escalation_configured",
    "nudge_for_visible_answer",
    "record_answer",
    "record_over_budget",
    "surface_malformed_tool_use",
    "surface_truncation",
]
