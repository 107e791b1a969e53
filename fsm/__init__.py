"""queryloop's engine: machines declared in YAML, executed, drawn and model-checked.

Imports nothing of queryloop outside itself. Its names are imported on first use (``lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:
    from .cli import ProgramWords, UsageError, run_command
    from .draw.ladder import View, layer_names
    from .draw.render import to_dot, to_mermaid
    from .draw.trace import Trace, TraceError, TraceStep, check_trace, read_trace
    from .errors import CheckFailed, FsmError, HandlerError, InternalError, SpecError, SpecProblem, TransitionError
    from .lazy import lazy_exports
    from .model.cache import load_machine_cached
    from .model.contract import Uses, uses
    from .model.jsontext import JsonLimitError, loads_json, well_formed
    from .model.load import Machine, check_observers, load_machine, parse_machine
    from .model.source import Source, json_path, read_json, read_yaml, schema_problems
    from .model.spec import ChildrenSpec, CounterSpec, MachineSpec, ParamSpec, StateSpec, TransitionSpec
    from .model.textfile import UnreadableFileError, read_file_bytes, read_text_file
    from .run.program import Program
    from .run.records import Event, RunFailure, RunState, Step
    from .run.runtime import EffectContext, Runner
    from .terminal import inert
    from .verify.check import CheckReport, Finding, check_spec
    from .verify.counterexample import Counterexample
    from .verify.paths import PlannedStep
    from .verify.promela import SpinError, to_promela
    from .verify.spin import SpinNotFound, SpinReport, spin_check
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".cli": (
                "ProgramWords",
                "UsageError",
                "run_command",
            ),
            ".draw.ladder": (
                "View",
                "layer_names",
            ),
            ".draw.render": (
                "to_dot",
                "to_mermaid",
            ),
            ".draw.trace": (
                "Trace",
                "TraceError",
                "TraceStep",
                "check_trace",
                "read_trace",
            ),
            ".errors": (
                "CheckFailed",
                "FsmError",
                "HandlerError",
                "InternalError",
                "SpecError",
                "SpecProblem",
                "TransitionError",
            ),
            ".lazy": ("lazy_exports",),
            ".model.cache": ("load_machine_cached",),
            ".model.contract": (
                "Uses",
                "uses",
            ),
            ".model.jsontext": (
                "JsonLimitError",
                "loads_json",
                "well_formed",
            ),
            ".model.load": (
                "Machine",
                "check_observers",
                "load_machine",
                "parse_machine",
            ),
            ".model.source": (
                "Source",
                "json_path",
                "read_json",
                "read_yaml",
                "schema_problems",
            ),
            ".model.spec": (
                "ChildrenSpec",
                "CounterSpec",
                "MachineSpec",
                "ParamSpec",
                "StateSpec",
                "TransitionSpec",
            ),
            ".model.textfile": (
                "UnreadableFileError",
                "read_file_bytes",
                "read_text_file",
            ),
            ".run.program": ("Program",),
            ".run.records": (
                "Event",
                "RunFailure",
                "RunState",
                "Step",
            ),
            ".run.runtime": (
                "EffectContext",
                "Runner",
            ),
            ".terminal": ("inert",),
            ".verify.check": (
                "CheckReport",
                "Finding",
                "check_spec",
            ),
            ".verify.counterexample": ("Counterexample",),
            ".verify.paths": ("PlannedStep",),
            ".verify.promela": (
                "SpinError",
                "to_promela",
            ),
            ".verify.spin": (
                "SpinNotFound",
                "SpinReport",
                "spin_check",
            ),
        },
    )

__all__ = [
    "CheckFailed",
    "CheckReport",
    "ChildrenSpec",
    "CounterSpec",
    "Counterexample",
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
    "PlannedStep",
    "Program",
    "ProgramWords",
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
    "Trace",
    "TraceError",
    "TraceStep",
    "TransitionError",
    "TransitionSpec",
    "UnreadableFileError",
    "UsageError",
    "Uses",
    "View",
    "check_observers",
    "check_spec",
    "check_trace",
    "inert",
    "json_path",
    "layer_names",
    "lazy_exports",
    "load_machine",
    "load_machine_cached",
    "loads_json",
    "parse_machine",
    "read_file_bytes",
    "read_json",
    "read_text_file",
    "read_trace",
    "read_yaml",
    "run_command",
    "schema_problems",
    "spin_check",
    "to_dot",
    "to_mermaid",
    "to_promela",
    "uses",
    "well_formed",
]
