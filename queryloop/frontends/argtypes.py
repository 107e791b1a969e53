"""The value types of the command-line flags: each turns one argument into a value or a one-line usage error.

Shared by every parser of the ``queryloop`` program (the run's flags, ``worker`` and
``submit``); imports nothing but the standard library, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["at_least_one", "budget", "models", "percent", "positive_int", "seconds"]


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
