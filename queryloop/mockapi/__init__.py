"""The embedded fault-injecting Anthropic-compatible server and the scenarios it plays.

A testing and demo facility: only ``--scenario`` and ``queryloop mock-api`` start it. Its names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .scenario import (
        Scenario,
        ScenarioError,
        load_scenario,
        parse_scenario,
        resolve_scenario,
        scenario_names,
    )
    from .scenario_schema import SCENARIO_SCHEMA_VERSION
    from .server import MockServer, RecordedRequest, serve_forever
    from .wire import estimate_input_tokens
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".scenario": (
                "Scenario",
                "ScenarioError",
                "load_scenario",
                "parse_scenario",
                "resolve_scenario",
                "scenario_names",
            ),
            ".scenario_schema": ("SCENARIO_SCHEMA_VERSION",),
            ".server": ("MockServer", "RecordedRequest", "serve_forever"),
            ".wire": ("estimate_input_tokens",),
        },
    )

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
