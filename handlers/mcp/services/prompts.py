"""MCP layer, prompts as slash commands: ``/mcp__<server>__<prompt> ARGS`` becomes the prompt's text.

Owns :func:`expand_command` (the words after the command fill the prompt's arguments in order; the last takes the
rest) and :class:`PromptCommandError`. Listing prompts and asking the server are ``client``'s.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...tools import ToolError
from .content import PromptMessage, blocks_text

if TYPE_CHECKING:
    from .client import McpManager

__all__ = ["PromptCommandError", "expand_command", "prompt_arguments"]


class PromptCommandError(ValueError):
    """A slash command naming an MCP prompt could not be filled: a missing argument, or the server refused."""


def prompt_arguments(names: Sequence[str], text: str) -> dict[str, str]:
    """The words of ``text`` as the arguments ``names``, in order; the last one takes the rest."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    if not names:
        return {}
    values = dict(zip(names, words, strict=False))
    if len(words) > len(names):
        values[names[-1]] = " ".join(words[len(names) - 1 :])
    return values


def _text(messages: Sequence[PromptMessage]) -> str:
    parts = []
    for message in messages:
        text = blocks_text(message["content"])
        parts.append(text if message["role"] == "user" else f"[assistant]\n{text}")
    return "\n\n".join(parts)


async def expand_command(manager: McpManager, prompt: str) -> str | None:
    """``prompt`` filled in when it is ``/mcp__<server>__<prompt> ARGS`` naming a listed prompt; None otherwise."""
    if not prompt.startswith("/mcp__"):
        return None
    command, _, rest = prompt[1:].partition(" ")
    found = (await manager.prompts()).get(command.strip())
    if found is None:
        return None
    server, listed = found
    declared = listed.arguments or []
    arguments = prompt_arguments([a.name for a in declared], rest.strip())
    missing = [a.name for a in declared if a.required and a.name not in arguments]
    if missing:
        usage = " ".join(f"<{a.name}>" if a.required else f"[{a.name}]" for a in declared)
        raise PromptCommandError(f"/{command} needs {', '.join(missing)}: /{command} {usage}")
    try:
        messages = await manager.get_prompt(server, listed.name, arguments)
    except ToolError as exc:
        raise PromptCommandError(f"/{command}: {exc}") from None
    given = " ".join(f"{k}={v}" for k, v in arguments.items())
    return f"/{command}{' ' + given if given else ''} (MCP prompt of server {server!r}):\n\n{_text(messages)}"
