"""A run's services (:class:`AgentServices`), built from its configuration: the tools offered, the hooks, the
sandbox, the session's store, who answers a permission prompt or an MCP server's question.

Builds them and holds nothing itself: the run that uses them is ``queryloop.run.agent``'s.
"""

from __future__ import annotations

import os
import random
from collections import ChainMap
from typing import TYPE_CHECKING, Any

import attrs

from queryloop.fsm import Program
from queryloop.handlers.agents import SubagentPool
from queryloop.handlers.hooks import HookRunner
from queryloop.handlers.mcp import ElicitAnswer, Elicitation, McpManager
from queryloop.handlers.request import ModelBackend, with_request_deadline
from queryloop.handlers.session import SessionStore
from queryloop.handlers.tools import (
    AGENT_TOOL,
    AskPermission,
    CallRunner,
    PermissionMode,
    PermissionRules,
    ToolContext,
    ToolRegistry,
    ToolSpec,
    default_registry,
    hidden_tools,
    named_hosts,
    read_denied,
)

from .config import AgentOptions
from .defaults import RETRY_MAX_DELAY_S
from .memory import instructions_block
from .subagents import Subagents
from .web import WebRequests

if TYPE_CHECKING:
    from queryloop.fsm import ChildrenSpec
    from queryloop.handlers.tools import Sandbox

__all__ = [
    "AgentServices",
    "agent_children",
    "answer_elicitation",
    "build_services",
    "hook_runner",
    "offers_agents",
    "open_sandbox",
    "tool_registry",
]


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


def tool_registry(options: AgentOptions, subagents: Subagents | None = None) -> ToolRegistry:
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


def offers_agents(options: AgentOptions, program: Program) -> bool:
    """Whether the run offers the Agent tool: agents are defined, the machine reports them back and declares
    them (``children: agents``, the limits the composed bound counts on), the run is less deep than that
    declaration's ``depth`` (at depth 1 a sub-agent starts none), and neither ``--tools`` nor a bare deny rule
    leaves it out."""
    if not options.agents.definitions or "awaiting_agents" not in program.spec.state_map:
        return False
    children = agent_children(program)
    if children is None or options.agents.spawn_depth >= children.depth:
        return False
    if options.tools.builtins is not None and AGENT_TOOL not in options.tools.builtins:
        return False
    return AGENT_TOOL not in hidden_tools(options.permissions.rules)


def agent_children(program: Program) -> ChildrenSpec | None:
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


def build_services(
    options: AgentOptions,
    backend: ModelBackend,
    mcp: McpManager | None,
    store: SessionStore | None,
    call_runner: CallRunner | None,
    subagents: Subagents | None = None,
) -> AgentServices:
    system = "\n\n".join(p for p in (options.request.system_prompt, options.request.append_system_prompt) if p) or None
    registry = tool_registry(options, subagents)
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
        env=ChainMap(dict(options.tools.env), os.environ),  # read when a web tool asks, not copied per run
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
        # as Claude Code, kept or not; a sub-agent's hooks are told the session's (SubagentStop: its own besides).
        # Without hooks nothing reads it, and finding it resolves the working directory on the filesystem.
        transcript_path=str(attrs.evolve(options.session_paths(), agent_id=None).transcript)
        if options.hooks.matchers
        else "",
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


def _keeps_records(options: AgentOptions) -> bool:
    """Whether tools make their records of each call: someone reads them (stream-json, a PostToolUse hook)."""
    return options.tools.records or any(m.event == "PostToolUse" for m in options.hooks.matchers)
