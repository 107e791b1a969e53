"""What a run uses when nothing names it — every default but the machine's caps — and the Claude Code release queryloop
behaves as.

It imports only ``os``, so ``--help`` shows the defaults cheaply.
"""

from __future__ import annotations

import os

__all__ = [
    "AUTO_COMPACT_THRESHOLD",
    "CLAUDE_CODE_VERSION",
    "DEFAULT_MODEL",
    "DEFAULT_SYSTEM_PROMPT",
    "MAX_OUTPUT_TOKENS",
    "OTEL_LOGS_INTERVAL_MS",
    "OTEL_METRIC_INTERVAL_MS",
    "OTLP_ENDPOINT",
    "OTLP_GRPC_ENDPOINT",
    "OTLP_TIMEOUT_MS",
    "PROMETHEUS_HOST",
    "PROMETHEUS_PORT",
    "RETRY_MAX_DELAY_S",
    "agent_timeout_s",
    "idle_timeout_s",
    "max_retries",
    "request_timeout_s",
    "retry_base_delay_s",
]

# The Claude Code release whose behaviour queryloop follows (its flags, lines and results, observed side
# by side): ``-v`` names it before queryloop's own version, the stream-json ``init`` line as
# ``claude_code_version``, which the Agent SDK checks at start.
CLAUDE_CODE_VERSION = "2.1.235"

# OpenTelemetry (queryloop.run.telemetry), as Claude Code exports when the variables leave them unsaid
OTEL_METRIC_INTERVAL_MS = 60_000  # OTEL_METRIC_EXPORT_INTERVAL
OTEL_LOGS_INTERVAL_MS = 5_000  # OTEL_LOGS_EXPORT_INTERVAL
OTLP_ENDPOINT = "http://localhost:4318"  # OTEL_EXPORTER_OTLP_ENDPOINT: a local collector's OTLP/HTTP port
OTLP_GRPC_ENDPOINT = "http://localhost:4317"  # the same, for OTEL_EXPORTER_OTLP_PROTOCOL=grpc
OTLP_TIMEOUT_MS = 10_000  # OTEL_EXPORTER_OTLP_TIMEOUT: how long one export may take
# OTEL_EXPORTER_PROMETHEUS_HOST and _PORT: the specification's defaults (Claude Code listens on every interface)
PROMETHEUS_HOST = "localhost"
PROMETHEUS_PORT = 9464

# When neither a flag, ANTHROPIC_MODEL, a setting nor a scenario names one: Claude Code 2.1.235's, the opus
# alias (claude-opus-5, or ANTHROPIC_DEFAULT_OPUS_MODEL's), resolved as every model name is.
DEFAULT_MODEL = "opus"

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in the user's directory through tools (Read, Write, Edit, "
    "Bash, Glob, Grep, WebFetch, WebSearch). Use tools when they help, keep changes minimal, and answer concisely."
)


# max_tokens of a request to a model models.yaml has no output limits for (each listed model has its own:
# queryloop.handlers.request.services.model_names.max_output_tokens), and of a RequestSettings built by hand.
MAX_OUTPUT_TOKENS = 32_000

AUTO_COMPACT_THRESHOLD = 0.8  # compact before sending past this share of the effective window

RETRY_MAX_DELAY_S = 32.0  # the backoff's longest delay between two attempts (a retry-after may ask for more)

_RETRY_BASE_DELAY_MS = "500"
_IDLE_TIMEOUT_S = "90"
_AGENT_TIMEOUT_S = "1800"


def _env_number(name: str, default: str | None, *, zero: bool = False) -> float | None:
    """The number the environment variable ``name`` holds (else ``default``, None: none); a value that is not
    a finite number above 0 (or 0 itself, when ``zero``) is an error naming the variable."""
    value = os.environ.get(name) or default
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not (0 <= number if zero else 0 < number) or number == float("inf"):
        raise ValueError(f"{name}={value!r}: expected a number {'of 0 or more' if zero else 'above 0'}")
    return number


def agent_timeout_s() -> float:
    """How long a sub-agent may run before it is stopped: 30 minutes, or ``QUERYLOOP_AGENT_TIMEOUT_S``."""
    return _env_number("QUERYLOOP_AGENT_TIMEOUT_S", _AGENT_TIMEOUT_S) or 0.0


def idle_timeout_s() -> float:
    """The longest wait for a response's headers or its next bytes: 90 s, or ``QUERYLOOP_STREAM_IDLE_TIMEOUT_S``."""
    return _env_number("QUERYLOOP_STREAM_IDLE_TIMEOUT_S", _IDLE_TIMEOUT_S) or 0.0


def max_retries(env: dict[str, str]) -> int | None:
    """Retries of one request as Claude Code's ``CLAUDE_CODE_MAX_RETRIES`` asks (None: unset, the machine's
    ``max_retries``); a value that is not a whole number of 0 or more is an error naming the variable.

    Claude Code 2.1.235 reads it from its environment or the settings' ``env``: 0 sent one request to a
    server that always failed, 1 two, 3 four.
    """
    value = env.get("CLAUDE_CODE_MAX_RETRIES", "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(f"CLAUDE_CODE_MAX_RETRIES={value!r}: expected a whole number of 0 or more")
    return int(value)


def structured_output_retries(env: dict[str, str]) -> int | None:
    """StructuredOutput calls that may fail the schema before the run gives up, as Claude Code's
    ``MAX_STRUCTURED_OUTPUT_RETRIES`` asks (None: unset, the machine's ``max_structured_output_retries``, 5);
    a value that is not a whole number from 0 to 100 is an error naming the variable."""
    value = env.get("MAX_STRUCTURED_OUTPUT_RETRIES", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) > 100:
        raise ValueError(f"MAX_STRUCTURED_OUTPUT_RETRIES={value!r}: expected a whole number from 0 to 100")
    return int(value)


def request_timeout_s() -> float | None:
    """The deadline of each model request attempt: ``QUERYLOOP_REQUEST_TIMEOUT_S``, else none (the idle timeout)."""
    return _env_number("QUERYLOOP_REQUEST_TIMEOUT_S", None)


def retry_base_delay_s() -> float:
    """The backoff's first delay: 0.5 s, or ``QUERYLOOP_RETRY_BASE_DELAY_MS`` (tests and demos shorten it)."""
    return (_env_number("QUERYLOOP_RETRY_BASE_DELAY_MS", _RETRY_BASE_DELAY_MS, zero=True) or 0.0) / 1000
