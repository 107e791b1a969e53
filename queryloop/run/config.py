"""A run's configuration: one record (:class:`AgentOptions`) and the one function that resolves it.

Every way in calls :func:`resolve_config` with what it was told (``queryloop.run.asked``'s records). What was not
said comes from a scenario's hints, then the settings, then the defaults; a cap nobody set is left to the YAML.
Every problem is a :class:`ConfigError` before anything runs.
"""

from __future__ import annotations

import json
import os
import shlex
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from queryloop.handlers.agents import (
    BUILT_IN_AGENTS,
    AgentDefinition,
    AgentDefinitionError,
    agents_from_files,
    agents_from_json,
    merge_agents,
)
from queryloop.handlers.hooks import HookConfig
from queryloop.handlers.mcp import Elicit, McpConfigError, McpServerConfig, with_timeouts
from queryloop.handlers.request import max_output_tokens, resolve_model
from queryloop.handlers.session import MAX_CHECKPOINTS, SessionPaths, queryloop_home
from queryloop.handlers.tools import (
    AskPermission,
    PermissionMode,
    PermissionRuleError,
    PermissionRules,
    SandboxPolicy,
    ToolSpec,
    default_registry,
)

from . import defaults
from .asked import AskedContext, AskedLimits, AskedRequest, AskedSession, AskedTools, ConfigSources
from .mcp_config import load_mcp_servers
from .memory import InstructionFile, MemoryKind, load_instructions
from .sessions import SessionChoice
from .settings import Settings, SettingsError, load_settings
from .telemetry import TelemetryConfigError, TelemetrySettings, telemetry_settings

__all__ = [
    "AgentOptions",
    "AgentSettings",
    "AskedContext",
    "AskedLimits",
    "AskedRequest",
    "AskedSession",
    "AskedTools",
    "ConfigError",
    "ConfigSources",
    "ContextSettings",
    "Limits",
    "PermissionSettings",
    "RequestSettings",
    "Resolved",
    "SessionSettings",
    "ToolSettings",
    "resolve_config",
    "run_params",
    "session_of",
    "with_session",
]


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
class RequestSettings:
    """What each model request asks for: the model and its fallbacks, the system prompt, the output cap, the timing."""

    model: str
    fallback_models: tuple[str, ...] = ()
    max_tokens: int = defaults.MAX_OUTPUT_TOKENS  # for ``model`` (:meth:`max_tokens_for` another)
    asked_max_tokens: int | None = None  # --max-output-tokens: every model's max_tokens (None: each model's own)
    fallback_max_tokens: tuple[int, ...] = ()  # each fallback model's max_tokens (none: ``max_tokens``)
    escalated_max_tokens: int | None = None
    system_prompt: str = defaults.DEFAULT_SYSTEM_PROMPT
    append_system_prompt: str | None = None
    retry_base_delay_s: float = attrs.field(factory=defaults.retry_base_delay_s)
    idle_timeout_s: float = attrs.field(factory=defaults.idle_timeout_s)
    request_timeout_s: float | None = attrs.field(factory=defaults.request_timeout_s)  # None: only the idle timeout

    def max_tokens_for(self, model: str, env: Mapping[str, str]) -> int:
        """The ``max_tokens`` of a request to ``model`` (a sub-agent's): the asked one, else the model's own."""
        return max_output_tokens(model, env, self.asked_max_tokens)

    def switched_to(self, name: str, env: Mapping[str, str]) -> RequestSettings:
        """These settings on the model ``name`` (an alias resolved as ``--model``'s is), at its ``max_tokens``."""
        model = resolve_model(name, env)
        return attrs.evolve(self, model=model, max_tokens=self.max_tokens_for(model, env))


@attrs.frozen(kw_only=True)
class Limits:
    """Where the run stops: the machine's caps that were set (an unset one is the YAML's) and the budget."""

    max_turns: int | None = None  # None: no limit (the YAML's max_turns)
    max_retries: int | None = None  # None: the YAML's max_retries
    max_budget_usd: float | None = None
    params: dict[str, Any] = attrs.field(factory=dict)  # other machine params (caps) to override


