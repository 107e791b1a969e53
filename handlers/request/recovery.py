"""Request layer, the recoveries: backoff before a retry, model fallback, surfacing a failure.

Owns the backoff (``back_off``, and the effect ``wait_before_retry`` of the model
request; the summary requests of compaction back off through it too), the guard
``fallback_available``
and the pure edge handlers of the retry, fallback and surfacing transitions. Which
edge is taken — retry, fallback, stream fallback, surfacing — is decided by
``machines/query_loop.yaml``; the backoff asks the machine (``next_reason``) rather
than re-deriving its caps.
"""

from __future__ import annotations

import asyncio
from typing import Any

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..outcome import with_outcome
from .client import ModelFailure
from .data import ApiRetry, R, RequestServices, with_request

__all__ = [
    "api_error_text",
    "back_off",
    "fallback_available",
    "note_failure",
    "surface_failure",
    "switch_to_fallback_model",
    "wait_before_retry",
]


@uses(counters=("api_retries",))
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
    """Sleep before a retry: ``failure``'s retry-after(-ms) when the server sent one, else backoff with jitter.

    ``counter`` counts the retries so far; ``retry_reasons`` are the edges on ``elapsed``
    that retry. When the machine would take another edge (the retry budget is spent,
    it surfaces the failure instead), the sleep would only delay that: it is skipped.
    """
    if ctx.next_reason("elapsed") not in retry_reasons:
        return
    run = ctx.run
    services = ctx.services
    retries = run.count(counter)
    if failure is not None and failure.retry_after_s is not None:
        delay = max(0.0, failure.retry_after_s)
    else:
        delay = min(services.retry_base_delay_s * (2**retries), services.retry_max_delay_s)
        delay *= 1.0 - 0.25 * services.rng.random()  # jitter, so clients don't retry in lockstep
    ctx.publish(
        ApiRetry(
            attempt=retries + 1,
            max_retries=run.cap(counter),
            retry_delay_ms=round(delay * 1000),
            error_status=failure.status if failure else None,
            error=failure.message if failure else "",
        )
    )
    await asyncio.sleep(delay)


# ---- guards ---------------------------------------------------------------------------------


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
    data = with_request(run.data, model=nxt, fallback_models=rest, failure=failure)
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


def api_error_text(failure: ModelFailure) -> str:
    """How a surfaced API failure reads in the result: ``API Error: 400 prompt is too long: …``."""
    status = f"{failure.status} " if failure.status else ""
    return f"API Error: {status}{failure.message}".rstrip()
