"""Tool layer, the permission gate: who may run, PreToolUse hooks, the user's answer, the refusals.

Owns the ``gating_tools`` effect and its edges. A call that will not run gets its error result here; Write and Edit
are checkpointed before they run.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import attrs

from queryloop.fsm import EffectContext, Event, RunState, inert, uses

from ..hooks import HookOutcome, context_notes, hook, stopped
from ..messages import ToolCall, synthetic_error_results, tool_result_block
from ..outcome import evolved, with_outcome
from ..session import LedgerEntry, hidden_calls, matching_entry, replayed_result
from .data import NotRun, PermissionDenied, T, ToolServices, close_open_calls, with_tools
from .services.base import ToolError, ToolSpec, resolve_inside_cwd
from .services.catalog import find_tool
from .services.decision import AskPermission, PermissionDecision, finalize_ask
from .services.dispatch import unknown_tool_result
from .services.permissions import decide, observable_input, suggest_rules
from .services.rules import parse_rule
from .services.shell import analyse

__all__ = [
    "GateOutcome",
    "checkpoint_taken",
    "close_calls_and_stop",
    "denial_signature",
    "gate_tool_calls",
    "record_gate",
    "stop_repeated_denial",
    "stop_repeated_replay",
]

_HOME = Path.home()  # read once: permission rules may name ~/ paths


@attrs.frozen(kw_only=True)
class GateOutcome:
    """What the gate decided for this turn's calls: who runs (possibly with new input), who is refused."""

    allowed: tuple[ToolCall, ...]
    denied: tuple[dict[str, Any], ...]  # the error tool_results of the calls that do not run: unknown or refused
    denials: tuple[dict[str, Any], ...]  # {tool_name, tool_use_id, tool_input} of the refused, for the result
    always_allowed: frozenset[str] = frozenset()  # every tool allowed "always" so far in the run
    signature: str | None = None  # when every call was denied: their denial_signature, else None
    replayed: int = 0  # calls answered from the ledger (not run again)
    checkpoints: int = 0  # files checkpointed before the permitted Write/Edit calls
    sources: tuple[tuple[str, str], ...] = ()  # (tool_use id, who decided) where not the configuration
    notes: tuple[str, ...] = ()  # what the PreToolUse hooks told the model (additionalContext), labelled


async def _ask_user(call: ToolCall, reason: str, always: tuple[str, ...]) -> str:
    """y / n (/ always, naming the rule it creates), asked on the terminal (only in interactive runs)."""
    choices = f"[y/n/always: {', '.join(always)}]" if always else "[y/n]"
    question = f"\nqueryloop: allow {call.name} {call.input}? ({reason}) {choices} "
    sys.stderr.write(inert(question))  # the call's input and the offered rules are the model's text
    sys.stderr.flush()
    answer: str = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return answer.strip().lower()


async def _ask_callback(ask: AskPermission, call: ToolCall, reason: str) -> tuple[ToolCall, str, str]:
    """The permission callback's answer: the call (its input maybe replaced), allow or deny, and why."""
    try:
        answer = await ask(call, reason)
    except Exception as exc:  # the callback's bug denies the call; it never ends the run
        return call, "deny", f"the permission callback raised {type(exc).__name__}: {exc}"
    if not answer.allow:
        return call, "deny", answer.message or "the permission callback said no"
    if answer.updated_input is not None:
        call = ToolCall(id=call.id, name=call.name, input=dict(answer.updated_input))
    return call, "allow", reason


