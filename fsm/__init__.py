"""queryloop's engine: machines declared in YAML, executed, drawn and model-checked.

Knows nothing about agents, Anthropic or tools and imports nothing of queryloop
outside itself; machines name the Python they need. Installed as ``queryloop.fsm``.
The names below are imported on first use (``lazy``), so a caller that only runs a
machine never loads the checker, the renderer or graphviz, and one that only checks
never loads the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:
    from .check import CheckReport, Finding, check_spec
    from .contract import Uses, uses
    from .errors import (
        CheckFailed,
        FsmError,
        HandlerError,
        InternalError,
        SpecError,
        SpecProblem,
        TransitionError,
    )
    from .jsontext import JsonLimitError, loads_json
    from .load import Machine, check_observers, load_machine, parse_machine
    from .promela import SpinError, to_promela
    from .render import to_dot, to_mermaid
    from .runtime import EffectContext, Event, Program, RunFailure, Runner, RunState, Step
    from .source import Source, read_json, read_yaml, schema_problems
    from .spec import CounterSpec, MachineSpec, ParamSpec, StateSpec, TransitionSpec
    from .spin import SpinNotFound, SpinReport, spin_check
    from .terminal import inert
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".check": ("CheckReport", "Finding", "check_spec"),
            ".contract": ("Uses", "uses"),
            ".errors": (
                "CheckFailed",
                "FsmError",
                "HandlerError",
                "InternalError",
                "SpecError",
                "SpecProblem",
                "TransitionError",
            ),
            ".jsontext": ("JsonLimitError", "loads_json"),
            ".load": ("Machine", "check_observers", "load_machine", "parse_machine"),
            ".promela": ("SpinError", "to_promela"),
            ".render": ("to_dot", "to_mermaid"),
            ".runtime": ("EffectContext", "Event", "Program", "RunFailure", "Runner", "RunState", "Step"),
            ".source": ("Source", "read_json", "read_yaml", "schema_problems"),
            ".spec": ("CounterSpec", "MachineSpec", "ParamSpec", "StateSpec", "TransitionSpec"),
            ".spin": ("SpinNotFound", "SpinReport", "spin_check"),
            ".terminal": ("inert",),
        },
    )

__all__ = [
    "CheckFailed",
    "CheckReport",
    "CounterSpec",
    "EffectContext",
    "Event",
    "Finding",
    "FsmError",
    "HandlerError",
    "InternalError",
    "JsonLimitError",
    "Machine",
    "MachineSpec",
    "ParamSpec",
    "Program",
    "RunFailure",
    "RunState",
    "Runner",
    "Source",
    "SpecError",
    "SpecProblem",
    "SpinError",
    "SpinNotFound",
    "SpinReport",
    "StateSpec",
    "Step",
    "TransitionError",
    "TransitionSpec",
    "Uses",
    "check_observers",
    "check_spec",
    "inert",
    "load_machine",
    "loads_json",
    "parse_machine",
    "read_json",
    "read_yaml",
    "schema_problems",
    "spin_check",
    "to_dot",
    "to_mermaid",
    "to_promela",
    "uses",
]
