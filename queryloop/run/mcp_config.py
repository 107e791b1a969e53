"""Which MCP servers a run starts: ``--mcp-config``, the project's ``.mcp.json`` once approved, settings.

Owns :func:`load_mcp_servers`, with Claude Code's rules (docs/mcp.md): a ``.mcp.json`` server starts only once the
settings approve it, so a cloned repository starts nothing by itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from queryloop.fsm import SpecError, UnreadableFileError, read_text_file
from queryloop.handlers.mcp import McpConfigError, McpServerConfig, parse_mcp_servers

__all__ = ["load_mcp_servers"]


def _document(text: str, label: str) -> Any:
    from queryloop.fsm import read_json  # here: its module brings PyYAML and jsonschema, which no flag may need

    try:
        return read_json(text, label).data
    except SpecError as exc:
        raise McpConfigError(str(exc.first)) from None


def _read(value: str, *, cwd: Path, flag: str) -> tuple[object, str]:
    """An inline JSON object, or the JSON file ``value`` names (relative to ``cwd``)."""
    if value.lstrip().startswith("{"):
        return _document(value, flag), flag
    path = Path(cwd, value).expanduser()
    try:
        text = read_text_file(path)
    except FileNotFoundError:
        raise McpConfigError(
            f"{flag} {value}: cannot read it (No such file or directory); pass a JSON file or an inline JSON object"
        ) from None
    except UnreadableFileError as exc:
        raise McpConfigError(f"{flag} {value}: {exc.reason}; pass a JSON file or an inline JSON object") from None
    return _document(text, str(value)), str(value)


def load_mcp_servers(
    *,
    cwd: Path,
    settings: Mapping[str, Any],
    mcp_config: Sequence[str] = (),
    strict: bool = False,
) -> tuple[tuple[McpServerConfig, ...], list[str]]:
    """The servers to start, in precedence order resolved (later sources win a name), and warnings to show."""
    servers: dict[str, McpServerConfig] = {}
    warnings: list[str] = []
    if not strict:
        if settings.get("mcpServers"):
            servers.update(parse_mcp_servers({"mcpServers": settings["mcpServers"]}, "settings"))
        project = cwd / ".mcp.json"
        if project.is_file():
            document, _ = _read(str(project), cwd=cwd, flag=".mcp.json")
            enable_all = settings.get("enableAllProjectMcpServers") is True
            enabled = set(settings.get("enabledMcpjsonServers") or ())
            disabled = set(settings.get("disabledMcpjsonServers") or ())
            for name, config in parse_mcp_servers(document, ".mcp.json").items():
                if name in disabled:
                    continue
                if enable_all or name in enabled:
                    servers[name] = config
                else:
                    warnings.append(
                        f".mcp.json server {name!r} is not started: it is not approved; add it to "
                        "enabledMcpjsonServers (or set enableAllProjectMcpServers) in your settings"
                    )
    for value in mcp_config:
        document, label = _read(value, cwd=cwd, flag="--mcp-config")
        servers.update(parse_mcp_servers(document, label))
    return tuple(servers.values()), warnings