def _decide(call: ToolCall, services: ToolServices, always: set[str], *, open_ask: bool = False) -> PermissionDecision:
    """The rules' verdict, with the rules the user created by answering "always" added to the allow rules.

    A run with a permission callback can ask, so what would ask stays "ask" (for the callback);
    ``open_ask`` keeps every ask open (a PreToolUse hook answers first; :func:`_with_hook_verdict`).
    """
    rules = services.rules
    if always:
        rules = attrs.evolve(rules, allow=(*rules.allow, *(parse_rule(r) for r in sorted(always))))
    sandbox = services.tool_context.sandbox
    return decide(
        call.name,
        call.input,
        mode=services.permission_mode,
        rules=rules,
        cwd=services.tool_context.cwd,
        interactive=_can_ask(services),
        home=_HOME,
        sandbox=sandbox.policy if sandbox is not None else None,
        open_ask=open_ask,
    )


def _can_ask(services: ToolServices) -> bool:
    return services.interactive or services.can_use_tool is not None


HookVerdict = Literal["allow", "ask", "deny"]
_HOOK_ASKS = "a PreToolUse hook asks for the user's confirmation"  # the question's reason when the hook gave none


def _with_hook_verdict(
    verdict: PermissionDecision, pre: HookOutcome | None, services: ToolServices
) -> tuple[PermissionDecision, HookVerdict | None]:
    """A PreToolUse hook's answer over the rules' open verdict, then the ask finalized; and what the hook decided.

    As in Claude Code 2.1.235: a hook's deny always denies; its ask asks even where a rule
    or the mode allows (in a run that cannot ask: denied, with the hook's reason); its allow
    lifts the mode's ask (default, acceptEdits, dontAsk: no prompt) but not a deny (a rule,
    plan mode) nor a firm ask (an ask rule, a file that runs later: :attr:`PermissionDecision.firm`).
    """
    decided: HookVerdict | None = None
    choice = pre.permission_decision if pre is not None else None
    if pre is not None and (choice == "deny" or (pre.blocked and choice is None)):
        why = pre.permission_decision_reason or "; ".join(pre.block_reasons)
        verdict, decided = attrs.evolve(verdict, behavior="deny", reason=why, listed=True, kind="hook"), "deny"
    elif choice == "ask" and verdict.behavior != "deny":
        nobody = not _can_ask(services) or services.permission_mode == "dontAsk"
        why = (pre.permission_decision_reason if pre is not None else None) or ("" if nobody else _HOOK_ASKS)
        behavior: Literal["deny", "ask"] = "deny" if nobody else "ask"
        verdict, decided = attrs.evolve(verdict, behavior=behavior, reason=why, firm=True, kind="hook"), "ask"
    elif choice == "allow" and verdict.behavior == "ask" and not verdict.firm:
        why = (pre.permission_decision_reason if pre is not None else None) or "a PreToolUse hook allowed the call"
        verdict, decided = attrs.evolve(verdict, behavior="allow", reason=why), "allow"
    return finalize_ask(verdict, mode=services.permission_mode, interactive=_can_ask(services)), decided


def _refusal_text(call: ToolCall, reason: str, *, hook: HookVerdict | None, cwd: Path) -> str:
    """The error result of a refused call: our sentence, with the markers Claude Code's refusals carry.

    A program or the model may key on them: ``PreToolUse:<tool> hook`` for a hook's deny or
    ask (with the hook's reason, as Claude Code gives it), ``Output redirection to '<absolute
    path>'`` for a refused redirection, ``Permission to use Bash with command <command>`` for
    another Bash refusal, ``Permission to use <tool>`` (and the file's absolute path for a file
    tool) for the rest.
    """
    if hook == "deny":
        return f"PreToolUse:{call.name} hook denied the call" + (f": {reason}" if reason else "")
    if hook == "ask":
        text = f"PreToolUse:{call.name} hook asked for the user's confirmation, which this run cannot give"
        return text + (f": {reason}" if reason else "")
    command = call.input.get("command") if call.name == "Bash" else None
    if isinstance(command, str):
        if reason.startswith("Output redirection to "):  # the reason names the file, made absolute
            return f"{reason} (the command was not run)"
        return f"Permission to use Bash with command {command} was denied: {reason}"
    raw = call.input.get("file_path")
    if isinstance(raw, str) and raw:
        path = Path(raw).expanduser()
        shown = path if path.is_absolute() else Path(os.path.normpath(cwd / path))
        return f"Permission to use {call.name} on {shown} was denied: {reason}"
    return f"Permission to use {call.name} was denied: {reason}"


