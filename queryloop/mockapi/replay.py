"""Counterexamples as scenarios: how each event of the query loop is scripted for the embedded server.

Owns :data:`SCRIPT_BY_EVENT`, the declarative table from an event to what the server
must answer to make it happen (a 529 for ``overloaded``, a prompt-too-long 400 for
``context_overflowed``, a ``max_tokens`` stop for ``truncated`` …) or why no scenario
can make it happen; :data:`PLAIN_GUARDS`, the value each guard takes in a plain offline
run (no escalation, no MCP server, no hooks, a small transcript); and
:class:`ScenarioReplayer`, which restricts ``queryloop check``'s counterexample search to
runs a scenario can play and writes them (``check --counterexamples DIR``). Waits are
scaled down: every scripted error asks for a retry after 1 ms. A run searched at a
``max_turns`` or ``max_retries`` other than the default says it in the scenario's ``cli``
section; every other param replays at the machine's default.

The one choice a scenario makes beyond its answers is its fallback chain
(``fallback_models``, at most 3: :data:`FALLBACK_MODELS`). The realiser tracks it along
the run: ``fallback_available`` is True exactly while a declared fallback model remains,
an edge running ``switch_to_fallback_model`` moves the run to the next one, and the run
stays there (every later request — a retry, a summary, the next turn — goes to that model,
as ``handlers/request/recovery.py`` keeps it). How many the scenario declares is fixed
lazily by the run: as many as it switches to, or needs left. Each scripted answer is
written under the model its request goes to. It does not search (``fsm.verify.counterexample``
does) and does not serve (``queryloop.mockapi.server`` does).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import yaml

from queryloop.fsm.model.spec import MachineSpec
from queryloop.fsm.verify.counterexample import Counterexample
from queryloop.fsm.verify.paths import PlannedStep

from .scenario import parse_scenario

__all__ = [
    "FALLBACK_MODELS",
    "MODEL",
    "PLAIN_GUARDS",
    "SCRIPT_BY_EVENT",
    "SWITCH_MODEL",
    "Script",
    "ScenarioReplayer",
    "scenario_of",
]

MODEL = "mock-primary"
FALLBACK_MODELS = ("mock-fallback-1", "mock-fallback-2", "mock-fallback-3")
"""The fallback chain a scenario may declare, in the order a run switches to them (at most 3, as the CLI takes)."""
SWITCH_MODEL = "switch_to_fallback_model"
"""The edge handler that moves a run to the next model of its chain, for the rest of the run."""
CHAIN_GUARD = "fallback_available"  # decided by the chain a scenario declares, not by a plain run
CLI_PARAMS = ("max_turns", "max_retries")  # params a scenario's `cli` section sets; the rest replay at their defaults
READ_FILE = "counterexample.txt"  # the file a scripted tool call reads
FAST = {"retry-after-ms": "1"}  # a scripted failure's wait, scaled down from seconds to a millisecond


@attrs.frozen(kw_only=True)
class Script:
    """How one event is made to happen.

    ``ambient``: a plain offline run takes it on its own (nothing scripted); ``answer``: the
    server answers the request with ``step``; ``reply``: a complete reply arrives, shaped by
    the ``shape`` event after it; ``shape``: the fields of that reply; ``never``: no
    scenario makes it happen (``why``).
    """

    kind: Literal["ambient", "answer", "reply", "shape", "never"]
    step: Mapping[str, Any] = attrs.field(factory=dict)
    why: str = ""


def _never(why: str) -> Script:
    return Script(kind="never", why=why)


def _reply(content: list[dict[str, Any]], stop_reason: str | None = None) -> Script:
    reply: dict[str, Any] = {"content": content}
    if stop_reason is not None:
        reply["stop_reason"] = stop_reason
    return Script(kind="shape", step={"reply": reply})


def _error(status: int, message: str | None = None) -> Script:
    error: dict[str, Any] = {"status": status, "headers": dict(FAST)}
    if message is not None:
        error["message"] = message
    return Script(kind="answer", step={"error": error})


_AMBIENT = Script(kind="ambient")
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
    # context
    "within_threshold": _AMBIENT,
    "over_threshold": _never("needs a transcript past the auto-compact threshold"),
    "compacted": Script(kind="answer", step={"reply": {"content": [{"text": "Summary: a scripted summary."}]}}),
    "summary_too_long": _error(400, _TOO_LONG),
    "summary_failed_transiently": _error(529),
    "summary_failed": _never("needs a summary request that fails for good or a PreCompact hook"),
    # request
    "replied": Script(kind="reply"),
    "failed_transiently": _error(500),
    "overloaded": _error(529),
    "model_unavailable": _error(404, "model: {model}"),
    "rejected": _error(400, "a scripted invalid request"),
    "context_overflowed": _error(400, _TOO_LONG),
    "media_too_large": _never("needs an image in the request"),
    "stream_broken": Script(kind="answer", step={"reply": {"content": [{"text": "cut"}]}, "cut_after_block": 0}),
    "stream_cut_after_tool_use": _never("a cut after a tool_use block is read as a tool turn by a non-streamed retry"),
    "response_malformed": _never("which fault reads as malformed depends on streaming; not scripted"),
    "elapsed": _AMBIENT,
    # output (each shapes the reply `replied` announced)
    "answered": _reply([{"text": "A scripted answer."}]),
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
    # agents
    "agent_completed": _never("needs a background sub-agent"),
    "agent_failed": _never("needs a background sub-agent"),
    "agent_timed_out": _never("needs a background sub-agent"),
    "no_agent_report": _AMBIENT,
    # every state
    "aborted": _never("needs an interrupt"),
}
"""What the server scripts for each event of ``machines/query_loop.yaml`` (an event missing here is not replayable)."""

PLAIN_GUARDS: Mapping[str, bool | None] = {
    "fallback_available": False,  # no --fallback-model; a run that needs one declares its chain (_Chain)
    "escalation_configured": False,  # no escalated max_tokens
    "can_compact": None,  # depends on the transcript's size
    "refill_thrashing": False,
    "has_staged_collapses": False,
    "old_results_clearable": False,  # the scripted calls' results are far from 10,000 tokens
    "can_drop_oldest_group": None,
    "nothing_older_to_summarise": None,
    "can_keep_more_rounds": None,
    "checkpoint_taken": False,  # the scripted call is a Read
    "retry_after_over_cap": False,  # every scripted retry-after is 1 ms
    "agents_running": False,
}
"""Each guard's value in a plain offline run of a scenario; None: it depends on data no scenario fixes."""


