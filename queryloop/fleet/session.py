"""A fleet session: what ``queryloop submit`` enqueues, and the DBOS workflow a worker runs it as.

The workflow is the normal ``AgentRun``, each effect a DBOS step and the session in the database.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Any

import attrs

from queryloop.handlers.request import AnthropicBackend
from queryloop.run.agent import AgentRun
from queryloop.run.config import (
    AgentOptions,
    AskedLimits,
    AskedRequest,
    AskedSession,
    AskedTools,
    ConfigSources,
    resolve_config,
)

from .database import FleetDatabase
from .steps import StepBackend, ToolSteps
from .store import FleetSessionStore, FleetTranscript

__all__ = ["QUEUE", "WORKFLOW", "SessionSpec", "run_session", "session_options"]

WORKFLOW = "queryloop.session"
"""The DBOS workflow every session runs as (its registered name)."""

QUEUE = "queryloop-sessions"
"""The DBOS queue ``queryloop submit`` puts sessions on and workers take them from."""


@attrs.frozen(kw_only=True)
class SessionSpec:
    """One submitted session: what the workflow is given (no credential: each worker has its own)."""

    session_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    prompt_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    prompt: str
    model: str
    fallback_models: tuple[str, ...] = ()
    base_url: str | None = None  # the Messages API to use (None: the worker's ANTHROPIC_BASE_URL, else Anthropic's)
    cwd: str  # the tools' working directory: a path every worker reaches
    max_turns: int | None = None
    max_retries: int | None = None  # None: the machine's
    max_budget_usd: float | None = None
    permission_mode: str | None = None  # None: "default"
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    system_prompt: str | None = None
    append_system_prompt: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.asdict(self).items()}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SessionSpec:
        fields = {a.name for a in attrs.fields(cls)}
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in fields}
        return cls(**values)


def session_options(spec: SessionSpec) -> AgentOptions:
    """The agent's options for a fleet session (no settings file is read: a worker's own are not the session's)."""
    resolved = resolve_config(
        cwd=Path(spec.cwd),
        prompt=spec.prompt,
        # no servers: nothing of the working directory's is approved here
        sources=ConfigSources(strict_mcp_config=True),
        request=AskedRequest(
            model=spec.model,
            fallback_models=spec.fallback_models,
            system_prompt=spec.system_prompt,
            append_system_prompt=spec.append_system_prompt,
        ),
        limits=AskedLimits(max_turns=spec.max_turns, max_retries=spec.max_retries, max_budget_usd=spec.max_budget_usd),
        tools=AskedTools(
            permission_mode=spec.permission_mode,  # type: ignore[arg-type]  # checked by submit
            allowed_tools=list(spec.allowed_tools) or None,
            disallowed_tools=list(spec.disallowed_tools) or None,
        ),
        # never written: the store is the database
        session=AskedSession(home=Path(tempfile.gettempdir()) / "queryloop-fleet"),
    )
    # no Agent tool yet: a worker taking a session over replays an Agent call's acknowledgement from the
    # database without restarting the agent, so its report would never come (docs/agents.md, "Not yet")
    options = resolved.options
    return attrs.evolve(
        options,
        session=attrs.evolve(options.session, session_id=spec.session_id),
        prompt_id=spec.prompt_id,
        agents=attrs.evolve(options.agents, definitions=()),
    )


async def run_session(db: FleetDatabase, executor_id: str, raw: dict[str, Any]) -> dict[str, object]:
    """Run one session to its end on this worker (the workflow's body); its result object."""
    import anthropic

    spec = SessionSpec.from_json(raw)
    options = session_options(spec)
    paths = options.session_paths()
    client = anthropic.AsyncAnthropic(base_url=spec.base_url, max_retries=0)
    try:
        run = AgentRun(
            options,
            StepBackend(AnthropicBackend(client)),
            store=FleetSessionStore(db, paths),
            transcript=FleetTranscript(db, paths),  # in the database, not on the worker's disk
            call_runner=ToolSteps(db, session_id=spec.session_id, executor_id=executor_id),
        )
        async for _item in run.events():
            pass
        if db.closing.is_set():  # the worker stopped meanwhile: its transcript is cut, so the session is not over
            raise asyncio.CancelledError  # here: DBOS records no result, and the worker recovering it finishes it
        result = run.result()
        if run.runner.error is not None:
            result["traceback"] = run.runner.error.traceback
        return result
    finally:
        await client.close()
