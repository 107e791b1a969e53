"""MCP layer, configuration: the servers a run may start, in Claude Code's ``mcpServers`` schema.

Owns :class:`McpServerConfig`, :func:`parse_mcp_servers` (schema-checked, ``${VAR}`` expanded),
:func:`with_timeouts` (``timeout``, ``MCP_TIMEOUT``, ``MCP_TOOL_TIMEOUT``), :func:`tool_name`,
:func:`server_name_problem` and :class:`McpConfigError`. Which sources apply is ``queryloop.run.settings``'.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

if TYPE_CHECKING:  # imported where a configuration is read: a run without one never loads jsonschema
    import jsonschema

__all__ = [
    "McpConfigError",
    "McpServerConfig",
    "parse_mcp_servers",
    "server_name_problem",
    "tool_name",
    "with_timeouts",
]

Transport = Literal["stdio", "http", "sse"]

_NAME = r"^[A-Za-z0-9_-]+$"
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["mcpServers"],
    "properties": {
        "mcpServers": {
            "type": "object",
            "propertyNames": {"pattern": _NAME},
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "type": {"enum": ["stdio", "http", "sse"]},
                    "command": {"type": "string", "minLength": 1},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": _STRINGS,
                    "url": {"type": "string", "pattern": "^https?://"},
                    "headers": _STRINGS,
                    "timeout": {"type": "number"},  # ms a call may take (under a second: not used, as Claude Code)
                },
            },
        }
    },
}


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    import jsonschema

    return jsonschema.Draft202012Validator(_SCHEMA)


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NOT_IN_A_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")


_POSITIVE = attrs.validators.optional(attrs.validators.gt(0))


class McpConfigError(ValueError):
    """A malformed MCP configuration: where (source and JSON path), what, and how to fix it."""


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One MCP server: ``stdio`` starts ``command`` with ``args`` and ``env``; ``http``/``sse`` connects to ``url``."""

    name: str
    type: Transport = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict, repr=False)  # may hold credentials: never printed
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)  # may hold credentials: never printed
    source: str = ""  # where it was declared (a file, --mcp-config, settings)
    # how long a call may take (its `timeout`, else MCP_TOOL_TIMEOUT; None: the tool layer's deadline)
    tool_timeout_s: float | None = attrs.field(default=None, validator=_POSITIVE)
    # how long its start, a listing or a resource read may take (MCP_TIMEOUT; None: the manager's, 30 s)
    startup_timeout_s: float | None = attrs.field(default=None, validator=_POSITIVE)


