"""OpenTelemetry settings from Claude Code's environment variables, and the run that exports nothing without them.

The export itself (spans, metrics, events over OTLP/HTTP) is tested end to end in
``tests/e2e/test_telemetry.py``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from queryloop.run.config import AskedSession, ConfigSources, resolve_config
from queryloop.run.telemetry import TelemetryConfigError, TelemetrySettings, telemetry_settings

ON = {"CLAUDE_CODE_ENABLE_TELEMETRY": "1"}


def test_nothing_is_exported_unless_telemetry_is_enabled_and_an_exporter_named() -> None:
    assert telemetry_settings({}) is None
    assert telemetry_settings({"OTEL_METRICS_EXPORTER": "otlp"}) is None
    assert telemetry_settings({**ON}) is None
    assert telemetry_settings({**ON, "OTEL_METRICS_EXPORTER": "none"}) is None
    assert telemetry_settings({"CLAUDE_CODE_ENABLE_TELEMETRY": "0", "OTEL_LOGS_EXPORTER": "otlp"}) is None


def test_each_signal_goes_to_its_own_endpoint_under_the_shared_one() -> None:
    settings = telemetry_settings(
        {
            **ON,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp,console",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "https://logs.example/ingest",
            "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20t,x-team=a",
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-team=b",
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
        }
    )
    assert settings is not None
    assert settings.metrics == ("otlp", "console") and settings.metric_interval_ms == 1000
    assert settings.endpoints == {
        "traces": "http://collector:4318/v1/traces",
        "metrics": "http://collector:4318/v1/metrics",
        "logs": "https://logs.example/ingest",
    }
    assert settings.headers["traces"] == {"Authorization": "Bearer t", "x-team": "a"}
    assert settings.headers["metrics"] == {"Authorization": "Bearer t", "x-team": "b"}
    assert settings.delta and not settings.log_user_prompts


def test_each_signal_takes_its_own_protocol_and_grpc_takes_the_endpoint_as_it_is() -> None:
    settings = telemetry_settings(
        {
            **ON,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp,prometheus",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/json",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
            "OTEL_EXPORTER_PROMETHEUS_PORT": "9999",
        }
    )
    assert settings is not None
    assert settings.protocols == {"traces": "grpc", "metrics": "grpc", "logs": "http/json"}
    assert settings.endpoints == {
        "traces": "http://localhost:4317",
        "metrics": "http://localhost:4317",
        "logs": "http://localhost:4318/v1/logs",
    }
    assert settings.metrics == ("otlp", "prometheus") and settings.timeout_s == 2.5
    assert (settings.prometheus_host, settings.prometheus_port) == ("localhost", 9999)


def test_otlp_json_writes_ids_in_hex_and_enums_as_numbers() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from queryloop.run.otlp_json import otlp_json

    message = ExportTraceServiceRequest()
    span = message.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name, span.kind = bytes(range(16)), b"\xab" * 8, "s", 1
    written = json.loads(otlp_json(message))
    (read,) = written["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert read == {"traceId": "000102030405060708090a0b0c0d0e0f", "spanId": "ab" * 8, "name": "s", "kind": 1}


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "prometheus"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_METRICS_EXPORTER": "statsd"}, "OTEL_METRICS_EXPORTER"),
        ({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "json"}, "OTLP_LOGS_PROTOCOL"),
        ({"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "99999"}, "PROMETHEUS_PORT"),
        ({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
        ({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"),
        ({"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "soon"}, "OTEL_METRIC_EXPORT_INTERVAL"),
        ({"OTEL_LOGS_EXPORTER": "console", "OTEL_LOG_USER_PROMPTS": "maybe"}, "OTEL_LOG_USER_PROMPTS"),
    ],
)
def test_a_value_it_cannot_honour_is_an_error_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(TelemetryConfigError, match=named):
        telemetry_settings({**ON, **env})


def test_a_bad_telemetry_variable_is_a_warning_and_the_run_goes_on_without_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code 2.1.235 runs with OTEL_METRICS_EXPORTER=bogus, exit 0, nothing said; we say why nothing is sent."""
    monkeypatch.setenv("CLAUDE_CODE_ENABLE_TELEMETRY", "1")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "bogus")
    resolved = resolve_config(prompt="hi", cwd=tmp_path, session=AskedSession(home=tmp_path / "home"))
    assert resolved.options.telemetry is None
    assert any("OTEL_METRICS_EXPORTER" in w for w in resolved.warnings)


def test_the_settings_env_turns_telemetry_on_as_the_process_environment_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLAUDE_CODE_ENABLE_TELEMETRY", raising=False)
    settings = '{"env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_TRACES_EXPORTER": "console"}}'
    resolved = resolve_config(
        prompt="hi",
        cwd=tmp_path,
        sources=ConfigSources(settings=settings),
        session=AskedSession(home=tmp_path / "home"),
    )
    assert resolved.options.telemetry is not None and resolved.options.telemetry.traces == ("console",)


def test_a_run_without_telemetry_imports_no_opentelemetry_module(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from queryloop.run.agent import AgentRun\n"
        "from queryloop.run.config import AgentOptions, RequestSettings, SessionSettings\n"
        "from queryloop.testing import ScriptedBackend, scripted_reply\n"
        "async def main():\n"
        "    model = ScriptedBackend(lambda call: scripted_reply([{'type': 'text', 'text': 'ok'}], call=call))\n"
        "    options = AgentOptions(\n"
        "        prompt='hi', request=RequestSettings(model='m'), session=SessionSettings(persist=False),\n"
        f"        cwd=Path({str(tmp_path)!r}),\n"
        "    )\n"
        "    run = AgentRun(options, model)\n"
        "    async for _ in run.events(): pass\n"
        "    assert run.result()['result'] == 'ok', run.result()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_without_the_sdk_installed_the_run_says_so_and_exports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name.startswith("opentelemetry") else real(name, *rest)
    )
    monkeypatch.setenv("CLAUDE_CODE_ENABLE_TELEMETRY", "1")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    resolved = resolve_config(prompt="hi", cwd=tmp_path, session=AskedSession(home=tmp_path / "home"))
    assert resolved.options.telemetry is None
    assert any("opentelemetry-sdk is not installed" in w and "queryloop[otel]" in w for w in resolved.warnings)


def test_only_one_method_gives_a_span_an_error_status_and_none_records_an_exception() -> None:
    """``RunTelemetry._fail`` keeps a span's status to a name: any other ``set_status`` could export content."""
    import ast

    import queryloop.run.otel as otel

    tree = ast.parse(Path(otel.__file__).read_text(encoding="utf-8"))
    callers = {
        function.name
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        for call in ast.walk(function)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("set_status", "record_exception")
    }
    assert callers == {"_fail"}


def test_the_process_providers_leave_every_span_status_to_the_run_and_record_no_exception() -> None:
    """The providers open each session's span, in their own module: a status set there would escape ``_fail``."""
    import ast

    import queryloop.run.otel_providers as providers

    tree = ast.parse(Path(providers.__file__).read_text(encoding="utf-8"))
    calls = [
        call.func.attr
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("set_status", "record_exception")
    ]
    assert calls == []


def test_the_process_providers_are_built_once_and_built_again_after_a_reset() -> None:
    from queryloop.run.otel import ProcessProviders

    providers = ProcessProviders()
    first = providers.get(TelemetrySettings())
    assert providers.get(TelemetrySettings(service_name="another")) is first, "the settings are read once"
    providers.end_session("no-such-session")  # nothing open: nothing to end
    providers.reset()
    assert providers.get(TelemetrySettings(service_name="another")) is not first
