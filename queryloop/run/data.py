"""The run data (:class:`AgentData`: the message graph, the outcome, one slice per layer) and its JSON snapshot.

Owns :func:`snapshot_run` / :func:`restore_run`; what a run does with its data is ``queryloop.run.agent``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import attrs
from cattrs.preconf.json import make_converter

from queryloop.fsm import Program, RunState
from queryloop.handlers.agents import AgentsData
from queryloop.handlers.context import ContextData
from queryloop.handlers.hooks import HooksData
from queryloop.handlers.mcp import McpData
from queryloop.handlers.messages import Message, MessageView
from queryloop.handlers.outcome import Outcome, evolve
from queryloop.handlers.output import MALFORMED_TOOL_USE_PROMPT, STRUCTURED_OUTPUT_PROMPT, OutputData
from queryloop.handlers.request import RequestData
from queryloop.handlers.session import SessionData
from queryloop.handlers.tools import ToolsData

__all__ = ["AgentData", "restore_run", "snapshot_run"]


@attrs.frozen(kw_only=True, slots=True)
class AgentData:
    """The whole run data: the message graph, the outcome, and each layer's slice. Replaced whole each step."""

    messages: MessageView
    outcome: Outcome = attrs.field(factory=Outcome)
    request: RequestData
    output: OutputData = attrs.field(factory=OutputData)
    hooks: HooksData = attrs.field(factory=HooksData)
    tools: ToolsData = attrs.field(factory=ToolsData)
    context: ContextData = attrs.field(factory=ContextData)
    session: SessionData = attrs.field(factory=SessionData)
    mcp: McpData = attrs.field(factory=McpData)
    agents: AgentsData = attrs.field(factory=AgentsData)
    user_turns: int = 0  # user messages the loop added after the prompt, as Claude Code counts them (_turns_in)

    def evolve(self, **changes: Any) -> Self:
        """A copy with the named slices replaced; user messages appended to the transcript are counted.

        Every layer changes the transcript through here, so this is the one place that sees
        each message arrive; a rebuilt transcript (a compaction) adds none (its summary is
        counted from the context slice's boundaries).
        """
        messages = changes.get("messages")
        if messages is not None and "user_turns" not in changes:
            added = messages.added_since(self.messages)
            if added:
                turns = self.user_turns
                for message, meta in added:
                    turns += _turns_in(message, meta)
                changes["user_turns"] = turns
        return evolve(self, **changes)


def _turns_in(message: Message, meta: bool) -> int:
    """How many of Claude Code's turns one message appended to the transcript makes.

    Claude Code 2.1.235 counts each user message its loop adds after the prompt: every tool
    result is a message of its own, and so are a Stop hook's feedback and the note that a
    tool call was malformed (which it shows; ours is hidden, so it is named here). Hidden
    continuations of a truncated answer are no turn (a reply cut three times, then
    finished: 1), nor is our thinking-only nudge, nor are the hidden results that close the
    ledger when the budget is spent (Claude Code runs nothing then and adds nothing: 1).
    """
    if message.get("role") != "user":
        return 0
    content = message.get("content")
    if meta:  # the request for a missing StructuredOutput call is a turn in Claude Code's count too
        return int(content in (MALFORMED_TOOL_USE_PROMPT, STRUCTURED_OUTPUT_PROMPT))
    if isinstance(content, list):
        results = 0
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results += 1
        if results:
            return results
    return 1


# ---- snapshots ---------------------------------------------------------------------------------

_codec = make_converter()  # JSON-ready values: frozensets and tuples become lists
_codec.register_unstructure_hook(MessageView, lambda view: [[m, meta] for m, meta in view.entries()])
_codec.register_structure_hook(
    MessageView, lambda raw, _: MessageView.of((m for m, _ in raw), (bool(meta) for _, meta in raw))
)
# a field typed ``object`` (a JSON value read, not built) takes back what the snapshot holds, as one typed Any does
_codec.register_structure_hook_func(lambda type_: type_ is object, lambda value, _: value)


def snapshot_run(program: Program, run: RunState[AgentData]) -> dict[str, object]:
    """The run state as plain JSON values: state, counters, params, steps and every slice of the data."""
    return {**program.snapshot(run), "data": _codec.unstructure(run.data)}


def restore_run(program: Program, snapshot: Mapping[str, object]) -> RunState[AgentData]:
    """The run state :func:`snapshot_run` wrote (after a JSON round trip), ready to continue."""
    return program.restore(snapshot, _codec.structure(snapshot["data"], AgentData))
