"""Tool layer, structured output (``--json-schema``): the edges out of a tool turn that held a StructuredOutput call.

Owns the guards ``structured_output_given`` and ``structured_output_attempts_spent`` and their edge handlers. A
failed call is an ordinary tool turn: its error result goes back to the model.
"""

from __future__ import annotations

from collections.abc import Mapping

from queryloop.fsm import Event, RunState, uses

from ..outcome import with_outcome
from .data import T
from .running import ToolsDone, record_tool_results
from .services.structured_output import STRUCTURED_OUTPUT, output_json

__all__ = [
    "record_structured_output",
    "structured_output_attempts_spent",
    "structured_output_given",
    "surface_structured_output_failure",
]


def _given(run: RunState[T], event: Event[ToolsDone]) -> Mapping[str, object] | None:
    """The input of this turn's first StructuredOutput call whose result is no error (None: none)."""
    calls = [c for c in run.data.tools.pending if c.name == STRUCTURED_OUTPUT]
    if not calls:
        return None
    failed = {str(r.get("tool_use_id")) for r in event.data.results if r.get("is_error")}
    return next((c.input for c in calls if c.id not in failed), None)


def structured_output_given(run: RunState[T], event: Event[ToolsDone]) -> bool:
    """A StructuredOutput call of this tool turn passed the schema: it is the run's answer."""
    return _given(run, event) is not None


def _attempts(run: RunState[T]) -> int:
    """The model's replies in the transcript that called StructuredOutput (Claude Code counts them so)."""
    count = 0
    for message in run.data.messages:
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            count += any(isinstance(b, dict) and b.get("name") == STRUCTURED_OUTPUT for b in content)
    return count


@uses(params=("max_structured_output_retries",))
def structured_output_attempts_spent(run: RunState[T], event: Event[ToolsDone]) -> bool:
    """This turn's StructuredOutput call failed the schema, and it was the last attempt the cap allows."""
    if not any(c.name == STRUCTURED_OUTPUT for c in run.data.tools.pending) or _given(run, event) is not None:
        return False
    return _attempts(run) >= int(run.params["max_structured_output_retries"])


def record_structured_output(run: RunState[T], event: Event[ToolsDone]) -> T:
    """The results close the turn; the call's input is the run's structured output, its JSON the result text."""
    value = _given(run, event)
    assert value is not None  # the guard structured_output_given held
    data = record_tool_results(run, event)
    return with_outcome(data, structured_output=dict(value), result_text=output_json(value), partial_text="")


@uses(params=("max_structured_output_retries",))
def surface_structured_output_failure(run: RunState[T], event: Event[ToolsDone]) -> T:
    """The last allowed StructuredOutput call failed: the results close the turn and the run ends saying so."""
    data = record_tool_results(run, event)
    cap = run.params["max_structured_output_retries"]
    return with_outcome(data, error=f"No StructuredOutput call passed the schema in {cap} attempts")