@attrs.frozen(kw_only=True)
class ToolSettings:
    """Which tools are offered — built-in, the caller's own, the MCP servers' — and what they are given."""

    builtins: tuple[str, ...] | None = None  # the built-in tools offered, by name; None = all of them
    # tools of the caller's own (ToolSpecs, e.g. from @queryloop.tool), offered after the built-ins
    custom_tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tool_specs, validator=_check_custom_tools)
    mcp_servers: tuple[McpServerConfig, ...] = ()  # MCP servers whose tools are offered (mcp__<server>__<tool>)
    ask_input: Elicit | None = None  # answers an MCP server's request for input no hook answered (the user)
    env: dict[str, str] = attrs.field(factory=dict)  # settings `env`: passed to tools on purpose
    # --json-schema: the answer is a StructuredOutput call whose input follows it (None: a text answer)
    json_schema: dict[str, Any] | None = None
    records: bool = False  # each call's record kept for its reader (stream-json's tool_use_result) without hooks


@attrs.frozen(kw_only=True)
class PermissionSettings:
    """How the permission gate decides a call: the mode, the rules, and who answers what would ask."""

    mode: PermissionMode = "default"
    rules: PermissionRules = attrs.field(factory=PermissionRules)
    can_use_tool: AskPermission | None = None  # answers what would ask (instead of a denial or a terminal prompt)
    interactive: bool = False  # a terminal to ask on
    # --permission-prompt-tool mcp__SERVER__TOOL: that MCP tool answers what would ask, and the model never sees it
    prompt_tool: str | None = None

    def hides(self, tool_name: str) -> bool:
        """True if ``tool_name`` is kept from the model: a bare deny rule removes it, or it is the prompt tool."""
        return tool_name == self.prompt_tool or self.rules.hides(tool_name)


@attrs.frozen(kw_only=True)
class ContextSettings:
    """What the context window holds beside the conversation, and when it is compacted."""

    auto_compact: bool = True
    microcompact: bool = True  # clear old tool results once that pays (docs/caching.md)
    auto_compact_threshold: float = defaults.AUTO_COMPACT_THRESHOLD  # of the effective window
    instructions: tuple[InstructionFile, ...] = ()  # CLAUDE.md files (queryloop.run.memory), sent with every request


@attrs.frozen(kw_only=True)
class SessionSettings:
    """The session the run is a prompt of: its id, where it is kept (unless ``persist`` is off), what it continues."""

    session_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    persist: bool = True
    home: Path | None = None  # None: $QUERYLOOP_HOME, else ~/.queryloop
    stored_as: SessionPaths | None = None  # where this run's session is kept (default: home, cwd, session_id)
    resume_from: SessionPaths | None = None  # the stored session whose history this run continues (itself, or a fork's)
    start_source: str = "startup"  # what SessionStart hooks are told: startup, resume or fork
    max_checkpoints: int = MAX_CHECKPOINTS


@attrs.frozen(kw_only=True)
class AgentSettings:
    """The sub-agents this run may start (the Agent tool), and which sub-agent this run is, if it is one."""

    definitions: tuple[AgentDefinition, ...] = BUILT_IN_AGENTS  # what the Agent tool may start (none: no Agent tool)
    timeout_s: float = attrs.field(factory=defaults.agent_timeout_s)  # a sub-agent runs this long at most
    agent_id: str | None = None  # this run is a sub-agent (its id; its type below)
    agent_type: str | None = None
    # how many Agent calls deep this run is (0: the user's run); the machine's `children: agents` `depth`
    # says how deep a run may be and still start agents
    spawn_depth: int = 0
    # a sub-agent's exported spans nest under this OpenTelemetry context (its Agent call's span); None: a root
    telemetry_parent: Any = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen(kw_only=True)
