"""Hook and permission layer: UserPromptSubmit, the permission gate, Stop hooks, `continue: false`.

Owns the effects ``submit_prompt`` (SessionStart + UserPromptSubmit hooks),
``gate_tool_calls`` (deny → ask → allow rules and the permission mode from
``fsm.agent.permissions``, PreToolUse hooks from ``fsm.agent.hooks``; in an
interactive terminal the user is asked y/n/always) and ``run_stop_hooks``, and
the pure edge handlers of their transitions. PostToolUse runs inside
``handlers.tooluse.run_tools``. Hooks are real subprocesses; a hook that times
out or crashes is a non-blocking error (published for verbose output).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import attrs

from fsm.agent.hooks import HookOutcome, run_hooks
from fsm.agent.loop_state import LoopConfig, LoopData, LoopServices, Notice, updated
from fsm.agent.permissions import decide
from fsm.agent.tools import ToolCall, synthetic_error_results, tool_result_block
from fsm.runtime import EffectContext, Event, RunState

from .tooluse import record_tool_results

_HOME = Path.home()  # read once: permission rules may name ~/ paths

__all__ = [
    "GateOutcome",
    "close_calls_and_stop",
    "gate_tool_calls",
    "hook",
    "record_block_limit",
    "record_gate",
    "record_hook_stop",
    "record_prompt_context",
    "record_tool_results_and_stop",
    "run_stop_hooks",
    "send_stop_feedback",
    "submit_prompt",
]


async def hook(ctx: EffectContext, event: str, payload: dict[str, Any]) -> HookOutcome | None:
    """Run the hooks configured for ``event`` (None when there are none); publish their errors."""
    services: LoopServices = ctx.services
    config: LoopConfig = services.config
    if not config.hooks.commands_for(event, payload):
        return None
    outcome = await run_hooks(
        event,
        payload,
        config.hooks,
        cwd=config.tool_context.cwd,
        session_id=config.session_id,
        transcript_path=config.transcript_path,
        permission_mode=config.permission_mode,
        timeout_default_s=config.hook_timeout_s,
    )
    for error in outcome.errors:
        ctx.publish(Notice(f"{event} hook error ({error.command}): {error.message}"))
    for message in outcome.system_messages:
        ctx.publish(Notice(f"{event} hook: {message}"))
    return outcome


def _stopped(outcome: HookOutcome | None) -> bool:
    return outcome is not None and not outcome.continue_


# ---- prompt -------------------------------------------------------------------------------


async def submit_prompt(ctx: EffectContext) -> Event:
    """SessionStart then UserPromptSubmit: context is added, a block erases the prompt."""
    data: LoopData = ctx.run.data
    first = data.messages.last() or {}
    prompt = first.get("content") if isinstance(first.get("content"), str) else ""
    context: list[str] = []
    start = await hook(ctx, "SessionStart", {"source": "startup"})
    if _stopped(start):
        return Event(name="hook_stopped", data=start)
    if start is not None:
        context.extend(start.additional_context)
    submit = await hook(ctx, "UserPromptSubmit", {"prompt": prompt})
    if _stopped(submit):
        return Event(name="hook_stopped", data=submit)
    if submit is not None and submit.blocked:
        return Event(name="prompt_blocked", data=submit)
    if submit is not None:
        context.extend(submit.additional_context)
    return Event(name="prompt_accepted", data=tuple(context))


def record_prompt_context(run: RunState, event: Event) -> RunState:
    """Hook output for SessionStart/UserPromptSubmit becomes context after the prompt."""
    context: tuple[str, ...] = event.data
    if not context:
        return run
    data: LoopData = run.data
    text = "\n\n".join(context)
    return updated(run, messages=data.messages.append({"role": "user", "content": text}, meta=True))


def record_hook_stop(run: RunState, event: Event) -> RunState:
    outcome: HookOutcome = event.data
    reason = outcome.stop_reason or ("; ".join(outcome.block_reasons) if outcome.block_reasons else f"{outcome.event} hook stopped the run")
    return updated(run, error=reason, stop_reason_from_hook=reason)


# ---- the permission gate ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class GateOutcome:
    """What the gate decided for this turn's calls: who runs (possibly with new input), who is refused."""

    allowed: tuple[ToolCall, ...]
    denied: tuple[dict[str, Any], ...]  # their error tool_results
    denials: tuple[dict[str, Any], ...]  # {tool_name, tool_use_id, tool_input} for the result object


async def _ask_user(call: ToolCall, reason: str) -> str:
    """y / n / always, asked on the terminal (only in interactive runs)."""
    question = f"\nqueryloop: allow {call.name} {call.input}? ({reason}) [y/n/always] "
    sys.stderr.write(question)
    sys.stderr.flush()
    answer: str = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return answer.strip().lower()