async def _answer(
    call: ToolCall, reason: str, verdict: PermissionDecision, services: ToolServices, always: set[str]
) -> tuple[ToolCall, str, str, PermissionDecision]:
    """Who answers a call that asks: the permission callback, else the user on a terminal, else nobody (deny).

    A callback's new input is checked again against the deny rules; a user's "always"
    adds the rules offered (to ``always``). Returns the call (maybe with new input), the
    behaviour, why, and the verdict that stands.
    """
    if services.can_use_tool is not None:
        asked = call
        call, behavior, reason = await _ask_callback(services.can_use_tool, call, reason)
        if behavior == "allow" and call.input != asked.input:  # new input: the deny rules see it too
            recheck = _decide(call, services, always)
            if recheck.behavior == "deny" and recheck.rule is not None:
                return call, "deny", f"the input the callback gave: {recheck.reason}", recheck
        return call, behavior, reason, verdict
    if services.interactive:
        offer = suggest_rules(call.name, call.input, cwd=services.tool_context.cwd)
        answer = await _ask_user(call, reason, offer)
        always_answer = bool(offer) and answer in ("always", "a")
        if always_answer:
            always.update(offer)
        if answer in ("y", "yes") or always_answer:
            return call, "allow", reason, verdict
        return call, "deny", "the user said no", verdict
    return call, "deny", f"{reason} (this run cannot ask, so it is denied)", verdict


@attrs.define
class _Tally:
    """The gate's decisions so far in one turn, in the model's order; :meth:`outcome` freezes them."""

    allowed: list[ToolCall] = attrs.Factory(list)
    denied: list[dict[str, Any]] = attrs.Factory(list)  # the error results of the calls that do not run
    denials: list[dict[str, Any]] = attrs.Factory(list)  # the refused calls, for the result's permission_denials
    unknown: bool = False  # a call got an error that is no denial (no such tool, no checkpoint)
    replayed: int = 0
    checkpoints: int = 0
    sources: list[tuple[str, str]] = attrs.Factory(list)  # who decided, where not the rules or the mode
    notes: list[str] = attrs.Factory(list)  # the hooks' context for the model, sent after this turn's results

    def outcome(self, pending: Iterable[ToolCall], always: set[str]) -> GateOutcome:
        # Only a turn whose every call was refused is a denial the repeated-denial breaker counts.
        refused_all = not (self.allowed or self.unknown or self.replayed)
        return GateOutcome(
            allowed=tuple(self.allowed),
            denied=tuple(self.denied),
            denials=tuple(self.denials),
            always_allowed=frozenset(always),
            signature=denial_signature(pending) if refused_all else None,
            replayed=self.replayed,
            checkpoints=self.checkpoints,
            sources=tuple(self.sources),
            notes=tuple(self.notes),
        )


@attrs.frozen(kw_only=True)
class _Ruling:
    """What stands for one call once the hook, the rules and whoever was asked have spoken."""

    call: ToolCall  # maybe with new input (a hook's or the permission callback's)
    behavior: str
    reason: str
    verdict: PermissionDecision
    refused_by_hook: HookVerdict | None  # the hook's deny, or its ask that nobody can answer
    asked: bool = False  # somebody (the permission callback, the user) was asked and answered


