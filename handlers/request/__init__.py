"""The request layer: calling the model over the official ``anthropic`` SDK, retries, model and stream fallback.

Its states are ``calling_model`` and ``backing_off``. Here: ``data``, ``attempts``, ``recovery`` and ``services``
(``client``, ``body``, ``backends``, ``pricing``).
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
