"""Rendering a run for the user: ``text``, ``json`` and ``stream-json`` (Claude Code's shapes), a class each.

Data is never markup nor a terminal command: text is built from plain strings and made inert (docs/cli.md).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

import attrs
from rich.console import Console
from rich.status import Status
from rich.text import Text

from queryloop.fsm import Step, inert, uses
from queryloop.handlers.context import CompactionDone
from queryloop.handlers.hooks import HookReported
from queryloop.handlers.mcp import McpProgress
from queryloop.handlers.messages import ToolResultBlock, is_tool_result
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import (
    RECOVERABLE_FAILURES,
    ApiRetry,
    AssistantMessage,
    RequestFailed,
    RequestLog,
    RequestLogged,
    StreamEvent,
    TextDelta,
)
from queryloop.handlers.session import now
from queryloop.handlers.tools import INTERRUPT_MARKERS, PermissionDenied, ToolResultPublished

from ..run.agent import AgentData
from ..run.defaults import CLAUDE_CODE_VERSION
from ..run.observe import Observation, SubagentEnded, SubagentItem, SubagentStarted
from .formats import OUTPUT_FORMATS

__all__ = [
    "RENDERERS",
    "JsonRenderer",
    "Renderer",
    "StreamJsonRenderer",
    "TextRenderer",
    "VerboseJsonRenderer",
    "renderer_for",
]

_ERROR_STATES_STYLE = "bold red"

# How the hooks service words a hook failure: "<Event> hook error (<command>): <message>".
_MARKER_CONTENTS = [[{"type": "text", "text": marker}] for marker in INTERRUPT_MARKERS]
_HOOK_ERROR = re.compile(r"(?P<event>[A-Za-z]+) hook error (?P<error>.*)", re.DOTALL)


# The transitions that switch to the next --fallback-model, and the trigger Claude Code names for each.
_MODEL_FALLBACKS = {"model_fallback": "overloaded", "unavailable_model_fallback": "model_not_found"}

_TOOL_USE_ERROR = re.compile(r"</?tool_use_error>")


def _result_text(content: object) -> str:
    """A tool_result's text: its string, or its text blocks joined (an image block has none)."""
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


def _tool_use_result(result: ToolResultBlock) -> object:
    """A ``user`` line's ``tool_use_result``: the tool's text, or its content blocks when it carries an image
    (Claude Code's form); an error reads ``Error: …``."""
    content = result.get("content", "")
    if (
        isinstance(content, list)
        and not result.get("is_error")
        and any(isinstance(b, dict) and b.get("type") == "image" for b in content)
    ):
        return content
    text = _TOOL_USE_ERROR.sub("", _result_text(content))
    return text if not result.get("is_error") or text.startswith("Error") else f"Error: {text}"


@attrs.define
class _AgentWork:
    """What a sub-agent has done so far, as its ``task_progress`` lines count it."""

    started: float = attrs.field(factory=time.monotonic)
    tokens: int = 0
    tool_uses: int = 0


_ACTIVITY_KEYS = ("file_path", "notebook_path", "path", "pattern", "command", "url", "query", "description")


def _activity(name: str, tool_input: object) -> str:
    """A ``task_progress`` line's description: the tool and what it works on (``Read hello.txt``)."""
    if isinstance(tool_input, dict):
        subject = next((tool_input[k].strip() for k in _ACTIVITY_KEYS if isinstance(tool_input.get(k), str)), "")
        if subject:
            return f"{name} {subject.splitlines()[0][:80]}"
    return name


def _agent_result(started: SubagentStarted, ended: SubagentEnded | None, result: ToolResultBlock) -> object:
    """An Agent call's ``tool_use_result``, in Claude Code 2.1.235's fields: a background launch's, or a
    waited-for agent's answer with its counts (an error result stays its text)."""
    if result.get("is_error"):
        return _tool_use_result(result)
    if started.background:
        return {
            "isAsync": True,
            "status": "async_launched",
            "agentId": started.agent_id,
            "description": started.description,
            "resolvedModel": started.model,
            "prompt": started.prompt,
            "outputFile": started.output_file,
            "canReadOutputFile": bool(started.output_file),
        }
    report = ended.report if ended is not None else None
    content = result.get("content")
    answer = content[:1] if isinstance(content, list) else [{"type": "text", "text": str(content)}]
    return {
        "status": "completed",
        "prompt": started.prompt,
        "agentId": started.agent_id,
        "agentType": started.agent_type,
        "content": answer,
        "resolvedModel": started.model,
        "totalDurationMs": report.duration_ms if report else 0,
        "totalTokens": report.total_tokens if report else 0,
        "totalToolUseCount": report.tool_uses if report else 0,
    }


