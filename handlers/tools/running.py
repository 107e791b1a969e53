"""Tool layer, running: recording tool requests, running the tools, returning results, closing the ledger.

Owns the ``run_tools`` effect and the edges that give every tool_use its tool_result, after an abort too. A
completed non-idempotent call is written to the ledger on disk first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Generic

import attrs

from queryloop.fsm import EffectContext, Event, RunState, uses

from ..hooks import HookOutcome, hook, reminder_block, tool_hook_notes
from ..messages import Block, ToolCall, ToolResultBlock, assistant_message, tool_calls_of, user_message, visible_text
from ..outcome import Notice, evolve, evolved, with_outcome
from ..request import ModelFailure, ModelReply
from ..session import LedgerEntry, input_hash, with_session
from .data import T, ToolResultPublished, ToolServices, close_open_calls, with_tools
from .services.base import BackgroundTask, ToolContext, ToolSpec
from .services.catalog import turn_registry
from .services.dispatch import ToolRegistry, run_tool_calls

__all__ = [
    "INTERRUPTED",
    "INTERRUPT_MARKERS",
    "ToolsDone",
    "close_dangling_tool_uses",
    "record_tool_request",
    "record_tool_results",
    "record_tool_results_and_stop",
    "record_tool_results_at_turn_limit",
    "run_tools",
]

INTERRUPTED = "Interrupted by the user before this tool finished; it may have partly run."
INTERRUPT_MARKERS = ("[Request interrupted by user]", "[Request interrupted by user for tool use]")
"""The user message an interrupt leaves in the transcript, as Claude Code 2.1.235 writes it (a value the model
and programs read: probed in tests/conformance/test_control.py): the second when tools were running or gated."""


@attrs.frozen(kw_only=True)
class ToolsDone:
    """Every call of the turn has its result, in the model's order; ``stop``: a PostToolUse hook ended the run."""

    results: tuple[ToolResultBlock, ...]
    stop: HookOutcome | None = None
    ledger: tuple[LedgerEntry, ...] = ()  # the completed calls of tools that are not idempotent, as recorded
    started: tuple[BackgroundTask, ...] = ()  # work calls started and left running (background sub-agents)
    notes: tuple[str, ...] = ()  # what the PreToolUse, then the PostToolUse hooks told the model, labelled


class _Completions(Generic[T]):
    """The turn's results as they complete: each published, each call of a tool that is not idempotent
    recorded in the ledger, and what an abort would report as done kept up to date."""

    def __init__(self, ctx: EffectContext[T, ToolServices], registry: ToolRegistry) -> None:
        self.ctx = ctx
        self.data = ctx.run.data
        self.registry = registry
        self.calls = {c.id: c for c in self.data.tools.pending}  # the calls that run (not the gate's refusals)
        self.completed: list[ToolResultBlock] = []
        self.recorded: list[LedgerEntry] = []
        self.started: list[BackgroundTask] = []  # work calls started and left running (background sub-agents)

    def on_result(self, call: ToolCall, result: ToolResultBlock) -> None:
        context = self.ctx.services.tool_context
        records = context.responses
        self.ctx.publish(
            ToolResultPublished(call=call, result=result, record=records.get(call.id) if records else None)
        )
        if call.id not in self.calls:
            return  # a refusal of the gate: it never ran
        task = context.background.started_by(call.id) if context.background is not None else None
        if task is not None:
            self.started.append(task)
        tool = self.registry.get(call.name)
        if tool is not None and not tool.idempotent:
            self.recorded.append(self._record(call, tool, result))
        self.completed.append(result.copy())
        self.ctx.save(self.done_so_far)  # what an abort now reports as done

    def _record(self, call: ToolCall, tool: ToolSpec, result: ToolResultBlock) -> LedgerEntry:
        """The call's ledger entry, written to the session's ledger first when the session keeps one."""
        entry = LedgerEntry(
            tool_use_id=call.id,
            name=call.name,
            input_hash=input_hash(call.name, call.input, tool.attempt_fields),
            input=dict(call.input),
            result=result.copy(),
            prompt_id=self.data.session.prompt_id,
        )
        store = self.ctx.services.session
        if store is not None:
            try:
                store.record(entry)  # durable before anything else: a kill now still knows it ran
            except OSError as exc:  # the run goes on; the entry is kept in the run data, not on disk
                self.ctx.publish(
                    Notice(f"warning: cannot write the side-effect ledger ({exc}); {call.name} is not on disk")
                )
        return entry

    def done_so_far(self) -> T:
        partial = with_tools(self.data, completed=tuple(self.completed))
        return with_session(partial, ledger=(*self.data.session.ledger, *self.recorded)) if self.recorded else partial


