"""One agent run: a resolved configuration (``queryloop.run.config``) → run data + services → the machine → a result.

Owns :class:`AgentRun` and what it is started with; its data and snapshots are ``queryloop.run.data``'s, its
services ``queryloop.run.services``' (every one given to the run or built from its configuration), its result
``queryloop.run.result``'s.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from queryloop.fsm import Program, Runner, RunState, Step, check_observers, load_machine_cached, uses
from queryloop.handlers.context import ContextData, request_overhead_tokens
from queryloop.handlers.hooks import HooksData
from queryloop.handlers.mcp import McpManager, expand_command
from queryloop.handlers.messages import MessageView
from queryloop.handlers.output import OutputData
from queryloop.handlers.request import ModelBackend, ModelCall, ModelFailure, ModelReply, RequestData, TokenCount
from queryloop.handlers.session import (
    SessionData,
    SessionStore,
    TranscriptSink,
    TranscriptWriter,
    machine_cache_dir,
    read_jsonl,
)
from queryloop.handlers.tools import AGENT_TOOL, AGENT_TOOL_EARLIER_NAME, BackgroundTask, CallRunner, ToolsData
from queryloop.machines import MACHINES_DIR

from .config import AgentOptions, run_params
from .data import AgentData, restore_run, snapshot_run
from .memory import instructions_tokens, memory_paths
from .observe import Observation, Observer
from .result import RunResult
from .services import AgentServices, agent_children, answer_elicitation, build_services, offers_agents
from .subagents import Subagents
from .tracing import TraceRecorder, recorder_from_env

if TYPE_CHECKING:
    from .otel import RunTelemetry

__all__ = [
    "AgentData",
    "AgentRun",
    "AgentServices",
    "OBSERVER_CHECKS",
    "ObserverChecks",
    "answer_elicitation",
    "query_loop_program",
    "restore_run",
    "snapshot_run",
]


@functools.cache
def query_loop_program(path: str | None = None) -> Program:
    """The compiled query loop (loaded and checked for handlers once per process; its declaration is kept in
    the user's machine cache, so the next process whose YAML is the same skips reading it)."""
    return Program(load_machine_cached(path or MACHINES_DIR / "query_loop.yaml", machine_cache_dir()))


def _init_tool_names(names: Sequence[str]) -> list[str]:
    """The ``init`` line's tools: the Agent tool first and under its earlier name, ``Task``, as Claude Code
    2.1.235 lists it there (its requests, and every other line, call it ``Agent``)."""
    if AGENT_TOOL not in names:
        return list(names)
    return [AGENT_TOOL_EARLIER_NAME, *(n for n in names if n != AGENT_TOOL)]


def _initial_data(
    options: AgentOptions, services: AgentServices, adopted: tuple[BackgroundTask, ...] = ()
) -> AgentData:
    """A new run's data; ``adopted``: the background agents of a resumed session it reports (as if launched)."""
    return AgentData(
        tools=ToolsData(background=adopted),
        messages=MessageView(),  # the session opens first: a stored history, then the prompt
        request=RequestData(
            model=options.request.model,
            fallback_models=options.request.fallback_models,
            max_tokens=options.request.max_tokens,
            fallback_max_tokens=options.request.fallback_max_tokens,
        ),
        output=OutputData(
            escalated_max_tokens=options.request.escalated_max_tokens,
            structured_output_required=options.tools.json_schema is not None,
        ),
        hooks=HooksData(
            start_source=options.session.start_source,
            manual_compact=options.compact,
            agent_id=options.agents.agent_id,
            agent_type=options.agents.agent_type,
            agent_transcript=str(options.session_paths().transcript) if options.agents.agent_id is not None else None,
        ),
        context=ContextData(
            auto_compact=options.context.auto_compact,
            microcompact=options.context.microcompact,
            overhead=request_overhead_tokens(services.system_prompt, services.tool_definitions)
            + instructions_tokens(options.context.instructions),
        ),
        session=SessionData(
            prompt=options.prompt, prompt_id=options.prompt_id, resume=options.session.resume_from is not None
        ),
    )


_TASK_ID = re.compile(r"<task-id>([^<]*)</task-id>")


def _reported_agents(transcript: Path) -> frozenset[str]:
    """The agents a stored session's transcript delivered a report of (its ``<task-notification>`` messages)."""
    entries, _ = read_jsonl(transcript)
    found: set[str] = set()
    for entry in entries:
        message = entry.get("message")
        content = message.get("content") if entry.get("type") == "user" and isinstance(message, dict) else None
        if isinstance(content, str) and "<task-notification>" in content:
            found.update(_TASK_ID.findall(content))
    return frozenset(found)


def _telemetry(run: AgentRun) -> RunTelemetry | None:
    """The observer that exports ``run`` over OpenTelemetry when its options say so; None (nothing imported) if not."""
    if run.options.telemetry is None:
        return None
    from .otel import RunTelemetry

    return RunTelemetry(run.options.telemetry, options=run.options, program=run.program, run=run)


def _check_fallback_models(options: AgentOptions) -> None:
    if len(options.request.fallback_models) > 3:
        raise ValueError(f"at most 3 fallback models, got {len(options.request.fallback_models)}")


def _run_params(program: Program, options: AgentOptions, state: RunState[AgentData] | None) -> Mapping[str, object]:
    """The params the run's runner will hold: a continued run's own, else the options' over the YAML's defaults
    (checked here as the runner checks them)."""
    return state.params if state is not None else program.run_params(run_params(options))


def _transcript(
    store: SessionStore | None, given: TranscriptSink | None, state: RunState[AgentData] | None
) -> TranscriptSink | None:
    """Where the transcript goes: ``given``, else beside the store's files when it writes; a run continued from
    its state has it written up to there."""
    transcript = given
    if transcript is None and store is not None and store.writes:
        transcript = TranscriptWriter(store.paths, in_place=store.source == store.paths)
    if transcript is not None and state is not None:
        transcript.continue_after(state.data.messages)
    return transcript


class ObserverChecks:
    """Which observer classes were checked against which program: the check runs once per pair in a process.

    Held per program object and forgotten with it (a program's ``id`` may be reused by a later one,
    which must be checked again); :meth:`clear` forgets every pair.
    """

    def __init__(self) -> None:
        self._checked: weakref.WeakKeyDictionary[Program, set[type]] = weakref.WeakKeyDictionary()

    def check(self, program: Program, observers: Sequence[object]) -> None:
        """Refuse an observer that reads a state or reason ``program``'s machine lacks (once per class)."""
        seen = self._checked.setdefault(program, set())
        new = [o for o in observers if type(o) not in seen]
        if new:
            check_observers(program.spec, new)
            seen.update(type(o) for o in new)

    def checked(self, program: Program) -> frozenset[type]:
        """The observer classes checked against ``program`` so far."""
        return frozenset(self._checked.get(program, ()))

    def clear(self) -> None:
        """Forget every check: each observer class is checked again at the next run."""
        self._checked.clear()


OBSERVER_CHECKS = ObserverChecks()
"""The process's record of checked observers (:class:`ObserverChecks`)."""


def _check_observers(program: Program, observers: Sequence[object]) -> None:
    """Refuse an observer that reads a state or reason this run's machine lacks (once per class and machine)."""
    OBSERVER_CHECKS.check(program, observers)


class _FirstTokenClock:
    """A backend that tells its owner when a request left and when an answer's first token arrived.

    The result's ``time_to_request_ms``, ``ttft_ms`` and ``ttft_stream_ms`` are read from them.
    """

    def __init__(self, inner: ModelBackend, seen: Callable[[float], None], sending: Callable[[float], None]) -> None:
        self.inner = inner
        self.seen = seen
        self.sending = sending

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        sent = time.monotonic()
        self.sending(sent)
        outcome = await self.inner.send(call, on_text)
        if isinstance(outcome, ModelReply):  # a reply not streamed has no first token: its arrival stands in
            log = outcome.log
            self.seen(sent + (log.ttft_ms if log.ttft_ms is not None else log.duration_ms) / 1000)
        return outcome

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        return await self.inner.count_tokens(call)


@uses(states=("opening_session", "submitting_prompt", "awaiting_agents"))
class AgentRun(RunResult):
    """One run of the query loop: iterate :meth:`events`, then read :meth:`result`.

    ``observers`` are told every item of the run as it happens — each step (the abort step
    included) and what its effects publish, which :meth:`events` then does not yield
    (``queryloop.run.observe``). ``state`` continues a run from a run state (e.g. one
    :func:`restore_run` read back)
    instead of starting from ``options.prompt``. When ``QUERYLOOP_TRACE_DIR`` is set, every
    step the run takes is recorded there (``queryloop.run.tracing``). Unless
    ``options.session.persist`` is off, the session's transcript is written as the run goes
    (``queryloop.handlers.session.services.transcript``), its ledger and checkpoints kept beside it. ``mcp``: MCP
    servers already connected (a conversation of several runs shares them); without it,
    the run connects ``options.tools.mcp_servers`` itself when it starts and closes them at its end.
    ``store``: the session's store, when it is not the files under ``options.session.home``
    (``queryloop.fleet`` keeps a session's ledger and checkpoints in its database);
    ``transcript``: where the transcript is written, when not beside the store's files
    (the fleet's database); ``call_runner``: what runs each tool call, when not the run
    itself (the fleet: one durable step per call). Every service is given here, none later.
    """

    def __init__(
        self,
        options: AgentOptions,
        backend: ModelBackend,
        *,
        program: Program | None = None,
        observers: Sequence[Observer] = (),
        state: RunState[AgentData] | None = None,
        mcp: McpManager | None = None,
        store: SessionStore | None = None,
        transcript: TranscriptSink | None = None,
        call_runner: CallRunner | None = None,
    ) -> None:
        _check_fallback_models(options)
        self.options = options
        self.first_token: float | None = None  # monotonic time of the first token of the run's first answer
        self.first_request: float | None = None  # monotonic time the run's first model request was sent
        self.program = program or query_loop_program()
        self._owns_mcp = mcp is None and bool(options.tools.mcp_servers)
        mcp = self._own_mcp() if self._owns_mcp else mcp
        self.subagents: Subagents | None = self._subagents(backend, mcp, _run_params(self.program, options, state))
        clock = _FirstTokenClock(backend, self._saw_first_token, self._sent_request)
        self.services = build_services(options, clock, mcp, store, call_runner, self.subagents)
        self.transcript: TranscriptSink | None = _transcript(self.services.session, transcript, state)
        self.observers = tuple(observers)
        self.telemetry = _telemetry(self)  # None unless OpenTelemetry is configured
        watchers = (self.transcript, self.telemetry)
        _check_observers(self.program, (self, *self.observers, *(w for w in watchers if w is not None)))
        self._trace_step = self._recorder()
        self._state = state
        self._expanded = False  # the prompt was looked at for an MCP prompt's command
        self.slash_commands: list[str] = []  # the MCP servers' prompts, as commands (after connect_mcp)
        self._adopted = self._adopt_unfinished_agents(state)  # a resumed session's agents that never reported
        self.runner: Runner[AgentData, AgentServices] = self._runner(options)
        self.started = time.monotonic()
        self.finished: float | None = None

    def _own_mcp(self) -> McpManager:
        """The MCP servers of the options, for this run to connect and close (none were handed to it)."""
        options = self.options
        taken = frozenset(t.name for t in options.tools.custom_tools).__contains__  # never offered twice
        return McpManager(
            options.tools.mcp_servers,
            cwd=options.cwd,
            hidden=options.permissions.hides,
            taken=taken,
            roots=options.working_directories(),
            elicit=lambda request: answer_elicitation(options, request),
            progress=self._published,
        )

    def _subagents(self, backend: ModelBackend, mcp: McpManager | None, params: Mapping[str, Any]) -> Subagents | None:
        """What starts the run's sub-agents, with the caps the run is given (``params``); None: no Agent tool."""
        options, program = self.options, self.program
        if not offers_agents(options, program):
            return None
        children = agent_children(program)
        assert children is not None  # offers_agents: there is one
        turns = params.get(children.steps)
        return Subagents(
            options=options,
            start_run=lambda child, observer, servers: AgentRun(
                child, backend, program=program, observers=(observer,), mcp=servers
            ),
            definitions=options.agents.definitions,
            max_running=int(params["max_running_agents"]),
            max_turns=None if turns is None else int(turns),
            timeout_s=options.agents.timeout_s,
            mcp=mcp,
            publish=self._published,
            trace_parent=lambda call_id: self.telemetry.span_context(call_id) if self.telemetry else None,
            budget_left=self._budget_left,
        )

    def _recorder(self) -> TraceRecorder | None:
        """What records each step: under QUERYLOOP_TRACE_DIR, else in the session's own folder on disk, else none."""
        options = self.options
        return recorder_from_env(
            machine=self.program.spec.name,
            session_id=options.session.session_id,
            agent_id=options.agents.agent_id,
            session_folder=options.session_paths().folder if isinstance(self.transcript, TranscriptWriter) else None,
        )

    def _adopt_unfinished_agents(self, state: RunState[AgentData] | None) -> tuple[BackgroundTask, ...]:
        """A resumed session's background agents that never reported (none for a run continued from its state)."""
        resumed = self.options.session.resume_from
        if self.subagents is None or state is not None or resumed != self.options.session_paths():
            return ()
        if not (resumed.folder / "subagents").is_dir():  # only then is the transcript read for its reports
            return ()
        return self.subagents.adopt_unfinished(_reported_agents(resumed.transcript))

    def _runner(self, options: AgentOptions) -> Runner[AgentData, AgentServices]:
        state = self._state
        return Runner(
            self.program,
            data=_initial_data(options, self.services, self._adopted) if state is None else None,
            services=self.services,
            params=run_params(options),
            state=state,
            on_publish=self._published if self.observers else None,
            # nothing to tell of a step (no trace, transcript, telemetry or observer; all are set by now): no call
            on_step=self._stepped if self._steps_watched() else None,
        )

    def _steps_watched(self) -> bool:
        """Whether :meth:`_stepped` has anyone to tell of a step."""
        return bool(
            self._trace_step is not None or self.transcript is not None or self.telemetry is not None or self.observers
        )

    async def events(self) -> AsyncGenerator[Any, None]:
        """Every step and published item until the run ends.

        Cancelling the iterating task, or closing this generator, takes the abort edges
        at once: the runner's generator is closed with it, not left to the garbage collector.
        """
        try:
            await self.connect_mcp()
            if self.subagents is not None:
                self.subagents.start_adopted()
            async with contextlib.aclosing(self.runner.run()) as items:
                async for item in items:
                    if not isinstance(item, Step):  # published after the effect: no observer took it live
                        if self.transcript is not None:
                            self.transcript.observe(item)
                        if self.telemetry is not None:
                            self.telemetry.observe(item)
                    yield item
        finally:
            if self.subagents is not None:  # the children still running end with their parent, by their abort edges
                await self.subagents.close()
            self.finished = time.monotonic()
            self._close_session()
            if self.telemetry is not None:
                self.telemetry.close()
            if self.services.tool_context.sandbox is not None:
                self.services.tool_context.sandbox.close()
            await self.close_mcp()
            if self.options.agents.agent_id is None:  # a sub-agent's end is no session's end
                await self._session_ended()

    async def _session_ended(self) -> None:
        """The SessionEnd hooks, informational; an interrupted run fires them too (the ``finally`` above).

        Claude Code 2.1.235 says ``reason: other`` at the end of a headless run, answered, failed
        or interrupted alike; how this run ended is in ``terminal_reason`` (ours).
        """
        end = {"reason": "other", "terminal_reason": self.terminal_reason()}
        await self.services.hooks.run("SessionEnd", end)

    def init_fields(self) -> dict[str, Any]:
        """What the ``init`` line says of this run (``Renderer.start``'s fields); after :meth:`connect_mcp`."""
        options, services = self.options, self.services
        mcp = services.mcp
        return {
            "model": options.request.model,
            "cwd": str(options.cwd),
            "tools": [*_init_tool_names(services.tools.names), *(t.name for t in (mcp.catalog() if mcp else ()))],
            "mcp_servers": mcp.statuses() if mcp else [],
            "fallback_models": list(options.request.fallback_models),
            "machine": self.program.spec.name,
            "memory_paths": memory_paths(options.context.instructions),
            "permission_mode": options.permissions.mode,
            "slash_commands": list(self.slash_commands),
            # Claude Code 2.1.235 lists them by name, case aside
            "agents": sorted((a.name for a in options.agents.definitions), key=str.lower)
            if self.subagents is not None
            else [],
        }

    async def connect_mcp(self) -> None:
        """Connect the MCP servers (once; the run does it when it starts): their statuses are known after this.

        A prompt naming a server's prompt (``/mcp__<server>__<prompt> ARGS``) is replaced by
        what the server returns for it; :class:`PromptCommandError` when it cannot be filled.
        """
        mcp = self.services.mcp
        if mcp is None:
            return
        await mcp.set_roots(self.options.working_directories())  # a conversation's servers: told if they changed
        if not mcp.started:
            await mcp.start()
        self.slash_commands = list(await mcp.prompts())
        if self._state is None and not self._expanded:
            self._expanded = True  # once: events() connects too
            expanded = await expand_command(mcp, self.options.prompt)
            if expanded is not None:
                self.options = attrs.evolve(self.options, prompt=expanded)
                self.runner = self._runner(self.options)

    async def close_mcp(self) -> None:
        """Close the MCP servers this run started (a conversation's shared ones stay open)."""
        if self._owns_mcp and self.services.mcp is not None:
            await self.services.mcp.close()

    def _budget_left(self) -> float | None:
        """What is left of ``--max-budget-usd`` after the run's requests and its sub-agents' (None: no budget)."""
        budget = self.options.limits.max_budget_usd
        if budget is None:
            return None
        runner = getattr(self, "runner", None)  # none yet while a resumed session's agents are taken over
        own = runner.final.data.request.usage.known_cost_usd if runner is not None else 0.0
        return budget - own - self.services.cost_elsewhere_usd()

    def _published(self, item: Observation) -> None:
        if self.transcript is not None:
            self.transcript.observe(item)
        if self.telemetry is not None:
            self.telemetry.observe(item)
        for observer in self.observers:
            observer.observe(item)

    def _stepped(self, step: Step) -> None:
        if self._trace_step is not None:
            self._trace_step(step)
        if self.transcript is not None:
            self.transcript.record(step, self.runner.final.data)
        if self.telemetry is not None:
            self.telemetry.observe(step)
        for observer in self.observers:
            observer.observe(step)

    def _close_session(self) -> None:
        """The transcript's closing entry (once the run has ended) and the ledger file closed."""
        if self.transcript is not None and self.runner.done:
            self.transcript.finish(self.result())
            self.transcript = None
        if self.services.session is not None:
            self.services.session.close()

    def _saw_first_token(self, at: float) -> None:
        if self.first_token is None:
            self.first_token = at

    def _sent_request(self, at: float) -> None:
        if self.first_request is None:
            self.first_request = at