def _log_fields(log: RequestLog) -> dict[str, object]:
    withheld = log.error_kind in RECOVERABLE_FAILURES  # shown only when recovery is spent (in the result)
    return {
        "client_request_id": log.client_request_id,
        "request_id": log.request_id,
        "attempt": log.attempt,
        "model": log.model,
        "stream": log.stream,
        "status": log.status,
        "stop_reason": log.stop_reason,
        "ttft_ms": None if log.ttft_ms is None else round(log.ttft_ms, 1),
        "duration_ms": round(log.duration_ms, 1),
        "usage": dict(log.usage),
        "error_kind": log.error_kind,
        "error": None if withheld else log.error_message,
        "withheld": withheld,
    }


class Renderer:
    """What every output format shares: the items a run yields or publishes, dispatched to one method each.

    A format overrides the ``show_*`` methods it prints something for (the rest print
    nothing), :meth:`start` and :meth:`show_result`; :meth:`note` writes one line to
    stderr and :meth:`waiting` shows (or stops) that the run waits on the model.
    """

    def __init__(
        self,
        *,
        session_id: str,
        verbose: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        partial_messages: bool = False,
    ) -> None:
        self.session_id = session_id
        self.verbose = verbose
        self.partial_messages = partial_messages  # --include-partial-messages: the stream's events, as they come
        self.out = stdout or sys.stdout
        self.err = Console(file=stderr or sys.stderr, highlight=False, soft_wrap=True)
        self.status: Status | None = None
        self.streamed_text = False
        self.at_line_start = True
        self.emitted_results: set[str] = set()
        self.records: dict[str, Any] = {}  # each call's own record (Read's, Bash's…), by tool_use id
        # this run's tool_use ids: a resumed or continued history holds earlier prompts' calls, whose
        # results were shown when they ran and are not this run's to show again
        self.called: set[str] = set()
        self.model = ""  # the model the run is on, and the fallbacks left (start() sets them)
        self.fallbacks: list[str] = []
        self.subagents: dict[str, SubagentStarted] = {}  # the run's sub-agents, by the Agent call that started each
        self.agent_ends: dict[str, SubagentEnded] = {}  # how each ended, by the same call
        self.agent_work: dict[str, _AgentWork] = {}  # what each has done so far (task_progress), by the same call
        self.tags: dict[str, Any] = {}  # what every line says while a sub-agent's item is shown (its Agent call)
        self.not_run: dict[str, str] = {}  # why each refused call did not run, by tool_use id (tool_result_meta)

    # ---- plumbing -------------------------------------------------------------------------
    def line(self, obj: dict[str, Any]) -> None:
        """One JSON line on stdout, with the session's id (and, for a sub-agent's item, its Agent call's)."""
        obj.setdefault("session_id", self.session_id)
        obj.update(self.tags)
        self.write_line(obj)

    def write_line(self, obj: dict[str, Any]) -> None:
        """Print one finished line (the Python API keeps the object instead: ``queryloop.frontends.api``)."""
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()

    def waiting(self, on: bool) -> None:
        """Show (or stop showing) that the run waits on the model: nothing but in text on a terminal."""

    def note(self, *parts: str | tuple[str, str]) -> None:
        """One stderr line from plain strings and ``(text, style)`` pairs; nothing in them is markup or a control."""
        self.waiting(False)
        if not self.at_line_start:
            self.out.write("\n")
            self.out.flush()
            self.at_line_start = True
        self.err.print(Text.assemble(*(inert(p) if isinstance(p, str) else (inert(p[0]), p[1]) for p in parts)))

    # ---- items -------------------------------------------------------------------------------
    def start(
        self,
        *,
        model: str,
        cwd: str,
        tools: list[str],
        fallback_models: list[str],
        mcp_servers: list[dict[str, str]] | None = None,  # [{name, status}]
        machine: str,
        memory_paths: dict[str, list[str]] | None = None,  # the CLAUDE.md files read, by kind
        permission_mode: str = "default",
        api_key_source: str | None = None,  # None: ANTHROPIC_API_KEY when it is set, else "none"
        slash_commands: list[str] | None = None,  # the MCP servers' prompts, as commands
        agents: list[str] | None = None,  # the agents the Agent tool may start
    ) -> None:
        self.model, self.fallbacks = model, list(fallback_models)

    def observe(self, item: Observation) -> None:
        """One item of the run, as it happens (an observer's one entry point)."""
        if isinstance(item, (SubagentStarted, SubagentEnded, SubagentItem)):
            self._observe_subagent(item)
            return
        self._note_request(item)
        self._show_item(item)

    def _observe_subagent(self, item: SubagentStarted | SubagentEnded | SubagentItem) -> None:
        """A sub-agent started, ended, or did something (shown with its Agent call's tags)."""
        if isinstance(item, SubagentStarted):
            self.subagents[item.tool_use_id] = item
            self.agent_work[item.tool_use_id] = _AgentWork()
            self.show_subagent_started(item)
        elif isinstance(item, SubagentEnded):
            self.agent_ends[item.report.tool_use_id] = item
            self.show_subagent_ended(item)
        else:
            started = self.subagents.get(item.tool_use_id)
            self.tags = {
                "parent_tool_use_id": item.tool_use_id,
                "subagent_type": started.agent_type if started else None,
                "task_description": started.description if started else None,
            }
            try:
                self.show_subagent_item(item.item)
            finally:
                self.tags = {}

    def _note_request(self, item: Observation) -> None:
        """A request attempt's line, and the tool calls its reply made (this run's to show the results of)."""
        if isinstance(item, (AssistantMessage, RequestLogged)):
            self.show_request(item.log)
        elif isinstance(item, RequestFailed):
            self.show_request(item.failure.log)
        if isinstance(item, AssistantMessage):
            self._note_calls(item.message["content"])
        elif isinstance(item, RequestFailed):  # a stream cut keeps its complete tool_use blocks
            self._note_calls(item.failure.partial_content)

    def _show_item(self, item: Observation) -> None:
        """Every other item, by its kind, to the format's ``show_…`` method."""
        if isinstance(item, TextDelta):
            self.waiting(False)
            self.show_text(item.text)
        elif isinstance(item, StreamEvent):
            self.show_stream_event(item)
        elif isinstance(item, Step):
            self.show_step(item)
        elif isinstance(item, AssistantMessage):
            self.show_assistant(item)
        elif isinstance(item, ToolResultPublished):
            self._keep_record(item)
            self._tool_result(item.call.name, item.result)
        elif isinstance(item, PermissionDenied):
            self.show_permission_denied(item)
        elif isinstance(item, ApiRetry):
            self.show_retry(item)
        elif isinstance(item, HookReported):
            self.show_hook(item)
        elif isinstance(item, CompactionDone):
            self.show_compaction(item)
        elif isinstance(item, Notice):
            self._notice(item)
        elif isinstance(item, McpProgress):
            self.show_progress(item)

    def _notice(self, item: Notice) -> None:
        if item.text.startswith("warning: "):  # a warning goes to stderr in every format
            self.note((f"queryloop: {item.text}", "yellow"))
        else:
            self.show_notice(item)

    def show_subagent_started(self, item: SubagentStarted) -> None:
        """An Agent call started a sub-agent."""

    def show_subagent_ended(self, item: SubagentEnded) -> None:
        """A sub-agent's run ended."""

    def show_subagent_item(self, item: Observation) -> None:
        """An item of a sub-agent's run (``tags`` name its Agent call while it is shown)."""

    def show_request(self, log: RequestLog) -> None:
        """A model request attempt, however it ended."""

    def show_text(self, text: str) -> None:
        """Streamed text of the answer."""

    def show_stream_event(self, item: StreamEvent) -> None:
        """One event of the model's answer as it streams in (written only with ``--include-partial-messages``)."""

    def show_step(self, step: Step) -> None:
        """A transition the run took."""

    def show_assistant(self, item: AssistantMessage) -> None:
        """A complete reply."""

    def show_progress(self, progress: McpProgress) -> None:
        """A running MCP call's progress (the interactive status line shows it; Claude Code prints no line for it)."""

    def show_tool_result(self, name: str, result: ToolResultBlock) -> None:
        """One tool call's result (``name`` is ``(synthetic)`` for one no tool produced)."""

    def show_permission_denied(self, item: PermissionDenied) -> None:
        """A call the gate refused before anybody was asked (its error result follows as a tool result)."""

    def show_retry(self, item: ApiRetry) -> None:
        """A request about to be retried."""

    def show_hook(self, item: HookReported) -> None:
        """A SessionStart hook started or finished."""

    def show_compaction(self, item: CompactionDone) -> None:
        """A compaction that rewrote the transcript."""

    def show_notice(self, notice: Notice) -> None:
        """A notice that is no warning (a hook's error or message)."""

    def show_result(self, result: dict[str, Any]) -> None:
        """The run's result object."""
        self.line(result)

    def _note_calls(self, content: Iterable[Mapping[str, object]]) -> None:
        self.called.update(str(b.get("id")) for b in content if b.get("type") == "tool_use")

    def _keep_record(self, item: ToolResultPublished) -> None:
        if item.record is not None and not item.result.get("is_error"):
            self.records[item.call.id] = item.record

    def _tool_result(self, name: str, result: ToolResultBlock) -> None:
        self.emitted_results.add(str(result.get("tool_use_id")))
        self.show_tool_result(name, result)

    # ---- the end -----------------------------------------------------------------------------
    def finish(self, result: dict[str, Any], data: AgentData) -> None:
        self.waiting(False)
        # this run's tool results that no effect published (synthetic ones after an abort or a budget stop)
        for message, meta in data.messages.entries():
            content = message.get("content")
            if meta or message.get("role") != "user" or not isinstance(content, list):
                continue  # a hidden answer (a budget stop's) was never the user's to see
            for block in content:
                if is_tool_result(block) and str(block.get("tool_use_id")) in self.called - self.emitted_results:
                    self._tool_result("(synthetic)", block)
        last = data.messages.last()
        if last is not None and last.get("role") == "user" and last.get("content") in _MARKER_CONTENTS:
            self.show_user_message(last)  # an interrupt's marker, as Claude Code writes it
        self.show_result(result)

    def show_user_message(self, message: Mapping[str, object]) -> None:
        """A user message the run added that is no tool result (an interrupt's marker)."""


