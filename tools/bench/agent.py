"""The agent every benchmark runs: N turns of a registered no-op tool, then a final text answer.

Owns the no-op tool (a ``@queryloop.tool``, read-only — it reads and writes nothing, so
it says so; a tool that is not read-only would also be recorded in the side-effect
ledger on every call), the permission rule that allows it (the normal gate in
``default`` mode decides every call: a custom tool is not among the built-in read-only
tools, so without the rule the call would be denied), the :class:`~queryloop.run.agent.AgentOptions`
of a benchmark run (only that tool offered, persistence on or off), the in-process
backend that materialises every request's body as the HTTP backend must before it
answers (:class:`MaterialisingBackend`), and the check that a run did what it was
scripted to do. Does not own any timing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queryloop.handlers.request.services.attempt import ModelFailure, ModelReply
from queryloop.handlers.request.services.backends import ModelCall, TokenCount
from queryloop.handlers.request.services.body import encode_request
from queryloop.handlers.tools import PermissionRules, ToolRegistry, tool
from queryloop.handlers.tools.services.rules import parse_rule_list
from queryloop.run.agent import AgentRun
from queryloop.run.config import AgentOptions, PermissionSettings, RequestSettings, SessionSettings, ToolSettings
from queryloop.testing import scripted_reply

from .script import FINAL_TEXT, NOOP_DESCRIPTION, NOOP_NAME, NOTE, PROMPT

__all__ = [
    "ALLOW_NOOP",
    "FINAL_TEXT",
    "MODEL",
    "NOOP",
    "NOOP_NAME",
    "NOTE",
    "PROMPT",
    "MaterialisingBackend",
    "bench_options",
    "check_run",
    "noop_definitions",
    "noop_function",
    "run_agent",
]

MODEL = "mock-primary"


async def noop_function(note: str) -> str:
    """Does nothing and says so."""
    return "ok"


NOOP = tool(NOOP_NAME, NOOP_DESCRIPTION, read_only=True)(noop_function)
ALLOW_NOOP = PermissionRules(allow=parse_rule_list(NOOP_NAME))


def noop_definitions() -> list[dict[str, Any]]:
    """The tool definitions a request offers: the no-op tool's, as queryloop sends them."""
    return list(ToolRegistry(tools=(NOOP,)).api_definitions())


class MaterialisingBackend:
    """A zero-latency model that builds each attempt's request body as the HTTP backend would, then answers.

    ``turns`` replies carry one no-op ``tool_use`` each, then one text answer. Every
    attempt's body is encoded in full (``encode_request(call, stream=call.stream)``), so
    whatever the HTTP path must pay to turn the transcript into bytes is paid here too.
    """

    def __init__(self, turns: int, *, note: str = NOTE) -> None:
        self.turns = turns
        self.note = note
        self.calls = itertools.count()
        self.bytes_sent = 0

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        self.bytes_sent += len(encode_request(call, stream=call.stream))
        i = next(self.calls)
        if i < self.turns:
            block = {"type": "tool_use", "id": f"toolu_{i:06d}", "name": NOOP_NAME, "input": {"note": self.note}}
            return scripted_reply([block], "tool_use", model=call.model, call=call)
        return scripted_reply([{"type": "text", "text": FINAL_TEXT}], "end_turn", model=call.model, call=call)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        return TokenCount(tokens=None, offered=False)  # as a server without the endpoint: the local estimate only


def bench_options(*, cwd: Path, model: str = MODEL, persist: bool, prompt: str = PROMPT) -> AgentOptions:
    """A run offering only the no-op tool, allowed by a rule in ``default`` permission mode."""
    return AgentOptions(
        prompt=prompt,
        cwd=cwd,
        request=RequestSettings(model=model),
        tools=ToolSettings(builtins=(), custom_tools=(NOOP,)),
        permissions=PermissionSettings(rules=ALLOW_NOOP, mode="default"),
        session=SessionSettings(persist=persist),
    )


def check_run(run: AgentRun, turns: int, label: str) -> None:
    """Exit with a message unless the run made ``turns`` tool turns, every call allowed, and ended with the answer."""
    result = run.result()
    ok = (
        result["subtype"] == "success"
        and result["num_turns"] == turns + 1
        and not result.get("permission_denials")
        and result.get("result") == FINAL_TEXT
    )
    if not ok:
        raise SystemExit(
            f"bench: the {label} run with {turns} tool turns did not complete as scripted: "
            f"subtype={result['subtype']!r}, num_turns={result['num_turns']} (expected {turns + 1}), "
            f"terminal_reason={result.get('terminal_reason')!r}, denials={result.get('permission_denials')!r}, "
            f"result={result.get('result') or result.get('errors')!r}"
        )


async def run_agent(options: AgentOptions, backend: Any, turns: int, label: str) -> AgentRun:
    """Play one run to its end (every item consumed) and check it."""
    run = AgentRun(options, backend)
    async for _ in run.events():
        pass
    check_run(run, turns, label)
    return run
