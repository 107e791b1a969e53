"""The options of the Python API, named as the Claude Agent SDK for Python's, and what they become.

Owns :class:`QueryOptions`, the SDK's hook and permission records, :func:`create_sdk_mcp_server` and
:func:`agent_options`. A problem is an :class:`OptionsError` naming the fix.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, cast

import attrs

from queryloop.fsm import inert
from queryloop.handlers.hooks import HOOK_EVENTS, HookCallback, HookConfig, HookFunction
from queryloop.handlers.hooks import HookMatcher as MatcherGroup
from queryloop.handlers.mcp import tool_name
from queryloop.handlers.messages import ToolCall
from queryloop.handlers.request import ModelBackend
from queryloop.handlers.tools import (
    PERMISSION_MODES,
    AskPermission,
    PermissionAnswer,
    PermissionMode,
    ToolSpec,
    observable_input,
)

from ..run.config import (
    AgentOptions,
    AskedLimits,
    AskedRequest,
    AskedSession,
    AskedTools,
    ConfigError,
    ConfigSources,
    resolve_config,
)
from ..run.defaults import DEFAULT_SYSTEM_PROMPT
from ..run.memory import MEMORY_KINDS, MemoryKind

__all__ = [
    "CanUseTool",
    "ClaudeAgentOptions",
    "HookMatcher",
    "OptionsError",
    "PermissionResult",
    "PermissionResultAllow",
    "PermissionResultDeny",
    "QueryOptions",
    "SdkMcpServer",
    "ToolPermissionContext",
    "agent_options",
    "create_sdk_mcp_server",
    "permission_asker",
]

"""The model a prompt uses when neither the options nor the settings name one (the CLI's default)."""


class OptionsError(ValueError):
    """The options cannot make a run (a bad value, unreadable settings, no such session); the message says why."""


# ---- the SDK's permission and hook records ---------------------------------------------------


@attrs.frozen(kw_only=True)
class ToolPermissionContext:
    """What ``can_use_tool`` is told besides the tool and its input: the call's id and why it asks."""

    signal: Any = None  # the SDK's placeholder for an abort signal; always None
    suggestions: list[Any] = attrs.field(factory=list)
    tool_use_id: str | None = None
    decision_reason: str | None = None


@attrs.frozen(kw_only=True)
class PermissionResultAllow:
    """``can_use_tool``'s yes: the call runs, with ``updated_input`` instead of the model's when given."""

    behavior: Literal["allow"] = "allow"
    updated_input: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class PermissionResultDeny:
    """``can_use_tool``'s no: the model reads ``message``; ``interrupt`` also interrupts the prompt."""

    behavior: Literal["deny"] = "deny"
    message: str = ""
    interrupt: bool = False


PermissionResult = PermissionResultAllow | PermissionResultDeny
CanUseTool = Callable[[str, dict[str, Any], ToolPermissionContext], Awaitable[PermissionResult]]
"""The SDK's permission callback: ``(tool_name, input, context)`` → allow or deny."""


def _callbacks(value: Iterable[HookCallback]) -> tuple[HookCallback, ...]:
    return tuple(value)


@attrs.frozen
class HookMatcher:
    """Python hooks for one event, as the SDK spells them: ``HookMatcher(matcher="Bash", hooks=[check])``.

    ``matcher`` is a settings matcher (``None``/``"*"``: every tool; ``"Edit|Write"``:
    exact names; else a regular expression); each hook is ``async (input_data,
    tool_use_id, context) -> dict`` answering what a command hook prints as JSON;
    ``timeout`` (seconds, default 60) bounds each.
    """

    matcher: str | None = None
    hooks: tuple[HookCallback, ...] = attrs.field(factory=tuple, converter=_callbacks)
    timeout: float | None = None


@attrs.frozen(kw_only=True)
class SdkMcpServer:
    """Python tools served in process under one server name (what :func:`create_sdk_mcp_server` makes)."""

    name: str
    version: str = "1.0.0"
    tools: tuple[ToolSpec, ...] = ()


def create_sdk_mcp_server(
    name: str, version: str = "1.0.0", tools: Iterable[ToolSpec] | None = None
) -> dict[str, object]:
    """The SDK's in-process server of ``@tool`` functions, for ``QueryOptions(mcp_servers={name: ...})``.

    Its tools are offered as ``mcp__<name>__<tool>`` (permission rules name them so, or
    ``mcp__<name>`` for all of them); they run in this process like ``custom_tools``.
    """
    return {"type": "sdk", "name": name, "instance": SdkMcpServer(name=name, version=version, tools=tuple(tools or ()))}


# ---- the options --------------------------------------------------------------------------------


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _optional_names(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else _names(value)


def _specs(value: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
    return tuple(value)


def _hook_map(value: Mapping[str, Iterable[HookMatcher]] | None) -> dict[str, tuple[HookMatcher, ...]]:
    return {event: tuple(groups) for event, groups in (value or {}).items()}


@attrs.frozen(kw_only=True)
class QueryOptions:
    """How :func:`queryloop.query` and :class:`queryloop.QueryClient` run (the SDK's ``ClaudeAgentOptions``).

    The SDK's fields: ``tools`` (built-in tool names offered; None: all), ``allowed_tools``
    / ``disallowed_tools`` (permission rules, ``"Bash(git:*)"``), ``system_prompt`` (a str,
    or ``{"type": "preset", "preset": "claude_code", "append": ...}``: queryloop's own prompt
    plus ``append``), ``permission_mode``, ``max_turns``, ``max_budget_usd``, ``model``,
    ``fallback_model`` (one, or queryloop's chain of up to 3), ``cwd``, ``resume`` /
    ``continue_conversation`` / ``fork_session`` / ``session_id`` (as ``--resume``,
    ``--continue``, ``--fork-session``, ``--session-id``), ``settings`` (a file or inline
    JSON, as ``--settings``), ``setting_sources`` (which settings files and CLAUDE.md
    files are read: ``user``, ``project``, ``local``; None reads none, as the SDK),
    ``env`` (passed to the tools' commands), ``hooks`` (``{"PreToolUse":
    [HookMatcher(...)]}``) and ``can_use_tool`` (answers what would ask; without it a
    call that would ask is denied), ``mcp_servers`` (``{name: {"command": ..., "args":
    [...]}}`` or ``{"type": "http", "url": ...}``, Claude Code's ``mcpServers`` entries,
    or a JSON file or text holding ``{"mcpServers": ...}``; a :func:`create_sdk_mcp_server`
    value serves Python tools) and ``strict_mcp_config`` (only those servers, not the
    settings' or an approved ``.mcp.json``'s).

    queryloop's own: ``custom_tools`` (``@queryloop.tool`` functions, offered after the
    built-ins), ``backend`` (the model backend; default: the ``anthropic`` SDK with
    ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``), ``home`` (where sessions are kept;
    default ``$QUERYLOOP_HOME``, else ``~/.queryloop``), ``persist_session``,
    ``max_retries``, ``max_tokens`` (output cap), ``retry_base_delay_s`` and ``params``
    (other caps of ``machines/query_loop.yaml``).
    """

    tools: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names)
    allowed_tools: tuple[str, ...] = attrs.field(default=(), converter=_names)
    disallowed_tools: tuple[str, ...] = attrs.field(default=(), converter=_names)
    system_prompt: str | Mapping[str, Any] | None = None
    permission_mode: PermissionMode | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    model: str | None = None
    fallback_model: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names)
    cwd: str | Path | None = None
    resume: str | None = None
    continue_conversation: bool = False
    fork_session: bool = False
    session_id: str | None = None
    settings: str | None = None
    setting_sources: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names)
    env: Mapping[str, str] = attrs.field(factory=dict)
    hooks: Mapping[str, tuple[HookMatcher, ...]] = attrs.field(factory=dict, converter=_hook_map)
    can_use_tool: CanUseTool | None = None
    mcp_servers: Mapping[str, Mapping[str, Any]] | str | Path = attrs.field(factory=dict)
    strict_mcp_config: bool = False
    # queryloop's own
    custom_tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_specs)
    backend: ModelBackend | None = None
    home: Path | None = None
    persist_session: bool = True
    max_retries: int | None = None  # None: the machine's
    max_tokens: int | None = None  # None: queryloop.run.defaults'
    retry_base_delay_s: float | None = None  # None: queryloop.run.defaults'
    params: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.permission_mode is not None and self.permission_mode not in PERMISSION_MODES:
            raise OptionsError(f"permission_mode {self.permission_mode!r} is not one of {', '.join(PERMISSION_MODES)}")
        unknown = sorted(set(self.setting_sources or ()) - set(MEMORY_KINDS))
        if unknown:
            raise OptionsError(f"setting_sources {unknown} are not among {', '.join(MEMORY_KINDS)}")
        if self.max_turns is not None and self.max_turns < 1:
            raise OptionsError(f"max_turns must be at least 1 (or None: no limit), got {self.max_turns}")
        if len(self.fallback_model or ()) > 3:
            raise OptionsError(f"at most 3 fallback models, got {len(self.fallback_model or ())}")
        if self.resume is not None and self.continue_conversation:
            raise OptionsError("resume and continue_conversation exclude each other: give one")