@uses(states=("calling_model", "completed", "refusal"))
class TextRenderer(Renderer):
    """``--output-format text``: the answer streamed to stdout, a coloured line per transition on stderr."""

    def waiting(self, on: bool) -> None:
        if not self.err.is_terminal:
            return
        if on and self.status is None:
            self.status = self.err.status("waiting on the model…", spinner="dots")
            self.status.start()
        elif not on and self.status is not None:
            self.status.stop()
            self.status = None

    def start(self, **fields: Any) -> None:
        super().start(**fields)
        if self.verbose:
            self.err.print(Text(inert(f"queryloop: model {fields['model']}, cwd {fields['cwd']}"), style="dim"))
        self.waiting(True)

    def show_request(self, log: RequestLog) -> None:
        if self.verbose:
            ttft = f", first token {log.ttft_ms:.0f} ms" if log.ttft_ms is not None else ""
            self.note(
                (
                    f"  request {log.request_id} attempt {log.attempt} {log.model} → {log.status} "
                    f"{log.stop_reason or log.error_kind or ''} in {log.duration_ms:.0f} ms{ttft}",
                    "dim",
                )
            )

    def show_text(self, text: str) -> None:
        self.out.write(inert(text))
        self.out.flush()
        self.streamed_text = True
        self.at_line_start = text.endswith("\n")

    def show_assistant(self, item: AssistantMessage) -> None:
        if not item.log.stream:  # a non-streamed reply (stream fallback): print it whole
            text = "".join(b.get("text", "") for b in item.message["content"] if b.get("type") == "text")
            if text:
                self.waiting(False)
                self.show_text(text)

    def show_step(self, step: Step) -> None:
        counters = " ".join(f"{k}={v}" for k, v in step.counter_dict().items() if v)
        style = (
            "cyan"
            if step.progress
            else ("red" if step.terminal and step.dest not in ("completed", "refusal") else "magenta")
        )
        extra = (f" {counters}", "dim") if counters else ""
        self.note((f"· {step.reason}", style), " ", (f"{step.source} → {step.dest}", "dim"), extra)
        if step.dest == "calling_model" and not step.terminal:
            self.waiting(True)

    def show_subagent_started(self, item: SubagentStarted) -> None:
        how = "in the background" if item.background else "(waited for)"
        self.note(("  ⇢ ", "cyan"), f"agent {item.agent_id} ({item.agent_type}) started {how}: {item.description}")

    def show_subagent_ended(self, item: SubagentEnded) -> None:
        r = item.report
        style = "green" if r.status == "completed" else "red"
        self.note(("  ⇠ ", style), f"agent {r.agent_id} {r.status} after {r.duration_ms} ms, {r.tool_uses} tool use(s)")

    def show_retry(self, item: ApiRetry) -> None:
        self.note(
            (
                f"  retrying in {item.retry_delay_ms} ms (attempt "
                f"{item.attempt}/{item.max_retries}, status {item.error_status})",
                "yellow",
            )
        )

    def show_compaction(self, item: CompactionDone) -> None:
        b = item.boundary
        lossy = f", lossy: {b.dropped_messages} message(s) dropped" if b.lossy else ""
        self.note((f"  compacted ({b.trigger}): {b.pre_tokens} → {b.post_tokens} tokens{lossy}", "blue"))

    def show_notice(self, notice: Notice) -> None:
        if self.verbose:
            self.note((f"  {notice.text}", "dim"))

    def show_tool_result(self, name: str, result: ToolResultBlock) -> None:
        mark = ("✗", "red") if result.get("is_error") else ("✓", "green")
        first = _result_text(result.get("content", "")).strip().splitlines()[:1]
        self.note("  ", mark, f" {name}: {first[0][:100] if first else ''}")

    def show_result(self, result: dict[str, Any]) -> None:
        if result["is_error"]:
            if not self.at_line_start:
                self.out.write("\n")
            text = result.get("result") or "; ".join(result.get("errors", []))
            label = f"Error ({result['terminal_reason']}):"
            self.err.print(Text.assemble((label, _ERROR_STATES_STYLE), inert(f" {text}")))
        else:
            answer = result.get("result") or ""
            if not self.streamed_text and answer:
                self.out.write(inert(answer))
                self.at_line_start = answer.endswith("\n")
            if not self.at_line_start:
                self.out.write("\n")
        self.out.flush()
        if self.verbose:
            cost = result["total_cost_usd"]
            self.err.print(
                Text(
                    f"{result['num_turns']} turn(s), {result['duration_ms']} ms, cost "
                    f"{'unknown' if cost is None else f'${cost:.4f}'}",
                    style="dim",
                )
            )


