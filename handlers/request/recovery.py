"""Request layer, the recoveries: backoff before a retry, model fallback, surfacing a failure.

Owns ``back_off``, the ``wait_before_retry`` effect, the guard ``fallback_available`` and the retry, fallback and
surfacing edge handlers. The backoff asks the machine (``next_reason``) rather than re-deriving its caps.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..outcome import with_outcome
from .data import ApiRetry, R, RequestServices, with_request
from .services.attempt import ModelFailure

__all__ = [
    "RETRY_JITTER",
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
]

RETRY_JITTER = 0.25
"""Up to this fraction of the backoff is added at random, so clients don't retry in lockstep."""


@uses(counters=("api_retries",), waits=("max_retry_after_s", "max_backoff_s"))
async def wait_before_retry(ctx: EffectContext[R, RequestServices]) -> Event[None]:
    """Sleep before the model request's retry (see :func:`back_off`)."""
    await back_off(ctx, ctx.run.data.request.failure, counter="api_retries", retry_reasons=("api_retry",))
    return Event(name="elapsed")


async def back_off(
    ctx: EffectContext[Any, RequestServices],
    failure: ModelFailure | None,
    *,
    counter: str,
    retry_reasons: tuple[str, ...],
) -> None:
    """Sleep before a retry: the larger of ``failure``'s retry-after(-ms) and the backoff (:func:`backoff_delay_s`).

    ``counter`` counts the retries so far; ``retry_reasons`` are the edges on ``elapsed``
    that retry. When the machine would take another edge (the retry budget is spent, the
    server asked for a wait over the cap, it surfaces the failure instead), the sleep
    would only delay that: it is skipped.
    """
    if ctx.next_reason("elapsed") not in retry_reasons:
        return
    run = ctx.run
    services = ctx.services
    retries = run.count(counter)
    delay = backoff_delay_s(retries, services.retry_base_delay_s, services.retry_max_delay_s, services.rng.random())
    delay = min(delay, backoff_cap_s(run))  # the machine's declared bound on one wait (check's worst-case wait)
    if failure is not None and failure.retry_after_s is not None:
        # Claude Code waits the larger of the two: a retry-after of 0 still backs off. A retry-after over
        # max_retry_after_s ends the run before this wait (the machine tries that edge first); the clamp keeps
        # every wait within the `each_s` its callers declare (`waits`) even if the machine did not.
        delay = min(max(failure.retry_after_s, delay), max(retry_after_cap_s(run), backoff_cap_s(run)))
    ctx.publish(
        ApiRetry(
            attempt=retries + 1,
            max_retries=run.cap(counter),
            retry_delay_ms=round(delay * 1000),
            error_status=failure.status if failure else None,
            error=retry_error(failure),
        )
    )
    await asyncio.sleep(delay)


def retry_error(failure: ModelFailure | None) -> str:
    """What failed, in the words of Claude Code 2.1.235's ``api_retry`` line's ``error`` (probed per status).

    Programs branch on it, so it is a closed set: ``overloaded`` (529 or an ``overloaded_error``),
    ``rate_limit`` (429), ``authentication_failed`` (401, 403), ``server_error`` (any other status
    from 408 up: 5xx, 408, 409) and ``unknown`` (no answer: the connection failed or the stream
    broke; or a status below 408 the server asked to be retried, ``x-should-retry: true``).
    """
    if failure is None or failure.status is None:
        return "unknown"
    if failure.status == 529 or failure.error_type == "overloaded_error":
        return "overloaded"
    named = {429: "rate_limit", 401: "authentication_failed", 403: "authentication_failed"}.get(failure.status)
    return named or ("server_error" if failure.status >= 408 else "unknown")


def backoff_delay_s(retries: int, base_s: float, max_s: float, draw: float) -> float:
    """The wait before retry ``retries + 1``: ``min(base·2^retries, max)`` plus up to 25 % of it (``draw`` in [0, 1)).

    Claude Code's backoff (observed as ``retry_delay_ms`` of 552, 1 106, 2 381, 4 292,
    8 480 ms for five retries at a base of 500 ms), rounded to whole milliseconds.
    """
    delay: float = min(base_s * 2.0**retries, max_s)
    return round(delay * (1.0 + RETRY_JITTER * draw), 3)


