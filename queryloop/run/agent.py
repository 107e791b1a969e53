"""One agent run: a resolved configuration (``queryloop.run.config``) → run data + services → the machine → a result.

Owns :class:`AgentData` (one slice per layer), :class:`AgentServices`, :class:`AgentRun`, the result object and
:func:`snapshot_run` / :func:`restore_run`. Every service is given to the run or built from its configuration.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import attrs
from cattrs.preconf.json import make_converter

from queryloop.fsm import Program, Runner, RunState, Step, check_observers, load_machine_cached, uses
from queryloop.handlers.agents import AgentsData, SubagentPool
from queryloop.handlers.context import ContextData, request_overhead_tokens
from queryloop.handlers.hooks import HookRunner, HooksData
from queryloop.handlers.mcp import ElicitAnswer, Elicitation, McpData, McpManager, expand_command
from queryloop.handlers.messages import Message, MessageView
from queryloop.handlers.outcome import Outcome, evolve
from queryloop.handlers.output import MALFORMED_TOOL_USE_PROMPT, STRUCTURED_OUTPUT_PROMPT, OutputData
from queryloop.handlers.request import (
    UNLISTED_MODEL,
    ModelBackend,
    ModelCall,
    ModelFailure,
    ModelReply,
    RequestData,
    TokenCount,
    UsageTotals,
    model_info,
    output_limits,
    with_request_deadline,
)
from queryloop.handlers.session import (
    SessionData,
    SessionStore,
    TranscriptSink,
    TranscriptWriter,
    machine_cache_dir,
    read_jsonl,
)
from queryloop.handlers.tools import (
    AGENT_TOOL,
    AGENT_TOOL_EARLIER_NAME,
    AskPermission,
    BackgroundTask,
    CallRunner,
    PermissionMode,
    PermissionRules,
    ToolContext,
    ToolRegistry,
    ToolsData,
    ToolSpec,
    default_registry,
    hidden_tools,
    named_hosts,
    read_denied,
)
from queryloop.machines import MACHINES_DIR

from .config import AgentOptions, run_params
from .defaults import RETRY_MAX_DELAY_S
from .memory import instructions_block, instructions_tokens, memory_paths
from .observe import Observation, Observer
from .subagents import Subagents
from .tracing import TraceRecorder, recorder_from_env
from .web import WebRequests

if TYPE_CHECKING:
    from queryloop.fsm import ChildrenSpec
    from queryloop.handlers.tools import Sandbox

    from .otel import RunTelemetry

__all__ = [
    "AgentData",
    "AgentRun",
    "AgentServices",
    "OBSERVER_CHECKS",
    "ObserverChecks",
    "answer_elicitation",
    "hook_runner",
    "query_loop_program",
    "restore_run",
    "snapshot_run",
]


@functools.cache
def query_loop_program(path: str | None = None) -> Program:
    """The compiled query loop (loaded and checked for handlers once per process; its declaration is kept in
    the user's machine cache, so the next process whose YAML is the same skips reading it)."""
    return Program(load_machine_cached(path or MACHINES_DIR / "query_loop.yaml", machine_cache_dir()))


@attrs.frozen(kw_only=True, slots=True)
class AgentData:
    """The whole run data: the message graph, the outcome, and each layer's slice. Replaced whole each step."""

    messages: MessageView
    outcome: Outcome = attrs.field(factory=Outcome)
    request: RequestData
    output: OutputData = attrs.field(factory=OutputData)
    hooks: HooksData = attrs.field(factory=HooksData)
    tools: ToolsData = attrs.field(factory=ToolsData)
    context: ContextData = attrs.field(factory=ContextData)
    session: SessionData = attrs.field(factory=SessionData)
    mcp: McpData = attrs.field(factory=McpData)
    agents: AgentsData = attrs.field(factory=AgentsData)
    user_turns: int = 0  # user messages the loop added after the prompt, as Claude Code counts them (_turns_in)

    def evolve(self, **changes: Any) -> Self:
        """A copy with the named slices replaced; user messages appended to the transcript are counted.

        Every layer changes the transcript through here, so this is the one place that sees
        each message arrive; a rebuilt transcript (a compaction) adds none (its summary is
        counted from the context slice's boundaries).
        """
        messages = changes.get("messages")
        if messages is not None and "user_turns" not in changes:
            added = messages.added_since(self.messages)
            if added:
                turns = self.user_turns
                for message, meta in added:
                    turns += _turns_in(message, meta)
                changes["user_turns"] = turns
        return evolve(self, **changes)


def _after(result: Mapping[str, object], key: str, new: str, value: object) -> dict[str, object]:
    """``result`` with ``new`` placed right after ``key``, where Claude Code 2.1.235 writes it."""
    out: dict[str, object] = {}
    for k, v in result.items():
        out[k] = v
        if k == key:
            out[new] = value
    return out


def _turns_in(message: Message, meta: bool) -> int:
    """How many of Claude Code's turns one message appended to the transcript makes.

    Claude Code 2.1.235 counts each user message its loop adds after the prompt: every tool
    result is a message of its own, and so are a Stop hook's feedback and the note that a
    tool call was malformed (which it shows; ours is hidden, so it is named here). Hidden
    continuations of a truncated answer are no turn (a reply cut three times, then
    finished: 1), nor is our thinking-only nudge, nor are the hidden results that close the
    ledger when the budget is spent (Claude Code runs nothing then and adds nothing: 1).
    """
    if message.get("role") != "user":
        return 0
    content = message.get("content")
    if meta:  # the request for a missing StructuredOutput call is a turn in Claude Code's count too
        return int(content in (MALFORMED_TOOL_USE_PROMPT, STRUCTURED_OUTPUT_PROMPT))
    if isinstance(content, list):
        results = 0
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results += 1
        if results:
            return results
    return 1


@attrs.frozen(kw_only=True)
class AgentServices:
    """What effects use: clients, registries, settings and a random source — nothing about the run itself."""

    backend: ModelBackend
    system_prompt: str | None
    tools: ToolRegistry
    tool_definitions: tuple[dict[str, Any], ...]
    tool_context: ToolContext
    hooks: HookRunner
    instructions: str | None  # the CLAUDE.md files as the one block every request carries (queryloop.run.memory)
    max_budget_usd: float | None
    auto_compact_threshold: float  # of the effective window (context window − output reserve)
    retry_base_delay_s: float
    retry_max_delay_s: float
    idle_timeout_s: float
    permission_mode: PermissionMode = "default"
    rules: PermissionRules = attrs.field(factory=PermissionRules)
    interactive: bool = False  # ask the user (y/n/always) instead of denying what would ask
    can_use_tool: AskPermission | None = None  # the permission callback: asked before the user, instead of denying
    session: SessionStore | None = None  # the session's ledger and checkpoints (None: nothing is kept)
    mcp: McpManager | None = None  # the MCP servers (None: none configured)
    call_runner: CallRunner | None = None  # runs each tool call (the fleet: one durable step each); None: in-process
    subagents: SubagentPool | None = None  # the run's sub-agents (None: no Agent tool is offered)
    rng: random.Random = attrs.field(factory=random.Random)

    def cost_elsewhere_usd(self) -> float:
        """What the run's sub-agents and web tools spent: the budget counts it with the run's own requests."""
        agents = self.subagents.cost_usd() if self.subagents is not None else 0.0
        web = self.tool_context.web
        return agents + (web.totals.known_cost_usd if isinstance(web, WebRequests) else 0.0)

    def extra_tool(self, name: str) -> ToolSpec | None:
        """An MCP server's tool by the name the model calls it (None if no server lists it now)."""
        return self.mcp.tool_spec(name) if self.mcp is not None else None


def _store(options: AgentOptions) -> SessionStore | None:
    """The session's store; None when nothing is kept and nothing is read back."""
    if not options.session.persist and options.session.resume_from is None:
        return None
    return SessionStore(
        options.session_paths(),
        source=options.session.resume_from,
        max_checkpoints=options.session.max_checkpoints,
        writes=options.session.persist,
    )


def _registry(options: AgentOptions, subagents: Subagents | None = None) -> ToolRegistry:
    """The allowed built-in tools in their order, the Agent tool, the custom ones, then StructuredOutput under
    ``--json-schema``; a bare deny rule keeps any of the others out (the answer's tool is never left out)."""
    hidden = hidden_tools(options.permissions.rules)
    builtins = options.tools.builtins if options.tools.builtins is not None else default_registry().names
    custom = tuple(spec for spec in options.tools.custom_tools if spec.name not in hidden)
    agent = (subagents.tool,) if subagents is not None else ()
    chosen = [t for t in builtins if t not in hidden and t != AGENT_TOOL]  # --tools may name Agent: offered apart
    answer: tuple[ToolSpec, ...] = ()
    if options.tools.json_schema is not None:
        from queryloop.handlers.tools import structured_output_tool

        answer = (structured_output_tool(options.tools.json_schema),)
    return ToolRegistry(tools=(*default_registry(chosen).tools, *agent, *custom, *answer))


def _init_tool_names(names: Sequence[str]) -> list[str]:
    """The ``init`` line's tools: the Agent tool first and under its earlier name, ``Task``, as Claude Code
    2.1.235 lists it there (its requests, and every other line, call it ``Agent``)."""
    if AGENT_TOOL not in names:
        return list(names)
    return [AGENT_TOOL_EARLIER_NAME, *(n for n in names if n != AGENT_TOOL)]


def _offers_agents(options: AgentOptions, program: Program) -> bool:
    """Whether the run offers the Agent tool: agents are defined, the machine reports them back and declares
    them (``children: agents``, the limits the composed bound counts on), the run is less deep than that
    declaration's ``depth`` (at depth 1 a sub-agent starts none), and neither ``--tools`` nor a bare deny rule
    leaves it out."""
    if not options.agents.definitions or "awaiting_agents" not in program.spec.state_map:
        return False
    children = _agent_children(program)
    if children is None or options.agents.spawn_depth >= children.depth:
        return False
    if options.tools.builtins is not None and AGENT_TOOL not in options.tools.builtins:
        return False
    return AGENT_TOOL not in hidden_tools(options.permissions.rules)


def _agent_children(program: Program) -> ChildrenSpec | None:
    """The machine's ``children: agents`` entry (None: it declares no sub-agents)."""
    return next((c for c in program.spec.children if c.name == "agents"), None)


def open_sandbox(options: AgentOptions) -> Sandbox | None:
    """The run's sandbox when the settings enable it and bubblewrap starts here; None otherwise.

    Where it cannot start, commands run through the permission gate alone (the CLI says
    so once, and refuses to run when ``failIfUnavailable`` is set).
    """
    if not options.sandbox.enabled or options.sandbox.problem() is not None:
        return None
    from queryloop.handlers.tools import Sandbox

    return Sandbox.for_rules(options.sandbox, cwd=options.cwd, rules=options.permissions.rules)


def _services(
    options: AgentOptions,
    backend: ModelBackend,
    mcp: McpManager | None,
    store: SessionStore | None,
    call_runner: CallRunner | None,
    subagents: Subagents | None = None,
) -> AgentServices:
    system = "\n\n".join(p for p in (options.request.system_prompt, options.request.append_system_prompt) if p) or None
    registry = _registry(options, subagents)
    store = store if store is not None else _store(options)
    backend = with_request_deadline(backend, options.request.request_timeout_s)
    return AgentServices(
        backend=backend,
        system_prompt=system,
        tools=registry,
        tool_definitions=tuple(registry.api_definitions()),
        instructions=instructions_block(options.context.instructions),
        tool_context=ToolContext(
            cwd=options.cwd,
            additional_dirs=tuple(d for d in options.working_directories()[1:] if d.is_dir()),
            responses={} if _keeps_records(options) else None,
            env=options.tools.env,
            hidden=read_denied(options.permissions.rules, cwd=options.cwd),
            sandbox=open_sandbox(options),
            background=subagents,
            web=_web_requests(options, backend),
        ),
        hooks=hook_runner(options),
        max_budget_usd=options.limits.max_budget_usd,
        auto_compact_threshold=options.context.auto_compact_threshold,
        retry_base_delay_s=options.request.retry_base_delay_s,
        retry_max_delay_s=RETRY_MAX_DELAY_S,
        idle_timeout_s=options.request.idle_timeout_s,
        permission_mode=options.permissions.mode,
        rules=options.permissions.rules,
        interactive=options.permissions.interactive,
        can_use_tool=_permission_callback(options, mcp),
        session=store,
        mcp=mcp,
        call_runner=call_runner,
        subagents=subagents,
    )


def _permission_callback(options: AgentOptions, mcp: McpManager | None) -> AskPermission | None:
    """Who answers what would ask: the caller's callback, else ``--permission-prompt-tool``'s MCP tool."""
    prompt_tool = options.permissions.prompt_tool
    if options.permissions.can_use_tool is not None or prompt_tool is None or mcp is None:
        return options.permissions.can_use_tool
    from queryloop.handlers.mcp import mcp_permission_asker

    return mcp_permission_asker(mcp, prompt_tool, cwd=options.cwd)


def _web_requests(options: AgentOptions, backend: ModelBackend) -> WebRequests:
    """The web tools' own model requests, told which hosts the allow rules name one by one."""
    rules = options.permissions.rules.allow
    specifiers = (r.specifier for r in rules if r.tool == "WebFetch" and r.specifier is not None)
    return WebRequests(
        backend=backend,
        model=options.request.model,
        env={**os.environ, **options.tools.env},
        named_hosts=named_hosts(specifiers),
        idle_timeout_s=options.request.idle_timeout_s,
        deadline_s=options.request.request_timeout_s,
    )


def hook_runner(options: AgentOptions) -> HookRunner:
    """The run's hooks, bound to what every hook is told."""
    return HookRunner(
        config=options.hooks,
        cwd=options.cwd,
        session_id=options.session.session_id,
        # as Claude Code, kept or not; a sub-agent's hooks are told the session's (SubagentStop: its own besides)
        transcript_path=str(attrs.evolve(options.session_paths(), agent_id=None).transcript),
        permission_mode=options.permissions.mode,
        prompt_id=options.prompt_id,
        agent_id=options.agents.agent_id,  # a sub-agent's hooks are told which agent runs them
        agent_type=options.agents.agent_type,
    )


async def answer_elicitation(options: AgentOptions, request: Elicitation) -> ElicitAnswer:
    """An MCP server's request for input: an ``Elicitation`` hook's answer, else the user's (``ask_input``);
    with neither (a headless run), declined with the reason."""
    outcome = await hook_runner(options).run("Elicitation", request.hook_payload())
    if outcome is not None and outcome.elicitation is not None:
        action, content = outcome.elicitation
        return ElicitAnswer(action=action, content=content)
    if options.tools.ask_input is not None:
        return await options.tools.ask_input(request)
    why = "no one can answer in a headless run (an Elicitation hook can answer it)"
    return ElicitAnswer(action="decline", reason=why)


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
    return state.params if state is not None else program.initial_state(None, run_params(options)).params


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
class AgentRun:
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
        self.services = _services(options, clock, mcp, store, call_runner, self.subagents)
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
        if not _offers_agents(options, program):
            return None
        children = _agent_children(program)
        assert children is not None  # _offers_agents: there is one
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
        end = {"reason": "other", "terminal_reason": self.result()["terminal_reason"]}
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
            "terminal_reason": declared.get("terminal_reason", runner.final.state),
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
        continuations do not (:func:`_turns_in`). A run its prompt hooks ended sent nothing:
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


# ---- snapshots ---------------------------------------------------------------------------------

_codec = make_converter()  # JSON-ready values: frozensets and tuples become lists
_codec.register_unstructure_hook(MessageView, lambda view: [[m, meta] for m, meta in view.entries()])
_codec.register_structure_hook(
    MessageView, lambda raw, _: MessageView.of((m for m, _ in raw), (bool(meta) for _, meta in raw))
)
# a field typed ``object`` (a JSON value read, not built) takes back what the snapshot holds, as one typed Any does
_codec.register_structure_hook_func(lambda type_: type_ is object, lambda value, _: value)


def _keeps_records(options: AgentOptions) -> bool:
    """Whether tools make their records of each call: someone reads them (stream-json, a PostToolUse hook)."""
    return options.tools.records or any(m.event == "PostToolUse" for m in options.hooks.matchers)


def snapshot_run(program: Program, run: RunState[AgentData]) -> dict[str, object]:
    """The run state as plain JSON values: state, counters, params, steps and every slice of the data."""
    return {**program.snapshot(run), "data": _codec.unstructure(run.data)}


def restore_run(program: Program, snapshot: Mapping[str, object]) -> RunState[AgentData]:
    """The run state :func:`snapshot_run` wrote (after a JSON round trip), ready to continue."""
    return program.restore(snapshot, _codec.structure(snapshot["data"], AgentData))
