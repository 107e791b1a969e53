"""A run's configuration: one record (:class:`AgentOptions`) and the one function that resolves it.

Every way in says what it was told and calls :func:`resolve_config`: the program's flags
(``queryloop.frontends.cli``, which also starts the Agent SDK's and the interactive
session), the Python API's options (``queryloop.frontends.options``) and a fleet
session's spec (``queryloop.fleet.session``). It reads the settings files, the permission
rules, the MCP configuration, the project's instructions and the sandbox settings, fills
what was left unsaid from a scenario's hints, then the settings, then the defaults — and
reports every problem before anything is created or run (:class:`ConfigError`).

Each default is written once: the machine's caps (``max_turns``, ``max_retries``, …) in
the params of ``machines/query_loop.yaml`` — a cap nobody set is not passed, so the
YAML's applies (:func:`run_params`) — and everything else in ``queryloop.run.defaults``.
Choosing the stored session a run continues is ``queryloop.run.sessions``'s;
:func:`with_session` puts the choice into a configuration.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from queryloop.handlers.agents.services.definitions import (
    BUILT_IN_AGENTS,
    AgentDefinition,
    AgentDefinitionError,
    agents_from_files,
    agents_from_json,
    merge_agents,
)
from queryloop.handlers.hooks import HookConfig
from queryloop.handlers.mcp import Elicit, McpConfigError, McpServerConfig
from queryloop.handlers.session import SessionPaths, queryloop_home
from queryloop.handlers.session.services.store import MAX_CHECKPOINTS
from queryloop.handlers.tools import (
    AskPermission,
    PermissionMode,
    PermissionRuleError,
    PermissionRules,
    ToolSpec,
    default_registry,
)
from queryloop.handlers.tools.services.sandbox.policy import SandboxPolicy

from . import defaults
from .mcp_config import load_mcp_servers
from .memory import InstructionFile, MemoryKind, load_instructions
from .sessions import SessionChoice
from .settings import SettingsError, load_settings
from .telemetry import TelemetryConfigError, TelemetrySettings, telemetry_settings

__all__ = ["AgentOptions", "ConfigError", "Resolved", "resolve_config", "run_params", "session_of", "with_session"]


def _tool_specs(tools: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
    return tuple(tools)


def _check_custom_tools(
    _instance: object, _attribute: attrs.Attribute[tuple[ToolSpec, ...]], tools: tuple[ToolSpec, ...]
) -> None:
    """Custom tools are ToolSpecs (``@queryloop.tool``) whose names neither a built-in tool nor another one has."""
    builtins = default_registry().names
    seen: set[str] = set()
    for spec in tools:
        if not isinstance(spec, ToolSpec):
            what = getattr(spec, "__qualname__", type(spec).__name__)
            raise TypeError(f"custom tools must be ToolSpecs: decorate {what} with @queryloop.tool first")
        if spec.name in builtins:
            raise ValueError(
                f"the custom tool {spec.name!r} has the name of a built-in tool; give it another name "
                f"(built-in tools: {', '.join(builtins)})"
            )
        if spec.name in seen:
            raise ValueError(f"two custom tools are named {spec.name!r}; tool names must be unique")
        seen.add(spec.name)


@attrs.frozen(kw_only=True)
class AgentOptions:
    """What one run was asked to do, resolved: every value it runs with (:func:`resolve_config` makes it)."""

    prompt: str
    model: str
    fallback_models: tuple[str, ...] = ()
    cwd: Path = attrs.field(factory=Path.cwd)
    max_turns: int | None = None  # None: no limit (the YAML's max_turns)
    max_retries: int | None = None  # None: the YAML's max_retries
    max_budget_usd: float | None = None
    max_tokens: int = defaults.MAX_OUTPUT_TOKENS
    escalated_max_tokens: int | None = None
    append_system_prompt: str | None = None
    system_prompt: str = defaults.DEFAULT_SYSTEM_PROMPT
    session_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    retry_base_delay_s: float = attrs.field(factory=defaults.retry_base_delay_s)
    idle_timeout_s: float = attrs.field(factory=defaults.idle_timeout_s)
    request_timeout_s: float | None = attrs.field(factory=defaults.request_timeout_s)  # None: only the idle timeout
    tools: tuple[str, ...] | None = None  # allowed tool names; None = all built-in tools
    # tools of the caller's own (ToolSpecs, e.g. from @queryloop.tool), offered after the built-ins
    custom_tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tool_specs, validator=_check_custom_tools)
    can_use_tool: AskPermission | None = None  # answers what would ask (instead of a denial or a terminal prompt)
    ask_input: Elicit | None = None  # answers an MCP server's request for input no hook answered (the user)
    mcp_servers: tuple[McpServerConfig, ...] = ()  # MCP servers whose tools are offered (mcp__<server>__<tool>)
    auto_compact: bool = True
    microcompact: bool = True  # clear old tool results once that pays (docs/caching.md)
    auto_compact_threshold: float = defaults.AUTO_COMPACT_THRESHOLD  # of the effective window
    params: dict[str, Any] = attrs.field(factory=dict)  # other machine params (caps) to override
    permission_mode: PermissionMode = "default"
    rules: PermissionRules = attrs.field(factory=PermissionRules)
    hooks: HookConfig = attrs.field(factory=HookConfig)
    interactive: bool = False
    tool_env: dict[str, str] = attrs.field(factory=dict)  # settings `env`: passed to tools on purpose
    instructions: tuple[InstructionFile, ...] = ()  # CLAUDE.md files (queryloop.run.memory), sent with every request
    # the session: kept under home (None: $QUERYLOOP_HOME, else ~/.queryloop) unless persist is off
    persist: bool = True
    home: Path | None = None
    stored_as: SessionPaths | None = None  # where this run's session is kept (default: home, cwd, session_id)
    resume_from: SessionPaths | None = None  # the stored session whose history this run continues (itself, or a fork's)
    prompt_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))  # the prompt's transcript uuid
    start_source: str = "startup"  # what SessionStart hooks are told: startup, resume or fork
    # the run compacts the session's history instead of sending ``prompt`` (/compact): the user's
    # instructions for the summary ("" for none); None: an ordinary prompt
    compact: str | None = None
    max_checkpoints: int = MAX_CHECKPOINTS
    sandbox: SandboxPolicy = attrs.field(factory=SandboxPolicy)  # the settings' `sandbox` (and --sandbox)
    telemetry: TelemetrySettings | None = None  # OpenTelemetry export (queryloop.run.telemetry); None: off
    agents: tuple[AgentDefinition, ...] = BUILT_IN_AGENTS  # what the Agent tool may start (none: no Agent tool)
    agent_timeout_s: float = attrs.field(factory=defaults.agent_timeout_s)  # a sub-agent runs this long at most
    agent_id: str | None = None  # this run is a sub-agent (its id; its type below)
    agent_type: str | None = None
    # how many Agent calls deep this run is (0: the user's run); the machine's `children: agents` `depth`
    # says how deep a run may be and still start agents
    spawn_depth: int = 0
    # a sub-agent's exported spans nest under this OpenTelemetry context (its Agent call's span); None: a root
    telemetry_parent: Any = attrs.field(default=None, eq=False, repr=False)

    def working_directories(self) -> tuple[Path, ...]:
        """The run's working directories: ``cwd``, then the settings' additional directories (the MCP roots)."""
        extra = (Path(d) for d in self.rules.additional_directories)
        return (self.cwd, *(d for d in extra if d != self.cwd))

    def session_paths(self) -> SessionPaths:
        """Where this run's session is kept (by default in this working directory's project folder)."""
        if self.stored_as is not None:
            return self.stored_as
        home = self.home if self.home is not None else queryloop_home()
        return SessionPaths(home=home, cwd=self.cwd.resolve(), session_id=self.session_id)


def _telemetry(env: Mapping[str, str], warnings: list[str]) -> TelemetrySettings | None:
    """What to export; a value it cannot honour turns telemetry off with a warning (Claude Code runs on, silent)."""
    try:
        settings = telemetry_settings(env)
    except TelemetryConfigError as exc:
        warnings.append(f"OpenTelemetry export is off: {exc}")
        return None
    if settings is not None and (missing := settings.missing_packages()):
        warnings.append(f"OpenTelemetry export is off: {missing} is not installed (pip install 'queryloop[otel]')")
        return None
    return settings


def run_params(options: AgentOptions) -> dict[str, Any]:
    """The machine params a run of ``options`` is given: only what was set (the YAML's defaults fill the rest)."""
    params = {**options.params, "max_turns": options.max_turns}
    if options.max_retries is not None:
        params["max_retries"] = options.max_retries
    return params


def with_session(options: AgentOptions, choice: SessionChoice, *, continuing: bool = False) -> AgentOptions:
    """``options`` in the chosen session: opened as chosen, or ``continuing`` it (a conversation's later prompts)."""
    return attrs.evolve(
        options,
        session_id=choice.session_id,
        stored_as=choice.stored_as,
        resume_from=choice.stored_as if continuing else choice.resume_from,
        start_source="resume" if continuing else choice.start_source,
    )


def session_of(options: AgentOptions) -> SessionChoice:
    """The session ``options`` were put in (:func:`with_session`'s inverse): what a conversation continues."""
    return SessionChoice(
        session_id=options.session_id,
        stored_as=options.session_paths(),
        resume_from=options.resume_from,
        start_source=options.start_source,
    )


class ConfigError(ValueError):
    """A configuration that cannot run: one message naming the file or value and the fix.

    ``kind`` says which part was wrong (``settings``: a settings file or a permission
    rule; ``mcp``: the MCP configuration; ``sandbox``: a required sandbox that cannot
    start; ``agents``: a custom agent's definition; ``value``: an option's value), so each
    front-end can word it as its users expect.
    """

    def __init__(self, message: str, *, kind: Literal["settings", "mcp", "sandbox", "agents", "value"]) -> None:
        super().__init__(message)
        self.kind = kind


@attrs.frozen(kw_only=True)
class Resolved:
    """A resolved configuration and the warnings to show before the run starts."""

    options: AgentOptions
    warnings: tuple[str, ...] = ()


def _said(value: Any, hint: Any) -> Any:
    return value if value is not None else hint


def resolve_config(
    *,
    cwd: Path,
    settings_cwd: Path | None = None,
    prompt: str = "",
    scenario: Mapping[str, Any] | None = None,
    setting_sources: Collection[MemoryKind] = (),
    settings: str | None = None,
    model: str | None = None,
    fallback_models: Sequence[str] | None = None,
    tools: Sequence[str] | None = None,
    allowed_tools: Sequence[str] | None = None,
    disallowed_tools: Sequence[str] | None = None,
    permission_mode: PermissionMode | None = None,
    max_turns: int | None = None,
    max_retries: int | None = None,
    max_budget_usd: float | None = None,
    max_tokens: int | None = None,
    escalated_max_tokens: int | None = None,
    max_retry_after_s: float | None = None,
    request_timeout_s: float | None = None,
    retry_base_delay_s: float | None = None,
    system_prompt: str | None = None,
    append_system_prompt: str | None = None,
    mcp_config: Sequence[str] = (),
    strict_mcp_config: bool = False,
    custom_tools: Sequence[ToolSpec] = (),
    can_use_tool: AskPermission | None = None,
    hooks: HookConfig | None = None,
    env: Mapping[str, str] | None = None,
    auto_compact: bool = True,
    microcompact: bool = True,
    auto_compact_threshold: float | None = None,
    params: Mapping[str, Any] | None = None,
    persist: bool = True,
    home: Path | None = None,
    sandbox: bool = False,
    interactive: bool = False,
    agents: str | None = None,
) -> Resolved:
    """The run's configuration from what a front-end was told (None: not said); :class:`ConfigError` if it cannot run.

    ``cwd`` is where the tools work and CLAUDE.md files are found; ``settings_cwd`` where
    the settings files are (default: ``cwd``; the program reads them where it was started
    even when a scenario gives the run a fresh directory). ``scenario``: a scenario's
    hints (its ``cli`` section with its ``model`` and ``fallback_models``), used for what
    was not said. ``setting_sources``: which settings and CLAUDE.md files are read.
    ``settings``: ``--settings`` (a file or inline JSON, above the files). ``hooks`` and
    ``env`` are added to the settings' own. ``sandbox``: ``--sandbox``. ``agents``: ``--agents``
    (JSON), above the ``.claude/agents/*.md`` files of the project and then the user.
    """
    hints = scenario or {}
    settings_cwd = settings_cwd or cwd
    allowed = _said(allowed_tools, hints.get("allowed_tools"))
    disallowed = _said(disallowed_tools, hints.get("disallowed_tools"))
    hinted_mcp = [c if isinstance(c, str) else json.dumps(c) for c in hints.get("mcp_config", ())]
    try:
        loaded = load_settings(
            cwd=settings_cwd, settings_arg=_said(settings, hints.get("settings")), sources=setting_sources
        )
        rules = loaded.permissions.to_rules(cwd=cwd, allowed_tools=allowed, disallowed_tools=disallowed)
    except (SettingsError, PermissionRuleError) as exc:
        raise ConfigError(str(exc), kind="settings") from None
    try:
        servers, warnings = load_mcp_servers(
            cwd=settings_cwd, settings=loaded.raw, mcp_config=list(mcp_config) or hinted_mcp, strict=strict_mcp_config
        )
    except McpConfigError as exc:
        raise ConfigError(str(exc), kind="mcp") from None
    policy = SandboxPolicy.from_settings(loaded.raw.get("sandbox"), force=sandbox)
    problem = policy.problem()
    if problem is not None and policy.fail_if_unavailable:
        raise ConfigError(
            f"the sandbox is required (sandbox.failIfUnavailable) but unavailable: {problem}", kind="sandbox"
        )
    if problem is not None:
        warnings.append(
            f"sandbox unavailable: {problem}; Bash commands run unsandboxed, through the permission gate alone"
        )
    try:
        subagents = merge_agents(
            BUILT_IN_AGENTS,
            agents_from_files(Path.home() / ".claude" / "agents") if "user" in setting_sources else (),
            agents_from_files(settings_cwd / ".claude" / "agents") if "project" in setting_sources else (),
            agents_from_json(agents) if agents is not None else (),
        )
    except AgentDefinitionError as exc:
        raise ConfigError(str(exc), kind="agents") from None
    caps = dict(params or {})
    if max_retry_after_s is not None:
        caps["max_retry_after_s"] = max_retry_after_s
    try:
        options = AgentOptions(
            prompt=prompt,
            model=model or hints.get("model") or loaded.model or defaults.DEFAULT_MODEL,
            fallback_models=tuple(_said(fallback_models, hints.get("fallback_models")) or ()),
            cwd=cwd,
            max_turns=_said(max_turns, hints.get("max_turns")),
            max_retries=_said(
                max_retries, _said(hints.get("max_retries"), defaults.max_retries({**os.environ, **loaded.env}))
            ),
            max_budget_usd=_said(max_budget_usd, hints.get("max_budget_usd")),
            max_tokens=_said(max_tokens, defaults.MAX_OUTPUT_TOKENS),
            escalated_max_tokens=escalated_max_tokens,
            system_prompt=_said(system_prompt, defaults.DEFAULT_SYSTEM_PROMPT),
            append_system_prompt=_said(append_system_prompt, hints.get("append_system_prompt")),
            retry_base_delay_s=_said(retry_base_delay_s, defaults.retry_base_delay_s()),
            request_timeout_s=_said(request_timeout_s, defaults.request_timeout_s()),
            tools=None if tools is None else tuple(tools),
            custom_tools=tuple(custom_tools),
            can_use_tool=can_use_tool,
            mcp_servers=servers,
            auto_compact=auto_compact,
            microcompact=microcompact,
            auto_compact_threshold=_said(auto_compact_threshold, defaults.AUTO_COMPACT_THRESHOLD),
            params=caps,
            permission_mode=permission_mode
            or hints.get("permission_mode")
            or loaded.permissions.default_mode
            or "default",
            rules=rules,
            hooks=loaded.hooks.merged(hooks) if hooks is not None else loaded.hooks,
            interactive=interactive,
            tool_env={**loaded.env, **(env or {})},
            instructions=load_instructions(cwd, sources=setting_sources),
            persist=persist,
            home=home,
            sandbox=policy,
            telemetry=_telemetry({**os.environ, **loaded.env, **(env or {})}, warnings),
            agents=subagents,
        )
    except (TypeError, ValueError) as exc:  # a custom tool that is no ToolSpec, or clashes with a built-in
        raise ConfigError(str(exc), kind="value") from None
    return Resolved(options=options, warnings=tuple(warnings))
