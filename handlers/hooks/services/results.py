"""Hooks: what a hook's run said, read from its exit code and output, and every hook of one event folded together.

Owns :class:`HookResult`, :class:`HookError` and :class:`HookOutcome`. Starting a hook is ``process``'s.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from queryloop.fsm import loads_json

from .config import HookEvent, json_kind

__all__ = [
    "HookContribution",
    "HookError",
    "HookOutcome",
    "HookResult",
    "fold_outcome",
    "interpret_command",
    "output_problem",
    "truncate_output",
]

# Events where exit code 2 (or `decision: "block"`) blocks something; elsewhere
# exit 2 is reported as a non-blocking error with its stderr.
_BLOCKING_EVENTS: Final[frozenset[HookEvent]] = frozenset(
    {"PreToolUse", "PostToolUse", "Stop", "SubagentStop", "UserPromptSubmit", "PreCompact"}
)
# Events whose plain (non-JSON) stdout on exit 0 is context for the model.
_CONTEXT_EVENTS: Final[frozenset[HookEvent]] = frozenset({"UserPromptSubmit", "SessionStart"})

_OUTPUT_LIMIT: Final = 10_000
_PERMISSION_RANK: Final[Mapping[str, int]] = {"allow": 0, "ask": 1, "deny": 2}


@attrs.frozen(kw_only=True)
class HookError:
    """A non-blocking hook failure: which command and why. The tool/turn carries on."""

    command: str
    message: str


@attrs.frozen(kw_only=True)
class HookResult:
    """What one hook process did. ``exit_code`` is ``None`` if it never exited on its own."""

    command: str
    exit_code: int | None
    duration_ms: int
    stdout: str
    stderr: str
    timed_out: bool = False


@attrs.frozen(kw_only=True)
class HookOutcome:
    """Every matching hook's result for one event, folded together.

    ``blocked`` means an exit code 2 or ``decision: "block"`` on an event that can
    block (PreToolUse: block the tool; PostToolUse: tell the model; Stop/SubagentStop:
    keep going with the reason as feedback; UserPromptSubmit: erase the prompt;
    PreCompact: skip compaction). ``continue_`` is False if any hook said
    ``"continue": false``, which ends the run with ``stop_reason``.
    """

    event: str
    blocked: bool = False
    block_reasons: tuple[str, ...] = ()
    continue_: bool = True
    stop_reason: str | None = None
    permission_decision: Literal["allow", "deny", "ask"] | None = None
    permission_decision_reason: str | None = None
    decision: Literal["block", "approve"] | None = None
    additional_context: tuple[str, ...] = ()  # hookSpecificOutput.additionalContext, each hook's
    output: tuple[str, ...] = ()  # plain stdout on exit 0 of a context event (SessionStart, UserPromptSubmit)
    updated_input: Mapping[str, Any] | None = None
    updated_output: Any = None
    system_messages: tuple[str, ...] = ()
    suppress_output: bool = False
    errors: tuple[HookError, ...] = ()
    results: tuple[HookResult, ...] = ()
    # Elicitation: the answer a hook gave an MCP server's request for input (action, then the form's values)
    elicitation: tuple[Literal["accept", "decline", "cancel"], Mapping[str, Any]] | None = None


def truncate_output(text: str) -> str:
    """``text`` cut to the characters of a hook's output that are kept, saying how many more there were."""
    if len(text) <= _OUTPUT_LIMIT:
        return text
    return text[:_OUTPUT_LIMIT] + f"\n… [{len(text) - _OUTPUT_LIMIT} more characters]"


@attrs.frozen(kw_only=True)
class HookContribution:
    """One hook's raw result plus its parsed contribution to the outcome."""

    result: HookResult
    errors: tuple[HookError, ...] = ()
    block_reason: str | None = None
    output: Mapping[str, Any] | None = None
    plain_stdout: str | None = None


