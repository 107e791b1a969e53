"""The CLI's SDK client: its span per request is off only where nothing could see it (a fresh process each)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_ASK = """
import sys
{before}
from queryloop.frontends.cli import _unseen_sdk_spans_off
print(_unseen_sdk_spans_off())
"""

_SET_PROVIDER = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())  # as opentelemetry-instrument does before the program runs
"""

_SET_PROPAGATOR = """
from opentelemetry.propagate import set_global_textmap
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
set_global_textmap(TraceContextTextMapPropagator())
"""


def _options(before: str = "", **env: str) -> str:
    """What the CLI's client is given about spans, in a new process with ``env`` and nothing of OpenTelemetry's."""
    names = ("OTEL_", "ANTHROPIC_", "CLAUDE_CODE_ENABLE_TELEMETRY")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(names)}
    done = subprocess.run(
        [sys.executable, "-c", _ASK.format(before=before)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_the_cli_client_has_no_sdk_spans_when_no_provider_propagator_or_setting_could_see_them() -> None:
    assert _options() == "{'open_telemetry': False}"


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"},
        {"OTEL_PROPAGATORS": "tracecontext"},
        {"OTEL_TRACES_EXPORTER": "console"},
        {"ANTHROPIC_OPEN_TELEMETRY_PROPAGATION": "false"},
        {"ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE": "content"},
        {"CLAUDE_CODE_ENABLE_TELEMETRY": "1"},
    ],
)
def test_the_cli_client_keeps_the_sdk_default_when_an_opentelemetry_variable_is_set(env: dict[str, str]) -> None:
    assert _options(**env) == "{}"


def test_the_cli_client_keeps_the_sdk_spans_when_a_tracer_provider_was_set_before_the_run() -> None:
    assert _options(_SET_PROVIDER) == "{}"


def test_the_cli_client_keeps_the_sdk_spans_when_a_propagator_was_set_before_the_run() -> None:
    assert _options(_SET_PROPAGATOR) == "{}"
