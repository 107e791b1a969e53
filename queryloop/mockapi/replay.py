"""Counterexamples as scenarios: the scenario written along a run, for the embedded server to play.

Owns :class:`ScenarioReplayer`, which keeps ``check``'s search to runs a scenario can play, and :func:`scenario_of`;
the table of scripts is replay_events', the run's tracking replay_realise's. What each run fixes: docs/checker.md.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml

from queryloop.fsm import Counterexample, MachineSpec, PlannedStep

from .replay_events import (
    BIG_CHARS,
    BIG_FILES,
    CHILD_HOLD_MS,
    CHILD_MARK,
    CLEARABLE_GUARD,
    CLI_PARAMS,
    FALLBACK_MODELS,
    MODEL,
    OLD_READS,
    READ_FILE,
    REPLY_PAD,
    REPORT_HOLD_MS,
    SCRIPT_BY_EVENT,
    SMALL_MODEL,
    SYSTEM_PAD,
)
from .replay_realise import TOOL_TURN_HANDLERS, ScenarioRun, TrackedRun, realise, step_handler, unplayable_params
from .scenario import parse_scenario

__all__ = ["ScenarioReplayer", "scenario_of"]


def _agent_call(n: int) -> dict[str, object]:
    prompt = f"[sub-agent {n}] Answer in one line."
    description = f"counterexample sub-agent {n}"
    return {
        "tool_use": {
            "name": "Agent",
            "input": {"description": description, "prompt": prompt, "run_in_background": True},
        }
    }


def _child_rule(n: int) -> dict[str, object]:
    """The rule answering sub-agent ``n``'s one request: an answer (its report: completed), held."""
    when = {"system_contains": CHILD_MARK, "first_user_contains": f"[sub-agent {n}]"}
    return {
        "when": when,
        "times": 1,
        "reply": {"content": [{"text": f"Sub-agent {n}'s scripted answer."}]},
        "delay_ms": CHILD_HOLD_MS,
    }


def _read_big(content: list[dict[str, Any]]) -> None:
    """A tool turn's reply ``content`` with its Read call replaced by two reading :data:`BIG_FILES`."""
    at = next(i for i, b in enumerate(content) if b.get("tool_use", {}).get("name") == "Read")
    content[at : at + 1] = [{"tool_use": {"name": "Read", "input": {"file_path": name}}} for name in BIG_FILES]


