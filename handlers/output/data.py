"""The output layer's slice of the run data and what its handlers need.

Owns :class:`OutputData` (the reply being read, the escalated ``max_tokens``, whether structured output is required)
and the layer's protocols.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import attrs

from ..outcome import evolve
from ..request import ModelReply, RequestRun

__all__ = ["OutputData", "OutputRun", "OutputServices", "with_output"]


@attrs.frozen(kw_only=True, slots=True)
class OutputData:
    """What the output layer keeps between steps."""

    escalated_max_tokens: int | None = None  # one retry of a truncated answer at this cap (None: no escalation)
    reply: ModelReply | None = None  # the complete reply being read (the last one, once read)
    structured_output_required: bool = False  # --json-schema: the answer is a StructuredOutput call
    structured_output_nudged: bool = False  # the model was asked once for a StructuredOutput call it did not make


class OutputRun(RequestRun, Protocol):
    """The run data as output-layer handlers see it."""

    @property
    def output(self) -> OutputData: ...


Out = TypeVar("Out", bound=OutputRun)


def with_output(data: Out, **changes: Any) -> Out:
    """The run data with its output slice changed as given."""
    return data.evolve(output=evolve(data.output, **changes))


class OutputServices(Protocol):
    """What reading a reply uses: the run's budget, and what it has spent outside its own requests."""

    @property
    def max_budget_usd(self) -> float | None: ...

    def cost_elsewhere_usd(self) -> float:
        """What the run spent beyond its own requests (its sub-agents' requests), counted against the budget."""
        ...