async def run_tools(ctx: EffectContext[T, ToolServices]) -> Event[ToolsDone]:
    """Run the permitted calls; merge their results with the gate's refusals in the model's order.

    Each result then passes the PostToolUse hooks: a block's reason and ``additionalContext``
    become labelled notes for the model beside the results (never inside a tool's output), an
    ``updatedOutput`` replaces the output (an invalid one keeps the original and attaches the
    hook error), ``continue: false`` ends the run once every result is in.
    """
    data = ctx.run.data
    tools = data.tools
    services = ctx.services
    registry = turn_registry(services, data.request.tool_catalog)
    sink = _Completions(ctx, registry)
    _show_refusals(data, sink.on_result)
    context = _with_checkpoints(services, data.session.prompt_id)
    ran = await run_tool_calls(
        tools.pending,
        registry,
        context,
        on_result=sink.on_result,
        runner=services.call_runner,
    )
    by_id: dict[str, ToolResultBlock] = {str(r["tool_use_id"]): r.copy() for r in (*ran, *tools.denied)}
    responses = services.tool_context.responses
    made = {i: responses.pop(i) for i in by_id if i in responses} if responses is not None else {}
    post = services.hooks.configures("PostToolUse")  # none: no PostToolUse payload to build for each call
    stop, notes = await _post_tool_use(ctx, sink.calls, by_id, made) if post else (None, {})
    order = tools.order or tuple(sink.calls)
    results = tuple([by_id[i] for i in order if i in by_id])
    said = (*tools.hook_notes, *(note for i in order for note in notes.get(i, ()))) if notes else tools.hook_notes
    done = ToolsDone(results=results, stop=stop, ledger=tuple(sink.recorded), started=tuple(sink.started), notes=said)
    return Event(name="stopped_by_hook" if stop is not None else "tools_finished", data=done)


def _show_refusals(data: T, on_result: Callable[[ToolCall, ToolResultBlock], None]) -> None:
    """The gate's refusals, complete already: shown before anything runs."""
    if not data.tools.denied:
        return
    last = data.messages.last()
    content = last["content"] if last and last["role"] == "assistant" else ()
    asked = {c.id: c for c in tool_calls_of(content)} if isinstance(content, list) else {}
    for refusal in data.tools.denied:
        call = asked.get(str(refusal["tool_use_id"]))
        if call is not None:
            on_result(call, refusal.copy())


async def _post_tool_use(
    ctx: EffectContext[T, ToolServices],
    calls: Mapping[str, ToolCall],
    by_id: dict[str, ToolResultBlock],
    made: Mapping[str, object],
) -> tuple[HookOutcome | None, dict[str, tuple[str, ...]]]:
    """Each run call's result through the PostToolUse hooks (``by_id`` updated in place): the outcome that
    stops the run, if one does, and each call's notes for the model."""
    stop: HookOutcome | None = None
    notes: dict[str, tuple[str, ...]] = {}
    for tool_use_id, result in by_id.items():
        call = calls.get(tool_use_id)
        if call is None:
            continue  # refused by the gate: it never ran, PostToolUse does not apply
        payload = {
            "tool_name": call.name,
            "tool_input": call.input,
            "tool_use_id": call.id,
            "tool_response": _tool_response(call, result, made.get(tool_use_id)),
        }
        post = await hook(ctx, "PostToolUse", payload)
        if post is None:
            continue
        by_id[tool_use_id] = _apply_post_hook(result, post)
        notes[tool_use_id] = tool_hook_notes(post, call.name)
        if not post.continue_:
            stop = post
    return stop, notes


def _tool_response(call: ToolCall, result: ToolResultBlock, made: object) -> object:
    """What a PostToolUse hook gets as ``tool_response``, as Claude Code 2.1.235 sends it: the tool's own
    record where it made one (Read, Write, Edit, ReadMcpResourceTool, Bash: its output, stderr merged into
    ``stdout`` as Claude Code's is, empty when there was none), an MCP tool's text as is; any other call's text
    as ``{"content": …}`` and a failed call's as ``{"error": …}`` (Claude Code tells failures to
    PostToolUseFailure hooks instead)."""
    content = result.get("content")
    if result.get("is_error"):
        return {"error": content}
    if made is not None:
        return made
    if call.name.startswith("mcp__"):
        return content
    return {"content": content}


def _apply_post_hook(result: ToolResultBlock, post: HookOutcome) -> ToolResultBlock:
    if post.updated_output is None:
        return result.copy()
    if isinstance(post.updated_output, str):
        return {**result, "content": post.updated_output}
    kind = type(post.updated_output).__name__
    error = f"updatedOutput must be a string, got {kind}; the original output is kept"
    return {**result, "content": f"{result.get('content')}\n[PostToolUse hook error: {error}]"}


