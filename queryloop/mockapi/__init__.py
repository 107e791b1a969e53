"""The embedded fault-injecting Anthropic-compatible server and the scenarios it plays.

A testing and demo facility, apart from the production path: ``queryloop run
--scenario`` and ``queryloop mock-api`` start it; nothing in the engine or the
handlers imports it.
"""

from .scenario import (
    SCENARIO_SCHEMA_VERSION,
    Scenario,
    ScenarioError,
    load_scenario,
    parse_scenario,
    resolve_scenario,
    scenario_names,
)
from .server import MockServer, RecordedRequest, estimate_input_tokens, serve_forever

__all__ = [
    "MockServer",
    "RecordedRequest",
    "SCENARIO_SCHEMA_VERSION",
    "Scenario",
    "ScenarioError",
    "estimate_input_tokens",
    "load_scenario",
    "parse_scenario",
    "resolve_scenario",
    "scenario_names",
    "serve_forever",
]
