"""What every output format's renderer shares: the items a run yields or publishes, one ``show_*`` method each.

Owns :class:`Renderer`; the formats' classes are in ``console`` (text, json) and ``stream_json``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

import attrs
from rich.console import Console
from rich.status import Status
from rich.text import Text

from queryloop.fsm import Step, inert
from queryloop.handlers.context import CompactionDone
from queryloop.handlers.hooks import HookReported
from queryloop.handlers.mcp import McpProgress
from queryloop.handlers.messages import ToolResultBlock, is_tool_result
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import (
    ApiRetry,
    AssistantMessage,
    RequestFailed,
    RequestLog,
    RequestLogged,
    StreamEvent,
    TextDelta,
)
from queryloop.handlers.tools import INTERRUPT_MARKERS, PermissionDenied, ToolResultPublished

from ..run.data import AgentData
from ..run.observe import Observation, SubagentEnded, SubagentItem, SubagentStarted

__all__ = ["Renderer", "result_text"]

_MARKER_CONTENTS = [[{"type": "text", "text": marker}] for marker in INTERRUPT_MARKERS]


def result_text(content: object) -> str:
    """A tool_result's text: its string, or its text blocks joined (an image block has none)."""
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


@attrs.define
class _AgentWork:
    """What a sub-agent has done so far, as its ``task_progress`` lines count it."""

    started: float = attrs.field(factory=time.monotonic)
    tokens: int = 0
    tool_uses: int = 0


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
