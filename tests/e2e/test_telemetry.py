"""End-to-end: a real ``queryloop -p`` exports its run over OTLP/HTTP to a receiver on loopback.

The receiver is a plain HTTP server in the test process that decodes each request
with ``opentelemetry-proto``'s protobuf messages. The run goes through the embedded
server: two overloaded answers (so a retried attempt carries its reason), then an
Edit the gate accepts and a Bash command it refuses (headless, it would ask), then
the answer. Two more runs: one that spends its retries (the error it ends with), one
whose request is too long (a reactive compaction and its summary request).
"""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from queryloop.handlers.context.services.compaction import SUMMARY_MARKER

from .harness import HANG_GUARD_S, ROOT, MockApi, cli_env, run_cli

# a CLI run whose exporters flush as it exits. One xdist worker runs the whole module (its group), so the run that
# `exported` makes is made once per run, not once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("telemetry")]

SCENARIO = """\
schema_version: 1
scenario: telemetry
model: mock-primary
models:
  mock-primary:
    - error: {status: 529}
      repeat: 2
    - reply:
        content:
          - tool_use: {name: Edit, input: {file_path: notes.txt, old_string: "draft", new_string: "final"}}
          - tool_use: {name: Bash, input: {command: "curl http://example.invalid"}}
    - reply:
        content:
          - text: "Edited notes.txt; the download was refused."
"""

_MESSAGES = {
    "/v1/traces": ExportTraceServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
    "/v1/logs": ExportLogsServiceRequest,
}


class Receiver(ThreadingHTTPServer):
    """Collects every OTLP/HTTP export it is sent, decoded."""

    received: list[tuple[str, Any]]
    content_types: set[str | None]


def _base64_ids(value: Any) -> Any:
    if isinstance(value, dict):
        ids = ("traceId", "spanId", "parentSpanId")
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode() if k in ids else _base64_ids(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_base64_ids(v) for v in value]
    return value


class _GrpcReceiver:
    """The same exports over OTLP/gRPC: a grpcio server with the three collector services."""

    def __init__(self, received: list[tuple[str, Any]]) -> None:
        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        def keep(path: str, reply: Any) -> Any:
            def export(servicer: Any, request: Any, context: Any) -> Any:
                received.append((path, request))
                return reply()

            return export

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            Export = keep("/v1/traces", trace_service_pb2.ExportTraceServiceResponse)

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            Export = keep("/v1/metrics", metrics_service_pb2.ExportMetricsServiceResponse)

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            Export = keep("/v1/logs", logs_service_pb2.ExportLogsServiceResponse)

        self.server = grpc.server(ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)  # type: ignore[no-untyped-call]
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)  # type: ignore[no-untyped-call]
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self.server)  # type: ignore[no-untyped-call]
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        message = _MESSAGES[self.path]()
        kind = self.headers.get("Content-Type")
        if kind == "application/json":  # OTLP/JSON: ids in hex, which the protobuf JSON mapping reads as base64
            json_format.ParseDict(_base64_ids(json.loads(body)), message)
        else:
            assert kind == "application/x-protobuf", kind
            message.ParseFromString(body)
        self.server.received.append((self.path, message))
        self.server.content_types.add(kind)
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attrs(attributes: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in attributes if isinstance(kv, KeyValue)}


