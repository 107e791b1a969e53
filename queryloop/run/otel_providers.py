"""The process's OpenTelemetry providers: one exporter set per process, built by the first run that exports, and
the sessions' open spans. Imported only by ``queryloop.run.otel`` (what a run exports is there).
"""

from __future__ import annotations

import atexit
import itertools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogRecordExporter, LogRecordExporter
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind

from .telemetry import TelemetrySettings

if TYPE_CHECKING:
    from .config import AgentOptions

__all__ = ["PROVIDERS", "ProcessProviders", "end_session"]

_T = TypeVar("_T")


class _Providers:
    """The process's tracer, meter instruments and logger; each None when its signal is not exported.

    An exporter that cannot be built (a port taken, a bad certificate) is a line on stderr;
    the run goes on with the others."""

    def __init__(self, settings: TelemetrySettings) -> None:
        from importlib.metadata import version

        __version__ = version("queryloop")
        resource = Resource.create({"service.name": settings.service_name, "service.version": __version__})
        self.version = __version__
        self.sessions_counted: set[str] = set()
        self.sessions: dict[str, tuple[Span, list[int]]] = {}  # session id → its open span, prompts played
        self.sequence = itertools.count()
        self.tracer: trace.Tracer | None = None
        spans = [x for n in settings.traces if (x := _built(n, "traces", _span_exporter, settings)) is not None]
        if spans:
            tracer_provider = TracerProvider(resource=resource)
            for span_exporter in spans:
                tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
            self.tracer = tracer_provider.get_tracer("queryloop", __version__)
            # ended before the provider's own exit hook (registered before, so run after) flushes them
            atexit.register(self.end_sessions)
        self.counters: dict[str, Any] = {}
        readers = [r for n in settings.metrics if (r := _built(n, "metrics", _metric_reader, settings)) is not None]
        if readers:
            meter = MeterProvider(resource=resource, metric_readers=readers).get_meter("queryloop", __version__)
            for counter, unit, description in _COUNTERS:
                self.counters[counter] = meter.create_counter(counter, unit=unit, description=description)
        self.logger: Any = None
        logs = [y for n in settings.logs if (y := _built(n, "logs", _log_exporter, settings)) is not None]
        if logs:
            logger_provider = LoggerProvider(resource=resource)
            for log_exporter in logs:
                logger_provider.add_log_record_processor(
                    BatchLogRecordProcessor(log_exporter, schedule_delay_millis=settings.logs_interval_ms)
                )
            self.logger = logger_provider.get_logger("queryloop.events", __version__)

    def session_span(self, options: AgentOptions, machine: str) -> Span | None:
        """The span of ``options``' session in this process, opened by its first prompt (a root: one trace)."""
        if self.tracer is None:
            return None
        opened = self.sessions.get(options.session.session_id)
        if opened is None:
            attributes = {
                "session.id": options.session.session_id,
                "gen_ai.conversation.id": options.session.session_id,
                "queryloop.machine": machine,
            }
            span = self.tracer.start_span("queryloop.session", attributes=attributes, kind=SpanKind.INTERNAL)
            opened = self.sessions[options.session.session_id] = (span, [0])
        opened[1][0] += 1
        return opened[0]

    def end_session(self, session_id: str) -> None:
        opened = self.sessions.pop(session_id, None)
        if opened is not None:
            span, prompts = opened
            span.set_attribute("queryloop.prompts", prompts[0])
            span.end()

    def end_sessions(self) -> None:
        for session_id in list(self.sessions):
            self.end_session(session_id)


_COUNTERS = (
    ("claude_code.session.count", "", "Count of CLI sessions started"),
    ("claude_code.token.usage", "tokens", "Number of tokens used"),
    ("claude_code.cost.usage", "USD", "Cost of the session"),
    ("claude_code.code_edit_tool.decision", "", "Permission decisions on Edit, Write and NotebookEdit calls"),
    ("queryloop.transition.count", "", "Transitions of the query loop taken, by reason"),
    ("queryloop.retry.count", "", "Requests sent again (reasons of kind retry, fallback, escalate), by reason"),
    ("queryloop.breaker.count", "", "Circuit breakers opened (reasons of kind breaker), by reason"),
)