class AgentOptions:
    """What one run was asked to do, resolved: every value it runs with (:func:`resolve_config` makes it).

    The prompt and the working directory, then one record per concern: ``request``
    (:class:`RequestSettings`), ``limits`` (:class:`Limits`), ``tools``
    (:class:`ToolSettings`), ``permissions`` (:class:`PermissionSettings`), ``hooks``,
    ``context`` (:class:`ContextSettings`), ``session`` (:class:`SessionSettings`),
    ``sandbox``, ``telemetry`` and ``agents`` (:class:`AgentSettings`).
    """

    prompt: str
    prompt_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))  # the prompt's transcript uuid
    # the run compacts the session's history instead of sending ``prompt`` (/compact): the user's
    # instructions for the summary ("" for none); None: an ordinary prompt
    compact: str | None = None
    cwd: Path = attrs.field(factory=Path.cwd)
    request: RequestSettings
    limits: Limits = attrs.field(factory=Limits)
    tools: ToolSettings = attrs.field(factory=ToolSettings)
    permissions: PermissionSettings = attrs.field(factory=PermissionSettings)
    hooks: HookConfig = attrs.field(factory=HookConfig)
    context: ContextSettings = attrs.field(factory=ContextSettings)
    session: SessionSettings = attrs.field(factory=SessionSettings)
    sandbox: SandboxPolicy = attrs.field(factory=SandboxPolicy)  # the settings' `sandbox` (and --sandbox)
    telemetry: TelemetrySettings | None = None  # OpenTelemetry export (queryloop.run.telemetry); None: off
    agents: AgentSettings = attrs.field(factory=AgentSettings)

    def working_directories(self) -> tuple[Path, ...]:
        """The run's working directories: ``cwd``, then the settings' additional directories (the MCP roots)."""
        extra = (Path(d) for d in self.permissions.rules.additional_directories)
        return (self.cwd, *(d for d in extra if d != self.cwd))

    def session_paths(self) -> SessionPaths:
        """Where this run's session is kept (by default in this working directory's project folder)."""
        session = self.session
        if session.stored_as is not None:
            return session.stored_as
        home = session.home if session.home is not None else queryloop_home()
        return SessionPaths(home=home, cwd=self.cwd.resolve(), session_id=session.session_id)


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


def run_params(options: AgentOptions) -> dict[str, object]:
    """The machine params a run of ``options`` is given: only what was set (the YAML's defaults fill the rest)."""
    limits = options.limits
    params = {**limits.params, "max_turns": limits.max_turns}
    if limits.max_retries is not None:
        params["max_retries"] = limits.max_retries
    return params


def with_session(options: AgentOptions, choice: SessionChoice, *, continuing: bool = False) -> AgentOptions:
    """``options`` in the chosen session: opened as chosen, or ``continuing`` it (a conversation's later prompts)."""
    session = attrs.evolve(
        options.session,
        session_id=choice.session_id,
        stored_as=choice.stored_as,
        resume_from=choice.stored_as if continuing else choice.resume_from,
        start_source="resume" if continuing else choice.start_source,
    )
    return attrs.evolve(options, session=session)


