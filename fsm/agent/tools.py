"""The built-in tools of the coding agent and the public API for running tool calls.

Owns the default tool set (``Read``, ``Write``, ``Edit``, ``Bash``, ``Glob``,
``Grep``, built once at import) and re-exports, from one place, everything a caller
needs: the records (``tools_base``), the registry and dispatcher (``tool_dispatch``).
The tools themselves live in ``tools_files``, ``tools_search`` and ``tools_bash``.

Results are API ``tool_result`` blocks that always carry ``is_error`` (``False`` on
success). Tool calls run under a :class:`ToolContext` whose ``cwd`` confines every
file path.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from fsm.agent.tool_dispatch import (
    OnResult,
    ToolRegistry,
    run_tool_calls,
    synthetic_error_results,
)
from fsm.agent.tools_base import (
    ToolCall,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolResultBlock,
    ToolRun,
    ToolSpec,
    tool_result_block,
)
from fsm.agent.tools_bash import BASH
from fsm.agent.tools_files import EDIT, READ, WRITE
from fsm.agent.tools_search import GLOB, GREP

__all__ = [
    "OnResult",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "ToolResultBlock",
    "ToolRun",
    "ToolSpec",
    "default_registry",
    "default_tools",
    "run_tool_calls",
    "synthetic_error_results",
    "tool_result_block",
]

_DEFAULT_TOOLS: Final = (READ, WRITE, EDIT, BASH, GLOB, GREP)
_DEFAULT_REGISTRY: Final = ToolRegistry(tools=_DEFAULT_TOOLS)


def default_tools() -> tuple[ToolSpec, ...]:
    """The built-in tools, in the order they are offered to the model (shared, immutable)."""
    return _DEFAULT_TOOLS


def default_registry(allowed: Collection[str] | None = None) -> ToolRegistry:
    """A registry of the built-in tools, restricted to ``allowed`` names if given.

    Without ``allowed`` the shared, prebuilt registry is returned.
    """
    return _DEFAULT_REGISTRY if allowed is None else _DEFAULT_REGISTRY.only(allowed)