def export_run(
    scenario: str,
    args: list[str],
    cwd: Path,
    *,
    protocol: str = "http/protobuf",
    stdin: str | None = None,
    fmt: str = "json",
) -> dict[str, Any]:
    """One ``queryloop -p`` run (or, with ``stdin``, a stream-json session) through the embedded server, exported
    to a receiver over ``protocol``: its spans, points and events."""
    received: list[tuple[str, Any]] = []
    if protocol == "grpc":
        grpc_server = _GrpcReceiver(received)
        endpoint, stop = f"http://127.0.0.1:{grpc_server.port}", grpc_server.stop
    else:
        server = Receiver(("127.0.0.1", 0), _Handler)
        server.received, server.content_types = received, set()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        endpoint = f"http://127.0.0.1:{server.server_port}"

        def stop() -> None:
            server.shutdown()
            server.server_close()

    try:
        with MockApi(scenario) as api:
            run = run_cli(
                ["-p", "tidy the notes", "--model", "mock-primary", *args]
                if stdin is None
                else ["--input-format", "stream-json", "--model", "mock-primary", *args],
                api=api,
                cwd=cwd,
                fmt=fmt,
                stdin=stdin,
                CLAUDE_CODE_ENABLE_TELEMETRY="1",
                OTEL_TRACES_EXPORTER="otlp",
                OTEL_METRICS_EXPORTER="otlp",
                OTEL_LOGS_EXPORTER="otlp",
                OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
                OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            )
            requests = api.requests
    finally:
        stop()
    assert "Traceback" not in run.stderr, run.stderr
    if protocol != "grpc":
        assert server.content_types == {"application/json" if protocol == "http/json" else "application/x-protobuf"}
    spans = [
        span
        for path, message in received
        if path == "/v1/traces"
        for resource in message.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    points = [
        (metric.name, _attrs(point.attributes), point.as_int or point.as_double)
        for path, message in received
        if path == "/v1/metrics"
        for resource in message.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.sum.data_points
    ]
    events = [
        (record.body.string_value, _attrs(record.attributes))
        for path, message in received
        if path == "/v1/logs"
        for resource in message.resource_logs
        for scope in resource.scope_logs
        for record in scope.log_records
    ]
    resources = [
        _attrs(resource.resource.attributes)
        for path, message in received
        if path == "/v1/traces"
        for resource in message.resource_spans
    ]
    return {
        "spans": spans,
        "points": points,
        "events": events,
        "resources": resources,
        "result": run.result,
        "run": run,
        "requests": requests,
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run of SCENARIO, exported."""
    cwd = tmp_path_factory.mktemp("telemetry")
    (cwd / "notes.txt").write_text("draft\n")
    exported = export_run(SCENARIO, ["--permission-mode", "acceptEdits"], cwd)
    assert exported["result"]["is_error"] is False, exported["result"]
    return exported


def test_the_session_turns_attempts_and_tools_are_nested_spans(exported: dict[str, Any]) -> None:
    spans = exported["spans"]
    by_id = {s.span_id: s for s in spans}
    (root,) = [s for s in spans if s.name == "queryloop.session"]
    (session,) = [s for s in spans if s.name == "invoke_agent queryloop"]
    assert session.parent_span_id == root.span_id and not root.parent_span_id
    assert _attrs(root.attributes)["queryloop.prompts"] == 1
    turns = [s for s in spans if s.name == "queryloop.turn"]
    attempts = [s for s in spans if s.name == "chat mock-primary"]
    tools = {s.name: s for s in spans if s.name.startswith("execute_tool ")}
    assert _attrs(session.attributes)["gen_ai.conversation.id"] == exported["result"]["session_id"]
    assert [_attrs(t.attributes)["queryloop.turn"] for t in turns] == [1, 2]
    assert all(t.parent_span_id == session.span_id for t in turns)
    assert len(attempts) == 4 and all(by_id[a.parent_span_id].name == "queryloop.turn" for a in attempts)
    assert set(tools) == {"execute_tool Edit", "execute_tool Bash"}
    assert {s.trace_id for s in spans} == {session.trace_id}
    assert exported["resources"][0]["service.name"] == "queryloop"


def test_a_retried_attempt_carries_the_reason_it_was_sent_again(exported: dict[str, Any]) -> None:
    attempts = sorted(
        (s for s in exported["spans"] if s.name == "chat mock-primary"), key=lambda s: s.start_time_unix_nano
    )
    first, second, third, last = (_attrs(a.attributes) for a in attempts)
    assert "queryloop.retry.reason" not in first
    assert first["error.type"] == "overloaded" and first["http.response.status_code"] == 529
    assert second["queryloop.retry.reason"] == "api_retry" and second["queryloop.attempt"] == 2
    assert third["queryloop.retry.reason"] == "api_retry" and third["queryloop.outcome"] == "replied"
    assert third["gen_ai.request.model"] == "mock-primary" and third["gen_ai.response.finish_reasons"] == ["tool_use"]
    assert third["gen_ai.usage.input_tokens"] > 0 and third["gen_ai.usage.output_tokens"] > 0
    assert "queryloop.retry.reason" not in last


def test_each_tool_span_says_what_the_gate_decided_and_where_it_ran(exported: dict[str, Any]) -> None:
    tools = {s.name: _attrs(s.attributes) for s in exported["spans"] if s.name.startswith("execute_tool ")}
    edit, bash = tools["execute_tool Edit"], tools["execute_tool Bash"]
    assert edit["queryloop.permission.decision"] == "accept" and edit["queryloop.tool.success"] is True
    assert bash["queryloop.permission.decision"] == "reject" and bash["queryloop.tool.success"] is False
    assert edit["queryloop.sandbox"] == bash["queryloop.sandbox"] == "none"
    assert edit["gen_ai.tool.call.id"].startswith("toolu_")


def test_every_transition_is_a_span_event_with_its_reason_and_counters(exported: dict[str, Any]) -> None:
    events = sorted(
        (_attrs(e.attributes) for s in exported["spans"] for e in s.events if e.name == "queryloop.transition"),
        key=lambda e: e["queryloop.step"],
    )
    reasons = [e["queryloop.reason"] for e in events]
    assert reasons.count("api_retry") == 2 and reasons.count("next_turn") == 1
    assert reasons[-1] == "stop_hooks_passed" and [e["queryloop.step"] for e in events] == list(range(len(events)))
    (second_retry,) = [
        e for e in events if e["queryloop.reason"] == "api_retry" and e["queryloop.counter.api_retries"] == 2
    ]
    assert second_retry["queryloop.from"] == "backing_off" and second_retry["queryloop.to"] == "calling_model"


def test_metrics_carry_claude_codes_names_and_the_machines_counts(exported: dict[str, Any]) -> None:
    points = exported["points"]

    def total(name: str, **where: str) -> float:
        return sum(v for n, a, v in points if n == name and all(a.get(k) == w for k, w in where.items()))

    usage = exported["result"]["usage"]
    assert total("claude_code.session.count") == 1
    assert total("claude_code.token.usage", type="input") == usage["input_tokens"]
    assert total("claude_code.token.usage", type="output", model="mock-primary") == usage["output_tokens"]
    assert total("claude_code.cost.usage") == pytest.approx(exported["result"]["total_cost_usd"])
    assert total("claude_code.code_edit_tool.decision", decision="accept", tool_name="Edit") == 1
    assert total("queryloop.retry.count", reason="api_retry", kind="retry") == 2
    assert total("queryloop.transition.count", reason="next_turn") == 1
    assert total("queryloop.breaker.count") == 0
    assert all(a.get("session.id") == exported["result"]["session_id"] for _, a, _ in points)


def test_events_carry_claude_codes_names_and_attributes(exported: dict[str, Any]) -> None:
    events = exported["events"]
    names = [body for body, _ in events]
    assert names.count("claude_code.api_request") == 2
    assert "claude_code.api_error" not in names, "a retried error is not one the run ended with (as in Claude Code)"
    request = next(a for b, a in events if b == "claude_code.api_request")
    assert request["model"] == "mock-primary" and request["query_source"] == "main"
    assert request["input_tokens"].isdigit() and isinstance(request["cost_usd"], float)
    prompt = next(a for b, a in events if b == "claude_code.user_prompt")
    assert prompt["prompt"] == "<REDACTED>" and prompt["prompt_length"] == str(len("tidy the notes"))
    decisions = {a["tool_name"]: a["decision"] for b, a in events if b == "claude_code.tool_decision"}
    assert decisions == {"Edit": "accept", "Bash": "reject"}
    results = {a["tool_name"]: a["success"] for b, a in events if b == "claude_code.tool_result"}
    assert results == {"Edit": "true", "Bash": "false"}
    assert sorted(int(a["event.sequence"]) for _, a in events) == list(range(len(events)))


QUIET = """\
schema_version: 1
scenario: quiet
model: mock-primary
models:
  mock-primary:
    - error: {status: 529, message: "overloaded while reading /srv/SECRET-API-7f3", headers: {retry-after-ms: "1"}}
    - reply:
        content:
          - tool_use: {name: Read, input: {file_path: /nonexistent/SECRET-PATH-7f3/keys.txt}}
          - tool_use: {name: Bash, input: {command: "echo SECRET-OUTPUT-7f3; exit 3"}}
    - reply:
        content:
          - text: "Both failed."
"""


def _span_texts(span: Any) -> list[str]:
    """Every string a span exports: its name, attributes, status and events."""
    texts = [span.name, span.status.message, *map(str, _attrs(span.attributes).values())]
    for event in span.events:
        texts += [event.name, *map(str, _attrs(event.attributes).values())]
    return texts


def test_with_content_logging_off_no_span_carries_a_tools_output_a_path_or_an_api_message(tmp_path: Path) -> None:
    exported = export_run(QUIET, [], tmp_path)
    sent = json.dumps([r.messages for r in exported["requests"]])
    assert "SECRET-PATH-7f3" in sent and "SECRET-OUTPUT-7f3" in sent, "both failed calls' outputs reached the model"
    leaks = [t for s in exported["spans"] for t in _span_texts(s) if "SECRET" in t]
    assert leaks == []
    events = [str(v) for _, attributes in exported["events"] for v in attributes.values()]
    assert [t for t in events if "SECRET-PATH" in t or "SECRET-OUTPUT" in t] == []
    tools = [s for s in exported["spans"] if s.name.startswith("execute_tool ")]
    error = tools[0].status.STATUS_CODE_ERROR
    assert [(s.status.code, s.status.message) for s in tools] == [(error, "tool_error")] * 2
    (failed,) = [s for s in exported["spans"] if _attrs(s.attributes).get("error.type") == "overloaded"]
    assert failed.status.message == "overloaded"


def test_a_run_that_spends_its_retries_reports_the_error_it_ended_with(tmp_path: Path) -> None:
    scenario = "schema_version: 1\nscenario: spent\nmodel: mock-primary\nmodels:\n  mock-primary:\n"
    scenario += "    - error: {status: 529}\n      repeat: 3\n"
    exported = export_run(scenario, ["--max-retries", "1"], tmp_path)
    assert exported["result"]["terminal_reason"] == "api_error"
    events = {body: a for body, a in exported["events"]}
    assert events["claude_code.api_error"]["status_code"] == "529"
    assert events["claude_code.api_retries_exhausted"]["total_attempts"] == "2"
    (session,) = [s for s in exported["spans"] if s.name == "invoke_agent queryloop"]
    assert session.status.code == session.status.STATUS_CODE_ERROR
    assert _attrs(session.attributes)["queryloop.terminal_reason"] == "api_error"


def test_a_reactive_compaction_is_a_span_holding_its_summary_request(tmp_path: Path) -> None:
    scenario = f"""\
schema_version: 1
scenario: compacted
model: mock-small-context
rules:
  - when: {{last_user_contains: "{SUMMARY_MARKER}"}}
    reply: {{content: [{{text: "Summary: two outputs were printed."}}]}}
  - when: {{input_tokens_over: 5500}}
    error: {{status: 400, message: "prompt is too long: {{n}} tokens > {{limit}} maximum"}}
models:
  mock-small-context:
    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "printf %012000d 0"}}}}}}]}}
    - reply: {{content: [{{tool_use: {{name: Bash, input: {{command: "printf %06000d 1"}}}}}}]}}
    - reply: {{content: [{{text: "done"}}]}}
