"""The request layer: calling the model over the official ``anthropic`` SDK, retries, model and stream fallback.

Its states are ``calling_model`` and ``backing_off``. Here: ``data``, ``attempts``, ``recovery`` and ``services``
(``client``, ``attempt``, ``streaming``, ``usage``, ``body``, ``backends``, ``pricing``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .attempts import call_model, classify_failure, record_attempt
    from .data import (
        ApiRetry,
        AssistantMessage,
        BackoffServices,
        ModelServices,
        RequestData,
        RequestFailed,
        RequestLogged,
        RequestRun,
        RequestServices,
        StreamEvent,
        TextDelta,
        count_attempt,
        with_request,
    )
    from .recovery import (
        api_error_text,
        back_off,
        backoff_cap_s,
        backoff_delay_s,
        fallback_available,
        note_failure,
        retry_after_cap_s,
        retry_after_over_cap,
        surface_failure,
        surface_long_retry_after,
        switch_to_fallback_model,
        wait_before_retry,
    )
    from .services.attempt import (
        RECOVERABLE_FAILURES,
        TRANSIENT_FAILURES,
        ModelFailure,
        ModelReply,
        RequestLog,
    )
    from .services.backends import AnthropicBackend, ModelBackend, ModelCall, TokenCount, with_request_deadline
    from .services.body import encode_request
    from .services.media import IMAGE_MAX_BASE64_CHARS, MEDIA_MAX_BASE64_CHARS, sniffed_image_type
    from .services.model_names import AGENT_CALL_MODELS, max_output_tokens, resolve_model, subagent_model
    from .services.pricing import UNLISTED_MODEL, cost_usd, model_info, output_limits
    from .services.usage import UsageTotals
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".attempts": (
                "call_model",
                "classify_failure",
                "record_attempt",
            ),
            ".data": (
                "ApiRetry",
                "AssistantMessage",
                "BackoffServices",
                "ModelServices",
                "RequestData",
                "RequestFailed",
                "RequestLogged",
                "RequestRun",
                "RequestServices",
                "StreamEvent",
                "TextDelta",
                "count_attempt",
                "with_request",
            ),
            ".recovery": (
                "api_error_text",
                "back_off",
                "backoff_cap_s",
                "backoff_delay_s",
                "fallback_available",
                "note_failure",
                "retry_after_cap_s",
                "retry_after_over_cap",
                "surface_failure",
                "surface_long_retry_after",
                "switch_to_fallback_model",
                "wait_before_retry",
            ),
            ".services.backends": (
                "AnthropicBackend",
                "ModelBackend",
                "ModelCall",
                "TokenCount",
                "with_request_deadline",
            ),
            ".services.body": ("encode_request",),
            ".services.attempt": (
                "ModelFailure",
                "ModelReply",
                "RECOVERABLE_FAILURES",
                "RequestLog",
                "TRANSIENT_FAILURES",
            ),
            ".services.media": (
                "IMAGE_MAX_BASE64_CHARS",
                "MEDIA_MAX_BASE64_CHARS",
                "sniffed_image_type",
            ),
            ".services.model_names": (
                "AGENT_CALL_MODELS",
                "max_output_tokens",
                "resolve_model",
                "subagent_model",
            ),
            ".services.pricing": (
                "UNLISTED_MODEL",
                "cost_usd",
                "model_info",
                "output_limits",
            ),
            ".services.usage": ("UsageTotals",),
        },
    )

__all__ = [
    "AGENT_CALL_MODELS",
    "AnthropicBackend",
    "ApiRetry",
    "AssistantMessage",
    "BackoffServices",
    "IMAGE_MAX_BASE64_CHARS",
    "MEDIA_MAX_BASE64_CHARS",
    "ModelBackend",
    "ModelCall",
    "ModelFailure",
    "ModelReply",
    "ModelServices",
    "RECOVERABLE_FAILURES",
    "RequestData",
    "RequestFailed",
    "RequestLog",
    "RequestLogged",
    "RequestRun",
    "RequestServices",
    "StreamEvent",
    "TRANSIENT_FAILURES",
    "TextDelta",
    "TokenCount",
    "UNLISTED_MODEL",
    "UsageTotals",
    "api_error_text",
    "back_off",
    "backoff_cap_s",
    "backoff_delay_s",
    "call_model",
    "classify_failure",
    "cost_usd",
    "count_attempt",
    "encode_request",
    "fallback_available",
    "max_output_tokens",
    "model_info",
    "note_failure",
    "output_limits",
    "record_attempt",
    "resolve_model",
    "retry_after_cap_s",
    "retry_after_over_cap",
    "sniffed_image_type",
    "subagent_model",
    "surface_failure",
    "surface_long_retry_after",
    "switch_to_fallback_model",
    "wait_before_retry",
    "with_request",
    "with_request_deadline",
]
