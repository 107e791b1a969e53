"""Whether a run exports OpenTelemetry, and where: Claude Code's environment variables, read without the SDK.

Owns :class:`TelemetrySettings` and :func:`telemetry_settings`, read as Claude Code 2.1.235 reads them
(docs/telemetry.md). A run without telemetry imports neither ``queryloop.run.otel`` nor the OpenTelemetry SDK.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Literal

import attrs

from .defaults import (
    OTEL_LOGS_INTERVAL_MS,
    OTEL_METRIC_INTERVAL_MS,
    OTLP_ENDPOINT,
    OTLP_GRPC_ENDPOINT,
    OTLP_TIMEOUT_MS,
    PROMETHEUS_HOST,
    PROMETHEUS_PORT,
)

__all__ = [
    "ENABLE_ENV",
    "end_session_trace",
    "TelemetryConfigError",
    "TelemetrySettings",
    "telemetry_settings",
]

ENABLE_ENV = "CLAUDE_CODE_ENABLE_TELEMETRY"
"""Claude Code's switch: telemetry is off unless it is set to a true value."""

Signal = Literal["traces", "metrics", "logs"]
Exporter = Literal["otlp", "console", "prometheus"]
Protocol = Literal["http/protobuf", "http/json", "grpc"]
_EXPORTERS = ("otlp", "console", "prometheus", "none")
_PROTOCOLS = ("http/protobuf", "http/json", "grpc")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class TelemetryConfigError(ValueError):
    """An OpenTelemetry environment variable holds a value queryloop cannot export with."""


@attrs.frozen(kw_only=True)
class TelemetrySettings:
    """What is exported where; an empty exporter tuple leaves that signal off."""

    traces: tuple[Exporter, ...] = ()
    metrics: tuple[Exporter, ...] = ()
    logs: tuple[Exporter, ...] = ()
    endpoints: Mapping[str, str] = attrs.field(factory=dict)  # signal → full OTLP/HTTP URL (…/v1/traces), gRPC's as is
    protocols: Mapping[str, Protocol] = attrs.field(factory=dict)  # signal → its OTLP protocol
    headers: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)  # signal → HTTP headers
    metric_interval_ms: int = OTEL_METRIC_INTERVAL_MS  # OTEL_METRIC_EXPORT_INTERVAL
    logs_interval_ms: int = OTEL_LOGS_INTERVAL_MS  # OTEL_LOGS_EXPORT_INTERVAL
    delta: bool = True  # OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: Claude Code's default is delta
    log_user_prompts: bool = False  # OTEL_LOG_USER_PROMPTS: the prompt's text, not only its length
    log_tool_details: bool = False  # OTEL_LOG_TOOL_DETAILS: a tool call's input in its events
    include_session_id: bool = True  # OTEL_METRICS_INCLUDE_SESSION_ID
    include_version: bool = False  # OTEL_METRICS_INCLUDE_VERSION
    service_name: str = "queryloop"  # OTEL_SERVICE_NAME
    timeout_s: float = OTLP_TIMEOUT_MS / 1000  # OTEL_EXPORTER_OTLP_TIMEOUT, in milliseconds as the specification says
    prometheus_host: str = PROMETHEUS_HOST  # OTEL_EXPORTER_PROMETHEUS_HOST
    prometheus_port: int = PROMETHEUS_PORT  # OTEL_EXPORTER_PROMETHEUS_PORT

    def missing_packages(self) -> str | None:
        """The distribution these settings need that is not installed (the ``otel`` extra's), if any."""
        from importlib.util import find_spec

        if find_spec("opentelemetry.sdk") is None:
            return "opentelemetry-sdk"
        needed = {
            "http/protobuf": ("opentelemetry.exporter.otlp.proto.http", "opentelemetry-exporter-otlp-proto-http"),
            "http/json": ("opentelemetry.exporter.otlp.proto.common", "opentelemetry-exporter-otlp-proto-common"),
            "grpc": ("opentelemetry.exporter.otlp.proto.grpc", "opentelemetry-exporter-otlp-proto-grpc"),
        }
        for protocol in dict.fromkeys(self.protocols.values()):
            module, distribution = needed[protocol]
            if find_spec(module) is None:
                return distribution
        if "prometheus" in self.metrics and find_spec("opentelemetry.exporter.prometheus") is None:
            return "opentelemetry-exporter-prometheus"
        return None


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise TelemetryConfigError(f"{name}={env[name]!r}: expected 1/true or 0/false")


def _exporters(env: Mapping[str, str], signal: Signal) -> tuple[Exporter, ...]:
    name = f"OTEL_{signal.upper()}_EXPORTER"
    named = [part.strip() for part in env.get(name, "").split(",") if part.strip()]
    for part in named:
        if part not in _EXPORTERS:
            expected = "otlp, prometheus, console or none" if signal == "metrics" else "otlp, console or none"
            raise TelemetryConfigError(f"{name}={env[name]!r}: unknown exporter {part!r} (expected {expected})")
        if part == "prometheus" and signal != "metrics":
            raise TelemetryConfigError(f"{name}={env[name]!r}: prometheus exports metrics only")
    return tuple(p for p in dict.fromkeys(named) if p != "none")  # type: ignore[misc]