class JsonRenderer(Renderer):
    """``--output-format json``: the result object only (and warnings on stderr); with ``--verbose``,
    :class:`VerboseJsonRenderer`."""


@uses(reasons=tuple(_MODEL_FALLBACKS))
class StreamJsonRenderer(Renderer):
    """``--output-format stream-json``: Claude Code's JSON lines, and our transition and request lines."""

    def start(self, **fields: Any) -> None:
        super().start(**fields)
        api_key_source = fields.get("api_key_source")
        if api_key_source is None:
            api_key_source = "ANTHROPIC_API_KEY" if os.environ.get("ANTHROPIC_API_KEY") else "none"
        self.line(
            {
                "type": "system",
                "subtype": "init",
                "cwd": fields["cwd"],
                "session_id": self.session_id,
                "tools": fields["tools"],
                "mcp_servers": fields.get("mcp_servers") or [],
                "model": fields["model"],
                "permissionMode": fields.get("permission_mode", "default"),
                "slash_commands": fields.get("slash_commands") or [],  # the MCP servers' prompts
                "apiKeySource": api_key_source,
                "claude_code_version": CLAUDE_CODE_VERSION,  # the release it behaves as: the SDK checks it
                "output_style": "default",
                "agents": fields.get("agents") or [],
                "skills": [],
                "plugins": [],
                # Claude Code 2.1.235's keys, with what holds here: no Claude Code-only slash commands, none
                # of its control-protocol extensions, nothing collected, and no fast mode (see the result)
                "terminal_slash_commands": [],
                "capabilities": [],
                "analytics_disabled": True,
                "product_feedback_disabled": True,
                "fast_mode_state": "off",
                "fast_mode_disabled_reason": "disabled_by_env",
                "memory_paths": fields.get("memory_paths") or {},
                "fallback_models": fields["fallback_models"],  # ours: the chain, and the machine the run executes
                "machine": fields["machine"],
                "uuid": str(uuid.uuid4()),
            }
        )

    def show_request(self, log: RequestLog) -> None:
        """Every attempt is logged as an event: ids, attempt, model, status, timing, usage."""
        self.line({"type": "system", "subtype": "api_request", **_log_fields(log)})

    def show_subagent_started(self, item: SubagentStarted) -> None:
        """Claude Code's ``system/task_started`` line."""
        self.line(
            {
                "type": "system",
                "subtype": "task_started",
                "task_id": item.agent_id,
                "tool_use_id": item.tool_use_id,
                "description": item.description,
                "subagent_type": item.agent_type,
                "task_type": "local_agent",
                "prompt": item.prompt,
                "uuid": str(uuid.uuid4()),
            }
        )

    def show_subagent_ended(self, item: SubagentEnded) -> None:
        """Claude Code's ``system/task_notification`` line: its ``summary`` is the agent's answer (or what went
        wrong)."""
        r = item.report
        status = {"completed": "completed", "cancelled": "stopped"}.get(r.status, "failed")
        self.line(
            {
                "type": "system",
                "subtype": "task_updated",  # Claude Code 2.1.235: the task's new status, then the notification
                "task_id": r.agent_id,
                "patch": {"status": status, "end_time": int(time.time() * 1000)},
                "uuid": str(uuid.uuid4()),
            }
        )
        line: dict[str, object] = {
            "type": "system",
            "subtype": "task_notification",
            "task_id": r.agent_id,
            "tool_use_id": r.tool_use_id,
            "status": status,
            "output_file": r.transcript,
            "summary": r.result,
            "uuid": str(uuid.uuid4()),
        }
        if r.status == "completed":
            line["usage"] = {"total_tokens": r.total_tokens, "tool_uses": r.tool_uses, "duration_ms": r.duration_ms}
        self.line(line)

    def show_subagent_item(self, item: Observation) -> None:
        """A sub-agent's replies, tool results, attempts and transitions, as the parent's lines tagged with its call."""
        if isinstance(item, AssistantMessage):
            self.show_request(item.log)
            self.show_assistant(item)
            self._task_progress(item)
        elif isinstance(item, (RequestLogged, RequestFailed)):
            self.show_request(item.log if isinstance(item, RequestLogged) else item.failure.log)
        elif isinstance(item, ToolResultPublished):
            self._keep_record(item)
            self.show_tool_result(item.call.name, item.result)
        elif isinstance(item, Step):
            self.show_step(item)
        elif isinstance(item, ApiRetry):
            self.show_retry(item)

    def _task_progress(self, item: AssistantMessage) -> None:
        """Claude Code's ``system/task_progress`` line for each tool call of a sub-agent's reply: what it is
        doing now, and its tokens, tool calls and time so far."""
        call_id = self.tags.get("parent_tool_use_id")
        started, work = self.subagents.get(str(call_id)), self.agent_work.get(str(call_id))
        if started is None or work is None:
            return
        work.tokens += sum(int(v) for k, v in item.log.usage.items() if k.endswith("tokens") and isinstance(v, int))
        for block in item.message["content"]:
            if block.get("type") != "tool_use":
                continue
            work.tool_uses += 1
            tags, self.tags = self.tags, {}  # a line about the task, not one of its own
            try:
                self.line(
                    {
                        "type": "system",
                        "subtype": "task_progress",
                        "task_id": started.agent_id,
                        "tool_use_id": started.tool_use_id,
                        "description": _activity(str(block.get("name")), block.get("input")),
                        "subagent_type": started.agent_type,
                        "usage": {
                            "total_tokens": work.tokens,
                            "tool_uses": work.tool_uses,
                            "duration_ms": round((time.monotonic() - work.started) * 1000),
                        },
                        "last_tool_name": block.get("name"),
                        "uuid": str(uuid.uuid4()),
                    }
                )
            finally:
                self.tags = tags

    def show_stream_event(self, item: StreamEvent) -> None:
        """A ``stream_event`` line: the API's event as it arrived (Claude Code's shape), of the main conversation."""
        if self.partial_messages and not self.tags:
            line = {
                "type": "stream_event",
                "event": item.event,
                "session_id": self.session_id,
                "parent_tool_use_id": None,
                "uuid": str(uuid.uuid4()),
            }
            self.line(line if item.ttft_ms is None else {**line, "ttft_ms": item.ttft_ms})

    def show_assistant(self, item: AssistantMessage) -> None:
        """One ``assistant`` line per content block, each with the message's id (Claude Code's shape)."""
        message_id = item.message_id or f"msg_{uuid.uuid4().hex}"  # a scripted backend's reply has none
        for block in item.message["content"]:
            message = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": item.model,
                "content": [block],
                "stop_reason": item.log.stop_reason,
                "stop_sequence": None,
                "usage": dict(item.log.usage),
            }
            self.line(
                {
                    "type": "assistant",
                    "message": message,
                    "parent_tool_use_id": None,  # the main conversation: no subagent's tool call
                    "uuid": str(uuid.uuid4()),
                    "timestamp": now(),
                    "request_id": item.log.request_id,
                }
            )

    def show_step(self, step: Step) -> None:
        self.line(
            {
                "type": "system",
                "subtype": "transition",
                "reason": step.reason,
                "from": step.source,
                "to": step.dest,
                "event": step.event,
                "counters": step.counter_dict(),
                "progress": step.progress,
            }
        )
        if step.reason in _MODEL_FALLBACKS and not self.tags:  # a sub-agent's fallback is not the run's model
            self._model_fallback(step)

    def _model_fallback(self, step: Step) -> None:
        """Claude Code's ``system/model_fallback`` line: which model the turn continues on, and why."""
        original = self.model
        self.model = self.fallbacks.pop(0) if self.fallbacks else original
        trigger = _MODEL_FALLBACKS[step.reason]
        why = "is overloaded" if trigger == "overloaded" else "is not available"
        self.line(
            {
                "type": "system",
                "subtype": "model_fallback",
                "trigger": trigger,
                "original_model": original,
                "fallback_model": self.model,
                "content": f"{original} {why}; the turn goes on with {self.model}",
                "uuid": str(uuid.uuid4()),
            }
        )

    def show_permission_denied(self, item: PermissionDenied) -> None:
        """Claude Code 2.1.235's ``system/permission_denied`` line, before the refused call's tool result (and
        why it did not run, for that result's ``tool_result_meta``)."""
        self.not_run[item.call.id] = item.not_run
        if not item.shown:
            return
        line: dict[str, Any] = {
            "type": "system",
            "subtype": "permission_denied",
            "tool_name": item.call.name,
            "tool_use_id": item.call.id,
        }
        if item.kind is not None:
            line["decision_reason_type"] = item.kind
        if item.reason is not None:
            line["decision_reason"] = item.reason
        self.line({**line, "message": item.message, "uuid": str(uuid.uuid4())})

    def show_hook(self, item: HookReported) -> None:
        """Claude Code's ``system/hook_started`` and ``system/hook_response`` lines of a SessionStart hook."""
        line: dict[str, Any] = {
            "type": "system",
            "subtype": f"hook_{item.phase}",
            "hook_id": item.hook_id,
            "hook_name": item.hook_name,
            "hook_event": item.event,
        }
        if item.result is not None:
            result = item.result
            line["output"] = result.stderr + result.stdout  # Claude Code: both as they came; stderr's first here
            line |= {"stdout": result.stdout, "stderr": result.stderr, "exit_code": result.exit_code}
            line["outcome"] = "success" if result.exit_code == 0 else "error"
        self.line({**line, "uuid": str(uuid.uuid4())})

    def show_retry(self, item: ApiRetry) -> None:
        self.line(
            {
                "type": "system",
                "subtype": "api_retry",
                "attempt": item.attempt,
                "max_retries": item.max_retries,
                "retry_delay_ms": item.retry_delay_ms,
                "error_status": item.error_status,
                "error": item.error,
                "uuid": str(uuid.uuid4()),
            }
        )

    def show_compaction(self, item: CompactionDone) -> None:
        b = item.boundary
        self.line(
            {
                "type": "system",
                "subtype": "compact_boundary",
                "compact_metadata": b.to_json(),
                **b.to_json(),
                "uuid": str(uuid.uuid4()),
            }
        )

    def show_notice(self, notice: Notice) -> None:
        """The hook failures among the notices, as Claude Code reports them."""
        failed = _HOOK_ERROR.fullmatch(notice.text)
        if failed is not None:
            self.line(
                {
                    "type": "system",
                    "subtype": "hook_error",
                    "hook_event_name": failed["event"],
                    "error": failed["error"],
                    "uuid": str(uuid.uuid4()),
                }
            )

    def show_user_message(self, message: Mapping[str, object]) -> None:
        line = {"type": "user", "message": dict(message), "parent_tool_use_id": None}
        self.line({**line, "uuid": str(uuid.uuid4()), "timestamp": now()})

    def show_tool_result(self, name: str, result: ToolResultBlock) -> None:
        call_id = str(result.get("tool_use_id"))
        started = None if self.tags else self.subagents.get(call_id)
        line: dict[str, object] = {
            "type": "user",
            "message": {"role": "user", "content": [result]},
            "parent_tool_use_id": None,
            "uuid": str(uuid.uuid4()),
            "timestamp": now(),
            "tool_use_result": self.records.pop(call_id, None) or _tool_use_result(result)
            if started is None
            else _agent_result(started, self.agent_ends.get(started.tool_use_id), result),
        }
        not_run = None if self.tags else self.not_run.pop(call_id, None)
        if not_run is not None:  # a refused call: why it did not run, as Claude Code 2.1.235 stamps it
            line["tool_result_meta"] = [{"id": call_id, "non_execution_kind": not_run}]
        self.line(line)


RENDERERS: dict[str, type[Renderer]] = {fmt: globals()[name] for fmt, name in OUTPUT_FORMATS.items()}
"""The renderer of each ``--output-format`` (the formats and their classes: ``queryloop.frontends.formats``)."""


class VerboseJsonRenderer(StreamJsonRenderer):
    """``--output-format json --verbose``: every line ``stream-json`` prints, kept, then printed as one JSON
    array when the result is (the result last), as Claude Code 2.1.235 prints it."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.kept: list[dict[str, Any]] = []

    def write_line(self, obj: dict[str, Any]) -> None:
        self.kept.append(obj)
        if obj.get("type") == "result":
            self.out.write(json.dumps(self.kept, ensure_ascii=False) + "\n")
            self.out.flush()
            self.kept = []


def renderer_for(fmt: str, **options: Any) -> Renderer:
    """The renderer of output format ``fmt`` (``text``, ``json``, ``stream-json``); ``json`` with ``verbose``
    prints every message as one array (:class:`VerboseJsonRenderer`)."""
    if fmt == "json" and options.get("verbose"):
        return VerboseJsonRenderer(**options)
    return RENDERERS[fmt](**options)
