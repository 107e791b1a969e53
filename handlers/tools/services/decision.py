"""The permission decision's records: the verdict for one call, a callback's answer, and an ask finalized.

Owns :class:`PermissionDecision`, :data:`DecisionKind`, :class:`PermissionAnswer`, :data:`AskPermission`,
:func:`finalize_ask` and the :func:`allow`/:func:`ask` shorthands. Deciding is ``permissions``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import attrs

from ...messages import ToolCall
from .rules import PermissionBehavior, PermissionMode

__all__ = [
    "AskPermission",
    "DecisionKind",
    "PermissionAnswer",
    "PermissionDecision",
    "allow",
    "ask",
    "finalize_ask",
]


DecisionKind = Literal["rule", "mode", "hook", "workingDir", "subcommandResults"]
"""What decided a verdict, as Claude Code 2.1.235 names it on its ``system/permission_denied`` line."""


@attrs.frozen(kw_only=True)
class PermissionDecision:
    """The verdict for one tool call: which behaviour, which rule (if any) and why."""

    behavior: PermissionBehavior
    rule: str | None
    reason: str
    # False for a file tool refused by a path deny rule: Claude Code does not list those in the
    # result's permission_denials (a Bash command refused for the file it reads is listed).
    listed: bool = True
    # An ask that a PreToolUse hook's allow does not lift (an ask rule, a file that runs later, a
    # command leaving the sandbox or one the rules cannot be applied to): only somebody asked may allow it.
    firm: bool = False
    # What decided it, in Claude Code 2.1.235's terms (its ``decision_reason_type``, a value programs read):
    # "rule", "mode", "hook", "workingDir", "subcommandResults" (a Bash rule); None where it names none.
    kind: DecisionKind | None = None
    # A denial standing for an ask nobody could answer (a run that cannot ask; plan mode, where Claude Code asks):
    # Claude Code marks its result "user-rejected" rather than "permission-rule".
    unanswered: bool = False


@attrs.frozen(kw_only=True)
class PermissionAnswer:
    """A permission callback's answer for one call that would ask: allowed (maybe with new input) or not, and why."""

    allow: bool
    updated_input: Mapping[str, Any] | None = None  # allowed with this input instead of the model's
    message: str = ""  # why it was denied: the model reads it in the error result


AskPermission = Callable[[ToolCall, str], Awaitable[PermissionAnswer]]
"""A permission callback: given a call that would ask and the reason it asks, the answer."""


def allow(reason: str, rule: str | None = None) -> PermissionDecision:
    """An allow for ``reason``, by ``rule`` when one allows it."""
    return PermissionDecision(behavior="allow", rule=rule, reason=reason)


def ask(reason: str, rule: str | None = None, *, firm: bool = False) -> PermissionDecision:
    """An ask for ``reason``: firm (a PreToolUse hook's allow does not lift it) when asked to be or a rule asks."""
    return PermissionDecision(behavior="ask", rule=rule, reason=reason, firm=firm or rule is not None)


def finalize_ask(decision: PermissionDecision, *, mode: PermissionMode, interactive: bool) -> PermissionDecision:
    """An ask as it stands when nobody may be asked: denied in ``dontAsk`` mode and in a non-interactive run."""
    if decision.behavior != "ask":
        return decision
    if mode == "dontAsk":
        return attrs.evolve(
            decision, behavior="deny", reason=f"{decision.reason}; dontAsk mode denies instead of asking", kind="mode"
        )
    if not interactive:
        return attrs.evolve(
            decision,
            behavior="deny",
            reason=f"{decision.reason}; denied because this run is non-interactive and cannot ask",
            unanswered=True,
        )
    return decision
