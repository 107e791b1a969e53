"""Usage summed over a run's requests, per model, and what it costs.

Owns :class:`ModelUsage` and :class:`UsageTotals`. Prices are ``pricing``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .pricing import cost_usd

__all__ = ["ModelUsage", "UsageTotals"]

_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
_CACHE_SPLIT_KEYS = ("ephemeral_1h_input_tokens", "ephemeral_5m_input_tokens")
"""A reply's ``usage.cache_creation`` split of its cache writes by lifetime, in Claude Code's result order."""


@attrs.frozen(kw_only=True)
class ModelUsage:
    """Usage summed over the requests to one model, and its cost (None if the model has no price)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0
    """The part of the cache writes the replies reported under ``cache_creation`` as 1-hour ones."""
    ephemeral_5m_input_tokens: int = 0
    """The part the replies reported as 5-minute ones (a reply without the split adds to neither)."""
    cost_usd: float | None = 0.0


_NO_USAGE = ModelUsage()  # a model's totals before its first request (frozen: one is shared)


def _split(usage: Mapping[str, Any]) -> tuple[int, int]:
    """One reply's cache writes reported as 1-hour and as 5-minute ones (0 and 0 without the split)."""
    split = usage.get("cache_creation")
    if split is None or not isinstance(split, Mapping):  # None first: no ABC check on the usual reply
        return 0, 0
    return int(split.get("ephemeral_1h_input_tokens") or 0), int(split.get("ephemeral_5m_input_tokens") or 0)


@attrs.frozen(kw_only=True)
class UsageTotals:
    """Usage and cost per model over a run; :meth:`add` returns a new record."""

    by_model: Mapping[str, ModelUsage] = attrs.field(factory=dict)

    def add(self, model: str, usage: Mapping[str, Any]) -> UsageTotals:
        """These totals plus one request's ``usage`` (API field names) on ``model``."""
        old = self.by_model.get(model, _NO_USAGE)
        cost = cost_usd(model, usage)
        get = usage.get
        hour, five = _split(usage)
        new = ModelUsage(
            requests=old.requests + 1,
            input_tokens=old.input_tokens + int(get("input_tokens") or 0),
            output_tokens=old.output_tokens + int(get("output_tokens") or 0),
            cache_creation_input_tokens=old.cache_creation_input_tokens + int(get("cache_creation_input_tokens") or 0),
            cache_read_input_tokens=old.cache_read_input_tokens + int(get("cache_read_input_tokens") or 0),
            ephemeral_1h_input_tokens=old.ephemeral_1h_input_tokens + hour,
            ephemeral_5m_input_tokens=old.ephemeral_5m_input_tokens + five,
            cost_usd=None if cost is None or old.cost_usd is None else old.cost_usd + cost,
        )
        return UsageTotals(by_model={**self.by_model, model: new})

    def __add__(self, other: UsageTotals) -> UsageTotals:
        """Both runs' usage (a run's and its sub-agents'), model by model."""
        merged = dict(self.by_model)
        for model, u in other.by_model.items():
            old = merged.get(model)
            if old is None:
                merged[model] = u
                continue
            counts = {k: getattr(old, k) + getattr(u, k) for k in (*_USAGE_KEYS, *_CACHE_SPLIT_KEYS)}
            cost = None if old.cost_usd is None or u.cost_usd is None else old.cost_usd + u.cost_usd
            merged[model] = ModelUsage(requests=old.requests + u.requests, cost_usd=cost, **counts)
        return UsageTotals(by_model=merged)

    @property
    def total_cost_usd(self) -> float | None:
        """The summed cost, or None when any model used has no price (never a partial guess)."""
        costs = [u.cost_usd for u in self.by_model.values()]
        if any(c is None for c in costs):
            return None
        return sum(c for c in costs if c is not None)

    @property
    def known_cost_usd(self) -> float:
        """The summed cost of the models that have a price (a lower bound when some don't)."""
        return sum(u.cost_usd for u in self.by_model.values() if u.cost_usd is not None)

    def usage(self) -> dict[str, Any]:
        """Token counts summed over all models, with API field names.

        The cache writes' split by lifetime comes under ``cache_creation``, as in a reply's
        usage and in Claude Code 2.1.235's result: the sums of what the replies reported.
        """

        def total(key: str) -> int:
            return sum(getattr(u, key) for u in self.by_model.values())

        return {**{k: total(k) for k in _USAGE_KEYS}, "cache_creation": {k: total(k) for k in _CACHE_SPLIT_KEYS}}

    def model_usage(self) -> dict[str, dict[str, object]]:
        """Per-model usage in the result object's ``model_usage`` shape (camelCase keys)."""
        return {
            model: {
                "inputTokens": u.input_tokens,
                "outputTokens": u.output_tokens,
                "cacheCreationInputTokens": u.cache_creation_input_tokens,
                "cacheReadInputTokens": u.cache_read_input_tokens,
                "costUSD": u.cost_usd,
            }
            for model, u in self.by_model.items()
        }
