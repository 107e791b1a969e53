"""``--output-format stream-json`` (and ``json --verbose``): Claude Code's JSON lines, and our own.

Owns :class:`StreamJsonRenderer`, :class:`VerboseJsonRenderer` and what their lines are built from.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

from queryloop.fsm import Step, uses
from queryloop.handlers.context import CompactionDone
from queryloop.handlers.hooks import HookReported
from queryloop.handlers.messages import ToolResultBlock
from queryloop.handlers.outcome import Notice
from queryloop.handlers.request import (
    RECOVERABLE_FAILURES,
    ApiRetry,
    AssistantMessage,
    RequestFailed,
    RequestLog,
    RequestLogged,
    StreamEvent,
)
from queryloop.handlers.session import now
from queryloop.handlers.tools import PermissionDenied, ToolResultPublished

from ..run.defaults import CLAUDE_CODE_VERSION
from ..run.observe import Observation, SubagentEnded, SubagentStarted
from .renderer import Renderer, result_text

__all__ = ["StreamJsonRenderer", "VerboseJsonRenderer"]

# How the hooks service words a hook failure: "<Event> hook error (<command>): <message>".
_HOOK_ERROR = re.compile(r"(?P<event>[A-Za-z]+) hook error (?P<error>.*)", re.DOTALL)


# The transitions that switch to the next --fallback-model, and the trigger Claude Code names for each.
_MODEL_FALLBACKS = {"model_fallback": "overloaded", "unavailable_model_fallback": "model_not_found"}

_TOOL_USE_ERROR = re.compile(r"</?tool_use_error>")


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
    text = _TOOL_USE_ERROR.sub("", result_text(content))
    return text if not result.get("is_error") or text.startswith("Error") else f"Error: {text}"


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
