"""The command-line flags the Claude Agent SDK passes, and which of them queryloop honours.

Owns :func:`prepare_sdk_flags`: a harmless flag is accepted with a warning, one a program would rely on is refused
by name. The SDK's in-process servers are kept out of ``--mcp-config``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from queryloop.fsm import UnreadableFileError, UsageError, loads_json, read_text_file

__all__ = ["add_sdk_options", "prepare_sdk_flags"]

# Accepted and ignored, with the reason the warning gives: leaving them out changes no promise a program relies on.
_IGNORED = {
    "thinking": "extended thinking is not requested yet",
    "thinking_display": "extended thinking is not requested yet",
    "effort": "requests carry no effort level",
    "betas": "requests carry no beta headers",
    "include_hook_events": "no hook_started/hook_response lines (a failed hook is a system/hook_error line)",
}

# Refused: a program would silently get less than it asked for.
_REFUSED = {
    "task_budget": "task budgets are not supported (use --max-budget-usd or --max-turns)",
    "plugin_dir": "plugins are not supported",
    "session_mirror": "mirroring the transcript to a session store is not supported",
    "resume_session_at": "resuming at a given message is not supported",
    "resume_drops_turn": "resuming without a turn is not supported",
}


def add_sdk_options(run: argparse.ArgumentParser) -> None:
    """The flags the Agent SDK passes besides those every run has (help for the ones queryloop honours)."""
    run.add_argument(
        "--tools",
        metavar="NAMES",
        help="built-in tools offered, comma separated ('default': all; '': none)",
    )
    run.add_argument(
        "--permission-prompt-tool",
        metavar="TOOL",
        help="who answers what would ask: mcp__SERVER__TOOL, an MCP server's tool; or stdio, with --input-format "
        "stream-json, the program (the Agent SDK's can_use_tool)",
    )
    run.add_argument(
        "--replay-user-messages",
        action="store_true",
        help="with --input-format stream-json: echo each prompt as a user line with its uuid (for rewind_files)",
    )
    run.add_argument(
        "--include-partial-messages",
        action="store_true",
        help="with stream-json output: also write each event of the model's stream as a stream_event line",
    )
    run.add_argument(
        "--add-dir",
        action="extend",
        nargs="+",
        metavar="DIR",
        help="more directories the tools may work in, as in the working directory (repeatable)",
    )
    run.add_argument("--system-prompt-file", type=Path, metavar="FILE", help="the system prompt, read from FILE")
    run.add_argument(
        "--json-schema",
        metavar="SCHEMA",
        help="structured output: the answer is JSON following SCHEMA (a JSON Schema object), as the result's "
        "structured_output",
    )
    for name in (*_IGNORED, *_REFUSED):
        flag = "--" + name.replace("_", "-")
        if name == "plugin_dir":
            run.add_argument(flag, action="append", help=argparse.SUPPRESS)
        elif name in ("include_hook_events", "session_mirror"):
            run.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
        else:
            run.add_argument(flag, help=argparse.SUPPRESS)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _set(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name, None)
    return value is not None and value is not False


def _tools(text: str) -> tuple[str, ...] | None:
    """``--tools``: ``default`` is every built-in tool; names Claude Code has and queryloop not are dropped."""
    from queryloop.handlers.tools import (
        AGENT_TOOL,
        AGENT_TOOL_EARLIER_NAME,
        default_registry,  # here: building the parser loads no tool
    )

    if text.strip() == "default":
        return None
    names = [n.strip() for n in text.replace(" ", ",").split(",") if n.strip()]
    names = [AGENT_TOOL if n == AGENT_TOOL_EARLIER_NAME else n for n in names]
    known = (*default_registry().names, AGENT_TOOL)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(
            f"queryloop: warning: --tools: {', '.join(unknown)} not offered: queryloop's built-in tools are "
            f"{', '.join(known)}",
            file=sys.stderr,
        )
    return tuple(n for n in names if n in known)


def _check_names(servers: list[str]) -> None:
    """The in-process servers' names follow the rule every server's does (no ``__``, no ``_`` at the end)."""
    if not servers:
        return
    from queryloop.handlers.mcp import server_name_problem

    for name in servers:
        problem = server_name_problem(name)
        if problem is not None:
            raise UsageError(f"--mcp-config: at .mcpServers.{name}: {problem}")


def _split_sdk_servers(configs: list[str] | None) -> tuple[list[str] | None, tuple[str, ...]]:
    """``--mcp-config`` values without the SDK's in-process servers, and those servers' names (inline JSON only)."""
    if not configs:
        return configs, ()
    kept: list[str] = []
    sdk: list[str] = []
    for value in configs:
        try:
            document = loads_json(value) if value.lstrip().startswith("{") else None
        except ValueError:
            document = None  # the MCP configuration reader reports it with its position
        if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
            kept.append(value)
            continue
        servers: dict[str, object] = document["mcpServers"]
        ours = [n for n, entry in servers.items() if isinstance(entry, dict) and entry.get("type") == "sdk"]
        _check_names(ours)
        sdk.extend(ours)
        rest = {n: entry for n, entry in servers.items() if n not in ours}
        if rest or not ours:
            kept.append(json.dumps({**document, "mcpServers": rest}))
    return kept, tuple(sdk)


def prepare_sdk_flags(args: argparse.Namespace) -> None:
    """Check the Agent SDK's flags (UsageError for a refused one, a warning for an ignored one) and resolve them.

    Sets ``args.tools`` (None: every built-in), ``args.system_prompt`` from
    ``--system-prompt-file``, and ``args.sdk_mcp_servers`` (the in-process servers'
    names, taken out of ``args.mcp_config``).
    """
    streaming = args.input_format == "stream-json"
    _check_pairings(args, streaming=streaming)
    _refuse_or_warn(args)
    args.tools = None if args.tools is None else _tools(args.tools)
    if args.system_prompt_file is not None:
        args.system_prompt = _system_prompt_from_file(args)
    args.mcp_config, args.sdk_mcp_servers = _split_sdk_servers(args.mcp_config)
    if args.sdk_mcp_servers and not streaming:
        raise UsageError(
            f"--mcp-config: the in-process server(s) {', '.join(args.sdk_mcp_servers)} (type sdk) are served by the "
            "Agent SDK's program: they need --input-format stream-json"
        )


def _check_pairings(args: argparse.Namespace, *, streaming: bool) -> None:
    """The flags that only work with another flag, each given with it (UsageError naming both)."""
    if streaming and args.output_format != "stream-json":
        raise UsageError("--input-format stream-json requires --output-format stream-json")
    if args.include_partial_messages and args.output_format != "stream-json":
        raise UsageError("--include-partial-messages requires --output-format stream-json")
    if args.replay_user_messages and not streaming:
        raise UsageError("--replay-user-messages requires --input-format stream-json")
    if args.permission_prompt_tool == "stdio" and not streaming:
        raise UsageError("--permission-prompt-tool stdio requires --input-format stream-json")


def _refuse_or_warn(args: argparse.Namespace) -> None:
    """A usage error for the first refused flag given; a warning line for each ignored one."""
    for name, why in _REFUSED.items():
        if _set(args, name):
            raise UsageError(f"{_flag(name)} is not supported: {why}")
    for name, why in _IGNORED.items():
        if _set(args, name):
            print(f"queryloop: warning: {_flag(name)} is ignored: {why}", file=sys.stderr)


def _system_prompt_from_file(args: argparse.Namespace) -> str:
    """``--system-prompt-file``'s text (UsageError: it is unreadable, or ``--system-prompt`` is given too)."""
    if args.system_prompt is not None:
        raise UsageError("give --system-prompt or --system-prompt-file, not both")
    try:
        return read_text_file(args.system_prompt_file)
    except UnreadableFileError as exc:
        raise UsageError(f"--system-prompt-file {args.system_prompt_file}: {exc.reason}") from None
    except OSError as exc:
        raise UsageError(f"--system-prompt-file {args.system_prompt_file}: cannot read it ({exc})") from None