ClaudeAgentOptions = QueryOptions
"""The Claude Agent SDK's name for :class:`QueryOptions`."""


# ---- what they become ------------------------------------------------------------------------------


def _system_prompt(value: str | Mapping[str, object] | None) -> tuple[str, str | None]:
    """The system prompt and what is appended to it."""
    if value is None:
        return DEFAULT_SYSTEM_PROMPT, None
    if isinstance(value, str):
        return value, None
    if value.get("type") == "preset":
        append = value.get("append")
        return DEFAULT_SYSTEM_PROMPT, append if isinstance(append, str) else None
    raise OptionsError(
        f"system_prompt {dict(value)!r} is neither a str nor "
        '{"type": "preset", "preset": "claude_code", "append": "..."}'
    )


def _python_hooks(hooks: Mapping[str, tuple[HookMatcher, ...]]) -> HookConfig:
    groups: list[MatcherGroup] = []
    for event, matchers in hooks.items():
        if event not in HOOK_EVENTS:
            raise OptionsError(f"hooks: {event!r} is no hook event; the events are {', '.join(HOOK_EVENTS)}")
        for matcher in matchers:
            if not isinstance(matcher, HookMatcher):
                raise OptionsError(f"hooks[{event!r}] must hold HookMatcher(matcher=..., hooks=[...]), got {matcher!r}")
            try:
                functions = tuple(HookFunction(callback=fn, timeout_s=matcher.timeout) for fn in matcher.hooks)
                groups.append(MatcherGroup(event=event, matcher=matcher.matcher or "", hooks=functions))
            except (TypeError, re.error) as exc:
                raise OptionsError(f"hooks[{event!r}] matcher {matcher.matcher!r}: {exc}") from None
    return HookConfig(matchers=tuple(groups))