def _big_text() -> str:
    """A file of :data:`BIG_CHARS` characters in lines of 100 (its Read result is cut at the tool's limit)."""
    line = "This line pads a file a scripted tool turn reads, so that a microcompaction later clears its result."
    return "".join(f"{line[:99]}\n" for _ in range(BIG_CHARS // 100))


def _padded(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` (a reply the transcript keeps) with :data:`REPLY_PAD` in its first text or thinking block."""
    content = answer["reply"]["content"]
    first = content[0] if content else {}
    for key in ("text", "thinking"):
        if key in first:
            first[key] += REPLY_PAD
            return answer
    content.insert(0, {"text": REPLY_PAD.strip()})
    return answer


@attrs.frozen(kw_only=True)
class _Written:
    """What a run's scenario holds: each model's answers, the sub-agents' rules, and the run's end."""

    end: TrackedRun
    primary: str
    answers: dict[str, list[dict[str, Any]]]
    rules: list[dict[str, Any]]
    agents: int
    big: bool = False  # a tool turn reads the big files (a microcompaction clears them)


class _Writer:
    """Writes a scenario's answers and rules step by step, along the run's data before and after each step."""

    def __init__(self, small: bool) -> None:
        self.small = small
        self.primary = SMALL_MODEL if small else MODEL
        self.answers: dict[str, list[dict[str, Any]]] = {self.primary: []}
        self.rules: list[dict[str, Any]] = []
        self.pending = False  # a reply was announced; the next event shapes it
        self.tool_reply: list[dict[str, Any]] = []  # the content of this tool turn's reply (an Agent call may join)
        self.last: dict[str, Any] = {}  # the last answer of the parent's requests (held when a report comes after)
        self.child: dict[str, Any] = {}
        self.agents = 0
        self.turns: list[list[dict[str, Any]]] = []  # each tool turn's reply content, in order
        self.big = False

    def step(self, i: int, step: PlannedStep, before: TrackedRun, after: TrackedRun) -> None:
        self._answer(i, step, before)
        self._agents(step, before, after)
        if step_handler(step) in TOOL_TURN_HANDLERS:
            self.turns.append(self.tool_reply)
        if step.guards.get(CLEARABLE_GUARD):  # the turn OLD_READS back reads big files: now they are cleared
            _read_big(self.turns[-OLD_READS])
            self.big = True

    def _answer(self, i: int, step: PlannedStep, before: TrackedRun) -> None:
        """The server's answer to the step's request, if one answers it."""
        script = SCRIPT_BY_EVENT[step.event]
        if self.pending and script.kind != "shape":
            raise ValueError(f"step {i + 1} ({step.reason}): a reply must be shaped by the event after it")
        if script.kind == "reply":
            self.pending = True
            return
        if script.kind not in ("shape", "answer"):
            return
        if script.kind == "shape" and not self.pending:
            raise ValueError(f"step {i + 1} ({step.reason}): {step.event!r} follows no reply")
        last = copy.deepcopy(dict(script.step))
        self.last = _padded(last) if script.kind == "shape" and self.small else last
        model = FALLBACK_MODELS[before.chain.used - 1] if before.chain.used else self.primary
        self.answers.setdefault(model, []).append(self.last)
        self.pending = False
        if step.event == "asked_for_tools":
            self.tool_reply = self.last["reply"]["content"]

    def _agents(self, step: PlannedStep, before: TrackedRun, after: TrackedRun) -> None:
        """An Agent call joining this tool turn's reply, its child's rule, and its report's timing."""
        launched = after.agent and not before.agent
        if step.event == "agent_call_waiting" or launched:
            self.agents += 1
            self.tool_reply.append(_agent_call(self.agents))
            if launched:
                self.child = _child_rule(self.agents)
                self.rules.append(self.child)
        if before.agent and not after.agent:  # its report
            if step.event == "agent_failed":
                del self.child["reply"]
                self.child["error"] = {"status": 400, "message": "a scripted invalid request of a sub-agent"}
            if step.source == "collecting_agent_reports":
                self.last["delay_ms"] = REPORT_HOLD_MS  # the tool turn after it finds the sub-agent ended


def _script(spec: MachineSpec, steps: Sequence[PlannedStep]) -> _Written:
    """Each model's scripted answers along ``steps``, the sub-agents' rules, and the run at the end (ValueError:
    the first step no scenario plays)."""
    runs = realise(spec, steps)
    small = next((s.event == "over_threshold" for s in steps if s.source == "checking_context"), False)
    writer = _Writer(small)
    for i, step in enumerate(steps):
        writer.step(i, step, runs[i], runs[i + 1])
    return _Written(
        end=runs[-1],
        primary=writer.primary,
        answers=writer.answers,
        rules=writer.rules,
        agents=writer.agents,
        big=writer.big,
    )


def scenario_of(spec: MachineSpec, example: Counterexample, *, name: str) -> dict[str, object]:
    """``example``'s run as a scenario document (raises ValueError naming the first step no scenario plays).

    The primary model answers until the run switches; each fallback model it declares then
    answers the requests that go to it, in order; each sub-agent's one request is answered by a rule.
    """
    if example.run is None:
        raise ValueError(f"no run to write: {example.why}")
    unplayable = unplayable_params(spec, example.params)
    if unplayable:
        raise ValueError(unplayable)
    written = _script(spec, example.run.steps)
    end, primary = written.end, written.primary
    reasons = " ".join(example.run.reasons)
    tools = ["Read", "Agent"] if written.agents else ["Read"]
    cli: dict[str, object] = {"prompt": "Replay the counterexample.", "allowed_tools": tools}
    if primary == SMALL_MODEL:
        cli["append_system_prompt"] = SYSTEM_PAD
    defaults = spec.param_defaults
    for param in CLI_PARAMS:  # a run searched at `--set max_turns=N` replays at N
        value = example.params.get(param)
        if param in defaults and value is not None and value != defaults[param]:
            cli[param] = value
    document: dict[str, object] = {
        "schema_version": 1,
        "scenario": name,
        "doc": f"counterexample of `queryloop check` on {spec.path}: {example.shows}. "
        f"Finding: {example.finding.message} Reasons: {reasons}",
        "model": primary,
    }
    declared = end.chain.declared
    if declared:
        document["fallback_models"] = list(declared)
    files = {READ_FILE: "read by the scripted tool call\n"}
    if written.big:
        files.update(dict.fromkeys(BIG_FILES, _big_text()))
    document.update({"cli": cli, "files": files})
    if written.rules:  # a sub-agent's further request (it diverged) fails it rather than eat the parent's answers
        diverged = {"status": 400, "message": "the counterexample's script is exhausted: the sub-agent diverged"}
        document["rules"] = [*written.rules, {"when": {"system_contains": CHILD_MARK}, "error": diverged}]
    document.update(
        {
            "models": {model: written.answers.get(model, []) for model in (primary, *declared)},
            "otherwise": {
                "error": {"status": 500, "message": "the counterexample's script is exhausted: the run diverged"}
            },
        }
    )
    return document


@attrs.define
class ScenarioReplayer:
    """The program's :class:`~queryloop.fsm.verify.counterexample.Replayer`: scenarios for the embedded server."""

    def realiser(self, spec: MachineSpec, params: Mapping[str, object] | None = None) -> ScenarioRun:
        return ScenarioRun(spec, params)

    def unscriptable(
        self, spec: MachineSpec, steps: Sequence[PlannedStep], params: Mapping[str, object] | None = None
    ) -> str | None:
        unplayable = unplayable_params(spec, params or {})
        if unplayable:
            return unplayable
        try:
            _script(spec, steps)
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