"""
    args = ["--model", "mock-small-context", "--max-output-tokens", "1000", "--auto-compact-threshold", "100"]
    exported = export_run(scenario, args, tmp_path)
    assert exported["result"]["result"] == "done"
    spans = exported["spans"]
    (compaction,) = [s for s in spans if s.name == "queryloop.compaction"]
    details = _attrs(compaction.attributes)
    assert details["queryloop.compaction.trigger"] == "reactive"
    assert details["queryloop.compaction.pre_tokens"] > details["queryloop.compaction.post_tokens"]
    (summary,) = [s for s in spans if _attrs(s.attributes).get("queryloop.purpose") == "compaction_summary"]
    assert summary.parent_span_id == compaction.span_id
    reasons = [_attrs(s.attributes).get("queryloop.retry.reason") for s in spans if s.name == "chat mock-small-context"]
    assert "reactive_compact_retry" in reasons
    event = next(a for body, a in exported["events"] if body == "claude_code.compaction")
    assert event["trigger"] == "reactive" and event["success"] == "true"


def test_a_sub_agent_is_a_span_of_its_own_under_its_agent_call_with_its_requests_in_it(tmp_path: Path) -> None:
    scenario = """\
schema_version: 1
scenario: agent
model: mock-primary
rules:
  - when: {first_user_contains: CHILD-TASK}
    reply: {content: [{text: "the child's answer"}]}