async def gate_tool_calls(ctx: EffectContext[T, ToolServices]) -> Event[GateOutcome] | Event[HookOutcome]:
    """Decide every pending call: the lookup, PreToolUse hooks (deny > ask > allow), rules (deny always wins)."""
    services = ctx.services
    data = ctx.run.data
    always = set(data.tools.always_allowed)  # rules the user created by answering "always"
    hidden = hidden_calls(data.session, data.messages) if data.session.ledger else []
    tally = _Tally()
    for call in data.tools.pending:
        tool = find_tool(services, data.request.tool_catalog, call.name)
        if tool is None:  # no such tool: nothing to ask a hook or a rule about
            tally.denied.append(dict(unknown_tool_result(call, removed_by_deny_rule=services.rules.hides(call.name))))
            tally.unknown = True
            continue
        stop = await _gate_call(ctx, call, tool, hidden, always, tally)
        if stop is not None:
            return Event(name="stopped_by_hook", data=stop)
    outcome = tally.outcome(data.tools.pending, always)
    if outcome.replayed:
        return Event(name="tools_already_done", data=outcome)
    if outcome.signature is None:
        return Event(name="tools_permitted", data=outcome)
    again = outcome.signature == data.tools.last_denial
    return Event(name="tools_denied_again" if again else "tools_denied", data=outcome)


async def _gate_call(
    ctx: EffectContext[T, ToolServices],
    call: ToolCall,
    tool: ToolSpec,
    hidden: list[LedgerEntry],
    always: set[str],
    tally: _Tally,
) -> HookOutcome | None:
    """Decide one call of a tool this run offers into ``tally``; the PreToolUse outcome when a hook stops the run."""
    pre = (
        await hook(ctx, "PreToolUse", {"tool_name": call.name, "tool_input": call.input, "tool_use_id": call.id})
        if ctx.services.hooks.configures("PreToolUse")  # none: no PreToolUse payload to build, no hook to ask
        else None
    )
    if stopped(pre):
        assert pre is not None
        return pre
    if pre is not None:  # no hook answered: no notes, no new input
        tally.notes.extend(context_notes(pre, f"PreToolUse:{call.name} hook"))
        if pre.updated_input is not None:
            call = ToolCall(id=call.id, name=call.name, input=dict(pre.updated_input))
    ruling = await _rule_on(call, pre, ctx.services, always, tally)
    if ruling.behavior == "allow":
        await _admit(ctx, ruling.call, tool, hidden, tally)
        return None
    refusal = _refusal(ruling, ctx.services)
    tally.denied.append(dict(tool_result_block(ruling.call.id, refusal, is_error=True)))
    if not ruling.verdict.listed:
        return None  # a path deny rule's refusal: an input error, as in Claude Code
    call, cwd = ruling.call, ctx.services.tool_context.cwd
    tally.denials.append({"tool_name": call.name, "tool_use_id": call.id, "tool_input": _listed_input(call, cwd)})
    ctx.publish(
        PermissionDenied(
            call=call,
            message=refusal,
            kind=ruling.verdict.kind,
            reason=_denial_reason(ruling, pre),
            shown=not ruling.asked and ruling.refused_by_hook != "deny",
            not_run=_not_run(ruling, ctx.services),
        )
    )
    return None


def _not_run(ruling: _Ruling, services: ToolServices) -> NotRun:
    """How Claude Code 2.1.235 stamps the refused call's result: an ask nobody answered (a run that cannot ask,
    plan mode, a hook's ask) or the user's no is "user-rejected"; a rule's, a hook's, a callback's deny is not."""
    if ruling.asked:
        return "permission-rule" if services.can_use_tool is not None else "user-rejected"
    if ruling.refused_by_hook == "ask" or ruling.verdict.unanswered:
        return "user-rejected"
    return "permission-rule"


def _listed_input(call: ToolCall, cwd: Path) -> dict[str, Any]:
    """A refused call's input as ``permission_denials`` lists it, as Claude Code 2.1.235 does: a file tool's
    path absolute and normalised (:func:`observable_input`), an Edit's ``replace_all`` as its schema defaults it."""
    listed = observable_input(call.name, call.input, cwd=cwd)
    if call.name == "Edit":
        listed.setdefault("replace_all", False)
    return listed


