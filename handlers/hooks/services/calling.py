"""Running hooks as a service other layers call: the permission gate, compaction, the prompt, Stop.

:func:`hook` runs one event's hooks; what the outcome means is the calling layer's.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs

from queryloop.fsm import EffectContext

from ...outcome import Notice
from .config import HookConfig, HookEvent
from .results import HookOutcome, HookResult
from .runner import run_hooks

__all__ = ["HookReported", "HookRunner", "HookServices", "hook", "stopped"]

REPORTED_EVENTS = frozenset({"SessionStart"})
"""The events whose every hook Claude Code 2.1.235 reports as stream-json lines (hook_started, hook_response)
without --include-hook-events; probed: tests/conformance/test_stream.py."""


@attrs.frozen(kw_only=True)
class HookReported:
    """One hook of a reported event started (``result`` None) or finished (its result)."""

    phase: Literal["started", "response"]
    hook_id: str  # the same for a hook's two reports
    hook_name: str  # ``SessionStart:startup``: the event and what it matched
    event: str
    result: HookResult | None = None


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

    def configures(self, event: HookEvent) -> bool:
        """Some matcher group of ``event`` is configured: its payload may be wanted (else none is built)."""
        return any(group.event == event for group in self.config.matchers)

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
    reported = _report_starts(ctx, event, payload)
    outcome = await ctx.services.hooks.run(event, payload)
    if outcome is None:
        return None
    for hook_id, result in zip(reported, outcome.results, strict=False):
        name = _reported_name(event, payload)
        ctx.publish(HookReported(phase="response", hook_id=hook_id, hook_name=name, event=event, result=result))
    for error in outcome.errors:
        ctx.publish(Notice(f"{event} hook error ({error.command}): {error.message}"))
    for message in outcome.system_messages:
        ctx.publish(Notice(f"{event} hook: {message}"))
    return outcome


def _report_starts(ctx: EffectContext[Any, HookServices], event: str, payload: dict[str, Any]) -> list[str]:
    """Publish a start for each hook of a reported event that will run, in their order; their ids."""
    if event not in REPORTED_EVENTS:
        return []
    ids = [str(uuid.uuid4()) for _ in ctx.services.hooks.config.commands_for(event, payload)]
    for hook_id in ids:
        ctx.publish(
            HookReported(phase="started", hook_id=hook_id, hook_name=_reported_name(event, payload), event=event)
        )
    return ids


def _reported_name(event: str, payload: dict[str, Any]) -> str:
    """``SessionStart:startup``: the event and the source it matched."""
    return f"{event}:{payload.get('source', '')}"


def stopped(outcome: HookOutcome | None) -> bool:
    """The hooks answered ``continue: false``."""
    return outcome is not None and not outcome.continue_
