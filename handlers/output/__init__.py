"""The output layer: what a complete reply means — the answer, max_tokens continuations, nudges, pause_turn.

Its state in ``machines/query_loop.yaml`` is ``reading_reply``. Here: the slice of the run
data it owns (``data``) and the edge handlers (``replies``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .data import OutputData, OutputRun, OutputServices
    from .replies import (
        CONTINUE_PROMPT,
        MALFORMED_TOOL_USE_PROMPT,
        NUDGE_PROMPT,
        STRUCTURED_OUTPUT_PROMPT,
        classify_reply,
        continue_after_truncation,
        continue_paused_turn,
        escalate_max_tokens,
        escalation_configured,
        nudge_for_structured_output,
        nudge_for_visible_answer,
        read_reply,
        receive_reply,
        record_answer,
        record_over_budget,
        report_malformed_tool_use,
        surface_malformed_tool_use,
        surface_truncation,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".data": (
                "OutputData",
                "OutputRun",
                "OutputServices",
            ),
            ".replies": (
                "CONTINUE_PROMPT",
                "MALFORMED_TOOL_USE_PROMPT",
                "NUDGE_PROMPT",
                "STRUCTURED_OUTPUT_PROMPT",
                "classify_reply",
                "continue_after_truncation",
                "continue_paused_turn",
                "escalate_max_tokens",
                "escalation_configured",
                "nudge_for_structured_output",
                "nudge_for_visible_answer",
                "read_reply",
                "receive_reply",
                "record_answer",
                "record_over_budget",
                "report_malformed_tool_use",
                "surface_malformed_tool_use",
                "surface_truncation",
            ),
        },
    )

__all__ = [
    "CONTINUE_PROMPT",
    "MALFORMED_TOOL_USE_PROMPT",
    "NUDGE_PROMPT",
    "OutputData",
    "OutputRun",
    "OutputServices",
    "STRUCTURED_OUTPUT_PROMPT",
    "classify_reply",
    "continue_after_truncation",
    "continue_paused_turn",
    "escalate_max_tokens",
    "escalation_configured",
    "nudge_for_structured_output",
    "nudge_for_visible_answer",
    "read_reply",
    "receive_reply",
    "record_answer",
    "record_over_budget",
    "report_malformed_tool_use",
    "surface_malformed_tool_use",
    "surface_truncation",
]
