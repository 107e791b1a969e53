"""The permission decision for one tool call.

Owns :func:`decide` (``allow``/``ask``/``deny``; Bash fails closed), :func:`suggest_rules` and
:func:`observable_input`. Bash's own order: ``bash_permissions``; matching rules: ``matching``; the records and
:func:`finalize_ask`: ``decision``; the rules' records: ``rules``. The gate acts on the decision.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path, PosixPath
from typing import TYPE_CHECKING

import attrs

from .bash_permissions import BashCall

# PermissionAnswer is not used here: it stays importable from this module, as before it was split (the tests
# import it from here)
from .decision import PermissionAnswer, PermissionDecision, ask, finalize_ask
from .matching import WEB_FETCH_TOOL, CallContext, allowing_rule, first_restricting_match, tool_path
from .names import BASH_TOOLS, DEFAULT_READ_ONLY_TOOLS, EDIT_TOOLS, PATH_FIELDS, SHOWN_ABSOLUTE
from .planted import planted_why, write_roots
from .rules import PERMISSION_MODES, PermissionMode, PermissionRules, is_inside
from .shell import ShellCommand, analyse
from .web_urls import web_host

if TYPE_CHECKING:
    from .sandbox.policy import SandboxPolicy

__all__ = [
    "PermissionAnswer",
    "PermissionDecision",
    "decide",
    "finalize_ask",
    "observable_input",
    "suggest_rules",
]


def suggest_rules(tool_name: str, tool_input: Mapping[str, object], *, cwd: Path) -> tuple[str, ...]:
    """The allow rules an "always" answer to this call creates: as narrow as the call, never the whole tool.

    Bash: one prefix rule per command the line runs (the program and its first word
    that is not an option, e.g. ``Bash(git push:*)``); none for a line that writes a
    file by redirection (only a bare ``Bash`` rule covers that) or sets variables; file
    tools: the file (``Edit(./src/app.py)``); other tools: the tool's name.
    """
    if tool_name in BASH_TOOLS:
        command = tool_input.get("command")
        shell = analyse(command) if isinstance(command, str) else None
        if shell is None or not shell.understood or not shell.commands or shell.writes:
            return ()  # nothing narrower than "every Bash command" can be said: no "always"
        if any(c.assignments for c in shell.commands):
            return ()
        rules: dict[str, None] = {}  # in order, each once (a list's `in` made a long line quadratic)
        for c in shell.commands:
            head = [c.name, *(w for w in c.words[1:2] if not w.startswith("-") and "/" not in w and "*" not in w)]
            rules[f"Bash({' '.join(head)}:*)"] = None
        return tuple(rules)
    if tool_name in PATH_FIELDS:
        path = tool_path(tool_name, tool_input, cwd=cwd, home=Path.home())
        if path is None:
            return (tool_name,)
        if tool_name in EDIT_TOOLS and planted_why(path, roots=(_absolute(cwd),), home=Path.home()) is not None:
            return ()  # no rule allows writing what runs later: "yes" is for this call only
        try:
            shown = "./" + str(Path(os.path.abspath(path)).relative_to(os.path.abspath(cwd)))
        except ValueError:
            shown = "/" + str(Path(os.path.abspath(path)))  # `//abs/path`: an absolute path rule
        return (f"{tool_name}({shown})",)
    if tool_name == WEB_FETCH_TOOL:  # the host, never every URL
        host = web_host(tool_input.get("url"))
        return (f"{tool_name}(domain:{host})",) if host is not None else ()
    return (tool_name,)


def observable_input(tool_name: str, tool_input: Mapping[str, object], *, cwd: Path) -> dict[str, object]:
    """The call's input as a permission callback is shown it: a file tool's path absolute and normalised.

    A host checking paths then sees the file the call would touch, whatever the model
    wrote (``out.txt``, ``./sub/../out.txt``, ``~/out.txt``); the call itself keeps its input.
    """
    shown = dict(tool_input)
    key = PATH_FIELDS.get(tool_name) if tool_name in SHOWN_ABSOLUTE else None
    path = tool_path(tool_name, tool_input, cwd=cwd, home=Path.home()) if key is not None else None
    if key is not None and path is not None:
        shown[key] = os.path.normpath(os.path.abspath(path))
    return shown


_last_absolute: tuple[object, Path | None] = (None, None)
"""The last working directory made absolute and normal, and what it became: a run asks with the same ``Path``
every call, and a ``Path`` never changes, so the same object gives the same answer (held alive here)."""


def _absolute(cwd: Path) -> Path:
    """``cwd`` made absolute and normal; an absolute one (a run asks with the same one every call) once."""
    global _last_absolute
    last, made = _last_absolute
    if cwd is last and made is not None:
        return made
    made = _normal(cwd) if os.path.isabs(cwd) else Path(os.path.abspath(cwd))
    if type(cwd) is PosixPath and os.path.isabs(cwd):  # a relative one depends on the process's directory
        _last_absolute = (cwd, made)
    return made


@functools.lru_cache(maxsize=64)
def _normal(cwd: Path) -> Path:
    return Path(os.path.normpath(cwd))


def decide(
    tool_name: str,
    tool_input: Mapping[str, object],
    *,
    mode: PermissionMode,
    rules: PermissionRules,
    cwd: Path,
    interactive: bool,
    home: Path | None = None,
    read_only_tools: frozenset[str] = DEFAULT_READ_ONLY_TOOLS,
    sandbox: SandboxPolicy | None = None,
    open_ask: bool = False,
) -> PermissionDecision:
    """Decide whether a tool call may run.

    Order: deny rules (never overridden) → mode overrides (``plan`` denies anything
    not read-only, ``bypassPermissions`` allows the rest) → ask rules → allow rules →
    mode defaults (read-only tools inside a working directory allowed; in
    ``acceptEdits`` also edits inside one; everything else asks). An ``ask`` becomes
    ``deny`` in ``dontAsk`` mode and in non-interactive (headless) runs. Bash has its
    own order (:class:`BashCall`), where ``sandbox`` (the run's sandbox policy, when
    the sandbox works) turns what would ask into an allow for a sandboxed command. With
    ``open_ask`` an ask stays an ask in every mode and run (a PreToolUse hook answers it
    first; the caller finalizes it with :func:`finalize_ask`).
    """
    if mode not in PERMISSION_MODES:
        raise ValueError(f"unknown permission mode {mode!r}; expected one of {', '.join(PERMISSION_MODES)}")
    ctx = CallContext(
        tool_name=tool_name,
        tool_input=tool_input,
        cwd=_absolute(cwd),
        home=home if isinstance(home, Path) else Path(home) if home is not None else Path.home(),
    )
    shell = _shell_of(ctx)
    rule = first_restricting_match(rules.deny, ctx, shell)
    if rule is not None:
        return PermissionDecision(
            behavior="deny",
            rule=rule.text,
            reason=f"{tool_name} is denied by the rule {rule.text!r}",
            listed=shell is not None or rule.specifier is None or tool_name not in PATH_FIELDS,
            kind="rule" if shell is None else "subcommandResults",  # Claude Code matches Bash rules per command
        )
    if tool_name in EDIT_TOOLS:  # as Claude Code: a file the Read rules deny is not edited either
        reading = attrs.evolve(ctx, tool_name="Read")
        rule = first_restricting_match([r for r in rules.deny if r.specifier is not None], reading, None)
        if rule is not None:
            why = f"{tool_name} is denied by the rule {rule.text!r}: the file may not be read"
            return PermissionDecision(behavior="deny", rule=rule.text, reason=why, listed=False)
    if shell is not None:
        bash = BashCall(ctx=ctx, shell=shell, mode=mode, rules=rules, sandbox=sandbox)
        return _finish(bash.decide(), mode=mode, interactive=interactive, open_ask=open_ask)
    if mode == "plan" and tool_name not in read_only_tools:
        return PermissionDecision(
            behavior="deny",
            rule=None,
            reason=f"{tool_name} is not read-only and plan mode allows only read-only tools",
            kind="mode",
            unanswered=True,
        )
    planted = _planted_by_tool(ctx, rules) if tool_name in EDIT_TOOLS else None
    if planted is not None:
        return _finish(planted, mode=mode, interactive=interactive, open_ask=open_ask)
    if mode == "bypassPermissions":
        return PermissionDecision(
            behavior="allow", rule=None, reason="bypassPermissions mode allows every tool not denied by a rule"
        )
    rule = first_restricting_match(rules.ask, ctx, None)
    if rule is not None:
        return _finish(
            PermissionDecision(
                behavior="ask",
                rule=rule.text,
                reason=f"{tool_name} needs approval by the rule {rule.text!r}",
                firm=True,
                kind="rule",
            ),
            mode=mode,
            interactive=interactive,
            open_ask=open_ask,
        )
    rule = allowing_rule(rules.allow, ctx)
    if rule is not None:
        return PermissionDecision(
            behavior="allow", rule=rule.text, reason=f"{tool_name} is allowed by the rule {rule.text!r}"
        )
    return _finish(
        _mode_default(ctx, mode=mode, rules=rules, read_only_tools=read_only_tools),
        mode=mode,
        interactive=interactive,
        open_ask=open_ask,
    )


def _shell_of(ctx: CallContext) -> ShellCommand | None:
    if ctx.tool_name not in BASH_TOOLS:
        return None
    command = ctx.tool_input.get("command")
    return analyse(command) if isinstance(command, str) else ShellCommand(problem="the command is not a string")


def _planted_by_tool(ctx: CallContext, rules: PermissionRules) -> PermissionDecision | None:
    """A file tool writing a file that runs later asks, in every mode and whatever the allow rules say."""
    target = tool_path(ctx.tool_name, ctx.tool_input, cwd=ctx.cwd, home=ctx.home)
    why = planted_why(target, roots=write_roots(ctx, rules), home=ctx.home) if target is not None else None
    if why is None:
        return None
    shown = os.path.normpath(target) if target is not None else ""
    return ask(
        f"{ctx.tool_name} writes {shown}, which runs later ({why}): no mode or rule allows that without asking",
        firm=True,
    )


def _mode_default(
    ctx: CallContext, *, mode: PermissionMode, rules: PermissionRules, read_only_tools: frozenset[str]
) -> PermissionDecision:
    target = tool_path(ctx.tool_name, ctx.tool_input, cwd=ctx.cwd, home=ctx.home)
    working_dirs = (ctx.cwd, *rules.additional_directories)
    inside = target is not None and any(is_inside(target, d) for d in working_dirs)
    if ctx.tool_name in read_only_tools:
        if target is None or inside:
            return PermissionDecision(behavior="allow", rule=None, reason=f"{ctx.tool_name} is read-only")
        return PermissionDecision(
            behavior="ask",
            rule=None,
            reason=f"{ctx.tool_name} reads {str(target)!r}, outside the working directories",
            kind="workingDir",
        )
    if mode == "acceptEdits" and ctx.tool_name in EDIT_TOOLS and inside:
        return PermissionDecision(
            behavior="allow",
            rule=None,
            reason=f"acceptEdits mode allows {ctx.tool_name} inside the working directories",
        )
    outside = target is not None and ctx.tool_name in EDIT_TOOLS and not inside
    return PermissionDecision(
        behavior="ask",
        rule=None,
        reason=f"{ctx.tool_name} needs approval in {mode} mode",
        kind="workingDir" if outside else None,
    )


def _finish(
    decision: PermissionDecision, *, mode: PermissionMode, interactive: bool, open_ask: bool
) -> PermissionDecision:
    return decision if open_ask else finalize_ask(decision, mode=mode, interactive=interactive)