def _denial_reason(ruling: _Ruling, pre: HookOutcome | None) -> str | None:
    """The ``decision_reason`` of a ``system/permission_denied`` line, where Claude Code gives one."""
    if ruling.verdict.kind == "hook":
        return (pre.permission_decision_reason if pre is not None else None) or None
    if ruling.verdict.kind == "workingDir":
        return "the path is outside the working directories"
    return None


async def _rule_on(
    call: ToolCall, pre: HookOutcome | None, services: ToolServices, always: set[str], tally: _Tally
) -> _Ruling:
    """The hook's and the rules' verdict on ``call``; where it asks, the answer of whoever can give one."""
    verdict, by_hook = _with_hook_verdict(_decide(call, services, always, open_ask=pre is not None), pre, services)
    behavior: str = verdict.behavior
    reason = verdict.reason
    refused_by_hook = by_hook if behavior == "deny" else None
    asked = behavior == "ask"  # what stands is then whoever was asked's answer
    if by_hook is not None:
        tally.sources.append((call.id, "hook"))  # the hook's verdict, not the rules', decided
    if behavior == "ask":
        known = len(always)
        call, behavior, reason, verdict = await _answer(call, reason, verdict, services, always)
        if services.can_use_tool is not None or services.interactive:  # somebody was asked
            source = "user_permanent" if len(always) > known else "user_temporary"
            tally.sources.append((call.id, source if behavior == "allow" else "user_reject"))
    return _Ruling(
        call=call, behavior=behavior, reason=reason, verdict=verdict, refused_by_hook=refused_by_hook, asked=asked
    )


async def _admit(
    ctx: EffectContext[T, ToolServices], call: ToolCall, tool: ToolSpec, hidden: list[LedgerEntry], tally: _Tally
) -> None:
    """A permitted call: answered from the ledger if it already ran, else checkpointed and let run."""
    entry = matching_entry(call, hidden, tool.attempt_fields) if hidden else None
    if entry is not None:  # it already ran: its recorded result, not a second run
        tally.denied.append(dict(replayed_result(call, entry)))
        tally.replayed += 1
        return
    store = ctx.services.session
    try:
        if store is not None and store.writes:  # else nothing is kept: none to take
            tally.checkpoints += await _checkpoint(ctx, call, tool)
    except OSError as exc:
        why = f"Not run: the checkpoint of the file it changes could not be stored ({exc}); nothing was changed"
        tally.denied.append(dict(tool_result_block(call.id, why, is_error=True)))
        tally.unknown = True
        return
    tally.allowed.append(call)


def _refusal(ruling: _Ruling, services: ToolServices) -> str:
    """The error result's text of a call the ruling refuses."""
    call = ruling.call
    if not ruling.verdict.listed:  # Claude Code's path-deny refusal: an input error
        return f"<tool_use_error>{call.name} refused: {ruling.reason}; a path deny rule covers it</tool_use_error>"
    return _refusal_text(call, ruling.reason, hook=ruling.refused_by_hook, cwd=services.tool_context.cwd)


async def _checkpoint(ctx: EffectContext[T, ToolServices], call: ToolCall, tool: ToolSpec) -> int:
    """Checkpoint the files ``call`` will change: how many were stored (0: none, or nothing kept); OSError if it fails.

    A Write or Edit changes the file its input names; an unsandboxed Bash command the
    files its redirections name (a sandboxed one is captured by the sandbox itself). A
    path the tool would refuse (outside the working directory, not a string) is left
    to the tool: it changes nothing.
    """
    store = ctx.services.session
    if store is None or not store.writes:
        return 0
    paths = [p for p in (_resolved(raw, ctx.services) for raw in _changed_files(call, tool, ctx.services)) if p]
    if not paths:
        return 0
    prompt_id = ctx.run.data.session.prompt_id
    partial = tool.name == "Bash"  # its redirections' files are kept; whatever else the command did is not
    save = functools.partial(store.checkpoints.save, prompt_id=prompt_id, tool_use_id=call.id, partial=partial)
    saved = await asyncio.to_thread(save, files=paths)
    return len(saved)


