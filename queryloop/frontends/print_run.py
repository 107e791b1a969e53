"""A ``-p`` run: one prompt to its end, rendered in the output format, and its exit code.

Owns SIGINT and SIGTERM during a run (the first one takes the machine's abort edges) and the result line of a run
that never started (a refused session, a slash command answered here).
"""

from __future__ import annotations

import signal
import sys
import uuid
from typing import TYPE_CHECKING, Any

from queryloop.fsm import inert

if TYPE_CHECKING:
    import argparse
    import asyncio

    from queryloop.fsm import Program
    from queryloop.handlers.request import ModelBackend

    from ..run.agent import AgentRun
    from ..run.config import AgentOptions

__all__ = ["Interrupts", "refused_result", "run_prompt"]


class Interrupts:
    """SIGINT and SIGTERM during a run: the first one cancels the run task, so the machine takes its abort edges.

    A signal before the run starts cancels it as soon as it starts; one after it ended
    (or a second one) changes nothing. Signal callbacks run on the event loop, only at
    an ``await``, so arming and disarming around the run leaves no window.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self.loop = loop
        self.task = task
        self.received: int | None = None
        self.cancelled_by: int | None = None
        self.armed = False
        for signum in self.SIGNALS:
            loop.add_signal_handler(signum, self._received, signum)

    def _received(self, signum: int) -> None:
        if self.received is None:
            self.received = signum
            self._cancel_if_armed()

    def _cancel_if_armed(self) -> None:
        if self.armed and self.received is not None and self.cancelled_by is None:
            self.cancelled_by = self.received
            self.task.cancel()

    def arm(self) -> None:
        self.armed = True
        self._cancel_if_armed()

    def disarm(self) -> None:
        self.armed = False

    def close(self) -> None:
        for signum in self.SIGNALS:
            self.loop.remove_signal_handler(signum)

    def exit_code(self, result: dict[str, Any]) -> int:
        """128 + the signal's number after an interruption (like a shell), else 1 for an error result, else 0."""
        if self.cancelled_by is not None:
            return 128 + self.cancelled_by
        return 1 if result["is_error"] else 0


def refused_result(message: str, session_id: str | None) -> dict[str, object]:
    """The result line of a run refused before it started (no such session): nothing ran, nothing cost.

    Claude Code 2.1.235's keys for it: a run's ``stop_reason``, ``usage``, ``modelUsage`` and
    ``permission_denials``, all empty, and no ``terminal_reason`` (no machine ran).
    """
    from queryloop.handlers.request import UsageTotals

    return {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "num_turns": 0,
        "duration_ms": 0,
        "duration_api_ms": 0,
        "stop_reason": None,
        "session_id": session_id or str(uuid.uuid4()),
        "total_cost_usd": 0,
        "usage": UsageTotals().usage(),
        "modelUsage": {},
        "permission_denials": [],
        "errors": [message],
        "uuid": str(uuid.uuid4()),
    }


def _local_result(text: str, session_id: str) -> dict[str, object]:
    """The result line of a slash command answered without a request: a success with no turn (Claude Code's shape)."""
    result = {**refused_result("", session_id), "subtype": "success", "is_error": False, "result": text}
    del result["errors"]
    return result


def _missing_prompt_tool(run: AgentRun) -> str | None:
    """Why ``--permission-prompt-tool``'s MCP tool cannot answer (no server offers it), or None."""
    name = run.options.permissions.prompt_tool
    mcp = run.services.mcp
    if name is None or (mcp is not None and mcp.tool_spec(name) is not None):
        return None
    offered = [t.name for t in mcp.catalog()] if mcp is not None else []
    listed = f" (the MCP tools: {', '.join(offered)})" if offered else " (no MCP tool is offered)"
    return f"--permission-prompt-tool {name}: no MCP server offers this tool{listed}"


async def run_prompt(
    options: AgentOptions, args: argparse.Namespace, program: Program, backend: ModelBackend, interrupts: Interrupts
) -> int:
    """One prompt (``-p``) run to its end, rendered in the output format; its exit code."""
    import attrs

    from ..run.agent import AgentRun
    from .console import renderer_for
    from .print_commands import local_answer, print_command

    command = print_command(options.prompt)  # /compact, /clear, an unknown /name: never sent as it is
    if command is not None and command.name == "compact":
        options = attrs.evolve(options, prompt="", compact=command.argument)
    renderer = renderer_for(
        args.output_format,
        session_id=options.session.session_id,
        verbose=args.verbose,
        partial_messages=args.include_partial_messages,
    )
    run = AgentRun(options, backend, program=program, observers=(renderer,))
    refused = await _connect_mcp(run)
    if refused is not None:  # found before anything is sent
        await run.close_mcp()
        sys.stderr.write(inert(refused))
        return 1
    renderer.start(**run.init_fields())
    answer = None if command is None else local_answer(command)
    if answer is not None:  # answered here: no request, no turn
        await run.close_mcp()
        renderer.finish(_local_result(answer, options.session.session_id), run.data)
        return 0
    await _run_interruptibly(run, interrupts)
    result = run.result()
    renderer.finish(result, run.data)
    failure = run.runner.error
    if failure is not None:  # the machine's Python raised: its traceback goes to stderr, never stdout
        sys.stderr.write(inert(f"queryloop: the run ended in internal_error:\n{failure.traceback}"))
        sys.stderr.flush()
    return interrupts.exit_code(result)


async def _connect_mcp(run: AgentRun) -> str | None:
    """Connect the run's MCP servers (the init line lists each one's status and tools); the line saying why the
    run cannot go on, or None."""
    from queryloop.handlers.mcp import PromptCommandError

    try:
        await run.connect_mcp()
    except PromptCommandError as exc:  # /mcp__server__prompt without its arguments: nothing was sent
        return f"queryloop: {exc}\n"
    missing = _missing_prompt_tool(run)  # Claude Code 2.1.235 fails only at the first ask
    return None if missing is None else f"queryloop: error: {missing}\n"


async def _run_interruptibly(run: AgentRun, interrupts: Interrupts) -> None:
    """Every step of ``run``; SIGINT or SIGTERM meanwhile makes it take its abort edge and end as any run ends."""
    import asyncio

    interrupts.arm()
    try:
        async for _ in run.events():  # the renderer is told every item, the abort step included
            pass
    except asyncio.CancelledError:
        if interrupts.cancelled_by is None:
            raise  # not ours
        interrupts.task.uncancel()  # we asked for it: the run took its abort edge; report it like any other end
    finally:
        interrupts.disarm()
