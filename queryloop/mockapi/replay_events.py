"""The table of how each event of the query loop is scripted for the embedded server.

Owns :data:`SCRIPT_BY_EVENT`, the guards a plain offline run fixes (:data:`PLAIN_GUARDS`) and the constants of a
replayed run; not the search along a run (replay_realise) nor the written scenario (replay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from queryloop.fsm import PlannedStep

__all__ = [
    "BIG_CHARS",
    "BIG_FILES",
    "CHAIN_GUARD",
    "CHILD_HOLD_MS",
    "CHILD_MARK",
    "CLEARABLE_GUARD",
    "CLI_PARAMS",
    "FALLBACK_MODELS",
    "MAX_GROUPS",
    "MODEL",
    "OLD_READS",
    "PLAIN_GUARDS",
    "QUICK_REQUESTS",
    "READ_FILE",
    "REFUSED_CALL",
    "REPLY_PAD",
    "REPORTS",
    "REPORT_HOLD_MS",
    "SCRIPT_BY_EVENT",
    "SMALL_MODEL",
    "SWITCH_MODEL",
    "SYSTEM_PAD",
    "Script",
    "TRACKED_GUARDS",
    "refusal_of",
]

MODEL = "mock-primary"
SMALL_MODEL = "mock-small-context"
"""The primary model of a run that passes the auto-compact threshold (handlers/request/services/models.yaml: an
8 000-token window, 4 096 output tokens at most, so an effective window of 3 904 and a threshold of 3 123)."""
FALLBACK_MODELS = ("mock-fallback-1", "mock-fallback-2", "mock-fallback-3")
"""The fallback chain a scenario may declare, in the order a run switches to them (at most 3, as the CLI takes)."""
SWITCH_MODEL = "switch_to_fallback_model"
"""The edge handler that moves a run to the next model of its chain, for the rest of the run."""
CHAIN_GUARD = "fallback_available"  # decided by the chain a scenario declares, not by a plain run
CLI_PARAMS = ("max_turns", "max_retries")  # params a scenario's `cli` section sets; the rest replay at their defaults
READ_FILE = "counterexample.txt"  # the file a scripted tool call reads
BIG_FILES = ("big-1.txt", "big-2.txt")
"""The files the two Read calls of a tool turn read when a microcompaction must clear their results later."""
BIG_CHARS = 30_000
"""Each big file's characters: its Read result is cut at the tool's 30 000 characters, about 7 500 tokens, so the
two together are past the 10 000 tokens a microcompaction must free."""
FAST = {"retry-after-ms": "1"}  # a scripted failure's wait, scaled down from seconds to a millisecond
SYSTEM_PAD = (
    "This paragraph is padding appended to the system prompt of a replayed counterexample, so that the "
    "system prompt and the tools alone are over the auto-compact threshold of mock-small-context. "
) * 48
"""``cli.append_system_prompt`` of a run on :data:`SMALL_MODEL`: about 2 700 tokens, over the threshold (3 123) by
far with the default system prompt and tools (about 1 900 more)."""
REPLY_PAD = " " + ("This sentence pads a scripted reply, so that its round is over what a compaction keeps. " * 24)
"""Appended to each reply a run on :data:`SMALL_MODEL` keeps: about 540 tokens, over the 390 (a tenth of the
effective window) an auto-compaction keeps verbatim, so it keeps exactly the newest round."""
CHILD_MARK = "Who directs you: the agent that started you"
"""Opens every sub-agent's system prompt context (``queryloop.run.subagents.CHILD_CONTEXT``) and no parent's: the
rules that answer a sub-agent's requests are routed on it."""
CHILD_HOLD_MS = 1500
"""A sub-agent's answer is held this long: the parent's next steps (at most :data:`QUICK_REQUESTS` requests) come
first."""
REPORT_HOLD_MS = CHILD_HOLD_MS + 2500
"""A parent request whose tool turn must find the sub-agent ended is held this long."""
QUICK_REQUESTS = 4
"""Parent requests after a launch during which its sub-agent is surely still running (its answer is held)."""
MAX_GROUPS = 4
"""API-round groups the realiser counts exactly; past it, a decision that needs the count is refused."""
OLD_READS = 5
"""Tool turns a microcompaction needs: the oldest one's results are cleared after four more (it keeps the newest 4)."""
_LAUNCHES = "agent_launches"  # the counter of the Agent calls admitted in this tool turn
REFUSED_CALL = "agent_launch_refused"  # the reason of an Agent call of agent_call_waiting that starts no agent
REPORTS = ("agent_completed", "agent_failed")
CLEARABLE_GUARD = "old_results_clearable"  # the microcompaction's guard


