"""Model prices and size limits, and the cost of one request's usage.

Owns ``models.yaml`` beside it (prices, windows, output limits) and usage as US dollars. An unlisted model is priced
as Claude Code 2.1.235 prices one (:data:`UNLISTED_MODEL`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any

import attrs

__all__ = [
    "HOUR_WRITE_MULTIPLIER",
    "LONG_CONTEXT_BETA",
    "LONG_CONTEXT_WINDOW",
    "UNLISTED_MODEL",
    "ModelInfo",
    "OutputLimits",
    "context_window",
    "cost_usd",
    "known_models",
    "model_info",
    "output_limits",
    "wire_model",
]

_PER_MILLION = 1_000_000.0
HOUR_WRITE_MULTIPLIER = 2.0
"""A 1-hour cache write (``cache_creation.ephemeral_1h_input_tokens``) costs twice the input price."""


LONG_CONTEXT = "[1m]"
LONG_CONTEXT_WINDOW = 1_000_000
LONG_CONTEXT_BETA = "context-1m-2025-08-07"
"""A model named with ``[1m]`` (``sonnet[1m]``) is its base id sent with this ``anthropic-beta`` and a
1,000,000-token window, as Claude Code 2.1.235 sends and counts it (probed: tests/conformance/test_stream.py)."""


def wire_model(model: str) -> tuple[str, tuple[str, ...]]:
    """The id a request sends for ``model`` and the betas it asks for: ``[1m]`` is the long-context beta."""
    if model.lower().endswith(LONG_CONTEXT):
        return model[: -len(LONG_CONTEXT)], (LONG_CONTEXT_BETA,)
    return model, ()


@attrs.frozen(kw_only=True)
class ModelInfo:
    """One model's prices (USD per million tokens) and limits."""

    name: str
    input: float
    output: float
    cache_write: float
    cache_read: float
    context_window: int
    max_output_tokens: int
    aliases: tuple[str, ...] = ()


UNLISTED_MODEL = ModelInfo(
    name="(unlisted)",
    input=5.0,
    output=25.0,
    cache_write=6.25,
    cache_read=0.50,
    context_window=200_000,
    max_output_tokens=32_000,
)
"""The prices and window of a model missing from ``models.yaml``: Claude Code 2.1.235's for one.

Observed side by side on the embedded server: for a model id it does not know, Claude
Code reports a cost at $5 / $25 per million input / output tokens, $6.25 per million
cache-write and $0.50 per million cache-read tokens (Opus 4.5's prices) and a 200,000-token
``contextWindow``, where a null cost would leave ``--max-budget-usd`` unable to stop.
"""


@attrs.frozen(kw_only=True)
class OutputLimits:
    """A model's ``max_tokens``: what a request sends unless asked otherwise, and the most it may ask for."""

    default: int
    cap: int


@functools.cache
def _document() -> Mapping[str, Any]:
    text = (
        resources.files(__package__ or "queryloop.handlers.request").joinpath("models.yaml").read_text(encoding="utf-8")
    )
    import yaml  # here: read once, when a price or a window is first asked for

    document: Mapping[str, object] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return document


@functools.cache
def _output_table() -> Mapping[str, OutputLimits]:
    raw: dict[str, Any] = _document()["output_tokens"]
    return {prefix: OutputLimits(default=int(v["default"]), cap=int(v["cap"])) for prefix, v in raw.items()}


def output_limits(model: str) -> OutputLimits:
    """The output limits of ``model``, by the longest prefix ``models.yaml`` lists (else the unlisted model's)."""
    table = _output_table()
    matches = [prefix for prefix in table if prefix != "unlisted" and model.startswith(prefix)]
    return table[max(matches, key=len)] if matches else table["unlisted"]


@functools.cache
def _table() -> Mapping[str, ModelInfo]:
    raw: dict[str, Any] = _document()["models"]
    table: dict[str, ModelInfo] = {}
    for name, entry in raw.items():
        info = ModelInfo(
            name=name,
            input=float(entry["input"]),
            output=float(entry["output"]),
            cache_write=float(entry["cache_write"]),
            cache_read=float(entry["cache_read"]),
            context_window=int(entry["context_window"]),
            max_output_tokens=int(entry["max_output_tokens"]),
            aliases=tuple(entry.get("aliases") or ()),
        )
        for key in (name, *info.aliases):
            if key in table:
                raise ValueError(
                    f"handlers/request/services/models.yaml: model id {key!r} is listed twice (keep one entry)"
                )
            table[key] = info
    return table


@functools.lru_cache(maxsize=64)  # asked every request (its cost, the context's window); the table never changes
def model_info(model: str) -> ModelInfo | None:
    """The entry for ``model`` (a name or one of its aliases; with ``[1m]``, its 1M window), or None if unknown."""
    base, betas = wire_model(model)
    info = _table().get(base)
    return attrs.evolve(info, context_window=LONG_CONTEXT_WINDOW) if info is not None and betas else info


def known_models() -> tuple[str, ...]:
    """Every model id with a price, aliases included, sorted."""
    return tuple(sorted(_table()))


def context_window(model: str) -> int | None:
    """The context window of ``model`` in tokens, or None if unknown."""
    info = model_info(model)
    return info.context_window if info else None


def _tokens(usage: Mapping[str, object], key: str) -> int:
    value = usage.get(key)
    return int(value) if isinstance(value, (int, float)) else 0


def cost_usd(model: str, usage: Mapping[str, object]) -> float:
    """Cost in USD of ``usage`` (API field names) on ``model``; an unlisted model at :data:`UNLISTED_MODEL`'s prices."""
    info = model_info(model) or UNLISTED_MODEL
    split = usage.get("cache_creation")
    hour = _tokens(split, "ephemeral_1h_input_tokens") if split is not None and isinstance(split, Mapping) else 0
    return (
        _tokens(usage, "input_tokens") * info.input
        + _tokens(usage, "output_tokens") * info.output
        + (_tokens(usage, "cache_creation_input_tokens") - hour) * info.cache_write
        + hour * info.input * HOUR_WRITE_MULTIPLIER
        + _tokens(usage, "cache_read_input_tokens") * info.cache_read
    ) / _PER_MILLION
