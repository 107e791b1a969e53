"""Which permission rules match one tool call: the call's context, its path, and a Bash line command by command.

Owns :class:`CallContext`, :func:`tool_path`, :func:`first_restricting_match` (deny and ask rules),
:func:`allowing_rule` and what a rule set says of Bash as a whole. The order of the decision is ``permissions``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .names import BASH_TOOLS, PATH_FIELDS, SEARCHES_CWD
from .rules import PermissionRule, PermissionRules, path_matches, path_pattern, tool_name_matches
from .runs import inner_commands
from .shell import ShellCommand, bash_command_matches
from .web_urls import domain_matches, web_host

__all__ = [
    "WEB_FETCH_TOOL",
    "CallContext",
    "allowing_rule",
    "allows_all_bash",
    "first_restricting_match",
    "restricts_bash",
    "tool_path",
]

WEB_FETCH_TOOL = "WebFetch"


def tool_path(tool_name: str, tool_input: Mapping[str, object], *, cwd: Path, home: Path) -> Path | None:
    """The path a file tool's call names (``~/`` under ``home``), the working directory a search runs in, or None."""
    key = PATH_FIELDS.get(tool_name)
    value = tool_input.get(key) if key is not None else None
    if isinstance(value, str) and value:
        if value == "~" or value.startswith("~/"):
            return home / value[2:]
        return cwd / value
    if tool_name in SEARCHES_CWD:
        return cwd
    return None


@attrs.frozen(kw_only=True)
class CallContext:
    """One call as the rules are matched against it: the tool, its input, and where its paths are read."""

    tool_name: str
    tool_input: Mapping[str, Any]
    cwd: Path
    home: Path


def _specifier_subject(ctx: CallContext) -> str | None:
    """The string an exact specifier is compared with, for tools without special rules."""
    for key in ("query", "subagent_type", "skill", "command", "pattern", "url"):
        value = ctx.tool_input.get(key)
        if isinstance(value, str):
            return value
    return None


def _rule_matches_part(rule: PermissionRule, ctx: CallContext, *, require_all: bool) -> bool:
    """Does ``rule`` match the whole call (for Bash: one simple command in ``tool_input``)?"""
    if not tool_name_matches(rule.tool, ctx.tool_name):
        return False
    if rule.specifier is None:
        return True
    if ctx.tool_name in BASH_TOOLS:
        command = ctx.tool_input.get("command")
        return isinstance(command, str) and bash_command_matches(rule.specifier, command)
    if ctx.tool_name in PATH_FIELDS:
        target = tool_path(ctx.tool_name, ctx.tool_input, cwd=ctx.cwd, home=ctx.home)
        if target is None:
            return False
        pattern = path_pattern(rule.specifier, cwd=ctx.cwd, home=ctx.home)
        return path_matches(pattern, target, require_all=require_all)
    if ctx.tool_name == WEB_FETCH_TOOL:  # `domain:HOST`, `domain:*.HOST`, `domain:*`, read as the fetch reads the URL
        host = web_host(ctx.tool_input.get("url"))
        domain = rule.specifier.startswith("domain:")
        return host is not None and domain and domain_matches(rule.specifier[len("domain:") :], host)
    subject = _specifier_subject(ctx)
    return subject is not None and rule.specifier == subject


def _bash_parts(ctx: CallContext, shell: ShellCommand) -> tuple[CallContext, ...]:
    """One call context per command the line runs, for deny and ask rules.

    Each command is seen normalised (wrappers and assignments dropped, so ``X=1 env rm``
    is ``rm``), and so is every command it runs in turn (``timeout 5 rm``, ``xargs rm``,
    ``bash -c 'rm x'``, ``eval 'rm x'``: ``runs.inner_commands``).
    """
    texts: list[str] = []
    for command in shell.commands:
        texts.append(command.text)
        texts.extend(inner_commands(command).texts)
    return tuple(attrs.evolve(ctx, tool_input={**ctx.tool_input, "command": t}) for t in dict.fromkeys(texts))


def first_restricting_match(
    rules: Sequence[PermissionRule], ctx: CallContext, shell: ShellCommand | None
) -> PermissionRule | None:
    """First deny/ask rule matching the call; for Bash, matching the whole line or any command it runs."""
    candidates = (ctx, *_bash_parts(ctx, shell)) if shell is not None else (ctx,)
    for rule in rules:
        if any(_rule_matches_part(rule, c, require_all=False) for c in candidates):
            return rule
    return None


def allowing_rule(rules: Sequence[PermissionRule], ctx: CallContext) -> PermissionRule | None:
    """The first allow rule that lets this call (for Bash: this one command) through."""
    for rule in rules:
        if _rule_matches_part(rule, ctx, require_all=True):
            return rule
    return None


def restricts_bash(rules: PermissionRules) -> bool:
    """Some deny or ask rule names a Bash command (an unreadable line might hide it)."""
    return any(r.tool in BASH_TOOLS and r.specifier is not None for r in (*rules.deny, *rules.ask))


def allows_all_bash(rules: PermissionRules) -> PermissionRule | None:
    """A bare ``Bash`` allow rule: every command, redirections included (as in Claude Code)."""
    return next((r for r in rules.allow if r.tool in BASH_TOOLS and r.specifier is None), None)