def backoff_cap_s(run: RunState[Any]) -> float:
    """The longest backoff wait (``max_backoff_s``); a handler calling this declares the param."""
    return float(run.params["max_backoff_s"])


def retry_after_cap_s(run: RunState[Any]) -> float:
    """The longest retry-after the run waits for (``--max-retry-after``); a handler calling this declares the param."""
    return float(run.params["max_retry_after_s"])


# ---- guards ---------------------------------------------------------------------------------


@uses(params=("max_retry_after_s",))
def retry_after_over_cap(run: RunState[R], event: Event[object]) -> bool:
    """The server asked to be retried later than the run waits for (``max_retry_after_s``)."""
    failure = run.data.request.failure
    return failure is not None and failure.retry_after_s is not None and failure.retry_after_s > retry_after_cap_s(run)


def fallback_available(run: RunState[R], event: Event[object]) -> bool:
    """Another model remains in the --fallback-model chain."""
    return bool(run.data.request.fallback_models)


# ---- edge handlers ----------------------------------------------------------------------------


def note_failure(run: RunState[R], event: Event[ModelFailure]) -> R:
    """Remember the failed attempt (its retry-after, status) for the backoff and for surfacing."""
    return with_request(run.data, failure=event.data)


def switch_to_fallback_model(run: RunState[R], event: Event[ModelFailure]) -> R:
    """Rerun the same logical turn on the next model; what the failed attempt produced is tombstoned."""
    request = run.data.request
    failure = event.data
    nxt, rest = request.fallback_models[0], request.fallback_models[1:]
    note = f"model {request.model} {failure.kind.replace('_', ' ')} ({failure.status}); switched to {nxt}"
    if failure.partial_content:
        note += f"; tombstoned {len(failure.partial_content)} provisional block(s)"
    caps = request.fallback_max_tokens  # each model's own max_tokens, as Claude Code sends it
    data = with_request(
        run.data,
        model=nxt,
        fallback_models=rest,
        max_tokens=caps[0] if caps else request.max_tokens,
        fallback_max_tokens=caps[1:],
        failure=failure,
    )
    return with_outcome(data, note=note)


@uses(states=("backing_off",), counters=("api_retries",))
def surface_failure(run: RunState[R], event: Event[ModelFailure | None]) -> R:
    """The recovery budget is spent (or there is none): the withheld error becomes the result."""
    failure = event.data if isinstance(event.data, ModelFailure) else run.data.request.failure
    if failure is None:
        return with_outcome(run.data, error="API Error: the request failed")
    message = api_error_text(failure)
    if run.state == "backing_off":
        message += f" (gave up after {run.count('api_retries')} retries)"
    return with_outcome(with_request(run.data, failure=failure), error=message, api_error_status=failure.status)


@uses(params=("max_retry_after_s",))
def surface_long_retry_after(run: RunState[R], event: Event[None]) -> R:
    """The server asked for a wait longer than the cap: not slept through; the result says until when."""
    failure = run.data.request.failure
    assert failure is not None and failure.retry_after_s is not None  # retry_after_over_cap held
    when = ""
    if failure.retry_at is not None:
        at = datetime.datetime.fromtimestamp(failure.retry_at, datetime.UTC)
        when = f" at {at.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
    message = (
        f"{api_error_text(failure)} (the server asked to be retried in {failure.retry_after_s:g} s{when}, "
        f"longer than the {retry_after_cap_s(run):g} s this run waits: --max-retry-after)"
    )
    return with_outcome(run.data, error=message, api_error_status=failure.status)


def api_error_text(failure: ModelFailure) -> str:
    """How a surfaced API failure reads in the result: ``API Error: 400 prompt is too long: …``."""
    status = f"{failure.status} " if failure.status else ""
    return f"API Error: {status}{failure.message}".rstrip()