models:
  mock-primary:
    - reply:
        content:
          - tool_use: {name: Agent, input: {description: look, prompt: "CHILD-TASK look", run_in_background: false}}
    - reply: {content: [{text: "done"}]}
"""
    exported = export_run(scenario, [], tmp_path)
    assert exported["result"]["is_error"] is False, exported["result"]
    spans = exported["spans"]
    by_id = {s.span_id: s for s in spans}
    (session,) = [s for s in spans if s.name == "invoke_agent queryloop"]
    (call,) = [s for s in spans if s.name == "execute_tool Agent"]
    (child,) = [s for s in spans if s.name == "invoke_agent general-purpose"]
    assert child.parent_span_id == call.span_id and {s.trace_id for s in spans} == {session.trace_id}
    child_attrs = _attrs(child.attributes)
    assert child_attrs["gen_ai.agent.name"] == "general-purpose" and child_attrs["gen_ai.agent.id"].startswith("a")
    # the child's own turn and model request, inside its span
    child_turns = [s for s in spans if s.name == "queryloop.turn" and s.parent_span_id == child.span_id]
    (child_turn,) = child_turns
    attempts = [s for s in spans if s.name == "chat mock-primary"]
    assert len(attempts) == 3 and sum(by_id[a.parent_span_id] is child_turn for a in attempts) == 1
    # one user prompt: the child's is no user's; the cost counts every request
    assert [a["prompt"] for body, a in exported["events"] if body == "claude_code.user_prompt"] == ["<REDACTED>"]
    requests = [a for body, a in exported["events"] if body == "claude_code.api_request"]
    assert len(requests) == 3


def test_the_decision_source_says_whether_the_rules_or_a_hook_decided(tmp_path: Path) -> None:
    """The rules allow every echo; a PreToolUse hook denies the one that asks for it: that refusal's source is
    ``hook``, the other calls' ``config`` (Claude Code's sources)."""
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import json, sys\n"
        "call = json.load(sys.stdin)\n"
        "if 'denied-by-hook' in call['tool_input'].get('command', ''):\n"
        "    print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse', 'permissionDecision': 'deny',"
        " 'permissionDecisionReason': 'the hook says no'}}))\n"
    )
    command = {"type": "command", "command": f"python3 {hook}"}
    settings = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [command]}]}}
    scenario = """\
