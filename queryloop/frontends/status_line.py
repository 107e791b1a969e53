"""The interactive session's status line: the machine's state and each live counter with its cap.

Owns :func:`status_line` and the terminal's renderer, which shows it in place of a line per transition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from rich.text import Text

from queryloop.fsm import Step, inert, uses
from queryloop.handlers.mcp import McpProgress
from queryloop.handlers.request import AssistantMessage

from ..run.agent import query_loop_program
from ..run.config import AgentOptions, run_params
from ..run.data import AgentData
from ..run.observe import Observation, SubagentEnded, SubagentStarted
from .console import TextRenderer

__all__ = ["TerminalRenderer", "brief", "status_line"]


class _Session(Protocol):
    """What the terminal's renderer tells the session: each step, and the result when the run ends."""

    steps: list[Step]

    def finished(self, result: dict[str, Any], data: AgentData) -> None: ...


def status_line(state: str, counters: Mapping[str, int], caps: Mapping[str, int | None]) -> str:
    """The machine's state and every live counter with its cap: ``backing_off · api_retries 2/10 · …``."""
    live = [
        f"{name} {value}/{'∞' if caps.get(name) is None else caps[name]}" for name, value in counters.items() if value
    ]
    return " · ".join([state, *live])


def _caps(options: AgentOptions) -> dict[str, int | None]:
    """Every counter's cap for the runs of ``options`` (the params each run is given)."""
    spec = query_loop_program().spec
    params = {**spec.param_defaults, **run_params(options)}
    return {counter.name: spec.cap_of(counter, params) for counter in spec.counters}


@uses(states=("opening_session", "reading_reply"))
class TerminalRenderer(TextRenderer):
    """Text output for the terminal: no line per transition, the status line instead; tool calls as one line."""

    def __init__(self, session: _Session, options: AgentOptions) -> None:
        super().__init__(session_id=options.session.session_id)
        self.session = session
        self.caps = _caps(options)
        self.state = "opening_session"
        self.counters: dict[str, int] = {}
        self.finished = False  # the run reached its end (no status line after it)
        self.progress: McpProgress | None = None  # the latest progress of a running MCP call (until the next step)
        self.running_agents: dict[str, str] = {}  # the sub-agents running now: id → type

    def status_text(self) -> str:
        line = status_line(self.state, self.counters, self.caps)
        if self.running_agents:
            kinds = ", ".join(sorted(set(self.running_agents.values())))
            line += f" · {len(self.running_agents)} agent{'s' * (len(self.running_agents) > 1)} running ({kinds})"
        return f"{line} · {self.progress.text()}" if self.progress is not None else line

    def show_subagent_started(self, item: SubagentStarted) -> None:
        super().show_subagent_started(item)
        self.running_agents[item.agent_id] = item.agent_type
        self._refresh()

    def show_subagent_ended(self, item: SubagentEnded) -> None:
        super().show_subagent_ended(item)
        self.running_agents.pop(item.report.agent_id, None)
        self._refresh()

    def _refresh(self) -> None:
        if self.status is not None:
            self.status.update(Text(inert(self.status_text())))

    def show_progress(self, progress: McpProgress) -> None:
        self.progress = progress
        if self.status is not None:
            self.status.update(Text(inert(self.status_text())))
        elif not self.finished:
            self.waiting(True)

    def pause(self) -> None:
        """Stop the status line (before a question, or a line printed by the session)."""
        self.waiting(False)

    def waiting(self, on: bool) -> None:
        if not self.err.is_terminal:
            return
        if on and self.status is None:
            if not self.at_line_start:  # the status line is erased when it stops: never on the answer's line
                self.out.write("\n")
                self.out.flush()
                self.at_line_start = True
            self.status = self.err.status(Text(inert(self.status_text())), spinner="dots")
            self.status.start()
        elif not on and self.status is not None:
            self.status.stop()
            self.status = None

    def note(self, *parts: str | tuple[str, str]) -> None:
        """A line above the status line, which stays while the machine works (a retry's wait, say)."""
        super().note(*parts)
        if self.state not in ("reading_reply",) and not self.finished:
            self.waiting(True)

    def observe(self, item: Observation) -> None:
        if isinstance(item, AssistantMessage):
            for block in item.message["content"]:
                if block.get("type") == "tool_use":
                    self.note(("● ", "cyan"), f"{block.get('name')}({brief(block.get('input'))})")
        super().observe(item)

    def show_step(self, step: Step) -> None:
        self.session.steps.append(step)
        self.state, self.counters = step.dest, step.counter_dict()
        self.progress = None
        if self.status is not None:
            self.status.update(Text(self.status_text()))
        elif not step.terminal and step.dest != "reading_reply":
            self.waiting(True)
        if step.terminal:
            self.finished = True
            self.waiting(False)

    def finish(self, result: dict[str, Any], data: AgentData) -> None:
        super().finish(result, data)
        self.session.finished(result, data)


def brief(value: object, width: int = 80) -> str:
    """A tool call's input on one line: its command or path when it has one, else its JSON, cut at ``width``."""
    if isinstance(value, Mapping):
        for key in ("command", "file_path", "pattern", "path"):
            if isinstance(value.get(key), str):
                value = value[key]
                break
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
