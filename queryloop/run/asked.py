"""What a front-end was told (None: not said), in the records :func:`~queryloop.run.config.resolve_config` takes.

One record per concern, as :class:`~queryloop.run.config.AgentOptions` is made; resolving them is ``config``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from queryloop.handlers.tools import AskPermission, PermissionMode, ToolSpec

from .memory import MemoryKind

__all__ = ["AskedContext", "AskedLimits", "AskedRequest", "AskedSession", "AskedTools", "ConfigSources"]


@attrs.frozen(kw_only=True)
class ConfigSources:
    """Where configuration is read from besides the flags: settings files, MCP configuration, agent definitions.

    ``settings_cwd``: where the settings files are (None: the run's ``cwd``; the program
    reads them where it was started even when a scenario gives the run a fresh
    directory). ``setting_sources``: which settings and CLAUDE.md files are read.
    ``settings``: ``--settings`` (a file or inline JSON, above the files). ``mcp_config``:
    ``--mcp-config`` values (``strict_mcp_config``: only those). ``agents``: ``--agents``
    (JSON), above the ``.claude/agents/*.md`` files of the project and then the user.
    """

    settings_cwd: Path | None = None
    setting_sources: Collection[MemoryKind] = ()
    settings: str | None = None
    mcp_config: Sequence[str] = ()
    strict_mcp_config: bool = False
    agents: str | None = None


@attrs.frozen(kw_only=True)
class AskedRequest:
    """What was said of each model request (:class:`RequestSettings` once resolved)."""

    model: str | None = None
    fallback_models: Sequence[str] | None = None
    max_tokens: int | None = None
    escalated_max_tokens: int | None = None
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    request_timeout_s: float | None = None
    retry_base_delay_s: float | None = None


@attrs.frozen(kw_only=True)
class AskedLimits:
    """What was said of where the run stops (:class:`Limits` once resolved); ``params``: other caps of the YAML."""

    max_turns: int | None = None
    max_retries: int | None = None
    max_budget_usd: float | None = None
    max_retry_after_s: float | None = None
    params: Mapping[str, Any] | None = None


@attrs.frozen(kw_only=True)
class AskedTools:
    """What was said of the tools and the gate (:class:`ToolSettings` and :class:`PermissionSettings` once resolved).

    ``tools``: the built-in tools offered (None: all); ``allowed_tools`` / ``disallowed_tools``:
    permission rules; ``env``: added to the settings' own; ``sandbox``: ``--sandbox``;
    ``add_dirs``: ``--add-dir``, more working directories (relative ones against ``cwd``).
    """

    tools: Sequence[str] | None = None
    custom_tools: Sequence[ToolSpec] = ()
    allowed_tools: Sequence[str] | None = None
    disallowed_tools: Sequence[str] | None = None
    permission_mode: PermissionMode | None = None
    can_use_tool: AskPermission | None = None
    env: Mapping[str, str] | None = None
    sandbox: bool = False
    interactive: bool = False
    add_dirs: Sequence[str] = ()
    json_schema: Mapping[str, Any] | None = None
    permission_prompt_tool: str | None = None  # an MCP tool's name (mcp__SERVER__TOOL)


@attrs.frozen(kw_only=True)
class AskedContext:
    """What was said of compaction (:class:`ContextSettings` once resolved)."""

    auto_compact: bool = True
    microcompact: bool = True
    auto_compact_threshold: float | None = None


@attrs.frozen(kw_only=True)
class AskedSession:
    """What was said of the session's keeping (:class:`SessionSettings` once resolved; which session is chosen
    afterwards, :func:`with_session`)."""

    persist: bool = True
    home: Path | None = None