def _refusal(step: PlannedStep) -> str | None:
    script = SCRIPT_BY_EVENT.get(step.event)
    if script is None:
        return f"event {step.event!r} has no script"
    if script.kind == "never":
        return f"event {step.event!r} {script.why}"
    for guard, value in step.guards.items():
        if guard == CHAIN_GUARD:
            continue  # the chain decides it, along the run
        plain = PLAIN_GUARDS.get(guard)
        if plain is None:
            return f"guard {guard!r} must be {value}, which no scenario fixes"
        if plain != value:
            return f"guard {guard!r} must be {value}; a plain offline run has it {plain}"
    for counter, fires in step.open_caps.items():
        if not fires:
            return f"the unset cap of {counter!r} must stop it (set it with --set and a flag)"
    return None


@attrs.frozen
class _Chain:
    """The fallback chain along a run: the models switched to (``used``), the fewest the scenario
    must declare (``least``), and whether that number is fixed (a step needed none left)."""

    used: int = 0
    least: int = 0
    fixed: bool = False

    @property
    def model(self) -> str:
        """The model the run's requests go to now (a switch is for the rest of the run)."""
        return FALLBACK_MODELS[self.used - 1] if self.used else MODEL

    @property
    def declared(self) -> tuple[str, ...]:
        return FALLBACK_MODELS[: self.least]

    def after(self, step: PlannedStep) -> _Chain | str:
        """The chain after ``step`` (its guard read first, then its edge's switch), or why no chain makes it happen."""
        used, least, fixed = self.used, self.least, self.fixed
        available = step.guards.get(CHAIN_GUARD)
        if available is True:
            if fixed:
                return f"guard {CHAIN_GUARD!r} must be True, but an earlier step needed no fallback model left"
            if used >= len(FALLBACK_MODELS):
                return f"guard {CHAIN_GUARD!r} must be True, but all {len(FALLBACK_MODELS)} fallback models are used"
            least = max(least, used + 1)
        elif available is False:
            if least > used:
                return f"guard {CHAIN_GUARD!r} must be False, but an earlier step needed a fallback model left"
            fixed = True
        if (step.transition.do or "").rpartition(".")[2] == SWITCH_MODEL:
            if fixed or used >= len(FALLBACK_MODELS):
                return f"{step.reason!r} switches to the next fallback model, and none is left"
            used += 1
            least = max(least, used)
        return _Chain(used=used, least=least, fixed=fixed)


