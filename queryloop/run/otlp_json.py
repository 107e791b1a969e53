"""OTLP over HTTP with JSON bodies (``OTEL_EXPORTER_OTLP_PROTOCOL=http/json``), which the Python SDK does not ship.

Owns one exporter per signal: the SDK's own OTLP messages written in OTLP's JSON mapping and POSTed, retried as the
specification asks (docs/telemetry.md). Imported only by ``queryloop.run.otel_providers``.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from google.protobuf.message import Message  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["JsonLogExporter", "JsonMetricExporter", "JsonSpanExporter", "otlp_json"]

_log = logging.getLogger(__name__)
_IDS = frozenset({"traceId", "spanId", "parentSpanId"})
_RETRYABLE = frozenset({429, 502, 503, 504})
_TRIES = 3


def otlp_json(message: Message) -> bytes:
    """``message`` in OTLP/JSON: the protobuf JSON mapping, ids as lowercase hex."""
    return json.dumps(_hex_ids(MessageToDict(message, use_integers_for_enums=True)), separators=(",", ":")).encode()


def _hex_ids(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in _IDS and isinstance(v, str) else _hex_ids(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


class _Poster:
    """POSTs one signal's JSON bodies to its endpoint, trying again as the specification allows."""

    def __init__(self, endpoint: str, headers: Mapping[str, str], timeout_s: float) -> None:
        self.endpoint = endpoint
        self.headers = {**headers, "Content-Type": "application/json"}
        self.timeout_s = timeout_s

    def post(self, body: bytes) -> bool:
        deadline = time.monotonic() + self.timeout_s
        for attempt in range(_TRIES):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            request = urllib.request.Request(self.endpoint, data=body, headers=self.headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=left) as response:
                    response.read()
                return True
            except urllib.error.HTTPError as error:
                error.close()
                if error.code not in _RETRYABLE:
                    _log.warning("OTLP/JSON export to %s refused: HTTP %s", self.endpoint, error.code)
                    return False
                why = f"HTTP {error.code}"
            except (urllib.error.URLError, OSError) as error:
                why = str(getattr(error, "reason", error))
            pause = float(2**attempt)
            if attempt + 1 == _TRIES or time.monotonic() + pause >= deadline:
                _log.warning("OTLP/JSON export to %s failed: %s", self.endpoint, why)
                return False
            time.sleep(pause)
        return False


class JsonSpanExporter(SpanExporter):
    def __init__(self, *, endpoint: str, headers: Mapping[str, str], timeout: float) -> None:
        self._poster = _Poster(endpoint, headers, timeout)

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        ok = self._poster.post(otlp_json(encode_spans(spans)))
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


class JsonMetricExporter(MetricExporter):
    def __init__(
        self,
        *,
        endpoint: str,
        headers: Mapping[str, str],
        timeout: float,
        preferred_temporality: dict[type, AggregationTemporality],
    ) -> None:
        super().__init__(preferred_temporality=preferred_temporality)
        self._poster = _Poster(endpoint, headers, timeout)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        ok = self._poster.post(otlp_json(encode_metrics(metrics_data)))
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        pass


class JsonLogExporter(LogRecordExporter):
    def __init__(self, *, endpoint: str, headers: Mapping[str, str], timeout: float) -> None:
        self._poster = _Poster(endpoint, headers, timeout)

    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        ok = self._poster.post(otlp_json(encode_logs(batch)))
        return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # nothing is held here: each batch is posted as it comes

    def shutdown(self) -> None:
        pass