def record_tool_request(run: RunState[T], event: Event[ModelReply | ModelFailure]) -> T:
    """Append the assistant message and remember its complete tool_use blocks as pending calls.

    After a stream cut only the blocks that completed are in the message (the cut block,
    if any, is gone), so exactly those tools run — once.
    """
    source = event.data
    outcome = run.data.outcome
    if isinstance(source, ModelFailure):
        content = list(source.partial_content)
        notes = (*outcome.notices, f"stream cut after {len(content)} complete block(s); kept them, no re-request")
        stop_reason = outcome.stop_reason
    else:
        content = list(source.content)
        notes = outcome.notices
        stop_reason = source.stop_reason
    data = run.data
    messages = data.messages.append(assistant_message(content))
    tools = evolve(data.tools, pending=tool_calls_of(content))
    text = visible_text(content)
    if stop_reason != outcome.stop_reason or text or notes is not outcome.notices:
        outcome = evolve(outcome, stop_reason=stop_reason, partial_text=outcome.partial_text + text, notices=notes)
    # else the outcome is already the one a copy would make (the usual tool turn: no text, the same stop reason)
    return evolved(data, messages=messages, tools=tools, outcome=outcome)  # one copy of the run data per tool turn


def record_tool_results(run: RunState[T], event: Event[ToolsDone]) -> T:
    """Append the tool_results as the next user message; nothing is pending any more.

    What the turn's tool hooks told the model follows the results in the same message, as one
    ``<system-reminder>`` text block (Claude Code 2.1.235 sends it as a system message after them).
    """
    data = run.data
    block = reminder_block(event.data.notes)
    content: list[Block] = [*event.data.results, block] if block is not None else list(event.data.results)
    changes: dict[str, object] = {
        "messages": data.messages.append(user_message(content)),
        "tools": evolve(
            data.tools,
            pending=(),
            denied=(),
            order=(),
            completed=(),
            hook_notes=(),
            turn=data.tools.turn + 1,
            background=(*data.tools.background, *event.data.started),
        ),
        "outcome": evolve(data.outcome, partial_text="") if data.outcome.partial_text else data.outcome,
    }
    if event.data.ledger:
        changes["session"] = evolve(data.session, ledger=(*data.session.ledger, *event.data.ledger))
    return evolved(data, **changes)  # one copy of the run data: this runs on every tool turn


@uses(params=("max_turns",))
def record_tool_results_at_turn_limit(run: RunState[T], event: Event[ToolsDone]) -> T:
    """The turn limit is reached: keep this turn's results (the ledger stays closed) and say why the run ends."""
    data = record_tool_results(run, event)
    return with_outcome(data, error=f"Reached the maximum number of turns ({run.params.get('max_turns')})")


def record_tool_results_and_stop(run: RunState[T], event: Event[ToolsDone]) -> T:
    """A PostToolUse hook stopped everything: the results are kept (ledger closed), the run ends."""
    data = record_tool_results(run, event)
    stop = event.data.stop
    reason = (stop.stop_reason if stop else None) or "a PostToolUse hook stopped the run"
    return with_outcome(data, error=reason)


def close_dangling_tool_uses(run: RunState[T], event: Event[None]) -> T:
    """User abort: every tool_use without a result gets a synthetic error result (ledger stays closed), then
    the interrupt's marker follows as a user message (:data:`INTERRUPT_MARKERS`), as in Claude Code.

    Calls the permission gate already refused keep their refusal, calls that completed
    their real result (and their ledger entries); the others are marked interrupted.
    Results follow the model's order.
    """
    tools = run.data.tools
    marker = INTERRUPT_MARKERS[bool(tools.pending or tools.denied or tools.completed)]
    data = close_open_calls(run.data, INTERRUPTED)
    data = data.evolve(messages=data.messages.append({"role": "user", "content": [{"type": "text", "text": marker}]}))
    return with_outcome(data, result_text=data.outcome.partial_text, error="Interrupted by the user")


def _with_checkpoints(services: ToolServices, prompt_id: str) -> ToolContext:
    """The tool context, with the session's checkpoints for a sandboxed command's changes when both exist."""
    context = services.tool_context
    store = services.session
    if context.sandbox is None or store is None or not store.writes:
        return context

    networked = bool(context.sandbox.policy.allowed_domains)  # what it sent to an allowed host is not captured

    def save(tool_use_id: str, files: Sequence[Path]) -> object:
        return store.checkpoints.save(prompt_id=prompt_id, tool_use_id=tool_use_id, files=files, partial=networked)

    return attrs.evolve(context, checkpoint=save)