class _ScenarioRun:
    """The realiser of a scenario's run: a step happens only if the table scripts it, its guards
    hold in a plain offline run, and a fallback chain of at most 3 models allows it."""

    def start(self) -> _Chain:
        return _Chain()

    def refuse(self, step: PlannedStep) -> str | None:
        return _refusal(step)

    def advance(self, data: _Chain, step: PlannedStep) -> Iterable[tuple[_Chain, Any]]:
        if _refusal(step) is not None:
            return ()
        after = data.after(step)
        if isinstance(after, str):
            return ()
        answered = SCRIPT_BY_EVENT[step.event].kind in ("answer", "shape")
        return ((after, data.model if answered else None),)  # the note: the model that answers the step


def _script(steps: Sequence[PlannedStep]) -> tuple[_Chain, dict[str, list[dict[str, Any]]]]:
    """Each model's scripted answers along ``steps``, and the chain at the end (ValueError: the first step no
    scenario plays)."""
    chain = _Chain()
    answers: dict[str, list[dict[str, Any]]] = {MODEL: []}
    pending = False
    for i, step in enumerate(steps, 1):
        why = _refusal(step)
        after = chain.after(step) if why is None else why
        if isinstance(after, str):
            raise ValueError(f"step {i} ({step.reason}): {after}")
        script = SCRIPT_BY_EVENT[step.event]
        if pending and script.kind != "shape":
            raise ValueError(f"step {i} ({step.reason}): a reply must be shaped by the event after it")
        if script.kind == "reply":
            pending = True
        elif script.kind == "shape":
            if not pending:
                raise ValueError(f"step {i} ({step.reason}): {step.event!r} follows no reply")
            answers.setdefault(chain.model, []).append(copy.deepcopy(dict(script.step)))
            pending = False
        elif script.kind == "answer":
            answers.setdefault(chain.model, []).append(copy.deepcopy(dict(script.step)))
        chain = after
    return chain, answers


def scenario_of(spec: MachineSpec, example: Counterexample, *, name: str) -> dict[str, Any]:
    """``example``'s run as a scenario document (raises ValueError naming the first step no scenario plays).

    The primary model answers until the run switches; each fallback model it declares then
    answers the requests that go to it, in order.
    """
    if example.run is None:
        raise ValueError(f"no run to write: {example.why}")
    chain, answers = _script(example.run.steps)
    reasons = " ".join(example.run.reasons)
    cli: dict[str, Any] = {"prompt": "Replay the counterexample.", "allowed_tools": ["Read"]}
    defaults = spec.param_defaults
    for param in CLI_PARAMS:  # a run searched at `--set max_turns=N` replays at N
        value = example.params.get(param)
        if param in defaults and value is not None and value != defaults[param]:
            cli[param] = value
    document: dict[str, Any] = {
        "schema_version": 1,
        "scenario": name,
        "doc": f"counterexample of `queryloop check` on {spec.path}: {example.shows}. "
        f"Finding: {example.finding.message} Reasons: {reasons}",
        "model": MODEL,
    }
    if chain.declared:
        document["fallback_models"] = list(chain.declared)
    document.update(
        {
            "cli": cli,
            "files": {READ_FILE: "read by the scripted tool call\n"},
            "models": {model: answers.get(model, []) for model in (MODEL, *chain.declared)},
            "otherwise": {
                "error": {"status": 500, "message": "the counterexample's script is exhausted: the run diverged"}
            },
        }
    )
    return document


@attrs.define
class ScenarioReplayer:
    """The program's :class:`~queryloop.fsm.verify.counterexample.Replayer`: scenarios for the embedded server."""

    def realiser(self, spec: MachineSpec) -> _ScenarioRun:
        return _ScenarioRun()

    def unscriptable(self, spec: MachineSpec, steps: Sequence[PlannedStep]) -> str | None:
        try:
            _script(steps)
        except ValueError as exc:
            return str(exc)
        return None

    def write(self, spec: MachineSpec, example: Counterexample, path: Path) -> Path:
        document = scenario_of(spec, example, name=path.name)
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
        out = path.with_suffix(".yaml")
        parse_scenario(text, str(out))  # a file the server cannot play is never written
        out.write_text(text, encoding="utf-8")
        return out