def _mcp_config(options: QueryOptions) -> list[str]:
    """The MCP servers to start, as ``--mcp-config`` would give them (the in-process ones are tools, not servers)."""
    value = options.mcp_servers
    if isinstance(value, Mapping):
        remote = {name: dict(entry) for name, entry in value.items() if entry.get("type") != "sdk"}
        return [json.dumps({"mcpServers": remote})] if remote else []
    return [str(value)]


def _served_tools(options: QueryOptions) -> tuple[ToolSpec, ...]:
    """The tools of the in-process servers (:func:`create_sdk_mcp_server`), named ``mcp__<server>__<tool>``."""
    value = options.mcp_servers
    tools: list[ToolSpec] = []
    for name, entry in value.items() if isinstance(value, Mapping) else ():
        if entry.get("type") != "sdk":
            continue
        server = entry.get("instance")
        if not isinstance(server, SdkMcpServer):
            raise OptionsError(
                f"mcp_servers[{name!r}] is an sdk server without tools: make it with create_sdk_mcp_server"
            )
        tools.extend(attrs.evolve(spec, name=tool_name(name, spec.name)) for spec in server.tools)
    return tuple(tools)


def agent_options(options: QueryOptions, *, can_use_tool: AskPermission | None) -> AgentOptions:
    """The run options every prompt of a conversation starts from (its prompt and session are set per prompt).

    Settings files, permission rules and CLAUDE.md files are read here, once
    (:func:`queryloop.run.config.resolve_config`, as for the program's flags).
    """
    cwd = Path(options.cwd if options.cwd is not None else Path.cwd()).resolve()
    if not cwd.is_dir():
        raise OptionsError(f"cwd {str(cwd)!r} is not a directory")
    system_prompt, append = _system_prompt(options.system_prompt)
    try:
        resolved = resolve_config(
            cwd=cwd,
            sources=ConfigSources(
                setting_sources=cast(tuple[MemoryKind, ...], options.setting_sources or ()),
                settings=options.settings,
                mcp_config=_mcp_config(options),
                strict_mcp_config=options.strict_mcp_config,
            ),
            request=AskedRequest(
                model=options.model,
                fallback_models=options.fallback_model,
                max_tokens=options.max_tokens,
                retry_base_delay_s=options.retry_base_delay_s,
                system_prompt=system_prompt,
                append_system_prompt=append,
            ),
            limits=AskedLimits(
                max_turns=options.max_turns,
                max_retries=options.max_retries,
                max_budget_usd=options.max_budget_usd,
                params=options.params,
            ),
            tools=AskedTools(
                tools=options.tools,
                custom_tools=(*options.custom_tools, *_served_tools(options)),
                allowed_tools=options.allowed_tools,
                disallowed_tools=options.disallowed_tools,
                permission_mode=options.permission_mode,
                can_use_tool=can_use_tool,
                env=options.env,
            ),
            hooks=_python_hooks(options.hooks),
            session=AskedSession(persist=options.persist_session, home=options.home),
        )
    except ConfigError as exc:
        raise OptionsError(f"mcp_servers: {exc}" if exc.kind == "mcp" else str(exc)) from None
    for warning in resolved.warnings:
        print(inert(f"queryloop: warning: {warning}"), file=sys.stderr)
    return resolved.options


def permission_asker(callback: CanUseTool, *, cwd: Path, on_interrupt: Callable[[], object]) -> AskPermission:
    """The SDK's ``can_use_tool`` as the gate asks it; a deny with ``interrupt`` calls ``on_interrupt``.

    The callback sees a file tool's path absolute (against ``cwd``), as Claude Code shows it.
    """

    async def ask(call: ToolCall, reason: str) -> PermissionAnswer:
        context = ToolPermissionContext(tool_use_id=call.id, decision_reason=reason)
        result: object = await callback(call.name, observable_input(call.name, call.input, cwd=cwd), context)
        if isinstance(result, PermissionResultAllow):
            return PermissionAnswer(allow=True, updated_input=result.updated_input)
        if isinstance(result, PermissionResultDeny):
            if result.interrupt:
                on_interrupt()
                await asyncio.sleep(0)  # the interrupt lands here, at the gate, whose abort edge ends the prompt
            return PermissionAnswer(allow=False, message=result.message)
        raise TypeError(
            f"can_use_tool returned {type(result).__name__}; return PermissionResultAllow() or "
            "PermissionResultDeny(message=...)"
        )

    return ask