def interpret_command(result: HookResult, *, stdout: str, stderr: str, event: str) -> HookContribution:
    """What a command hook contributes, read from its exit code, stdout and stderr."""
    command, code = result.command, result.exit_code
    if code == 0:
        text = stdout.strip()
        if text.startswith("{"):
            try:
                output = loads_json(text)
            except json.JSONDecodeError as exc:  # not JSON, or past what can be read safely
                error = HookError(command=command, message=f"exited 0 but its stdout is not valid JSON ({exc})")
                return HookContribution(result=result, errors=(error,))
            problem = output_problem(output, event)
            if problem is not None:
                error = HookError(command=command, message=f"exited 0 but its JSON output was ignored: {problem}")
                return HookContribution(result=result, errors=(error,))
            return HookContribution(result=result, output=output)
        return HookContribution(result=result, plain_stdout=text or None)
    reason = stderr.strip()
    if code == 2 and event in _BLOCKING_EVENTS:
        return HookContribution(
            result=result, block_reason=reason or f"blocked by hook {command!r} (exit code 2, no stderr)"
        )
    if code is not None and code < 0:
        why = (
            f"was killed by signal {signal.Signals(-code).name}"
            if -code in signal.valid_signals()
            else f"was killed by signal {-code}"
        )
    else:
        why = f"exited with code {code}"
    detail = f": {reason}" if reason else ""
    return HookContribution(result=result, errors=(HookError(command=command, message=f"{why}{detail}"),))


_OUTPUT_FIELD_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "continue": (bool,),
    "stopReason": (str,),
    "suppressOutput": (bool,),
    "decision": (str,),
    "reason": (str,),
    "systemMessage": (str,),
    "hookSpecificOutput": (dict,),
}
_SPECIFIC_FIELD_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "hookEventName": (str,),
    "permissionDecision": (str,),
    "permissionDecisionReason": (str,),
    "additionalContext": (str,),
    "updatedInput": (dict,),
}


def output_problem(output: object, event: str) -> str | None:
    """Why a hook's JSON output must be ignored, or ``None`` if it is usable."""
    if not isinstance(output, dict):
        return f"expected an object, found {json_kind(output)}"
    for key, types in _OUTPUT_FIELD_TYPES.items():
        if key in output and output[key] is not None and not isinstance(output[key], types):
            return f"{key!r} has the wrong type ({json_kind(output[key])})"
    if output.get("decision") not in (None, "block", "approve"):
        return f'\'decision\' must be "block" or "approve", found {json_kind(output["decision"])}'
    specific = output.get("hookSpecificOutput")
    if isinstance(specific, dict):
        for key, types in _SPECIFIC_FIELD_TYPES.items():
            if key in specific and specific[key] is not None and not isinstance(specific[key], types):
                return f"'hookSpecificOutput.{key}' has the wrong type ({json_kind(specific[key])})"
        name = specific.get("hookEventName")
        if name is not None and name != event:
            return f"'hookSpecificOutput.hookEventName' is {name!r} but the event is {event!r}"
        decision = specific.get("permissionDecision")
        if decision is not None and decision not in _PERMISSION_RANK:
            return f"'hookSpecificOutput.permissionDecision' must be allow, deny or ask, found {json_kind(decision)}"
    return None


