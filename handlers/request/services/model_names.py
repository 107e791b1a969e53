"""What a model name means: aliases, retired ids and the ``max_tokens`` a request sends, as Claude Code 2.1.235.

Owns the one resolution every way of naming a model goes through (flags, settings, environment, agents). Limits per
model are ``models.yaml``'s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Final

from .pricing import output_limits

__all__ = [
    "AGENT_CALL_MODELS",
    "FAMILIES",
    "max_output_tokens",
    "resolve_model",
    "subagent_model",
]

FAMILIES: Final = {
    "opus": "claude-opus-5",
    "sonnet": "claude-sonnet-5",
    "haiku": "claude-haiku-4-5-20251001",
    "fable": "claude-fable-5",
}
"""Each family's model, unless ``ANTHROPIC_DEFAULT_<FAMILY>_MODEL`` names another."""

_ALIASES: Final = {
    **{family: family for family in FAMILIES},
    "best": "opus",
    "default": "opus",
    "opusplan": "sonnet",  # opus in plan mode
}

AGENT_CALL_MODELS: Final = tuple(FAMILIES)
"""The ``model`` an Agent call may ask for (Claude Code refuses the call otherwise)."""

# Retired Opus ids Claude Code runs on the opus alias's model instead, unless
# CLAUDE_CODE_DISABLE_LEGACY_MODEL_REMAP is set (1 or true).
_RETIRED: Final = frozenset(
    {"claude-opus-4-0", "claude-opus-4-1", "claude-opus-4-20250514", "claude-opus-4-1-20250805"}
)

_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _family_model(family: str, env: Mapping[str, str]) -> str:
    chosen = env.get(f"ANTHROPIC_DEFAULT_{family.upper()}_MODEL") or FAMILIES[family]
    return _without_suffix(chosen)


def _split(name: str) -> tuple[str, str]:
    """``name`` and its trailing ``[…]`` apart (``("opus", "[1m]")``); no suffix: ``(name, "")``."""
    start = name.rfind("[")
    if start < 0 or not name.endswith("]") or "]" in name[start:-1]:
        return name, ""
    return name[:start], name[start:]


def _without_suffix(name: str) -> str:
    return _split(name)[0]


def resolve_model(name: str, env: Mapping[str, str], *, plan: bool = False) -> str:
    """The model id a request sends for ``name``: an alias (any case, ``[1m]`` allowed) is its family's model,
    a retired Opus id the opus alias's, any other name itself without a trailing ``[…]``.

    ``plan``: the run is in plan mode (``opusplan`` is opus there, sonnet elsewhere).
    """
    base, suffix = _split(name.strip())
    long = "[1m]" if suffix.lower() == "[1m]" else ""  # kept: the request asks for the 1M window (pricing.wire_model)
    alias = base.lower()
    if alias in _ALIASES and (long or not suffix):
        family = "opus" if alias == "opusplan" and plan else _ALIASES[alias]
        return _family_model(family, env) + long
    if base in _RETIRED and not _truthy(env.get("CLAUDE_CODE_DISABLE_LEGACY_MODEL_REMAP")):
        return _family_model("opus", env) + long
    return base + long


def subagent_model(env: Mapping[str, str]) -> str | None:
    """``CLAUDE_CODE_SUBAGENT_MODEL`` resolved: every sub-agent's model, above its definition and the call's."""
    name = env.get("CLAUDE_CODE_SUBAGENT_MODEL", "").strip()
    return resolve_model(name, env) if name else None


def _asked_tokens(value: str | None) -> int | None:
    """``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` as Claude Code reads it: the number it starts with, whole; none above 0 is
    no value (the model's default)."""
    match = _NUMBER.match(value or "")
    if match is None:
        return None
    number = float(match[0])
    return math.floor(number) if number >= 1 else None


def max_output_tokens(model: str, env: Mapping[str, str], asked: int | None = None) -> int:
    """The ``max_tokens`` each request to ``model`` sends: ``asked`` (queryloop's ``--max-output-tokens``) as it
    is, else ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` lowered to the model's cap, else the model's default."""
    if asked is not None:
        return asked
    limits = output_limits(model)
    wanted = _asked_tokens(env.get("CLAUDE_CODE_MAX_OUTPUT_TOKENS"))
    return limits.default if wanted is None else min(wanted, limits.cap)
