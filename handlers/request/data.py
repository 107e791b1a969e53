"""The request layer's slice of the run data, what its handlers need, and the items it publishes.

Owns :class:`RequestData` (the model and fallbacks, usage so far, the last request's facts), the protocols request
handlers work on, and an attempt's publish items.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeVar

import attrs

from ..outcome import SharedData, evolve
from .services.attempt import ModelFailure, RequestLog
from .services.backends import ModelBackend
from .services.usage import UsageTotals

__all__ = [
    "BackoffServices",
    "ApiRetry",
    "AssistantMessage",
    "ModelServices",
    "RequestData",
    "RequestFailed",
    "RequestLogged",
    "RequestRun",
    "RequestServices",
    "TextDelta",
    "cache_lifetime",
    "count_attempt",
    "real_input_tokens",
    "with_request",
]


@attrs.frozen(kw_only=True, slots=True)
class RequestData:
    """What the request layer keeps between steps."""

    model: str
    max_tokens: int  # the run's output cap (its configuration's)
    fallback_models: tuple[str, ...] = ()
    fallback_max_tokens: tuple[int, ...] = ()  # each fallback model's max_tokens (none: ``max_tokens`` stays)
    failure: ModelFailure | None = None  # the last failed attempt (retry-after, status; surfaced if recovery ends)
    usage: UsageTotals = attrs.field(factory=UsageTotals)
    api_duration_ms: float = 0.0
    real_input_tokens: int = 0  # input tokens the API counted for the last answered request (0: none yet)
    sent_message_tokens: int = 0  # the local estimate of that request's messages
    # tools offered beside the registry's (MCP servers'): set only at a request boundary (syncing_tools)
    tool_catalog: tuple[dict[str, Any], ...] = ()
    tool_catalog_tokens: int = 0  # its share of the request's estimate (the JSON's length / 4)
    # The prompt cache: what the last answered request's breakpoints hold (read + written), and the
    # ttl the breakpoints ask for ("1h" once a request had to write again all the one before it had
    # cached: its entries expired, so this session's requests come more than 5 minutes apart).
    cached_tokens: int = 0
    cache_ttl: Literal["5m", "1h"] = "5m"


def real_input_tokens(usage: Mapping[str, Any]) -> int:
    """Input tokens the API counted for a request, cache reads and writes included."""
    get = usage.get
    return (
        int(get("input_tokens") or 0)
        + int(get("cache_read_input_tokens") or 0)
        + int(get("cache_creation_input_tokens") or 0)
    )


def cache_lifetime(request: RequestData, usage: Mapping[str, Any]) -> dict[str, object]:
    """What an answer's usage says about the prompt cache: what its breakpoints now hold, and their ttl.

    When an answer read less than the previous answered request had cached, yet its prompt
    holds at least as much, it wrote again what it should have read: the entries had expired,
    so this session's requests come more than 5 minutes apart (a user away, a slow tool), and
    its breakpoints ask for the 1-hour cache from then on. A write costs 2x the input price
    there rather than 1.25x, and saves writing the whole history again (1.25x) after each
    later pause. A compaction leaves a shorter prompt, so it does not switch it.
    """
    read = int(usage.get("cache_read_input_tokens") or 0)
    write = int(usage.get("cache_creation_input_tokens") or 0)
    changes: dict[str, Any] = {"cached_tokens": read + write}
    if read < request.cached_tokens <= read + write:
        changes["cache_ttl"] = "1h"
    return changes


class RequestRun(SharedData, Protocol):
    """The run data as request-layer handlers see it."""

    @property
    def request(self) -> RequestData: ...


R = TypeVar("R", bound=RequestRun)


def with_request(data: R, **changes: Any) -> R:
    """The run data with its request slice changed as given."""
    return data.evolve(request=evolve(data.request, **changes))


def count_attempt(data: R, log: RequestLog, **changes: object) -> R:
    """The run data with one more attempt's usage and API time added to its request slice (and ``changes``)."""
    request = data.request
    usage = request.usage.add(log.model, log.usage) if log.usage else request.usage
    return with_request(data, usage=usage, api_duration_ms=request.api_duration_ms + log.duration_ms, **changes)


class ModelServices(Protocol):
    """What any layer needs to send the model a request: the backend and the request's fixed parts."""

    @property
    def backend(self) -> ModelBackend: ...

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def tool_definitions(self) -> tuple[dict[str, Any], ...]: ...

    @property
    def instructions(self) -> str | None:
        """The project instructions every request carries (``ModelCall.instructions``); None: none."""
        ...

    @property
    def idle_timeout_s(self) -> float: ...


class BackoffServices(Protocol):
    """What a backoff uses: its base and ceiling, a random source for jitter."""

    @property
    def retry_base_delay_s(self) -> float: ...

    @property
    def retry_max_delay_s(self) -> float: ...

    @property
    def rng(self) -> random.Random: ...


class RequestServices(ModelServices, BackoffServices, Protocol):
    """What request-layer effects use: the model, and the backoff between its attempts."""


# ---- what request-layer effects publish (rendered by queryloop.frontends.console) ----------------------


@attrs.frozen(slots=True)
class TextDelta:
    """A piece of visible answer text as it streams in."""

    text: str


@attrs.frozen(slots=True)
class StreamEvent:
    """One event of the Messages API's stream as it arrived (``--include-partial-messages`` writes each)."""

    event: Mapping[str, Any]
    ttft_ms: int | None = None  # message_start's: the milliseconds since the attempt began


@attrs.frozen(kw_only=True, slots=True)
class AssistantMessage:
    """A complete assistant reply as the model sent it."""

    message: dict[str, Any]
    model: str
    log: RequestLog
    message_id: str | None = None  # the API's ``msg_…`` id, for the stream-json ``assistant`` lines


@attrs.frozen(kw_only=True, slots=True)
class ApiRetry:
    """A retry is about to be sent after ``retry_delay_ms`` (Claude Code's system/api_retry)."""

    attempt: int
    max_retries: int | None
    retry_delay_ms: int
    error_status: int | None
    error: str


@attrs.frozen(kw_only=True, slots=True)
class RequestFailed:
    """An attempt failed (logged; whether it is shown depends on the recovery that follows)."""

    failure: ModelFailure


@attrs.frozen(slots=True)
class RequestLogged:
    """An attempt that is not an answer of the conversation (a summary request): logged only."""

    log: RequestLog
