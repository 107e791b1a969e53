"""What a run reports at its end: the result object as Claude Code's headless mode prints it, and its counts.

Owns :class:`RunResult`, the part of :class:`~queryloop.run.agent.AgentRun` that reads a run and changes nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from queryloop.fsm import Runner, Step, uses
from queryloop.handlers.request import UNLISTED_MODEL, UsageTotals, model_info, output_limits

from .web import WebRequests

if TYPE_CHECKING:
    from .config import AgentOptions
    from .data import AgentData
    from .services import AgentServices
    from .subagents import Subagents

__all__ = ["RunResult"]


def _after(result: Mapping[str, object], key: str, new: str, value: object) -> dict[str, object]:
    """``result`` with ``new`` placed right after ``key``, where Claude Code 2.1.235 writes it."""
    out: dict[str, object] = {}
    for k, v in result.items():
        out[k] = v
        if k == key:
            out[new] = value
    return out


@uses(states=("opening_session", "submitting_prompt"))
class RunResult:
    """A run's result and the counts it reports, read from the run :class:`~queryloop.run.agent.AgentRun` holds.

    Mixed into ``AgentRun``, which sets every attribute declared here.
    """

    options: AgentOptions
    services: AgentServices
    runner: Runner[AgentData, AgentServices]
    subagents: Subagents | None
    started: float  # monotonic times: the run's start, its end (None while it runs)
    finished: float | None
    first_token: float | None  # of the run's first answer
    first_request: float | None  # when the run's first model request was sent

    @property
    def data(self) -> AgentData:
        return self.runner.final.data

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.runner.trace

    def result(self) -> dict[str, object]:
        """The result object, as Claude Code's headless mode prints it (plus ``terminal_reason``).

        Claude Code's shapes: a run that ended with ``subtype: success`` has ``result`` (the
        answer, or the surfaced error when ``is_error``) and ``api_error_status``, and
        ``ttft_ms`` when it is no error; an error subtype (``error_max_turns``,
        ``error_max_budget_usd``, ``error_during_execution``) has ``errors`` instead — a run
        that ended in ``internal_error`` (the machine's Python raised) lists the exception's
        message there, its traceback is in ``runner.error``.
        """
        runner = self.runner
        declared = runner.result
        data = self.data
        outcome = data.outcome
        subtype = str(declared.get("subtype", "error_during_execution"))
        is_error = bool(declared.get("is_error", True))
        error = runner.error.message if runner.error is not None else outcome.error
        end = self.finished if self.finished is not None else time.monotonic()
        usage = self.usage()
        result: dict[str, object] = {
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "num_turns": self.num_turns(),
            "duration_ms": round((end - self.started) * 1000),
            "duration_api_ms": round(data.request.api_duration_ms),
            "result": error if error and (is_error or not outcome.result_text) else outcome.result_text,
            "stop_reason": outcome.stop_reason,
            "terminal_reason": self.terminal_reason(),
            "api_error_status": outcome.api_error_status,
            "session_id": self.options.session.session_id,
            "total_cost_usd": (usage + self.side_usage()).total_cost_usd,
            "usage": usage.usage(),
            "modelUsage": self._model_usage(),
            "permission_denials": self._permission_denials(),
            # Claude Code's fast mode (a faster tier of its own service) does not exist here: always off,
            # and of its closed set of reasons the one that says it is not available in this setup
            "fast_mode_state": "off",
            "fast_mode_disabled_reason": "disabled_by_env",
            "uuid": str(uuid.uuid4()),
        }
        if outcome.structured_output is not None and subtype == "success":  # --json-schema's answer, by its key
            result = _after(result, "result", "structured_output", outcome.structured_output)
        if subtype != "success":
            del result["result"], result["api_error_status"]
            result["errors"] = self._errors(subtype, error)
        elif not is_error and self.first_token is not None:
            result.update(self._timings())
        return result

    def terminal_reason(self) -> str:
        """How the run ended (the result's ``terminal_reason``): its terminal state's, else the state's name."""
        return str(self.runner.result.get("terminal_reason", self.runner.final.state))

    def _permission_denials(self) -> list[dict[str, object]]:
        """The calls refused in this run, then in its sub-agents' (launch order), as Claude Code's result lists
        a sub-agent's refusals with its parent's."""
        own = [dict(d) for d in self.data.tools.permission_denials]
        return own if self.subagents is None else own + self.subagents.permission_denials()

    def _timings(self) -> dict[str, int]:
        """An answered run's timings from its start, in ms: the first token, and the first request sent.

        Claude Code reports ``ttft_stream_ms`` (the stream's first event) just under ``ttft_ms``;
        ours are both the first content delta, the one moment the client observes.
        """
        assert self.first_token is not None
        ttft = round((self.first_token - self.started) * 1000)
        sent = self.first_request if self.first_request is not None else self.started
        return {"ttft_ms": ttft, "ttft_stream_ms": ttft, "time_to_request_ms": round((sent - self.started) * 1000)}

    def num_turns(self) -> int:
        """Claude Code's ``num_turns``: 1 + the user messages its loop added after the prompt.

        Probed against Claude Code 2.1.235: each tool result counts (two parallel Reads then
        an answer: 3), as do a Stop hook's feedback, the note that a tool call was malformed
        and a compaction's summary (three tool rounds and a reactive compaction: 5); hidden
        continuations do not (``queryloop.run.data``). A run its prompt hooks ended sent nothing:
        0. At ``--max-turns N`` it reports the turn it refused to start: N + 1, however many
        tool results the N turns had.
        """
        max_turns = self.options.limits.max_turns
        if self.runner.result.get("subtype") == "error_max_turns" and max_turns is not None:
            return max_turns + 1
        trace = self.runner.trace
        if trace and trace[-1].source in ("opening_session", "submitting_prompt"):
            return 0  # the run ended before its prompt reached the loop (a prompt hook, an interrupt)
        data = self.data
        return 1 + data.user_turns + len(data.context.boundaries)

    def _errors(self, subtype: str, error: str | None) -> list[str]:
        """What an error result lists (Claude Code's wording for its limits)."""
        if subtype == "error_max_turns":
            return [f"Reached maximum number of turns ({self.options.limits.max_turns})"]
        if subtype == "error_max_budget_usd" and self.options.limits.max_budget_usd is not None:
            return [f"Reached maximum budget (${self.options.limits.max_budget_usd:g})"]
        return [error] if error else []

    def usage(self) -> UsageTotals:
        """The usage the result reports: the run's requests and its sub-agents' (as Claude Code's result does)."""
        own = self.data.request.usage
        return own if self.subagents is None or not self.subagents.children else own + self.subagents.usage()

    def side_usage(self) -> UsageTotals:
        """The web tools' own requests (a page's question, a search), the run's and its sub-agents': in
        ``modelUsage`` and the cost, not ``usage``, as in Claude Code's result."""
        web = self.services.tool_context.web
        own = web.totals if isinstance(web, WebRequests) else UsageTotals()
        return own if self.subagents is None or not self.subagents.children else own + self.subagents.side_usage()

    def _model_usage(self) -> dict[str, dict[str, object]]:
        """Per-model usage as Claude Code's ``modelUsage``: tokens and cost, the model's window and output cap."""
        by_model = (self.usage() + self.side_usage()).model_usage()
        web = self.services.tool_context.web
        searches = web.searches if isinstance(web, WebRequests) else {}
        for model, entry in by_model.items():
            info = model_info(model) or UNLISTED_MODEL  # Claude Code's window for a model it does not know
            entry["webSearchRequests"] = searches.get(model, 0)
            entry["contextWindow"] = info.context_window
            # the model's own default max_tokens, whatever the run asked for (as Claude Code 2.1.235 reports it)
            entry["maxOutputTokens"] = output_limits(model).default
        return by_model