class _Fold:
    """What every hook of one event said, gathered in order: the pieces of its :class:`HookOutcome`."""

    def __init__(self, event: str) -> None:
        self.event = event
        self.block_reasons: list[str] = []
        self.errors: list[HookError] = []
        self.contexts: list[str] = []
        self.outputs: list[str] = []
        self.messages: list[str] = []
        self.continue_ = True
        self.stop_reason: str | None = None
        self.suppress = False
        self.decision: Literal["block", "approve"] | None = None
        self.permission: Literal["allow", "deny", "ask"] | None = None
        self.permission_reason: str | None = None
        self.updated_input: Mapping[str, Any] | None = None
        self.updated_output: Any = None
        self.elicitation: tuple[Literal["accept", "decline", "cancel"], Mapping[str, Any]] | None = None

    def offer_permission(self, value: Literal["allow", "deny", "ask"], reason: str | None) -> None:
        """Several hooks may decide: deny beats ask beats allow; the first hook giving the winning one gives the
        reason."""
        if self.permission is None or _PERMISSION_RANK[value] > _PERMISSION_RANK[self.permission]:
            self.permission, self.permission_reason = value, reason

    def add(self, run: HookContribution) -> None:
        self.errors.extend(run.errors)
        if run.block_reason is not None:
            self.block_reasons.append(run.block_reason)
            if self.event == "PreToolUse":
                self.offer_permission("deny", run.block_reason)
        if run.plain_stdout is not None and self.event in _CONTEXT_EVENTS:
            self.outputs.append(run.plain_stdout)
        if run.output is not None:
            self._output(run, run.output)

    def _output(self, run: HookContribution, out: Mapping[str, Any]) -> None:
        if out.get("continue") is False:
            self.continue_ = False
            if self.stop_reason is None and isinstance(out.get("stopReason"), str):
                self.stop_reason = out["stopReason"]
        self.suppress = self.suppress or out.get("suppressOutput") is True
        if isinstance(out.get("systemMessage"), str):
            self.messages.append(out["systemMessage"])
        reason = out.get("reason") if isinstance(out.get("reason"), str) else None
        if out.get("decision") == "block":
            self.decision = "block"
            if self.event in _BLOCKING_EVENTS:
                self.block_reasons.append(reason or f"blocked by hook {run.result.command!r}")
        elif out.get("decision") == "approve" and self.decision is None:
            self.decision = "approve"
        specific = out.get("hookSpecificOutput")
        specific = specific if isinstance(specific, dict) else {}
        if self.event == "PreToolUse":
            self._pre_tool_use(out, specific, reason)
        elif self.event == "PostToolUse":
            self._post_tool_use(specific)
        elif self.event == "Elicitation":
            self._elicitation(specific)
        if isinstance(specific.get("additionalContext"), str):
            self.contexts.append(specific["additionalContext"])

    def _pre_tool_use(self, out: Mapping[str, Any], specific: Mapping[str, Any], reason: str | None) -> None:
        chosen = specific.get("permissionDecision")
        if chosen is None and out.get("decision") is not None:
            chosen = "allow" if out["decision"] == "approve" else "deny"  # the older top-level form
        if chosen is not None:
            self.offer_permission(chosen, specific.get("permissionDecisionReason") or reason)
        if isinstance(specific.get("updatedInput"), dict):
            self.updated_input = specific["updatedInput"]

    def _post_tool_use(self, specific: Mapping[str, object]) -> None:
        for key in ("updatedOutput", "updatedMCPToolOutput"):
            if key in specific:
                self.updated_output = specific[key]

    def _elicitation(self, specific: Mapping[str, Any]) -> None:
        if self.elicitation is None and specific.get("action") in ("accept", "decline", "cancel"):
            values = specific.get("content")
            self.elicitation = (specific["action"], values if isinstance(values, dict) else {})

    def outcome(self, runs: Sequence[HookContribution]) -> HookOutcome:
        return HookOutcome(
            event=self.event,
            blocked=bool(self.block_reasons),
            block_reasons=tuple(self.block_reasons),
            continue_=self.continue_,
            stop_reason=self.stop_reason,
            permission_decision=self.permission,
            permission_decision_reason=self.permission_reason,
            decision=self.decision,
            additional_context=tuple(self.contexts),
            output=tuple(self.outputs),
            updated_input=self.updated_input,
            updated_output=self.updated_output,
            system_messages=tuple(self.messages),
            suppress_output=self.suppress,
            errors=tuple(self.errors),
            results=tuple(run.result for run in runs),
            elicitation=self.elicitation,
        )


def fold_outcome(event: str, runs: Sequence[HookContribution]) -> HookOutcome:
    """Every hook's contribution to ``event``, in order, folded into one outcome."""
    fold = _Fold(event)
    for run in runs:
        fold.add(run)
    return fold.outcome(runs)
