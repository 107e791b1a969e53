"""The value types of the command-line flags: each turns one argument into a value or a one-line usage error.

Shared by every parser of the ``queryloop`` program (the run's flags, ``worker`` and
``submit``); imports nothing but the standard library, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping

__all__ = [
    "PARAM_FLAGS",
    "at_least_one",
    "beyond_declared_range",
    "budget",
    "models",
    "percent",
    "positive_int",
    "seconds",
]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def at_least_one(text: str) -> int:
    value = positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an amount in USD, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite amount > 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value:g}")
    return value


def percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage between 1 and 100, got {value:g}")
    return value


def models(text: str) -> tuple[str, ...]:
    models = tuple(m.strip() for m in text.split(",") if m.strip())
    if not models:
        raise argparse.ArgumentTypeError("expected one to three model names, comma separated")
    if len(models) > 3:
        raise argparse.ArgumentTypeError(f"at most 3 fallback models, got {len(models)}")
    return models


#: The run's flags that set a param of the query loop: the flag's attribute, the param and the least the flag takes.
PARAM_FLAGS: dict[str, tuple[str, str, int]] = {
    "--max-turns": ("max_turns", "max_turns", 1),
    "--max-agent-turns": ("max_agent_turns", "max_agent_turns", 1),
    "--max-retries": ("max_retries", "max_retries", 0),
    "--max-retry-after": ("max_retry_after", "max_retry_after_s", 0),
}


def beyond_declared_range(given: Mapping[str, float | None], most: Mapping[str, float | None]) -> str | None:
    """Why a flag's value (``given``, by attribute) is above the most its param accepts (``most``, the machine's
    ``max:``), as a usage error words it; ``None`` when every one is within its range.

    The checker proves the figures (requests per turn, a turn with its agents) for every value within the
    declared ranges, so a run takes no other: Claude Code 2.1.235 takes any ``--max-turns``."""
    for flag, (attribute, param, least) in PARAM_FLAGS.items():
        value, top = given.get(attribute), most.get(param)
        if value is None or top is None or value <= top:
            continue
        shown = f"{least} to {top:g} (the machine's range of {param})"
        return f"argument {flag}: expected a number from {shown}, got {value:g}"
    return None
