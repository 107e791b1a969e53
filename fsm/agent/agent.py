"""Running the query loop: options → run data + services → the machine → a result object.

Owns the composition of one agent run (the shipped ``machines/query_loop.yaml``,
its services, the initial transcript) and the Claude-Code-shaped result object.
Rendering to text / json / stream-json lives in ``fsm.agent.output``; the CLI in
``fsm.agent.commands``.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs

from fsm.load import load_machine
from fsm.runtime import Program, Runner, Step
from machines import MACHINES_DIR

from .hooks import HookConfig, run_hooks
from .loop_state import LoopConfig, LoopData, LoopServices, MessageView, ModelBackend
from .permissions import PermissionMode, PermissionRules, hidden_tools
from .tools import ToolContext, default_registry

__all__ = ["AgentOptions", "AgentRun", "DEFAULT_SYSTEM_PROMPT", "query_loop_program"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in the user's directory through tools (Read, Write, Edit, "
    "Bash, Glob, Grep). Use tools when they help, keep changes minimal, and answer concisely."
)


@functools.cache
def query_loop_program(path: str | None = None) -> Program:
    """The compiled query loop (loaded and checked for handlers once per process)."""
    return Program(load_machine(path or MACHINES_DIR / "query_loop.yaml"))


@attrs.frozen(kw_only=True)
class AgentOptions:
    """What one run was asked to do (the CLI flags, as values)."""

    prompt: str
    model: str
    fallback_models: tuple[str, ...] = ()
    cwd: Path = attrs.field(factory=Path.cwd)
    max_turns: int | None = None
    max_retries: int = 10
    max_budget_usd: float | None = None
    max_tokens: int = 32_000
    escalated_max_tokens: int | None = None
    append_system_prompt: str | None = None
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    session_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    retry_base_delay_s: float = 0.5
    idle_timeout_s: float = 90.0
    tools: tuple[str, ...] | None = None  # allowed tool names; None = all built-in tools
    auto_compact: bool = True
    auto_compact_threshold: float = 0.8  # of the effective window
    params: dict[str, Any] = attrs.field(factory=dict)  # other machine params (caps) to override
    permission_mode: PermissionMode = "default"
    rules: PermissionRules = attrs.field(factory=PermissionRules)
    hooks: HookConfig = attrs.field(factory=HookConfig)
    interactive: bool = False


class AgentRun:
    """One run of the query loop: iterate :meth:`events`, then read :meth:`result`."""

    def __init__(self, options: AgentOptions, backend: ModelBackend, *, program: Program | None = None, on_publish: Callable[[Any], None] | None = None) -> None:
        if len(options.fallback_models) > 3:
            raise ValueError(f"at most 3 fallback models, got {len(options.fallback_models)}")
        self.options = options
        system = options.system_prompt
        if options.append_system_prompt:
            system = f"{system}\n\n{options.append_system_prompt}"
        allowed = [t for t in (options.tools or default_registry().names) if t not in hidden_tools(options.rules)]
        config = LoopConfig(
            system_prompt=system,
            tools=default_registry(allowed),
            tool_context=ToolContext(cwd=options.cwd),
            max_budget_usd=options.max_budget_usd,
            auto_compact_threshold=options.auto_compact_threshold,
            retry_base_delay_s=options.retry_base_delay_s,
            idle_timeout_s=options.idle_timeout_s,
            permission_mode=options.permission_mode,
            rules=options.rules,
            hooks=options.hooks,
            interactive=options.interactive,
            session_id=options.session_id,
        )
        self.services = LoopServices(config, backend)
        data = LoopData(
            messages=MessageView().append({"role": "user", "content": options.prompt}),
            model=options.model,
            fallback_models=options.fallback_models,
            max_tokens=options.max_tokens,
            escalated_max_tokens=options.escalated_max_tokens,
            auto_compact=options.auto_compact,
            overhead=self.services.overhead_tokens,
        )
        params = {**options.params, "max_turns": options.max_turns, "max_retries": options.max_retries}
        self.runner = Runner(program or query_loop_program(), data=data, services=self.services, params=params, on_publish=on_publish)
        self.started = time.monotonic()
        self.finished: float | None = None

    async def events(self) -> AsyncIterator[Any]:
        """Every step and published item until the run ends (cancellation takes the abort edges)."""
        try:
            async for item in self.runner.run():
                yield item
        finally:
            self.finished = time.monotonic()
        config = self.services.config
        if config.hooks.matchers:  # SessionEnd: informational, its outcome changes nothing
            await run_hooks(
                "SessionEnd", {"reason": self.runner.final.state}, config.hooks, cwd=config.tool_context.cwd,
                session_id=config.session_id, transcript_path=config.transcript_path, permission_mode=config.permission_mode,
                timeout_default_s=config.hook_timeout_s,
            )

    @property
    def data(self) -> LoopData:
        data: LoopData = self.runner.final.data
        return data

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.runner.trace

    def result(self) -> dict[str, Any]:
        """The result object, as Claude Code's headless mode prints it (plus ``terminal_reason``)."""
        runner = self.runner
        declared = runner.result
        data = self.data
        is_error = bool(declared.get("is_error", True))
        end = self.finished if self.finished is not None else time.monotonic()
        usage = self.services.usage
        text = data.error if is_error and data.error else data.result_text
        return {
            "type": "result",
            "subtype": declared.get("subtype", "error_during_execution"),
            "is_error": is_error,
            "num_turns": 1 + sum(1 for s in runner.trace if s.progress),
            "duration_ms": round((end - self.started) * 1000),
            "duration_api_ms": round(self.services.api_duration_ms),
            "result": text,
            "stop_reason": data.reply.stop_reason if data.reply else None,
            "terminal_reason": runner.final.state,
            "api_error_status": data.api_error_status,
            "session_id": self.options.session_id,
            "total_cost_usd": usage.total_cost_usd,
            "usage": usage.usage(),
            "model_usage": usage.model_usage(),
            "permission_denials": [dict(d) for d in data.permission_denials],
            "uuid": str(uuid.uuid4()),
        }