@attrs.frozen(kw_only=True)
class Script:
    """How one event is made to happen.

    ``ambient``: a plain offline run takes it on its own (nothing scripted); ``answer``: the
    server answers the request with ``step``; ``reply``: a complete reply arrives, shaped by
    the ``shape`` event after it; ``shape``: the fields of that reply; ``call``: the tool
    turn's reply gets one more Agent call; ``tracked``: the run's tracked data decides whether
    it happens (its model's window, its sub-agent's answer and timing); ``never``: no
    scenario makes it happen (``why``).
    """

    kind: Literal["ambient", "answer", "reply", "shape", "call", "tracked", "never"]
    step: Mapping[str, Any] = attrs.field(factory=dict)
    why: str = ""


def _never(why: str) -> Script:
    return Script(kind="never", why=why)


def _reply(content: Sequence[Mapping[str, object]], stop_reason: str | None = None) -> Script:
    reply: dict[str, object] = {"content": content}
    if stop_reason is not None:
        reply["stop_reason"] = stop_reason
    return Script(kind="shape", step={"reply": reply})


def _error(status: int, message: str | None = None) -> Script:
    error: dict[str, object] = {"status": status, "headers": dict(FAST)}
    if message is not None:
        error["message"] = message
    return Script(kind="answer", step={"error": error})


_AMBIENT = Script(kind="ambient")
_TRACKED = Script(kind="tracked")
_TOO_LONG = "prompt is too long: {n} tokens > 1000 maximum"

SCRIPT_BY_EVENT: Mapping[str, Script] = {
    # session
    "session_new": _AMBIENT,
    "history_restored": _never("needs a stored session (--resume)"),
    "dangling_calls_found": _never("needs a stored session that died mid-call"),
    # mcp
    "tools_in_sync": _AMBIENT,
    "tool_list_changed": _never("needs an MCP server"),
    "servers_down": _never("needs an MCP server"),
    "servers_reconnected": _never("needs an MCP server"),
    "reconnect_failed": _never("needs an MCP server"),
    # hooks
    "prompt_accepted": _AMBIENT,
    "compaction_requested": _never("needs a /compact run"),
    "prompt_blocked": _never("needs a UserPromptSubmit hook"),
    "stopped_by_hook": _never("needs a hook answering continue: false"),
    "stop_accepted": _AMBIENT,
    "stop_blocked": _never("needs a Stop hook"),
    # context: the primary model's window decides (mock-primary: always within; mock-small-context: always over)
    "within_threshold": _TRACKED,
    "over_threshold": _TRACKED,
    "compacted": Script(kind="answer", step={"reply": {"content": [{"text": "Summary: a scripted summary."}]}}),
    "summary_too_long": _error(400, _TOO_LONG),
    "summary_failed_transiently": _error(529),
    "summary_failed": _error(403, "a scripted refusal of the summary request"),
    # request
    "replied": Script(kind="reply"),
    "failed_transiently": _error(500),
    "overloaded": _error(529),
    "model_unavailable": _error(404, "model: {model}"),
    "unauthorized": _error(401),
    "rejected": _error(400, "a scripted invalid request"),
    "context_overflowed": _error(400, _TOO_LONG),
    "media_too_large": _never("needs an image in the request"),
    "stream_broken": Script(kind="answer", step={"reply": {"content": [{"text": "cut"}]}, "cut_after_block": 0}),
    "stream_cut_after_tool_use": _never("a cut after a tool_use block is read as a tool turn by a non-streamed retry"),
    "response_malformed": _never("which fault reads as malformed depends on streaming; not scripted"),
    "elapsed": _AMBIENT,
    # output (each shapes the reply `replied` announced)
    "answered": _reply([{"text": "A scripted answer."}]),
    "answered_unstructured": _never("needs --json-schema, which a scenario's run does not pass"),
    "asked_for_tools": _reply([{"tool_use": {"name": "Read", "input": {"file_path": READ_FILE}}}]),
    "tool_use_malformed": _reply([{"text": "A tool call without its block."}], "tool_use"),
    "truncated": _reply([{"text": "A scripted answer cut"}], "max_tokens"),
    "thought_only": _reply([{"thinking": "Only a thought."}]),
    "refused": _reply([{"text": "No."}], "refusal"),
    "paused": _reply([{"text": "A scripted pause."}], "pause_turn"),
    "budget_spent": _never("needs --max-budget-usd"),
    # tools
    "tools_permitted": _AMBIENT,
    "tools_denied": _never("needs a permission rule that denies"),
    "tools_denied_again": _never("needs a permission rule that denies"),
    "tools_already_done": _never("needs a ledger from an earlier process"),
    "tools_finished": _AMBIENT,
    # agents: the tool turn's reply holds an Agent call; its child is answered by a rule (see the module's doc)
    "agent_call_waiting": Script(kind="call"),
    "agent_calls_admitted": _AMBIENT,
    "agent_completed": _TRACKED,
    "agent_failed": _TRACKED,
    "agent_timed_out": _never("needs a sub-agent past its time limit (30 minutes; a scenario cannot set it)"),
    "no_agent_report": _TRACKED,
    # every state
    "aborted": _never("needs an interrupt"),
}
"""What the server scripts for each event of ``machines/query_loop.yaml`` (an event missing here is not replayable)."""

