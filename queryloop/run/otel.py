"""A run exported over OpenTelemetry: spans, Claude Code's metrics and events, and the machine's own counts.

Owns :class:`RunTelemetry`; the process's providers are ``queryloop.run.otel_providers``'. The two import the
OpenTelemetry SDK, and only when telemetry is configured. What is exported: docs/telemetry.md.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from queryloop.fsm import Step, uses
from queryloop.handlers.context import CompactionDone
from queryloop.handlers.request import AssistantMessage, RequestFailed, RequestLog, RequestLogged, cost_usd
from queryloop.handlers.tools import CHANGES_CODE, ToolResultPublished

from .otel_providers import PROVIDERS, ProcessProviders, end_session
from .telemetry import TelemetrySettings

if TYPE_CHECKING:
    from queryloop.fsm import Program

    from .config import AgentOptions
    from .observe import Observation

__all__ = ["PROVIDERS", "ProcessProviders", "RETRY_KINDS", "RunTelemetry", "UNOFFERED_TOOL", "end_session"]

RETRY_KINDS = frozenset({"retry", "fallback", "escalate"})
"""Reason kinds that send the same request again (the machine's ``reason_kinds``): counted as retries."""

_COMPACTING = {
    "auto_compacting": "auto",
    "reactive_compacting": "reactive",
    "manual_compacting": "manual",
    "backing_off_auto_summary": "auto",
    "backing_off_reactive_summary": "reactive",
    "backing_off_manual_summary": "manual",
}
_BEFORE_THE_LOOP = ("opening_session", "submitting_prompt")
_STATUS_WORD = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a span's error status: a name, never a sentence or a path
_API_TOOL_ID = re.compile(r"toolu_[0-9A-Za-z]{1,64}")  # a tool_use id as the API makes them: `toolu_` and base62
UNOFFERED_TOOL = "unoffered_tool"
"""The name a call of a tool the run does not offer is exported under while tool details are off: the model
chose that name, and a model can write anything there."""


def _usage_attributes(usage: Mapping[str, Any]) -> dict[str, int]:
    """GenAI semantic-convention token counts of one request."""
    out = {
        "gen_ai.usage.input_tokens": int(usage.get("input_tokens") or 0),
        "gen_ai.usage.output_tokens": int(usage.get("output_tokens") or 0),
        "gen_ai.usage.cache_read.input_tokens": int(usage.get("cache_read_input_tokens") or 0),
        "gen_ai.usage.cache_creation.input_tokens": int(usage.get("cache_creation_input_tokens") or 0),
    }
    return out


@uses(
    states=("calling_model", "gating_tools", "running_tools", *_COMPACTING, *_BEFORE_THE_LOOP),
    reasons=("next_turn", "api_retries_exhausted"),
)
class RunTelemetry:
    """Exports one run: told every step and published item, it opens and closes spans and counts."""

    def __init__(self, settings: TelemetrySettings, *, options: AgentOptions, program: Program, run: Any) -> None:
        self.settings = settings
        self.providers = PROVIDERS.get(settings)
        self.options = options
        self.run = run  # the AgentRun: its run data (the gate's decisions) and services (the sandbox)
        self.kinds = tuple(program.spec.reason_kinds)
        self.common: dict[str, str] = {}
        if settings.include_session_id:
            self.common["session.id"] = options.session.session_id
        if settings.include_version:
            self.common["app.version"] = self.providers.version
        self.turn_index = 0
        self.turn: Span | None = None
        self.attempt: Span | None = None
        self.attempt_failure: RequestFailed | None = None  # the open attempt's failure
        self.last_failure: RequestFailed | None = None  # the last attempt's, until one is answered
        self.retry_reason: str | None = None
        self.compaction: Span | None = None
        self.compaction_started = 0.0
        self.compaction_done: CompactionDone | None = None
        self.compaction_trigger = ""
        self.asked: dict[str, tuple[str, dict[str, Any]]] = {}  # tool_use id → (name, input) of the last reply
        self.tools: dict[str, tuple[Span, float, str, str]] = {}  # tool_use id → (span, start, decision, source)
        self.session = self._start_session()

    # ---- the observer ----------------------------------------------------------------------

    def observe(self, item: Observation) -> None:
        if isinstance(item, Step):
            self._step(item)
        elif isinstance(item, AssistantMessage):
            self._replied(item)
        elif isinstance(item, RequestFailed):
            self.attempt_failure = self.last_failure = item
        elif isinstance(item, RequestLogged):
            self._summary_request(item.log)
        elif isinstance(item, ToolResultPublished):
            self._tool_result(item)
        elif isinstance(item, CompactionDone):
            self.compaction_done = item

    def close(self) -> None:
        """The run is over: end what no terminal step ended (a run that ended in ``internal_error`` takes none)."""
        if self.session is None:
            return
        for span in (self.attempt, self.compaction):
            if span is not None:
                span.end()
        self.attempt = self.compaction = None
        self._end_tools(aborted=True)
        self._end_turn()
        failure = self.run.runner.error
        # the error's message may quote the run's data (a path, a tool's output): its name only
        self._fail(self.session, "internal_error" if failure else "unfinished")
        self.session.set_attribute("queryloop.terminal_reason", "internal_error" if failure else "unfinished")
        self.session.end()
        self.session = None

    # ---- spans -------------------------------------------------------------------------------

    def _span(self, name: str, parent: Span | None, attributes: Mapping[str, Any], **kwargs: Any) -> Span | None:
        tracer = self.providers.tracer
        if tracer is None:
            return None
        context = trace.set_span_in_context(parent) if parent is not None else None
        return tracer.start_span(name, context=context, attributes=attributes, **kwargs)

    def _start_session(self) -> Span | None:
        """The run's span: the session's (a root), or a sub-agent's, under the span of the Agent call that
        started it (``options.agents.telemetry_parent``)."""
        options = self.options
        session_id = options.session.session_id
        if session_id not in self.providers.sessions_counted:
            self.providers.sessions_counted.add(session_id)
            self._count("claude_code.session.count", 1, {})
        agent = options.agents.agent_type if options.agents.agent_id is not None else None
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent or "queryloop",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.conversation.id": session_id,
            "gen_ai.request.model": options.request.model,
            "session.id": session_id,
            "queryloop.machine": self.run.program.spec.name,
            "queryloop.permission_mode": options.permissions.mode,
        }
        if options.agents.agent_id is not None:
            attributes["gen_ai.agent.id"] = options.agents.agent_id
        tracer = self.providers.tracer
        if tracer is None:
            return None
        context = options.agents.telemetry_parent
        if options.agents.agent_id is None:  # a prompt of the session: its span is the session's child
            session = self.providers.session_span(options, self.run.program.spec.name)
            context = trace.set_span_in_context(session) if session is not None else None
        return tracer.start_span(
            f"invoke_agent {agent or 'queryloop'}", context=context, attributes=attributes, kind=SpanKind.INTERNAL
        )

    def span_context(self, tool_use_id: str) -> object:
        """The context a sub-agent started by the Agent call ``tool_use_id`` nests its spans in: that call's
        span (else the turn's); None when no span is open."""
        opened = self.tools.get(tool_use_id)
        holder = opened[0] if opened is not None else self.turn
        return trace.set_span_in_context(holder) if holder is not None else None

    def _open_turn(self) -> Span | None:
        if self.turn is None and self.session is not None:
            self.turn_index += 1
            self.turn = self._span("queryloop.turn", self.session, {"queryloop.turn": self.turn_index})
        return self.turn

    def _end_turn(self) -> None:
        if self.turn is not None:
            self.turn.end()
            self.turn = None

    def _step(self, step: Step) -> None:
        self._count_transition(step)
        if step.index == 0 and self.options.agents.agent_id is None:  # a sub-agent's prompt is no user's
            self._user_prompt()
        self._add_transition_event(step)
        self._end_what_step_leaves(step)
        self._start_what_step_enters(step)
        if step.reason == "next_turn":
            self._end_turn()
        if step.terminal:
            self._end_session(step)

    def _count_transition(self, step: Step) -> None:
        """The transition's counters, by reason and kind (a retry's reason kept for the next request's span)."""
        kind = next((k for k in self.kinds if step.reason.endswith(f"_{k}")), "")
        self._count("queryloop.transition.count", 1, {"reason": step.reason, "kind": kind})
        if kind in RETRY_KINDS:
            self._count("queryloop.retry.count", 1, {"reason": step.reason, "kind": kind})
            self.retry_reason = step.reason
        elif kind == "breaker":
            self._count("queryloop.breaker.count", 1, {"reason": step.reason})

    def _add_transition_event(self, step: Step) -> None:
        """The transition as an event of the session's span (before the loop) or of the turn's."""
        holder = self.session if step.source in _BEFORE_THE_LOOP else self._open_turn()
        if holder is None:
            return
        holder.add_event(
            "queryloop.transition",
            {
                "queryloop.step": step.index,
                "queryloop.from": step.source,
                "queryloop.event": step.event,
                "queryloop.reason": step.reason,
                "queryloop.to": step.dest,
                # the counters that have counted (a zero is the counter's default, and there are ~20)
                **{f"queryloop.counter.{n}": c for n, c in zip(step.counter_names, step.counters, strict=True) if c},
            },
        )

    def _end_what_step_leaves(self, step: Step) -> None:
        """The request attempt, the gate, the tool calls and the compaction the step leaves; the run's error."""
        if step.source == "calling_model":
            self._end_attempt(step)
        if step.source == "gating_tools":
            self._gated()
        if step.source == "running_tools" or step.terminal:
            self._end_tools(step.terminal)
        if step.source in _COMPACTING and step.dest not in _COMPACTING:
            self._end_compaction(step)
        # as Claude Code: an error the run ends with, not a retried one
        if step.terminal and self.last_failure is not None:
            self._api_error(self.last_failure, exhausted=step.reason == "api_retries_exhausted")

    def _start_what_step_enters(self, step: Step) -> None:
        """A request attempt's span, or a compaction's, when the step enters one."""
        if step.dest == "calling_model":
            self._start_attempt()
        if step.dest in _COMPACTING and step.source not in _COMPACTING:
            self._start_compaction(_COMPACTING[step.dest])

    def _start_attempt(self) -> None:
        request = self.run.data.request
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.system": "anthropic",
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": request.max_tokens,
        }
        if self.retry_reason is not None:
            attributes["queryloop.retry.reason"] = self.retry_reason
        self.retry_reason = None
        self.attempt_failure = None
        self.attempt = self._span(f"chat {request.model}", self._open_turn(), attributes, kind=SpanKind.CLIENT)

    def _end_attempt(self, step: Step) -> None:
        span = self.attempt
        self.attempt = None
        if span is None:
            return
        span.set_attribute("queryloop.outcome", step.event)
        span.set_attribute("queryloop.next_reason", step.reason)
        failure = self.attempt_failure
        if failure is not None:
            log = failure.failure.log
            span.set_attribute("queryloop.attempt", log.attempt)
            span.set_attribute("error.type", failure.failure.kind)
            if failure.failure.status is not None:
                span.set_attribute("http.response.status_code", failure.failure.status)
            self._fail(span, failure.failure.kind)  # the API's message may quote the request: the kind only
        span.end()

    def _replied(self, item: AssistantMessage) -> None:
        log = item.log
        self.last_failure = None
        content = item.message.get("content") or []
        self.asked = {
            str(b["id"]): (str(b.get("name")), dict(b.get("input") or {}))
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_use"
        }
        if self.attempt is not None:
            span = self.attempt
            span.set_attributes(_usage_attributes(log.usage))
            span.set_attribute("gen_ai.response.model", item.model)
            span.set_attribute("queryloop.attempt", log.attempt)
            if item.message_id:
                span.set_attribute("gen_ai.response.id", item.message_id)
            if log.stop_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [log.stop_reason])
            if log.status is not None:
                span.set_attribute("http.response.status_code", log.status)
            if log.request_id:
                span.set_attribute("queryloop.request_id", log.request_id)
            if log.ttft_ms is not None:
                span.set_attribute("queryloop.ttft_ms", round(log.ttft_ms))
        self._api_request(log, "main")

    def _summary_request(self, log: RequestLog) -> None:
        """A compaction's summary request: a child span of the compaction, back-dated by its duration."""
        now = time.time_ns()
        span = self._span(
            f"chat {log.model}",
            self.compaction or self._open_turn(),
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "anthropic",
                "gen_ai.request.model": log.model,
                "queryloop.purpose": "compaction_summary",
                **_usage_attributes(log.usage),
            },
            kind=SpanKind.CLIENT,
            start_time=now - int(log.duration_ms * 1_000_000),
        )
        if log.error_kind is None:
            self._api_request(log, "compact")
        if span is not None:
            if log.error_kind is not None:
                span.set_attribute("error.type", log.error_kind)
                self._fail(span, log.error_kind)
            span.end(end_time=now)

    def _gated(self) -> None:
        """The gate decided this turn's calls: a span per call, its decision, Claude Code's decision event."""
        self._end_tools(aborted=False)  # a call of an earlier turn still open (its results never came): closed
        tools = self.run.data.tools
        allowed = {c.id for c in tools.pending}
        refused = {str(d.get("tool_use_id")) for d in tools.permission_denials}
        sources = dict(tools.decision_sources)  # who decided, where not the configuration
        sandbox = self.run.services.tool_context.sandbox
        for call_id, (asked_name, tool_input) in self.asked.items():
            decision = "accept" if call_id in allowed else "reject" if call_id in refused else "none"
            source = sources.get(call_id, "config")
            sandboxed = asked_name == "Bash" and sandbox is not None and sandbox.policy.sandboxes(tool_input)
            name, shown_id = self._tool_name(asked_name), self._tool_id(call_id)
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": shown_id,
                "gen_ai.tool.type": "extension" if name.startswith("mcp__") else "function",
                "queryloop.permission.decision": decision,
                "queryloop.permission.source": source,
                "queryloop.sandbox": "bubblewrap" if sandboxed else "none",
            }
            if self.settings.log_tool_details:
                attributes["gen_ai.tool.call.arguments"] = _json(tool_input)
            span = self._span(f"execute_tool {name}", self._open_turn(), attributes)
            if span is not None:
                self.tools[call_id] = (span, time.monotonic(), decision, source)
            if decision == "none":
                continue  # no such tool, or answered from the ledger: the gate decided nothing
            event = {"decision": decision, "source": source, "tool_name": name, "tool_use_id": shown_id}
            self._event("tool_decision", event)
            if name in CHANGES_CODE:  # Claude Code's code_edit_tool.decision
                self._count(
                    "claude_code.code_edit_tool.decision",
                    1,
                    {"decision": decision, "source": source, "tool_name": name},
                )
        self.asked = {}

    def _tool_result(self, item: ToolResultPublished) -> None:
        call = item.call
        opened = self.tools.pop(call.id, None)
        failed = bool(item.result.get("is_error"))
        content = item.result.get("content")
        size = len(content.encode()) if isinstance(content, str) else len(_json(content).encode())
        duration = round((time.monotonic() - opened[1]) * 1000) if opened else 0
        event: dict[str, object] = {
            "tool_name": self._tool_name(call.name),
            "tool_use_id": self._tool_id(call.id),
            "success": "false" if failed else "true",
            "duration_ms": str(duration),
            "tool_result_size_bytes": str(size),
        }
        if opened is not None and opened[2] != "none":
            event.update(decision_source=opened[3], decision_type=opened[2])
        if self.settings.log_tool_details:
            event["tool_parameters"] = _json(call.input)
        self._event("tool_result", event)
        if opened is not None:
            span = opened[0]
            span.set_attribute("queryloop.tool.success", not failed)
            if failed:
                refused = opened[2] == "reject"
                detail = content if isinstance(content, str) else _json(content) if content is not None else ""
                self._fail(span, "permission_denied" if refused else "tool_error", content=detail)
            span.end()

    def _tool_name(self, name: str) -> str:
        """A call's tool name as exported: the model chose it, so with tool details off only a tool the run
        offers keeps its name (a built-in, a custom tool, a listed MCP tool); any other is ``unoffered_tool``."""
        services = self.run.services
        if self.settings.log_tool_details or services.tools.get(name) or services.extra_tool(name):
            return name
        return UNOFFERED_TOOL

    def _tool_id(self, call_id: str) -> str:
        """A call's id as exported: with tool details off, an id not in the API's shape (``toolu_`` and up to 64
        letters and digits) is ``hashed_`` and 24 hex digits of its SHA-256, so the model cannot write text
        there and the call's span and events still share one id."""
        if self.settings.log_tool_details or _API_TOOL_ID.fullmatch(call_id):
            return call_id
        return "hashed_" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]

    def _end_tools(self, aborted: bool) -> None:
        for span, _, _, _ in self.tools.values():
            span.set_attribute("queryloop.tool.finished", False)
            if aborted:
                self._fail(span, "unfinished")  # the run ended before the call finished
            span.end()
        self.tools.clear()

    def _start_compaction(self, trigger: str) -> None:
        self.compaction_done = None
        self.compaction_started = time.monotonic()
        self.compaction = self._span(
            "queryloop.compaction", self._open_turn(), {"queryloop.compaction.trigger": trigger}
        )
        self.compaction_trigger = trigger

    def _end_compaction(self, step: Step) -> None:
        done = self.compaction_done
        event: dict[str, object] = {
            "trigger": self.compaction_trigger,
            "success": str(done is not None).lower(),
            "duration_ms": str(round((time.monotonic() - self.compaction_started) * 1000)),
        }
        if done is not None:
            event.update(pre_tokens=str(done.boundary.pre_tokens), post_tokens=str(done.boundary.post_tokens))
        self._event("compaction", event)
        span = self.compaction
        self.compaction = None
        if span is not None:
            span.set_attribute("queryloop.next_reason", step.reason)
            if done is not None:
                span.set_attribute("queryloop.compaction.pre_tokens", done.boundary.pre_tokens)
                span.set_attribute("queryloop.compaction.post_tokens", done.boundary.post_tokens)
            else:
                self._fail(span, step.reason)
            span.end()

    def _end_session(self, step: Step) -> None:
        if self.attempt is not None:
            self.attempt.end()
            self.attempt = None
        if self.compaction is not None:
            self.compaction.end()
            self.compaction = None
        self._end_turn()
        span = self.session
        self.session = None
        if span is None:
            return
        declared = self.run.program.spec.state(step.dest).result or {}
        usage = self.run.data.request.usage
        span.set_attributes(_usage_attributes(usage.usage()))
        span.set_attribute("queryloop.terminal_reason", str(declared.get("terminal_reason", step.dest)))
        span.set_attribute("queryloop.steps", step.index + 1)
        if declared.get("is_error", True):
            self._fail(span, str(declared.get("terminal_reason", step.dest)))
        span.end()

    def _fail(self, span: Span, why: str, *, content: str | None = None) -> None:
        """Mark ``span`` failed: the one place a span takes an error status.

        ``why`` is a name from a closed vocabulary — a failure kind, a reason or terminal
        reason of the machine, ``tool_error`` — and anything else reads ``error``, so no
        caller can put a path, a tool's output or an API message in the description. A
        failed tool's ``content`` joins it only when ``OTEL_LOG_TOOL_DETAILS`` is on: Claude
        Code 2.1.235 gives a failed tool's span its error message only then, and its error
        class otherwise.
        """
        text = why if _STATUS_WORD.fullmatch(why) else "error"
        if content and self.settings.log_tool_details:
            text = f"{text}: {content[:500]}"
        span.set_status(Status(StatusCode.ERROR, text))

    # ---- events and metrics ------------------------------------------------------------------

    def _count(self, name: str, amount: float, attributes: Mapping[str, object]) -> None:
        counter = self.providers.counters.get(name)
        if counter is not None:
            counter.add(amount, {**self.common, **attributes})

    def _event(self, name: str, attributes: Mapping[str, object]) -> None:
        logger = self.providers.logger
        if logger is None:
            return
        now = time.time_ns()
        logger.emit(
            timestamp=now,
            observed_timestamp=now,
            body=f"claude_code.{name}",
            event_name=f"claude_code.{name}",
            attributes={
                **self.common,
                "event.name": name,
                "event.timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "event.sequence": str(next(self.providers.sequence)),
                "prompt.id": self.options.prompt_id,
                **attributes,
            },
        )

    def _user_prompt(self) -> None:
        prompt = self.options.prompt
        self._event(
            "user_prompt",
            {"prompt_length": str(len(prompt)), "prompt": prompt if self.settings.log_user_prompts else "<REDACTED>"},
        )

    def _api_request(self, log: RequestLog, source: str) -> None:
        usage = log.usage
        cost = cost_usd(log.model, usage)
        model = {"model": log.model}
        self._count("claude_code.cost.usage", cost, model)
        for key, kind in (
            ("input_tokens", "input"),
            ("output_tokens", "output"),
            ("cache_read_input_tokens", "cacheRead"),
            ("cache_creation_input_tokens", "cacheCreation"),
        ):
            self._count("claude_code.token.usage", int(usage.get(key) or 0), {**model, "type": kind})
        self._event(
            "api_request",
            {
                "model": log.model,
                # counts as strings, the cost a number: the types Claude Code 2.1.235 sends
                "input_tokens": str(int(usage.get("input_tokens") or 0)),
                "output_tokens": str(int(usage.get("output_tokens") or 0)),
                "cache_read_tokens": str(int(usage.get("cache_read_input_tokens") or 0)),
                "cache_creation_tokens": str(int(usage.get("cache_creation_input_tokens") or 0)),
                "cost_usd": cost,
                "cost_usd_micros": str(round(cost * 1e6)),
                "duration_ms": str(round(log.duration_ms)),
                "request_id": log.request_id or "",
                "client_request_id": log.client_request_id,
                "attempt": str(log.attempt),
                "query_source": source,
            },
        )

    def _api_error(self, failed: RequestFailed, *, exhausted: bool) -> None:
        """The error a run ended with (and, after retries, that they were spent), as Claude Code tells them."""
        failure = failed.failure
        log = failure.log
        event: dict[str, object] = {
            "model": log.model,
            "error": failure.message[:500],
            "duration_ms": str(round(log.duration_ms)),
            "attempt": str(log.attempt),
            "client_request_id": log.client_request_id,
        }
        if failure.status is not None:
            event["status_code"] = str(failure.status)
        if log.request_id:
            event["request_id"] = log.request_id
        self._event("api_error", event)
        if exhausted and log.attempt > 1:
            retries = {k: v for k, v in event.items() if k in ("model", "error", "status_code")}
            self._event("api_retries_exhausted", {**retries, "total_attempts": str(log.attempt)})


def _json(value: object) -> str:
    import json

    return json.dumps(value, default=str, ensure_ascii=False)