def server_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an MCP server (a sentence naming the fix), or None when it can.

    A tool is offered as ``mcp__<server>__<tool>``, and a permission rule ``mcp__<server>``
    covers every name that starts with ``mcp__<server>__``. A server name holding ``__``
    (``trusted__evil``), or ending in ``_`` (``trusted_``: ``mcp__trusted___x``), would have
    its tools covered by the rule for another server (``mcp__trusted``). With both refused,
    no two servers share an ``mcp__<server>__`` prefix, so they never offer the same name.
    Checked on the name as tool names spell it (characters the API refuses become ``_``).
    """
    spelled = _NOT_IN_A_TOOL_NAME.sub("_", name)
    if spelled and "__" not in spelled and not spelled.endswith("_"):
        return None
    owner = f"{spelled}__x".split("__")[0]
    what = "contain '__'" if "__" in spelled else "end with '_'"
    written = "" if spelled == name else f" (written {spelled!r} in tool names)"
    rule = f", which a permission rule for mcp__{owner} would cover" if owner else ""
    rename = re.sub("_+", "_", spelled).strip("_") or "server"
    return (
        f"server name {name!r}{written} may not {what}: its tools would be offered as mcp__{spelled}__<tool>"
        f"{rule}; rename it (e.g. {rename!r})"
    )


def tool_name(server: str, tool: str) -> str:
    """The name the model sees: ``mcp__<server>__<tool>``, characters the API refuses replaced by ``_``.

    :class:`McpConfigError` for a server name :func:`server_name_problem` refuses: every
    way a server is declared (a file, ``--mcp-config``, the Agent SDK's in-process servers,
    the Python API's) names its tools here.
    """
    problem = server_name_problem(server)
    if problem is not None:
        raise McpConfigError(problem)
    return f"mcp__{_NOT_IN_A_TOOL_NAME.sub('_', server)}__{_NOT_IN_A_TOOL_NAME.sub('_', tool)}"


def _expand(value: str, where: str, source: str) -> str:
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found is not None:
            return found
        if default is not None:
            return default
        raise McpConfigError(
            f"{source}: {where}: environment variable {name} is not set; set it, "
            f"or give a default as ${{{name}:-value}}"
        )

    return _VARIABLE.sub(one, value)


def _path(error: jsonschema.ValidationError) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path) or "(top level)"


def _shape_problem(entry: Mapping[str, object]) -> str | None:
    """What is wrong with a server entry the schema let through: the transport and its address must agree."""
    kind = entry.get("type", "stdio")
    if kind == "stdio" and "url" in entry:
        return "a url needs type http or sse (a stdio server has a command instead)"
    if kind == "stdio" and "command" not in entry:
        return "a server needs either a command (type stdio, the default) or a url with type http or sse"
    if kind != "stdio" and "command" in entry:
        return f"a server of type {kind} has a url, not a command (a command needs type stdio)"
    if kind != "stdio" and "url" not in entry:
        return f"a server of type {kind} needs a url"
    return None


def _explain(error: jsonschema.ValidationError) -> str:
    if error.validator == "pattern" and error.absolute_path and error.absolute_path[-1] == "url":
        return f"url must start with http:// or https://, got {error.instance!r}"
    if "propertyNames" in error.absolute_schema_path:
        return f"server name {error.instance!r} may hold only letters, digits, '_' and '-'"
    return error.message


def parse_mcp_servers(raw: Any, source: str) -> dict[str, McpServerConfig]:
    """The servers of one ``{"mcpServers": {...}}`` document; :class:`McpConfigError` naming the fault otherwise."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(raw))
    if error is not None:
        raise McpConfigError(f"{source}: at {_path(error)}: {_explain(error)}")
    servers: dict[str, McpServerConfig] = {}
    for name, entry in raw["mcpServers"].items():
        where = f"mcpServers.{name}"
        problem = server_name_problem(name) or _shape_problem(entry)
        if problem:
            raise McpConfigError(f"{source}: at .{where}: {problem}")
        kind: Transport = entry.get("type", "stdio")
        servers[name] = McpServerConfig(
            name=name,
            type=kind,
            command=_expand(entry["command"], f"{where}.command", source) if "command" in entry else None,
            args=tuple(_expand(a, f"{where}.args", source) for a in entry.get("args", ())),
            env={k: _expand(v, f"{where}.env.{k}", source) for k, v in entry.get("env", {}).items()},
            url=_expand(entry["url"], f"{where}.url", source) if "url" in entry else None,
            headers={k: _expand(v, f"{where}.headers.{k}", source) for k, v in entry.get("headers", {}).items()},
            source=source,
            tool_timeout_s=_own_timeout_s(entry.get("timeout")),
        )
    return servers


_MIN_TIMEOUT_MS = 1000  # Claude Code 2.1.235 waits at least a second for a call, whatever a value asks
_MAX_TIMEOUT_MS = 2**31 - 1  # and at most this long (its timers' limit): about 24.8 days


def _own_timeout_s(value: object) -> float | None:
    """A server's ``timeout`` (ms) in seconds; None when it says nothing usable (under a second: not used)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not _MIN_TIMEOUT_MS <= value:
        return None
    return min(float(value), _MAX_TIMEOUT_MS) / 1000


def _env_ms(env: Mapping[str, str], name: str, warnings: list[str]) -> float | None:
    """The positive whole number of milliseconds ``env[name]`` holds, in seconds (None: unset or unusable, with
    a warning for the latter: Claude Code ignores such a value without a word)."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) == 0:
        warnings.append(f"{name}={raw!r} is not a whole number of milliseconds above 0; it is not used")
        return None
    return min(int(raw), _MAX_TIMEOUT_MS) / 1000


def with_timeouts(
    servers: Sequence[McpServerConfig], env: Mapping[str, str], warnings: list[str]
) -> tuple[McpServerConfig, ...]:
    """``servers`` with their timeouts from ``env`` (the environment, the settings' ``env`` above it), as Claude
    Code 2.1.235 reads them: ``MCP_TOOL_TIMEOUT`` (ms, at least a second) bounds a call of a server that gives
    no ``timeout`` of its own; ``MCP_TIMEOUT`` (ms) a server's start, its listings and its resource reads."""
    call = _env_ms(env, "MCP_TOOL_TIMEOUT", warnings)
    start = _env_ms(env, "MCP_TIMEOUT", warnings)
    if call is not None:
        call = max(call, _MIN_TIMEOUT_MS / 1000)
    return tuple(
        attrs.evolve(
            s,
            tool_timeout_s=s.tool_timeout_s if s.tool_timeout_s is not None else call,
            startup_timeout_s=start if start is not None else s.startup_timeout_s,
        )
        for s in servers
    )
