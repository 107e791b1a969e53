"""What every framework's agent shares: the prompt, the no-op tool's contract, the check, the agent protocol.

Owns :class:`PeerAgent` (what ``load()`` of a framework module returns),
:class:`ToolCounter` (counts the no-op tool's calls, so each run is checked to have
made exactly N) and :func:`check_peer`. Does not own any framework.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

from bench.script import FINAL_TEXT, NOOP_DESCRIPTION, NOTE, PROMPT, SYSTEM

__all__ = ["FINAL_TEXT", "NOOP_DESCRIPTION", "NOTE", "PROMPT", "SYSTEM", "PeerAgent", "ToolCounter", "check_peer"]


class ToolCounter:
    """The no-op tool's body, counting its calls: ``await counter.noop(note)`` returns ``"ok"``."""

    def __init__(self) -> None:
        self.calls = 0

    async def noop(self, note: str) -> str:
        self.calls += 1
        return "ok"


@attrs.frozen(kw_only=True)
class PeerAgent:
    """One framework's agent: ``run(turns, model)`` plays it once (``model`` names the HTTP server's script)."""

    framework: str
    version: str
    run: Callable[[int, str], Awaitable[None]]
    note: str = ""


def check_peer(framework: str, turns: int, tool_calls: int, final: object) -> None:
    """Exit with a message unless the run called the tool ``turns`` times and answered :data:`FINAL_TEXT`."""
    if tool_calls != turns or final != FINAL_TEXT:
        raise SystemExit(
            f"bench peers: {framework} made {tool_calls} tool calls and answered {final!r} "
            f"(expected {turns} and {FINAL_TEXT!r})"
        )
