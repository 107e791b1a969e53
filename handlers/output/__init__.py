"""The output layer: what a complete reply means — the answer, max_tokens continuations, nudges, pause_turn.

Its state in ``machines/query_loop.yaml`` is ``reading_reply``. Here: the slice of the run
data it owns (``data``) and the edge handlers (``replies``).
"""

from .data import OutputData, OutputRun, OutputServices
from .replies import (
    CONTINUE_PROMPT,
    MALFORMED_TOOL_USE_PROMPT,
    NUDGE_PROMPT,
    classify_reply,
    continue_after_truncation,
    continue_paused_turn,
    escalate_max_tokens,
    escalation_configured,
    nudge_for_visible_answer,
    read_reply,
    receive_reply,
    record_answer,
    record_over_budget,
    report_malformed_tool_use,
    surface_malformed_tool_use,
    surface_truncation,
)

__all__ = [
    "CONTINUE_PROMPT",
    "MALFORMED_TOOL_USE_PROMPT",
    "NUDGE_PROMPT",
    "OutputData",
    "OutputRun",
    "OutputServices",
    "classify_reply",
    "continue_after_truncation",
    "continue_paused_turn",
    "escalate_max_tokens",
    "escalation_configured",
    "nudge_for_visible_answer",
    "read_reply",
    "receive_reply",
    "record_answer",
    "record_over_budget",
    "report_malformed_tool_use",
    "surface_malformed_tool_use",
    "surface_truncation",
]
