"""MCP layer, configuration: the servers a run may start, in Claude Code's ``mcpServers`` schema.

Owns :class:`McpServerConfig`, :func:`parse_mcp_servers` (schema-checked, ``${VAR}`` expanded), :func:`tool_name`,
:func:`server_name_problem` and :class:`McpConfigError`. Which sources apply is ``queryloop.run.settings``'.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

if TYPE_CHECKING:  # imported where a configuration is read: a run without one never loads jsonschema
    import jsonschema

__all__ = ["McpConfigError", "McpServerConfig", "parse_mcp_servers", "server_name_problem", "tool_name"]

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


def _shape_problem(entry: Mapping[str, Any]) -> str | None:
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
        )
    return servers
