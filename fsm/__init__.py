"""queryloop's engine: machines declared in YAML, executed, drawn and model-checked.

Knows nothing about agents, Anthropic or tools; machines name the Python they need.
"""

from .check import CheckReport, Finding, check_spec
from .errors import (
    CheckFailed,
    FsmError,
    HandlerError,
    InternalError,
    SpecError,
    SpecProblem,
    TransitionError,
)
from .load import Machine, load_machine, parse_machine
from .render import to_dot, to_mermaid
from .runtime import EffectContext, Event, Program, Runner, RunState, Step
from .spec import CounterSpec, MachineSpec, ParamSpec, StateSpec, TransitionSpec

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
    "Machine",
    "MachineSpec",
    "ParamSpec",
    "Program",
    "RunState",
    "Runner",
    "SpecError",
    "SpecProblem",
    "StateSpec",
    "Step",
    "TransitionError",
    "TransitionSpec",
    "check_spec",
    "load_machine",
    "parse_machine",
    "to_dot",
    "to_mermaid",
]
