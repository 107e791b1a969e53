"""The context layer: token accounting, auto-compaction and its breaker, collapses, reactive compaction.

Its states are ``checking_context``, ``auto_compacting``, ``reactive_compacting`` and ``manual_compacting``, with
their backoffs. Here: ``data``, ``measuring``, ``compacting`` and ``services`` (``compaction``, ``reactive``,
``estimates``, ``rounds``, ``collapse``, ``clearing``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .compacting import (
        apply_compaction,
        apply_manual_compaction,
        can_drop_oldest_group,
        can_keep_more_rounds,
        commit_staged_collapses,
        compact_transcript,
        drop_oldest_group,
        has_staged_collapses,
        keep_more_rounds,
        note_compaction_failure,
        note_summary_failure,
        nothing_older_to_summarise,
        plan_compaction,
        plan_manual_compaction,
        plan_reactive_compaction,
        record_summary_attempt,
        surface_context_window_exceeded,
        surface_manual_compaction_failure,
        surface_prompt_too_long,
        wait_before_summary_retry,
    )
    from .data import Compacted, CompactionDone, CompactionFailed, ContextData, ContextRun, ContextServices, Measured
    from .measuring import (
        RAPID_TURNS,
        can_compact,
        clear_old_tool_results,
        effective_window,
        measure_context,
        old_results_clearable,
        record_count_tokens_offer,
        record_measurement,
        refill_thrashing,
        skip_compaction_breaker_open,
        surface_thrashing,
    )
    from .services.collapse import StagedCollapse
    from .services.compaction import SUMMARY_MARKER, CompactBoundary, CompactionPlan
    from .services.estimates import request_overhead_tokens
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".compacting": (
                "apply_compaction",
                "apply_manual_compaction",
                "can_drop_oldest_group",
                "can_keep_more_rounds",
                "commit_staged_collapses",
                "compact_transcript",
                "drop_oldest_group",
                "has_staged_collapses",
                "keep_more_rounds",
                "note_compaction_failure",
                "note_summary_failure",
                "nothing_older_to_summarise",
                "plan_compaction",
                "plan_manual_compaction",
                "plan_reactive_compaction",
                "record_summary_attempt",
                "surface_context_window_exceeded",
                "surface_manual_compaction_failure",
                "surface_prompt_too_long",
                "wait_before_summary_retry",
            ),
            ".data": (
                "Compacted",
                "CompactionDone",
                "CompactionFailed",
                "ContextData",
                "ContextRun",
                "ContextServices",
                "Measured",
            ),
            ".measuring": (
                "RAPID_TURNS",
                "can_compact",
                "clear_old_tool_results",
                "effective_window",
                "measure_context",
                "old_results_clearable",
                "record_count_tokens_offer",
                "record_measurement",
                "refill_thrashing",
                "skip_compaction_breaker_open",
                "surface_thrashing",
            ),
            ".services.collapse": ("StagedCollapse",),
            ".services.compaction": (
                "CompactBoundary",
                "CompactionPlan",
                "SUMMARY_MARKER",
            ),
            ".services.estimates": ("request_overhead_tokens",),
        },
    )

__all__ = [
    "CompactBoundary",
    "Compacted",
    "CompactionDone",
    "CompactionFailed",
    "CompactionPlan",
    "ContextData",
    "ContextRun",
    "ContextServices",
    "Measured",
    "RAPID_TURNS",
    "SUMMARY_MARKER",
    "StagedCollapse",
    "apply_compaction",
    "apply_manual_compaction",
    "can_compact",
    "can_drop_oldest_group",
    "can_keep_more_rounds",
    "clear_old_tool_results",
    "commit_staged_collapses",
    "compact_transcript",
    "drop_oldest_group",
    "effective_window",
    "has_staged_collapses",
    "keep_more_rounds",
    "measure_context",
    "note_compaction_failure",
    "note_summary_failure",
    "nothing_older_to_summarise",
    "old_results_clearable",
    "plan_compaction",
    "plan_manual_compaction",
    "plan_reactive_compaction",
    "record_count_tokens_offer",
    "record_measurement",
    "record_summary_attempt",
    "refill_thrashing",
    "request_overhead_tokens",
    "skip_compaction_breaker_open",
    "surface_context_window_exceeded",
    "surface_manual_compaction_failure",
    "surface_prompt_too_long",
    "surface_thrashing",
    "wait_before_summary_retry",
]
