"""The built-in tools of the coding agent, in the order they are offered to the model.

Owns the default tool set, built once at import. The tools live in ``files``, ``search``, ``bash`` and ``web``; what
a tool name means to the rules is ``names``'.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from .base import ToolSpec
from .bash import BASH
from .dispatch import ToolRegistry
from .files import EDIT, READ, WRITE
from .search import GLOB, GREP
from .web import WEB_FETCH, WEB_SEARCH

__all__ = ["default_registry", "default_tools"]

_DEFAULT_TOOLS: Final = (READ, WRITE, EDIT, BASH, GLOB, GREP, WEB_FETCH, WEB_SEARCH)
_DEFAULT_REGISTRY: Final = ToolRegistry(tools=_DEFAULT_TOOLS)


def default_tools() -> tuple[ToolSpec, ...]:
    """The built-in tools, in the order they are offered to the model (shared, immutable)."""
    return _DEFAULT_TOOLS


def default_registry(allowed: Collection[str] | None = None) -> ToolRegistry:
    """A registry of the built-in tools, restricted to ``allowed`` names if given.

    Without ``allowed`` the shared, prebuilt registry is returned.
    """
    return _DEFAULT_REGISTRY if allowed is None else _DEFAULT_REGISTRY.only(allowed)