schema_version: 1
scenario: sources
model: mock-primary
models:
  mock-primary:
    - reply:
        content:
          - tool_use: {name: Edit, input: {file_path: notes.txt, old_string: "draft", new_string: "final"}}
          - tool_use: {name: Bash, input: {command: "echo fine"}}
          - tool_use: {name: Bash, input: {command: "echo denied-by-hook"}}
    - reply: {content: [{text: "done"}]}
"""
    (tmp_path / "notes.txt").write_text("draft\n")
    args = ["--permission-mode", "acceptEdits", "--allowedTools", "Bash(echo:*)", "--settings", json.dumps(settings)]
    exported = export_run(scenario, args, tmp_path)
    assert exported["result"]["is_error"] is False, exported["result"]
    decisions = [
        (a["tool_name"], a["decision"], a["source"]) for b, a in exported["events"] if b == "claude_code.tool_decision"
    ]
    assert sorted(decisions) == [("Bash", "accept", "config"), ("Bash", "reject", "hook"), ("Edit", "accept", "config")]
    results = [a for b, a in exported["events"] if b == "claude_code.tool_result"]
    assert sorted(a["decision_source"] for a in results) == ["config", "config", "hook"]
    spans = [_attrs(s.attributes) for s in exported["spans"] if s.name == "execute_tool Bash"]
    assert sorted(s["queryloop.permission.source"] for s in spans) == ["config", "hook"]


TWO_PROMPTS = """\
schema_version: 1
scenario: two_prompts
model: mock-primary
models:
  mock-primary:
    - reply: {content: [{text: "first answer"}]}
    - reply: {content: [{text: "second answer"}]}