TRACKED_GUARDS: Mapping[str, str] = {
    "fallback_available": "a fallback model of the chain the scenario declares remains",
    "can_compact": "the transcript has at least 2 API-round groups (auto-compaction is on)",
    "refill_thrashing": "the last two compactions each came under 3 tool turns after the one before, and so would this",
    "can_drop_oldest_group": "the part being summarised has at least 2 groups",
    "agents_running": "the run's background sub-agent has not been reported yet",
    "old_results_clearable": (
        f"the first context check after a tool turn whose reads came {OLD_READS - 1} tool turns after those of another,"
        " on a 200 000-token window (the reads of that older turn are made big)"
    ),
}
"""The guards the run's tracked data decides, and how (:class:`TrackedRun`)."""

PLAIN_GUARDS: Mapping[str, bool | None] = {
    "escalation_configured": False,  # no escalated max_tokens
    "has_staged_collapses": False,  # the scripted tool results are far from the 4,000 characters a collapse needs
    "checkpoint_taken": False,  # the scripted calls are a Read and an Agent call
    "retry_after_over_cap": False,  # every scripted retry-after is 1 ms
    "structured_output_given": False,  # a scenario's run asks for no structured output (no --json-schema)
    "structured_output_attempts_spent": False,
    # a reactive compaction: whether one is tried, and what it keeps, reads the API's gap and every round's size
    "nothing_older_to_summarise": None,
    "can_keep_more_rounds": None,
    **dict.fromkeys(TRACKED_GUARDS),
}
"""Each guard's value in a plain offline run of a scenario; None: the run's tracked data decides it (TRACKED_GUARDS)
or, for the others, no scenario fixes it."""


def refusal_of(step: PlannedStep) -> str | None:
    """Why no scenario makes ``step`` happen, whatever the run did before it (None: some run may)."""
    script = SCRIPT_BY_EVENT.get(step.event)
    if script is None:
        return f"event {step.event!r} has no script"
    if script.kind == "never":
        return f"event {step.event!r} {script.why}"
    if script.kind == "call" and step.reason != REFUSED_CALL and step.counters.get(_LAUNCHES, 0) > 0:
        # the first admitted call of the turn runs until a later turn: a second would run beside it
        return "a second Agent call admitted in one tool turn (a scenario times one sub-agent at a time)"
    for guard, value in step.guards.items():
        if guard in TRACKED_GUARDS:
            continue  # the run's data decides it, along the run
        plain = PLAIN_GUARDS.get(guard)
        if plain is None:
            return f"guard {guard!r} must be {value}, which no scenario fixes"
        if plain != value:
            return f"guard {guard!r} must be {value}; a plain offline run has it {plain}"
    for counter, fires in step.open_caps.items():
        if not fires:
            return f"the unset cap of {counter!r} must stop it (set it with --set and a flag)"
    return None