async def gate_tool_calls(ctx: EffectContext) -> Event:
    """Decide every pending call: PreToolUse hooks (deny > ask > allow) and rules (deny always wins)."""
    data: LoopData = ctx.run.data
    services: LoopServices = ctx.services
    config = services.config
    allowed: list[ToolCall] = []
    denied: list[dict[str, Any]] = []
    denials: list[dict[str, Any]] = []
    for call in data.pending:
        pre = await hook(ctx, "PreToolUse", {"tool_name": call.name, "tool_input": call.input, "tool_use_id": call.id})
        if _stopped(pre):
            return Event(name="hook_stopped", data=pre)
        if pre is not None and pre.updated_input is not None:
            call = ToolCall(id=call.id, name=call.name, input=dict(pre.updated_input))
        verdict = decide(
            call.name, call.input, mode=config.permission_mode, rules=config.rules, cwd=config.tool_context.cwd,
            interactive=config.interactive, home=_HOME,
        )
        behavior, reason = verdict.behavior, verdict.reason
        if pre is not None and pre.permission_decision == "deny":
            behavior, reason = "deny", pre.permission_decision_reason or "; ".join(pre.block_reasons) or "denied by a PreToolUse hook"
        elif pre is not None and (pre.blocked and pre.permission_decision is None):
            behavior, reason = "deny", "; ".join(pre.block_reasons) or "blocked by a PreToolUse hook"
        elif pre is not None and pre.permission_decision == "allow" and behavior != "deny":
            behavior = "allow"  # a hook's allow skips the prompt; a deny rule still wins
        elif pre is not None and pre.permission_decision == "ask" and behavior == "allow":
            behavior = "ask"
        if behavior == "ask" and call.name in services.always_allowed:
            behavior = "allow"  # the user answered "always" for this tool earlier in the run
        if behavior == "ask":
            if config.interactive:
                answer = await _ask_user(call, reason)
                behavior = "allow" if answer in ("y", "yes", "always", "a") else "deny"
                reason = reason if behavior == "allow" else "the user said no"
                if answer in ("always", "a"):
                    services.always_allowed.add(call.name)
            else:
                behavior, reason = "deny", f"{reason} (this run cannot ask, so it is denied)"
        if behavior == "allow":
            allowed.append(call)
        else:
            denied.append(dict(tool_result_block(call.id, f"Permission to use {call.name} was denied: {reason}", is_error=True)))
            denials.append({"tool_name": call.name, "tool_use_id": call.id, "tool_input": call.input})
    outcome = GateOutcome(allowed=tuple(allowed), denied=tuple(denied), denials=tuple(denials))
    return Event(name="tools_permitted" if allowed else "tools_denied", data=outcome)


def record_gate(run: RunState, event: Event) -> RunState:
    """Only the permitted calls stay pending; the refused ones already have their error results."""
    data: LoopData = run.data
    gate: GateOutcome = event.data
    if not gate.denied and gate.allowed == data.pending:
        return run  # everything runs as asked: the common case
    return updated(
        run,
        order=tuple(c.id for c in data.pending),
        pending=gate.allowed,
        denied=gate.denied,
        permission_denials=(*data.permission_denials, *gate.denials),
    )


def close_calls_and_stop(run: RunState, event: Event) -> RunState:
    """A PreToolUse hook stopped everything: nothing runs, every call gets a result, the run ends."""
    data: LoopData = run.data
    outcome: HookOutcome = event.data
    reason = outcome.stop_reason or "a PreToolUse hook stopped the run"
    results = synthetic_error_results(data.pending, f"Not run: {reason}")
    messages = data.messages.append({"role": "user", "content": list(results)})
    return updated(run, messages=messages, pending=(), error=reason, stop_reason_from_hook=reason)


def record_tool_results_and_stop(run: RunState, event: Event) -> RunState:
    """A PostToolUse hook stopped everything: the results are kept (ledger closed), the run ends."""
    results, outcome = event.data
    run = record_tool_results(run, Event(name="tools_done", data=results))
    reason = outcome.stop_reason or "a PostToolUse hook stopped the run"
    return updated(run, error=reason, stop_reason_from_hook=reason)


# ---- Stop hooks ---------------------------------------------------------------------------


async def run_stop_hooks(ctx: EffectContext) -> Event:
    data: LoopData = ctx.run.data
    outcome = await hook(ctx, "Stop", {"stop_hook_active": data.stop_hook_active})
    if outcome is None:
        return Event(name="stop_accepted")
    if _stopped(outcome):
        return Event(name="hook_stopped", data=outcome)
    if outcome.blocked or outcome.decision == "block":
        return Event(name="stop_blocked", data=outcome)
    return Event(name="stop_accepted", data=outcome)


def send_stop_feedback(run: RunState, event: Event) -> RunState:
    """The hook's reason goes back to the model as the next user turn."""
    data: LoopData = run.data
    outcome: HookOutcome = event.data
    reason = "; ".join(outcome.block_reasons) or "A Stop hook asked you to continue."
    message = {"role": "user", "content": f"Stop hook feedback:\n{reason}"}
    return updated(run, messages=data.messages.append(message), stop_hook_active=True)


def record_block_limit(run: RunState, event: Event) -> RunState:
    limit = run.cap("stop_hook_blocks")
    return updated(run, error=f"Stop hooks blocked {limit} times in a row; stopping instead of looping (warning)")