"""


def _user_lines(*prompts: str) -> str:
    return "".join(
        json.dumps({"type": "user", "message": {"role": "user", "content": p}, "parent_tool_use_id": None}) + "\n"
        for p in prompts
    )


@pytest.mark.parametrize("protocol", ["http/json", "grpc"])
def test_a_session_of_two_prompts_is_one_trace_over_each_protocol(tmp_path: Path, protocol: str) -> None:
    """The Agent SDK's session (stream-json on stdin) plays two prompts: one ``queryloop.session`` span holds both
    prompts' runs, sent over OTLP/JSON or OTLP/gRPC as over http/protobuf; metrics and events arrive too."""
    exported = export_run(
        TWO_PROMPTS, ["--verbose"], tmp_path, protocol=protocol, stdin=_user_lines("one", "two"), fmt="stream-json"
    )
    results = [line for line in exported["run"].lines if line.get("type") == "result"]
    assert [r["result"] for r in results] == ["first answer", "second answer"]
    spans = exported["spans"]
    (root,) = [s for s in spans if s.name == "queryloop.session"]
    prompts = [s for s in spans if s.name == "invoke_agent queryloop"]
    assert len(prompts) == 2 and all(p.parent_span_id == root.span_id for p in prompts)
    assert {s.trace_id for s in spans} == {root.trace_id}
    assert _attrs(root.attributes)["queryloop.prompts"] == 2
    assert _attrs(root.attributes)["session.id"] == results[0]["session_id"] == results[1]["session_id"]
    assert sum(v for n, _, v in exported["points"] if n == "claude_code.session.count") == 1
    assert [b for b, _ in exported["events"]].count("claude_code.user_prompt") == 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_prometheus_serves_the_sessions_metrics_while_it_runs(tmp_path: Path) -> None:
    """OTEL_METRICS_EXPORTER=prometheus: a session answers a scrape of /metrics on loopback between prompts with
    Claude Code's counters and the machine's, cumulative; the endpoint goes away with the process."""
    port = _free_port()
    with MockApi(TWO_PROMPTS) as api:
        env = cli_env(
            api,
            CLAUDE_CODE_ENABLE_TELEMETRY="1",
            OTEL_METRICS_EXPORTER="prometheus",
            OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
            OTEL_EXPORTER_PROMETHEUS_PORT=str(port),
        )
        cmd = [
            sys.executable,
            "-m",
            "queryloop",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
        ]
        cmd += ["--verbose", "--model", "mock-primary", "--cwd", str(tmp_path)]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(_user_lines("one"))
            proc.stdin.flush()
            for line in proc.stdout:  # the first prompt's result: its metrics are recorded
                if json.loads(line).get("type") == "result":
                    break
            deadline = time.monotonic() + HANG_GUARD_S  # bounds a hang only: the port answering is the event
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                        scraped = response.read().decode()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nothing listened on the Prometheus port"
                    time.sleep(0.2)
            proc.stdin.close()
            assert proc.wait(timeout=HANG_GUARD_S) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    lines = [line for line in scraped.splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("claude_code_session_count_total") for line in lines), scraped
    tokens = [line for line in lines if line.startswith("claude_code_token_usage_tokens_total{")]
    assert any('type="output"' in line and 'model="mock-primary"' in line for line in tokens), scraped
    steps = [line for line in lines if line.startswith("queryloop_transition_count_total{")]
    assert any('reason="stop_hooks_passed"' in line for line in steps), scraped