# the OTLP exporter class of each (signal, protocol): the SDK's, or ours for http/json (queryloop.run.otlp_json)
_OTLP_EXPORTERS = {
    ("traces", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    ("traces", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
    ("traces", "http/json"): ("queryloop.run.otlp_json", "JsonSpanExporter"),
    ("metrics", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter"),
    ("metrics", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter"),
    ("metrics", "http/json"): ("queryloop.run.otlp_json", "JsonMetricExporter"),
    ("logs", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "OTLPLogExporter"),
    ("logs", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http._log_exporter", "OTLPLogExporter"),
    ("logs", "http/json"): ("queryloop.run.otlp_json", "JsonLogExporter"),
}


def _otlp(signal: str, settings: TelemetrySettings, **extra: object) -> Any:
    """The signal's OTLP exporter over its protocol, to its endpoint with its headers and the timeout (imported
    here: a process loads only the exporter it uses)."""
    import importlib

    module, name = _OTLP_EXPORTERS[signal, settings.protocols[signal]]
    exporter = getattr(importlib.import_module(module), name)
    return exporter(
        endpoint=settings.endpoints[signal], headers=dict(settings.headers[signal]), timeout=settings.timeout_s, **extra
    )


def _span_exporter(name: str, settings: TelemetrySettings) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter(out=sys.stderr)  # stdout is the answer's
    return _otlp("traces", settings)  # type: ignore[no-any-return]


def _built(
    name: str, signal: str, make: Callable[[str, TelemetrySettings], _T], settings: TelemetrySettings
) -> _T | None:
    """``make(name, settings)``, or None with a line on stderr saying why that exporter sends nothing."""
    try:
        return make(name, settings)
    except Exception as error:  # an exporter's set-up failing never stops the run
        print(f"queryloop: warning: the {name} exporter of {signal} is off: {error}", file=sys.stderr)
        return None


def _metric_reader(name: str, settings: TelemetrySettings) -> MetricReader:
    """A reader the meter pushes through every interval, or Prometheus's, which is scraped."""
    if name == "prometheus":
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry()
        where = f"{settings.prometheus_host}:{settings.prometheus_port}"
        try:
            start_http_server(settings.prometheus_port, settings.prometheus_host, registry=registry)
        except OSError as error:
            raise OSError(f"cannot listen on {where}: {error.strerror or error}") from None
        return PrometheusMetricReader(registry=registry)  # cumulative, as Prometheus counts
    return PeriodicExportingMetricReader(_metric_exporter(name, settings), settings.metric_interval_ms)


def _metric_exporter(name: str, settings: TelemetrySettings) -> MetricExporter:
    temporality = AggregationTemporality.DELTA if settings.delta else AggregationTemporality.CUMULATIVE
    preferred: dict[type, AggregationTemporality] = {Counter: temporality}
    if name == "console":
        return ConsoleMetricExporter(out=sys.stderr, preferred_temporality=preferred)
    return _otlp("metrics", settings, preferred_temporality=preferred)  # type: ignore[no-any-return]


def _log_exporter(name: str, settings: TelemetrySettings) -> LogRecordExporter:
    if name == "console":
        return ConsoleLogRecordExporter(out=sys.stderr)
    return _otlp("logs", settings)  # type: ignore[no-any-return]


class ProcessProviders:
    """The process's one set of exporters, and the sessions' open spans: its only state that outlives a run.

    The first run that exports builds them from the settings it was given; later runs share them
    (as Claude Code, the process reads its telemetry environment once), so a later run's other
    settings are not applied. :meth:`reset` ends the open sessions' spans and drops the set, so
    the next run that exports builds a new one: for tests and programs that change the settings.
    """

    def __init__(self) -> None:
        self._providers: _Providers | None = None

    def get(self, settings: TelemetrySettings) -> _Providers:
        """The process's providers, built from ``settings`` by the first run that asks."""
        if self._providers is None:
            self._providers = _Providers(settings)
        return self._providers

    def end_session(self, session_id: str) -> None:
        """The session is over in this process: its span ends, and its trace with it (nothing if none is open)."""
        if self._providers is not None:
            self._providers.end_session(session_id)

    def reset(self) -> None:
        """End every open session's span and forget the providers; the next run that exports builds them again."""
        if self._providers is not None:
            self._providers.end_sessions()
        self._providers = None


PROVIDERS = ProcessProviders()
"""The process's providers (:class:`ProcessProviders`): every run of the process exports through them."""


def end_session(session_id: str) -> None:
    """The session is over in this process (a conversation closed, /clear): its span ends, and its trace with it."""
    PROVIDERS.end_session(session_id)
