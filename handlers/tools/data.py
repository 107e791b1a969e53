"""The tool layer's slice of the run data, what its handlers need, and the item it publishes.

Owns :class:`ToolsData` (pending calls, refusals, permission denials, "always" rules, tool turns, the last denial's
signature), the layer's protocols and the items it publishes: :class:`ToolResultPublished`, :class:`PermissionDenied`.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypeVar

import attrs

from ..hooks import HookServices
from ..messages import Block, ToolCall, ToolResultBlock, synthetic_error_results, user_message
from ..outcome import SharedData, evolve
from ..request import RequestData
from ..session import SessionData, SessionServices
from .services.base import BackgroundTask, ToolContext, ToolSpec
from .services.decision import AskPermission, DecisionKind
from .services.dispatch import CallRunner, ToolRegistry
from .services.rules import PermissionMode, PermissionRules

__all__ = [
    "NotRun",
    "PermissionDenied",
    "ToolResultPublished",
    "ToolServices",
    "ToolsData",
    "ToolsRun",
    "close_open_calls",
    "with_tools",
]


@attrs.frozen(kw_only=True, slots=True)
class ToolsData:
    """What the tool layer keeps between steps."""

    pending: tuple[ToolCall, ...] = ()  # tool_use blocks of the last assistant message still without results
    denied: tuple[ToolResultBlock, ...] = ()  # error results of this turn's calls that do not run (unknown, refused)
    order: tuple[str, ...] = ()  # tool_use ids of this turn in the model's order (set when the gate refused some)
    permission_denials: tuple[dict[str, Any], ...] = ()  # {tool_name, tool_use_id, tool_input}, for the result
    always_allowed: frozenset[str] = frozenset()  # allow rules the user created by answering "always"
    turn: int = 0  # tool turns completed
    last_denial: str | None = None  # the calls of the last tool turn when the gate denied them all (denial_signature)
    completed: tuple[ToolResultBlock, ...] = ()  # results of calls that finished while the turn runs (seen on abort)
    background: tuple[BackgroundTask, ...] = ()  # work calls of the run started and left running (sub-agents)
    # who decided the last gated turn's calls when not the configuration (rules, mode): tool_use id → hook,
    # user_temporary, user_permanent or user_reject (Claude Code's decision sources); absent: config
    decision_sources: tuple[tuple[str, str], ...] = ()
    hook_notes: tuple[str, ...] = ()  # the last gated turn's PreToolUse context for the model, sent after its results


class ToolsRun(SharedData, Protocol):
    """The run data as tool-layer handlers see it."""

    @property
    def tools(self) -> ToolsData: ...

    @property
    def session(self) -> SessionData: ...

    @property
    def request(self) -> RequestData: ...  # its tool_catalog: the tools beyond the registry offered this turn


T = TypeVar("T", bound=ToolsRun)


def with_tools(data: T, **changes: Any) -> T:
    """The run data with its tools slice changed as given."""
    return data.evolve(tools=evolve(data.tools, **changes))


def close_open_calls(data: T, message: str) -> T:
    """The run data with every tool_use of this turn answered, so the ledger stays closed.

    The gate's refusals keep their error results, calls that completed keep their real
    results, the other pending calls get one saying ``message``; results follow the
    model's order and nothing stays pending.
    """
    tools = data.tools
    if tools.pending or tools.denied:
        by_id = {str(r["tool_use_id"]): r.copy() for r in tools.denied}
        by_id.update((str(r["tool_use_id"]), r.copy()) for r in synthetic_error_results(tools.pending, message))
        by_id.update((str(r["tool_use_id"]), r.copy()) for r in tools.completed)
        order = tools.order or tuple(by_id)
        content: list[Block] = [by_id[i] for i in order if i in by_id]
        data = data.evolve(messages=data.messages.append(user_message(content)))
    return with_tools(data, pending=(), denied=(), order=(), completed=())


class ToolServices(HookServices, SessionServices, Protocol):
    """What tool-layer effects use: the tools, where they run, the permission settings, the hooks."""

    @property
    def tools(self) -> ToolRegistry: ...

    @property
    def tool_context(self) -> ToolContext: ...

    def extra_tool(self, name: str) -> ToolSpec | None:
        """A tool beyond the registry (an MCP server's) by the name the model calls it, as it can run now."""
        ...

    @property
    def permission_mode(self) -> PermissionMode: ...

    @property
    def rules(self) -> PermissionRules: ...

    @property
    def interactive(self) -> bool: ...

    @property
    def can_use_tool(self) -> AskPermission | None: ...  # answers what would ask, before any terminal prompt

    @property
    def call_runner(self) -> CallRunner | None: ...  # runs each call (the fleet: a durable step); None: in-process


@attrs.frozen(kw_only=True, slots=True)
class ToolResultPublished:
    """One tool's result, as soon as it completes."""

    call: ToolCall
    result: ToolResultBlock
    record: Any = None  # the tool's own record of the call, as Claude Code makes it, where it made one


NotRun = Literal["permission-rule", "user-rejected"]
"""Why a refused call did not run, as Claude Code 2.1.235 stamps its result (``non_execution_kind``)."""


@attrs.frozen(kw_only=True, slots=True)
class PermissionDenied:
    """A call the gate refused (listed in ``permission_denials``), published before its error result.

    ``shown``: refused before anybody could be asked — by a rule, the mode, the working directories, or a
    PreToolUse hook's ask this run cannot put to anyone — and so printed as Claude Code 2.1.235's
    ``system/permission_denied`` line; a hook's deny and an answer somebody gave print none, as in Claude Code.
    """

    call: ToolCall
    message: str  # the error result the model gets
    kind: DecisionKind | None  # what decided it (``decision_reason_type``)
    reason: str | None = None  # why, where Claude Code says (a hook's reason, a path outside the working directories)
    shown: bool = True  # a ``system/permission_denied`` line is printed for it (refused before anybody was asked)
    # the result's ``tool_result_meta`` kind: a rule's or a hook's or a callback's deny, or an ask nobody answered
    not_run: NotRun = "permission-rule"
