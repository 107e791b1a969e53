"""The request layer: calling the model over the official ``anthropic`` SDK, retries, model and stream fallback.

Its states in ``machines/query_loop.yaml`` are ``calling_model`` (one attempt and how
it ended) and ``backing_off``; the summary requests of compaction use its client and
its backoff too.
Here: the slice of the run data it owns (``data``), the typed client for one attempt
(``client``), the request body built from the stored bytes of the transcript, with the
project instructions and the prompt-cache breakpoints (``body``), the backends that send it
(``backends``), prices and limits
(``pricing``), the attempt's effect and exit (``attempts``) and the recovery edges
(``recovery``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm.lazy import lazy_exports

if TYPE_CHECKING:
    from .attempts import call_model, classify_failure, record_attempt
    from .data import (
        ApiRetry,
        AssistantMessage,
        ModelServices,
        RequestData,
        RequestFailed,
        RequestLogged,
        RequestRun,
        RequestServices,
        StreamEvent,
        TextDelta,
    )
    from .recovery import (
        api_error_text,
        fallback_available,
        note_failure,
        retry_after_over_cap,
        surface_failure,
        surface_long_retry_after,
        switch_to_fallback_model,
        wait_before_retry,
    )
    from .services.backends import AnthropicBackend, ModelBackend, ModelCall, TokenCount
    from .services.client import ModelFailure, ModelReply, RequestLog, UsageTotals
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".attempts": ("call_model", "classify_failure", "record_attempt"),
            ".services.backends": ("AnthropicBackend", "ModelBackend", "ModelCall", "TokenCount"),
            ".services.client": ("ModelFailure", "ModelReply", "RequestLog", "UsageTotals"),
            ".data": (
                "ApiRetry",
                "AssistantMessage",
                "ModelServices",
                "RequestData",
                "RequestFailed",
                "RequestLogged",
                "RequestRun",
                "RequestServices",
                "StreamEvent",
                "TextDelta",
            ),
            ".recovery": (
                "api_error_text",
                "fallback_available",
                "note_failure",
                "retry_after_over_cap",
                "surface_failure",
                "surface_long_retry_after",
                "switch_to_fallback_model",
                "wait_before_retry",
            ),
        },
    )

__all__ = [
    "AnthropicBackend",
    "ApiRetry",
    "AssistantMessage",
    "ModelBackend",
    "ModelCall",
    "ModelFailure",
    "ModelReply",
    "ModelServices",
    "RequestData",
    "RequestFailed",
    "RequestLog",
    "RequestLogged",
    "RequestRun",
    "RequestServices",
    "StreamEvent",
    "TextDelta",
    "TokenCount",
    "UsageTotals",
    "api_error_text",
    "call_model",
    "classify_failure",
    "fallback_available",
    "note_failure",
    "record_attempt",
    "retry_after_over_cap",
    "surface_failure",
    "surface_long_retry_after",
    "switch_to_fallback_model",
    "wait_before_retry",
]