def _changed_files(call: ToolCall, tool: ToolSpec, services: ToolServices) -> list[object]:
    if tool.changes_file:
        return [call.input.get(tool.changes_file)]
    command = call.input.get("command")
    if tool.name != "Bash" or not isinstance(command, str):
        return []
    sandbox = services.tool_context.sandbox
    if sandbox is not None and sandbox.policy.sandboxes(call.input):
        return []
    return list(dict.fromkeys(analyse(command).writes))


def _resolved(raw: object, services: ToolServices) -> Path | None:
    if not isinstance(raw, str):
        return None
    try:
        path = resolve_inside_cwd(raw, services.tool_context)
    except ToolError:
        return None
    return None if path.is_dir() else path


def checkpoint_taken(run: RunState[T], event: Event[GateOutcome]) -> bool:
    """Guard: the gate checkpointed a file a permitted call will change."""
    return event.data.checkpoints > 0


def denial_signature(calls: Iterable[ToolCall]) -> str:
    """The calls as the model proposed them — names and inputs, in any order — as one canonical JSON text."""
    canonical = sorted(json.dumps([c.name, c.input], sort_keys=True, separators=(",", ":")) for c in calls)
    return json.dumps(canonical, separators=(",", ":"))


def record_gate(run: RunState[T], event: Event[GateOutcome]) -> T:
    """Only the permitted calls stay pending; the refused ones already have their error results.

    A turn whose calls were all denied leaves their signature for the next gate to compare
    (the repeated-denial breaker); any other turn clears it.
    """
    tools = run.data.tools
    gate = event.data
    if (
        not gate.denied
        and gate.allowed == tools.pending
        and gate.always_allowed == tools.always_allowed
        and tools.last_denial is None
        and not gate.sources
        and not tools.decision_sources
        and not gate.notes
    ):
        return run.data  # everything runs as asked: the common case
    return with_tools(
        run.data,
        order=tuple(c.id for c in tools.pending),
        pending=gate.allowed,
        denied=gate.denied,
        permission_denials=(*tools.permission_denials, *gate.denials),
        always_allowed=gate.always_allowed,
        last_denial=gate.signature,
        decision_sources=gate.sources,
        hook_notes=gate.notes,
    )


@uses(params=("max_denied_call_repeats",))
def stop_repeated_denial(run: RunState[T], event: Event[GateOutcome]) -> T:
    """The model proposed the same denied calls again as often as allowed: they get their refusals, the run ends."""
    data = close_open_calls(record_gate(run, event), "Not run: the run stopped")
    repeats = run.params.get("max_denied_call_repeats")
    text = f"Stopped: the model proposed the same denied tool call {repeats} times in a row"
    return with_outcome(data, error=text)


@uses(params=("max_ledger_replays",))
def stop_repeated_replay(run: RunState[T], event: Event[GateOutcome]) -> T:
    """The model kept re-proposing completed calls: this turn's calls get their results, nothing runs, the run ends."""
    data = close_open_calls(record_gate(run, event), "Not run: the run stopped")
    turns = run.params.get("max_ledger_replays")
    text = f"Stopped: the model re-proposed calls that had already completed {turns} tool turns in a row"
    return with_outcome(data, error=text)


def close_calls_and_stop(run: RunState[T], event: Event[HookOutcome]) -> T:
    """A PreToolUse hook stopped everything: nothing runs, every call gets a result, the run ends."""
    reason = event.data.stop_reason or "a PreToolUse hook stopped the run"
    results = synthetic_error_results(run.data.tools.pending, f"Not run: {reason}")
    data = with_tools(
        evolved(run.data, messages=run.data.messages.append({"role": "user", "content": list(results)})), pending=()
    )
    return with_outcome(data, error=reason)