def _milliseconds(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) == 0:
        raise TelemetryConfigError(f"{name}={env[name]!r}: expected a positive number of milliseconds")
    return int(value)


def _headers(raw: str, name: str) -> dict[str, str]:
    """``k=v,k2=v2`` (values may be percent-encoded), as the OTLP exporter specification writes headers."""
    from urllib.parse import unquote

    out: dict[str, str] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise TelemetryConfigError(f"{name}: expected key=value pairs separated by commas, got {part.strip()!r}")
        out[unquote(key.strip())] = unquote(value.strip())
    return out


def _otlp_target(env: Mapping[str, str], signal: Signal) -> tuple[Protocol, str, dict[str, str]]:
    """The signal's OTLP protocol, URL and headers: its own variables first, then the shared ones.

    Over HTTP a shared endpoint is a base URL that ``/v1/<signal>`` is added to; over gRPC
    it is the collector's address as is (the OTLP exporter specification's rules)."""
    upper = signal.upper()
    protocol_name = next(
        (n for n in (f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") if env.get(n)), None
    )
    protocol = "http/protobuf" if protocol_name is None else env[protocol_name].strip()
    if protocol not in _PROTOCOLS:
        raise TelemetryConfigError(
            f"{protocol_name}={env[protocol_name or '']!r}: expected http/protobuf, http/json or grpc"
        )
    own = env.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "").strip()
    shared = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if own:
        url = own
    elif protocol == "grpc":
        url = shared or OTLP_GRPC_ENDPOINT
    else:
        url = f"{(shared or OTLP_ENDPOINT).rstrip('/')}/v1/{signal}"
    if not url.startswith(("http://", "https://")):
        raise TelemetryConfigError(f"the OTLP endpoint for {signal} must be an http(s) URL, got {url!r}")
    headers = _headers(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""), "OTEL_EXPORTER_OTLP_HEADERS")
    headers.update(_headers(env.get(f"OTEL_EXPORTER_OTLP_{upper}_HEADERS", ""), f"OTEL_EXPORTER_OTLP_{upper}_HEADERS"))
    return protocol, url, headers  # type: ignore[return-value]


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise TelemetryConfigError(f"{name}={env[name]!r}: expected a port number from 1 to 65535")
    return int(value)


def telemetry_settings(env: Mapping[str, str]) -> TelemetrySettings | None:
    """What ``env`` asks to export; None when telemetry is off or names no exporter.

    Raises :class:`TelemetryConfigError` for a value it cannot honour (an unknown
    exporter, gRPC, a bad interval), naming the variable.
    """
    if not _flag(env, ENABLE_ENV, False):
        return None
    exporters = {signal: _exporters(env, signal) for signal in ("traces", "metrics", "logs")}
    if not any(exporters.values()):
        return None
    endpoints: dict[str, str] = {}
    protocols: dict[str, Protocol] = {}
    headers: dict[str, Mapping[str, str]] = {}
    for signal, chosen in exporters.items():
        if "otlp" in chosen:
            protocols[signal], endpoints[signal], headers[signal] = _otlp_target(env, signal)  # type: ignore[arg-type]
    temporality = env.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta").strip().lower() or "delta"
    if temporality not in ("delta", "cumulative"):
        raise TelemetryConfigError(
            f"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE={temporality!r}: expected delta or cumulative"
        )
    return TelemetrySettings(
        traces=exporters["traces"],
        metrics=exporters["metrics"],
        logs=exporters["logs"],
        endpoints=endpoints,
        protocols=protocols,
        headers=headers,
        metric_interval_ms=_milliseconds(env, "OTEL_METRIC_EXPORT_INTERVAL", OTEL_METRIC_INTERVAL_MS),
        logs_interval_ms=_milliseconds(env, "OTEL_LOGS_EXPORT_INTERVAL", OTEL_LOGS_INTERVAL_MS),
        delta=temporality == "delta",
        log_user_prompts=_flag(env, "OTEL_LOG_USER_PROMPTS", False),
        log_tool_details=_flag(env, "OTEL_LOG_TOOL_DETAILS", False),
        include_session_id=_flag(env, "OTEL_METRICS_INCLUDE_SESSION_ID", True),
        include_version=_flag(env, "OTEL_METRICS_INCLUDE_VERSION", False),
        service_name=env.get("OTEL_SERVICE_NAME", "").strip() or "queryloop",
        timeout_s=_milliseconds(env, "OTEL_EXPORTER_OTLP_TIMEOUT", OTLP_TIMEOUT_MS) / 1000,
        prometheus_host=env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or PROMETHEUS_HOST,
        prometheus_port=_port(env, "OTEL_EXPORTER_PROMETHEUS_PORT", PROMETHEUS_PORT),
    )


def end_session_trace(session_id: str) -> None:
    """End the span of ``session_id``'s session if this process exports one (a conversation closed, a
    ``/clear``); the rest end when the process exits. Imports nothing when telemetry is off."""
    otel = sys.modules.get("queryloop.run.otel")
    if otel is not None:
        otel.end_session(session_id)
