"""Running hooks as a service other layers call: the permission gate, compaction, the prompt, Stop.

:func:`hook` runs one event's hooks; what the outcome means is the calling layer's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import attrs

from queryloop.fsm import EffectContext

from ...outcome import Notice
from .runner import HookConfig, HookEvent, HookOutcome, run_hooks

__all__ = ["HookRunner", "HookServices", "hook", "stopped"]


@attrs.frozen(kw_only=True)
class HookRunner:
    """The run's hooks and the fields every hook receives on stdin."""

    config: HookConfig = attrs.field(factory=HookConfig)
    cwd: Path
    session_id: str = ""
    transcript_path: str = ""
    permission_mode: str = "default"
    prompt_id: str | None = None  # the run's user prompt: every hook after SessionStart gets it, as in Claude Code
    timeout_s: float = 600.0
    # a sub-agent's run: every hook it runs is told which agent calls (Claude Code 2.1.235's agent_id, agent_type)
    agent_id: str | None = None
    agent_type: str | None = None

    @property
    def configured(self) -> bool:
        """Any hook at all is configured (lets hot paths skip building payloads)."""
        return bool(self.config.matchers)

    async def run(self, event: HookEvent, payload: dict[str, Any]) -> HookOutcome | None:
        """Run the hooks matching ``event``/``payload``; None when none is configured for it."""
        if not self.config.commands_for(event, payload):
            return None
        if self.agent_id is not None:
            payload = {"agent_id": self.agent_id, "agent_type": self.agent_type, **payload}
        if self.prompt_id and event != "SessionStart":  # Claude Code 2.1.235: absent before the prompt
            payload = {"prompt_id": self.prompt_id, **payload}
        return await run_hooks(
            event,
            payload,
            self.config,
            cwd=self.cwd,
            session_id=self.session_id,
            transcript_path=self.transcript_path,
            permission_mode=self.permission_mode,
            timeout_default_s=self.timeout_s,
        )


class HookServices(Protocol):
    """Services that carry the run's hooks."""

    @property
    def hooks(self) -> HookRunner: ...


async def hook(ctx: EffectContext[Any, HookServices], event: HookEvent, payload: dict[str, Any]) -> HookOutcome | None:
    """Run the hooks configured for ``event`` (None when there are none); publish their errors."""
    outcome = await ctx.services.hooks.run(event, payload)
    if outcome is None:
        return None
    for error in outcome.errors:
        ctx.publish(Notice(f"{event} hook error ({error.command}): {error.message}"))
    for message in outcome.system_messages:
        ctx.publish(Notice(f"{event} hook: {message}"))
    return outcome


def stopped(outcome: HookOutcome | None) -> bool:
    """The hooks answered ``continue: false``."""
    return outcome is not None and not outcome.continue_
