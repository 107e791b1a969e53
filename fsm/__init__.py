"""queryloop's engine: machines declared in YAML, executed, drawn and model-checked.

Imports nothing of queryloop outside itself. Its names are imported on first use (``lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:
    from .draw.render import to_dot, to_mermaid
    from .errors import (
        CheckFailed,
        FsmError,
        HandlerError,
        InternalError,
        SpecError,
        SpecProblem,
        TransitionError,
    )
    from .model.contract import Uses, uses
    from .model.jsontext import JsonLimitError, loads_json
    from .model.load import Machine, check_observers, load_machine, parse_machine
    from .model.source import Source, read_json, read_yaml, schema_problems
    from .model.spec import CounterSpec, MachineSpec, ParamSpec, StateSpec, TransitionSpec
    from .model.textfile import UnreadableFileError, read_text_file
    from .run.runtime import EffectContext, Event, Program, RunFailure, Runner, RunState, Step
    from .terminal import inert
    from .verify.check import CheckReport, Finding, check_spec
    from .verify.promela import SpinError, to_promela
    from .verify.spin import SpinNotFound, SpinReport, spin_check
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".verify.check": ("CheckReport", "Finding", "check_spec"),
            ".model.contract": ("Uses", "uses"),
            ".errors": (
                "CheckFailed",
                "FsmError",
                "HandlerError",
                "InternalError",
                "SpecError",
                "SpecProblem",
                "TransitionError",
            ),
            ".model.jsontext": ("JsonLimitError", "loads_json"),
            ".model.load": ("Machine", "check_observers", "load_machine", "parse_machine"),
            ".verify.promela": ("SpinError", "to_promela"),
            ".draw.render": ("to_dot", "to_mermaid"),
            ".run.runtime": ("EffectContext", "Event", "Program", "RunFailure", "Runner", "RunState", "Step"),
            ".model.source": ("Source", "read_json", "read_yaml", "schema_problems"),
            ".model.textfile": ("UnreadableFileError", "read_text_file"),
            ".model.spec": ("CounterSpec", "MachineSpec", "ParamSpec", "StateSpec", "TransitionSpec"),
            ".verify.spin": ("SpinNotFound", "SpinReport", "spin_check"),
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
    "UnreadableFileError",
    "Uses",
    "check_observers",
    "check_spec",
    "inert",
    "load_machine",
    "loads_json",
    "parse_machine",
    "read_json",
    "read_text_file",
    "read_yaml",
    "schema_problems",
    "spin_check",
    "to_dot",
    "to_mermaid",
    "to_promela",
    "uses",
]