def session_of(options: AgentOptions) -> SessionChoice:
    """The session ``options`` were put in (:func:`with_session`'s inverse): what a conversation continues."""
    return SessionChoice(
        session_id=options.session.session_id,
        stored_as=options.session_paths(),
        resume_from=options.session.resume_from,
        start_source=options.session.start_source,
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
    ignored: tuple[str, ...] = ()  # of the warnings, what an untrusted folder's settings would have widened


def _said(value: object, hint: object) -> Any:
    return value if value is not None else hint


def _json(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def resolve_config(
    *,
    cwd: Path,
    prompt: str = "",
    scenario: Mapping[str, Any] | None = None,
    sources: ConfigSources | None = None,
    request: AskedRequest | None = None,
    limits: AskedLimits | None = None,
    tools: AskedTools | None = None,
    hooks: HookConfig | None = None,
    context: AskedContext | None = None,
    session: AskedSession | None = None,
) -> Resolved:
    """The run's configuration from what a front-end was told (None: not said); :class:`ConfigError` if it cannot run.

    ``cwd`` is where the tools work and CLAUDE.md files are found. ``scenario``: a
    scenario's hints (its ``cli`` section with its ``model`` and ``fallback_models``),
    used for what was not said. ``sources``: where the settings, the MCP configuration
    and the agent definitions are read (:class:`ConfigSources`). ``hooks`` are added to
    the settings' own. The other records hold what was said of each part of
    :class:`AgentOptions`.
    """
    hints = scenario or {}
    src = sources or ConfigSources()
    asked_tools = tools or AskedTools()
    settings_cwd = src.settings_cwd or cwd
    loaded, rules = _settings_and_rules(cwd, settings_cwd, src, asked_tools, hints)
    try:
        servers, warnings = load_mcp_servers(
            cwd=settings_cwd,
            settings=loaded.raw,
            mcp_config=list(src.mcp_config) or [_json(c) for c in hints.get("mcp_config", ())],
            strict=src.strict_mcp_config,
        )
    except McpConfigError as exc:
        raise ConfigError(str(exc), kind="mcp") from None
    if loaded.ignored:  # an untrusted folder's widening keys, named before anything else, then how to trust it
        trust = f"queryloop trust {shlex.quote(str(settings_cwd))}"
        warnings[:0] = [*loaded.ignored, f"to trust {settings_cwd} and use them, run: {trust}"]
    rules = _with_added_dirs(rules, cwd, asked_tools.add_dirs, warnings)
    policy = _sandbox(loaded.raw.get("sandbox"), force=asked_tools.sandbox, warnings=warnings)
    subagents = _subagents(settings_cwd, src)
    env = asked_tools.env or {}
    asked_session = session or AskedSession()
    mode = asked_tools.permission_mode or hints.get("permission_mode") or loaded.permissions.default_mode or "default"
    mode = _allowed_mode(mode, loaded.raw.get("permissions"), warnings)
    read_env = {**os.environ, **loaded.env}  # what Claude Code reads: its environment, the settings' env above it
    servers = with_timeouts(servers, read_env, warnings)  # MCP_TOOL_TIMEOUT, MCP_TIMEOUT
    try:
        options = AgentOptions(
            prompt=prompt,
            cwd=cwd,
            limits=_limits(limits or AskedLimits(), hints, read_env),
            request=_request(request or AskedRequest(), hints, loaded.model, read_env, plan=mode == "plan"),
            tools=ToolSettings(
                builtins=None if asked_tools.tools is None else tuple(asked_tools.tools),
                custom_tools=tuple(asked_tools.custom_tools),
                mcp_servers=servers,
                env={**loaded.env, **env},
                json_schema=None if asked_tools.json_schema is None else dict(asked_tools.json_schema),
            ),
            permissions=PermissionSettings(
                mode=mode,
                rules=rules,
                can_use_tool=asked_tools.can_use_tool,
                interactive=asked_tools.interactive,
                prompt_tool=asked_tools.permission_prompt_tool,
            ),
            hooks=loaded.hooks.merged(hooks) if hooks is not None else loaded.hooks,
            context=_context(context or AskedContext(), cwd, src.setting_sources, warnings),
            session=SessionSettings(persist=asked_session.persist, home=asked_session.home),
            sandbox=policy,
            telemetry=_telemetry({**os.environ, **loaded.env, **env}, warnings),
            agents=AgentSettings(definitions=subagents),
        )
    except (TypeError, ValueError) as exc:  # a custom tool that is no ToolSpec, or clashes with a built-in
        raise ConfigError(str(exc), kind="value") from None
    return Resolved(options=options, warnings=tuple(warnings), ignored=loaded.ignored)


def _settings_and_rules(
    cwd: Path, settings_cwd: Path, src: ConfigSources, asked: AskedTools, hints: Mapping[str, object]
) -> tuple[Settings, PermissionRules]:
    """The settings files (and ``--settings``) read, and the permission rules they and the flags make."""
    allowed = _said(asked.allowed_tools, hints.get("allowed_tools"))
    disallowed = _said(asked.disallowed_tools, hints.get("disallowed_tools"))
    try:
        loaded = load_settings(
            cwd=settings_cwd, settings_arg=_said(src.settings, hints.get("settings")), sources=src.setting_sources
        )
        rules = loaded.permissions.to_rules(cwd=cwd, allowed_tools=allowed, disallowed_tools=disallowed)
    except (SettingsError, PermissionRuleError) as exc:
        raise ConfigError(str(exc), kind="settings") from None
    return loaded, rules


def _with_added_dirs(rules: PermissionRules, cwd: Path, added: Sequence[str], warnings: list[str]) -> PermissionRules:
    """``rules`` with ``--add-dir``'s directories among the working directories (the user's own flag: honoured
    whether or not the folder is trusted); one that is no directory is left out with a warning."""
    kept = list(rules.additional_directories)
    for raw in added:
        directory = (cwd / Path(raw).expanduser()).resolve()
        if not directory.is_dir():
            warnings.append(f"--add-dir {raw}: {directory} is not a directory; it is not added")
        elif directory not in kept:
            kept.append(directory)
    return attrs.evolve(rules, additional_directories=kept)


def _allowed_mode(mode: PermissionMode, permissions: object, warnings: list[str]) -> PermissionMode:
    """``mode``, but ``default`` for ``bypassPermissions`` when the settings'
    ``permissions.disableBypassPermissionsMode`` is ``"disable"`` (as Claude Code 2.1.235 does,
    which says nothing; here a warning says why)."""
    if mode != "bypassPermissions" or not isinstance(permissions, dict):
        return mode
    if permissions.get("disableBypassPermissionsMode") != "disable":
        return mode
    warnings.append("bypassPermissions is off in the settings (permissions.disableBypassPermissionsMode): mode default")
    return "default"


def _sandbox(raw: Any, *, force: bool, warnings: list[str]) -> SandboxPolicy:
    """The settings' ``sandbox`` (and ``--sandbox``); a required one that cannot start is a :class:`ConfigError`."""
    policy = SandboxPolicy.from_settings(raw, force=force)
    if policy.enabled:
        warnings.extend(policy.places(Path.home()).problems)
    problem = policy.problem()
    if problem is not None and policy.fail_if_unavailable:
        raise ConfigError(
            f"the sandbox is required (sandbox.failIfUnavailable) but unavailable: {problem}", kind="sandbox"
        )
    if problem is not None:
        warnings.append(
            f"sandbox unavailable: {problem}; Bash commands run unsandboxed, through the permission gate alone"
        )
    return policy


def _subagents(settings_cwd: Path, src: ConfigSources) -> tuple[AgentDefinition, ...]:
    """The agents the Agent tool may start: the built-in ones, then the user's, the project's, ``--agents``."""
    try:
        return merge_agents(
            BUILT_IN_AGENTS,
            agents_from_files(Path.home() / ".claude" / "agents") if "user" in src.setting_sources else (),
            agents_from_files(settings_cwd / ".claude" / "agents") if "project" in src.setting_sources else (),
            agents_from_json(src.agents) if src.agents is not None else (),
        )
    except AgentDefinitionError as exc:
        raise ConfigError(str(exc), kind="agents") from None


def _request(
    asked: AskedRequest, hints: Mapping[str, Any], settings_model: str | None, env: Mapping[str, str], *, plan: bool
) -> RequestSettings:
    """The request settings; every model name resolved as Claude Code does (aliases, ``ANTHROPIC_DEFAULT_*_MODEL``,
    retired ids), ``ANTHROPIC_MODEL`` below the flag and the scenario and above the settings, ``max_tokens`` the
    model's unless ``--max-output-tokens`` or ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` says otherwise."""
    # a scenario's model is what its server answers, so it ranks above a variable left set in the shell
    named = asked.model or hints.get("model") or env.get("ANTHROPIC_MODEL") or settings_model or defaults.DEFAULT_MODEL
    model = resolve_model(named, env, plan=plan)
    fallbacks = tuple(
        resolve_model(m, env, plan=plan) for m in _said(asked.fallback_models, hints.get("fallback_models")) or ()
    )
    return RequestSettings(
        model=model,
        fallback_models=fallbacks,
        max_tokens=max_output_tokens(model, env, asked.max_tokens),
        fallback_max_tokens=tuple(max_output_tokens(m, env, asked.max_tokens) for m in fallbacks),
        asked_max_tokens=asked.max_tokens,
        escalated_max_tokens=asked.escalated_max_tokens,
        system_prompt=_said(asked.system_prompt, defaults.DEFAULT_SYSTEM_PROMPT),
        append_system_prompt=_said(asked.append_system_prompt, hints.get("append_system_prompt")),
        retry_base_delay_s=_said(asked.retry_base_delay_s, defaults.retry_base_delay_s()),
        request_timeout_s=_said(asked.request_timeout_s, defaults.request_timeout_s()),
    )


def _limits(asked: AskedLimits, hints: Mapping[str, object], env: dict[str, str]) -> Limits:
    caps = dict(asked.params or {})
    if asked.max_retry_after_s is not None:
        caps["max_retry_after_s"] = asked.max_retry_after_s
    retries = defaults.structured_output_retries(env)
    if retries is not None:
        caps.setdefault("max_structured_output_retries", retries)
    return Limits(
        max_turns=_said(asked.max_turns, hints.get("max_turns")),
        max_retries=_said(asked.max_retries, _said(hints.get("max_retries"), defaults.max_retries(env))),
        max_budget_usd=_said(asked.max_budget_usd, hints.get("max_budget_usd")),
        params=caps,
    )


def _context(
    asked: AskedContext, cwd: Path, setting_sources: Collection[MemoryKind], warnings: list[str]
) -> ContextSettings:
    return ContextSettings(
        auto_compact=asked.auto_compact,
        microcompact=asked.microcompact,
        auto_compact_threshold=_said(asked.auto_compact_threshold, defaults.AUTO_COMPACT_THRESHOLD),
        instructions=load_instructions(cwd, sources=setting_sources, skipped=warnings),
    )