def test_with_tool_details_on_a_failed_tools_span_carries_its_output_as_claude_codes_does(tmp_path: Path) -> None:
    exported = export_run(QUIET, ["--settings", json.dumps({"env": {"OTEL_LOG_TOOL_DETAILS": "1"}})], tmp_path)
    statuses = {s.name: s.status.message for s in exported["spans"] if s.name.startswith("execute_tool ")}
    bash = statuses["execute_tool Bash"]
    assert bash.startswith("tool_error: ") and "SECRET-OUTPUT-7f3" in bash
    assert "SECRET-PATH-7f3" in statuses["execute_tool Read"]
    (failed,) = [s for s in exported["spans"] if _attrs(s.attributes).get("error.type") == "overloaded"]
    assert failed.status.message == "overloaded"  # an API error's message is no tool's detail


CHOSEN = """\
schema_version: 1
scenario: telemetry-chosen-names
model: mock-primary
models:
  mock-primary:
    - reply:
        content:
          - tool_use: {name: "Leak SECRET-NAME-7f3", id: "toolu_01AbCdEf", input: {}}
          - tool_use: {name: Bash, id: "SECRET-ID-7f3 said here", input: {command: "true"}}
          - tool_use: {name: Bash, id: "toolu_01GhIjKl", input: {command: "true"}}
    - reply: {content: [{text: "done"}]}
"""


def _tool_texts(exported: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]], list[Any]]:
    """Every string the spans export, the tool events' attributes, and the tool spans."""
    texts = [t for s in exported["spans"] for t in _span_texts(s)]
    texts += [str(v) for _, attributes in exported["events"] for v in attributes.values()]
    texts += [str(v) for _, attributes, _ in exported["points"] for v in attributes.values()]
    tool_events = [
        a for name, a in exported["events"] if name in ("claude_code.tool_decision", "claude_code.tool_result")
    ]
    tools = [s for s in exported["spans"] if s.name.startswith("execute_tool ")]
    return texts, tool_events, tools


def test_with_tool_details_off_a_model_chosen_tool_name_or_id_never_leaves_the_run(tmp_path: Path) -> None:
    exported = export_run(CHOSEN, ["--permission-mode", "bypassPermissions"], tmp_path)
    texts, tool_events, tools = _tool_texts(exported)
    assert [t for t in texts if "SECRET" in t] == []
    spans = {_attrs(s.attributes)["gen_ai.tool.call.id"]: s.name for s in tools}
    hashed = next(i for i in spans if i.startswith("hashed_"))
    assert re.fullmatch(r"hashed_[0-9a-f]{24}", hashed), hashed
    assert spans == {
        "toolu_01GhIjKl": "execute_tool Bash",  # an offered tool, an id in the API's shape: as they are
        hashed: "execute_tool Bash",
        "toolu_01AbCdEf": "execute_tool unoffered_tool",
    }
    ids = {(a["tool_name"], a["tool_use_id"]) for a in tool_events}
    assert ("Bash", hashed) in ids and ("unoffered_tool", "toolu_01AbCdEf") in ids, "events and spans share the id"


def test_with_tool_details_on_the_model_chosen_tool_name_and_id_are_exported_as_they_were(tmp_path: Path) -> None:
    details = ["--permission-mode", "bypassPermissions", "--settings", '{"env": {"OTEL_LOG_TOOL_DETAILS": "1"}}']
    _, tool_events, tools = _tool_texts(export_run(CHOSEN, details, tmp_path))
    assert {s.name for s in tools} == {"execute_tool Bash", "execute_tool Leak SECRET-NAME-7f3"}
    assert {a["tool_use_id"] for a in tool_events} >= {"SECRET-ID-7f3 said here", "toolu_01AbCdEf"}
