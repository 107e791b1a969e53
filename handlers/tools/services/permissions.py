"""The permission decision for one tool call.

Owns matching rules against a call, :func:`decide` (``allow``/``ask``/``deny``; Bash fails closed),
:func:`suggest_rules`, :data:`AskPermission`, :class:`PermissionAnswer` and :func:`observable_input`. The rules'
records are in ``rules``. The gate acts on the decision.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path, PosixPath
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ...messages import ToolCall
from .names import BASH_TOOLS, DEFAULT_READ_ONLY_TOOLS, EDIT_TOOLS, PATH_FIELDS, SEARCHES_CWD, SHOWN_ABSOLUTE
from .rules import (
    PERMISSION_MODES,
    PermissionBehavior,
    PermissionMode,
    PermissionRule,
    PermissionRules,
    is_inside,
    path_matches,
    path_pattern,
    read_denied,
    tool_name_matches,
)
from .runs import inner_commands, unreadable
from .runs_later import RunsLater, runs_later
from .shell import (
    ReadOnlyReading,
    ShellCommand,
    SimpleCommand,
    analyse,
    bash_command_matches,
    read_only_operands,
)
from .web_urls import domain_matches, web_host

if TYPE_CHECKING:
    from .sandbox.policy import SandboxPolicy

WEB_FETCH_TOOL = "WebFetch"

__all__ = [
    "AskPermission",
    "DecisionKind",
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
        path = _tool_path(tool_name, tool_input, cwd=cwd, home=Path.home())
        if path is None:
            return (tool_name,)
        if tool_name in EDIT_TOOLS and _planted_why(path, roots=(_absolute(cwd),), home=Path.home()) is not None:
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


# ------------------------------------------------------------------ bash commands
# A command line is read by ``shell.analyse``: rules are matched against every simple
# command it runs (wrappers and paths normalised), and every file a redirection writes
# needs what a Write of that file needs.


def observable_input(tool_name: str, tool_input: Mapping[str, object], *, cwd: Path) -> dict[str, object]:
    """The call's input as a permission callback is shown it: a file tool's path absolute and normalised.

    A host checking paths then sees the file the call would touch, whatever the model
    wrote (``out.txt``, ``./sub/../out.txt``, ``~/out.txt``); the call itself keeps its input.
    """
    shown = dict(tool_input)
    key = PATH_FIELDS.get(tool_name) if tool_name in SHOWN_ABSOLUTE else None
    path = _tool_path(tool_name, tool_input, cwd=cwd, home=Path.home()) if key is not None else None
    if key is not None and path is not None:
        shown[key] = os.path.normpath(os.path.abspath(path))
    return shown


def _tool_path(tool_name: str, tool_input: Mapping[str, object], *, cwd: Path, home: Path) -> Path | None:
    key = PATH_FIELDS.get(tool_name)
    value = tool_input.get(key) if key is not None else None
    if isinstance(value, str) and value:
        if value == "~" or value.startswith("~/"):
            return home / value[2:]
        return cwd / value
    if tool_name in SEARCHES_CWD:
        return cwd
    return None


# ---------------------------------------------------------------------- matching
@attrs.frozen(kw_only=True)
class _CallContext:
    tool_name: str
    tool_input: Mapping[str, Any]
    cwd: Path
    home: Path


def _specifier_subject(ctx: _CallContext) -> str | None:
    """The string an exact specifier is compared with, for tools without special rules."""
    for key in ("query", "subagent_type", "skill", "command", "pattern", "url"):
        value = ctx.tool_input.get(key)
        if isinstance(value, str):
            return value
    return None


def _rule_matches_part(rule: PermissionRule, ctx: _CallContext, *, require_all: bool) -> bool:
    """Does ``rule`` match the whole call (for Bash: one simple command in ``tool_input``)?"""
    if not tool_name_matches(rule.tool, ctx.tool_name):
        return False
    if rule.specifier is None:
        return True
    if ctx.tool_name in BASH_TOOLS:
        command = ctx.tool_input.get("command")
        return isinstance(command, str) and bash_command_matches(rule.specifier, command)
    if ctx.tool_name in PATH_FIELDS:
        target = _tool_path(ctx.tool_name, ctx.tool_input, cwd=ctx.cwd, home=ctx.home)
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


def _bash_parts(ctx: _CallContext, shell: ShellCommand) -> tuple[_CallContext, ...]:
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


def _first_restricting_match(
    rules: Sequence[PermissionRule], ctx: _CallContext, shell: ShellCommand | None
) -> PermissionRule | None:
    """First deny/ask rule matching the call; for Bash, matching the whole line or any command it runs."""
    candidates = (ctx, *_bash_parts(ctx, shell)) if shell is not None else (ctx,)
    for rule in rules:
        if any(_rule_matches_part(rule, c, require_all=False) for c in candidates):
            return rule
    return None


def _allowing_rule(rules: Sequence[PermissionRule], ctx: _CallContext) -> PermissionRule | None:
    """The first allow rule that lets this call (for Bash: this one command) through."""
    for rule in rules:
        if _rule_matches_part(rule, ctx, require_all=True):
            return rule
    return None


def _restricts_bash(rules: PermissionRules) -> bool:
    """Some deny or ask rule names a Bash command (an unreadable line might hide it)."""
    return any(r.tool in BASH_TOOLS and r.specifier is not None for r in (*rules.deny, *rules.ask))


def _allows_all_bash(rules: PermissionRules) -> PermissionRule | None:
    """A bare ``Bash`` allow rule: every command, redirections included (as in Claude Code)."""
    return next((r for r in rules.allow if r.tool in BASH_TOOLS and r.specifier is None), None)


# ---------------------------------------------------------------------- decision


DecisionKind = Literal["rule", "mode", "hook", "workingDir", "subcommandResults"]
"""What decided a verdict, as Claude Code 2.1.235 names it on its ``system/permission_denied`` line."""


@attrs.frozen(kw_only=True)
class PermissionDecision:
    """The verdict for one tool call: which behaviour, which rule (if any) and why."""

    behavior: PermissionBehavior
    rule: str | None
    reason: str
    # False for a file tool refused by a path deny rule: Claude Code does not list those in the
    # result's permission_denials (a Bash command refused for the file it reads is listed).
    listed: bool = True
    # An ask that a PreToolUse hook's allow does not lift (an ask rule, a file that runs later, a
    # command leaving the sandbox or one the rules cannot be applied to): only somebody asked may allow it.
    firm: bool = False
    # What decided it, in Claude Code 2.1.235's terms (its ``decision_reason_type``, a value programs read):
    # "rule", "mode", "hook", "workingDir", "subcommandResults" (a Bash rule); None where it names none.
    kind: DecisionKind | None = None
    # A denial standing for an ask nobody could answer (a run that cannot ask; plan mode, where Claude Code asks):
    # Claude Code marks its result "user-rejected" rather than "permission-rule".
    unanswered: bool = False


@attrs.frozen(kw_only=True)
class PermissionAnswer:
    """A permission callback's answer for one call that would ask: allowed (maybe with new input) or not, and why."""

    allow: bool
    updated_input: Mapping[str, Any] | None = None  # allowed with this input instead of the model's
    message: str = ""  # why it was denied: the model reads it in the error result


AskPermission = Callable[[ToolCall, str], Awaitable[PermissionAnswer]]
"""A permission callback: given a call that would ask and the reason it asks, the answer."""


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
    own order (:class:`_BashCall`), where ``sandbox`` (the run's sandbox policy, when
    the sandbox works) turns what would ask into an allow for a sandboxed command. With
    ``open_ask`` an ask stays an ask in every mode and run (a PreToolUse hook answers it
    first; the caller finalizes it with :func:`finalize_ask`).
    """
    if mode not in PERMISSION_MODES:
        raise ValueError(f"unknown permission mode {mode!r}; expected one of {', '.join(PERMISSION_MODES)}")
    ctx = _CallContext(
        tool_name=tool_name,
        tool_input=tool_input,
        cwd=_absolute(cwd),
        home=home if isinstance(home, Path) else Path(home) if home is not None else Path.home(),
    )
    shell = _shell_of(ctx)
    rule = _first_restricting_match(rules.deny, ctx, shell)
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
        rule = _first_restricting_match([r for r in rules.deny if r.specifier is not None], reading, None)
        if rule is not None:
            why = f"{tool_name} is denied by the rule {rule.text!r}: the file may not be read"
            return PermissionDecision(behavior="deny", rule=rule.text, reason=why, listed=False)
    if shell is not None:
        bash = _BashCall(ctx=ctx, shell=shell, mode=mode, rules=rules, sandbox=sandbox)
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
    rule = _first_restricting_match(rules.ask, ctx, None)
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
    rule = _allowing_rule(rules.allow, ctx)
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


def _shell_of(ctx: _CallContext) -> ShellCommand | None:
    if ctx.tool_name not in BASH_TOOLS:
        return None
    command = ctx.tool_input.get("command")
    return analyse(command) if isinstance(command, str) else ShellCommand(problem="the command is not a string")


def _allow(reason: str, rule: str | None = None) -> PermissionDecision:
    return PermissionDecision(behavior="allow", rule=rule, reason=reason)


def _ask(reason: str, rule: str | None = None, *, firm: bool = False) -> PermissionDecision:
    return PermissionDecision(behavior="ask", rule=rule, reason=reason, firm=firm or rule is not None)


@attrs.frozen(kw_only=True)
class _BashCall:
    """One Bash call the deny rules let through, and the order in which the rest of the gate decides it.

    Fails closed: a line the parser cannot read in full asks, and so does, under a Bash
    deny or ask rule, one that runs code the gate cannot read (``runs``); a command is allowed
    only by an allow rule that names it, by being provably read-only (``shell``), by
    a bare ``Bash`` allow rule, by ``bypassPermissions``, or — the wall, not the
    parser — by running in the sandbox with ``autoAllowBashIfSandboxed``. A file a
    redirection writes is allowed only by a bare ``Bash`` rule, ``acceptEdits`` inside
    a working directory, bypass or the sandbox (never by a ``Write`` rule: as in Claude
    Code); a file a read-only command reads is held to the Read deny rules and the
    working directories, as Read is.
    """

    ctx: _CallContext
    shell: ShellCommand
    mode: PermissionMode
    rules: PermissionRules
    sandbox: SandboxPolicy | None

    def decide(self) -> PermissionDecision:
        refused = self._refused_write() or self._refused_read() or self._planted()
        if refused is not None:
            return refused
        if not self.shell.understood:
            return self._unreadable()
        hidden = unreadable(self.shell) if _restricts_bash(self.rules) else None
        if hidden is not None:  # in every mode: bypass and a bare Bash rule cannot apply rules to what is not read
            why = f"the command runs code the gate cannot read ({hidden}), so the Bash deny and ask rules cannot apply"
            return (
                PermissionDecision(behavior="deny", rule=None, reason=why)
                if self.mode == "plan"
                else _ask(why, firm=True)
            )
        readings = [read_only_operands(c) for c in self.shell.commands]
        read_only = bool(readings) and not self.shell.writes and all(r is not None for r in readings)
        if self.mode == "plan" and not read_only:
            return PermissionDecision(
                behavior="deny",
                rule=None,
                reason="Bash is not read-only and plan mode allows only read-only tools",
                kind="mode",
                unanswered=True,
            )
        if self.mode == "bypassPermissions":
            return _allow("bypassPermissions mode allows every tool not denied by a rule")
        rule = _first_restricting_match(self.rules.ask, self.ctx, self.shell)
        if rule is not None:
            return attrs.evolve(_ask(f"Bash needs approval by the rule {rule.text!r}", rule.text), kind="rule")
        if self._leaves_sandbox():  # Claude Code's sandbox override: the user decides, whatever the rules allow
            return _ask(
                "Run outside of the sandbox: the command asks to leave it (dangerouslyDisableSandbox)", firm=True
            )
        if self._auto_allowed():
            return _allow("the command runs in the sandbox (autoAllowBashIfSandboxed)")
        everything = _allows_all_bash(self.rules)
        if everything is not None:
            return _allow(f"Bash is allowed by the rule {everything.text!r}", everything.text)
        return self._by_command(readings)

    def _leaves_sandbox(self) -> bool:
        return self.sandbox is not None and self.sandbox.leaves_on_request(self.ctx.tool_input)

    def _sandboxed(self) -> bool:
        return self.sandbox is not None and self.sandbox.sandboxes(self.ctx.tool_input)

    def _auto_allowed(self) -> bool:
        return self.sandbox is not None and self.sandbox.auto_allow and self._sandboxed()

    def _unreadable(self) -> PermissionDecision:
        """A line the parser cannot read in full: only what does not depend on reading it may allow it."""
        why = f"the command cannot be checked: {self.shell.problem}"
        if self.mode == "plan":
            return PermissionDecision(
                behavior="deny", rule=None, reason=f"{why}; plan mode allows only read-only tools"
            )
        if _restricts_bash(self.rules):
            return _ask(f"{why}, so the Bash deny and ask rules cannot be applied to it", firm=True)
        if self.mode == "bypassPermissions":
            return _allow("bypassPermissions mode allows every tool")
        if self._leaves_sandbox():
            return _ask(f"{why}; and it asks to run outside the sandbox (dangerouslyDisableSandbox)", firm=True)
        if self._auto_allowed():
            return _allow("the command runs in the sandbox (autoAllowBashIfSandboxed)")
        everything = _allows_all_bash(self.rules)
        if everything is not None:
            return _allow(f"Bash is allowed by the rule {everything.text!r}", everything.text)
        return _ask(why)

    def _refused_write(self) -> PermissionDecision | None:
        """A redirection writing a file an Edit/Write deny rule covers is denied, whatever else allows the line."""
        for target in self.shell.writes:
            ctx = attrs.evolve(self.ctx, tool_name="Write", tool_input={"file_path": target})
            rule = _first_restricting_match(self.rules.deny, ctx, None)
            if rule is not None:
                return PermissionDecision(
                    behavior="deny",
                    rule=rule.text,
                    reason=f"Bash writes {target!r}, which the rule {rule.text!r} denies",
                )
        return None

    def _planted(self) -> PermissionDecision | None:
        """A redirection writing a file that runs later asks, whatever else allows the line (plan mode denies it)."""
        if self.mode == "plan":
            return None
        roots = _roots(self.ctx, self.rules)
        home, git, into = self._cd_may_reach(roots)
        for target in self.shell.writes:
            path = self._path(target)
            why = _planted_why(path, roots=roots, home=self.ctx.home)
            if why is None and not os.path.isabs(target) and (home or git or into):
                why = into or _anywhere(target, home=home, git=git)
                why = f"the command changes directory first, and there it may be {why}" if why else None
            if why is not None:
                return _ask(
                    f"Output redirection to {str(path)!r} needs approval: the file runs later ({why}), so no mode "
                    "or rule allows it without asking",
                    firm=True,
                )
        return None

    def _cd_may_reach(self, roots: Sequence[Path]) -> tuple[bool, bool, str | None]:
        """Where a ``cd`` of the line may lead: the home directory (or a folder holding it), a git directory,
        and why the folder it names runs later itself (``cd .git/hooks``), if it does.

        After one, the folder a relative redirection lands in is not the working directory. A ``cd``
        whose folder is not literal (``cd ~``, ``cd $D``), ``cd -`` and ``popd`` may lead anywhere.
        """
        home = git = False
        into: str | None = None
        for command in self.shell.commands:
            if command.name not in _CHANGES_DIRECTORY:
                continue
            folders = [w for w in command.words[1:] if w == "-" or not w.startswith("-")]
            folder = self._path(folders[0] if folders else "~")
            anywhere = not command.literal or not folders or folders[0] == "-" or command.name == "popd"
            home = home or anywhere or self.ctx.home.is_relative_to(folder)
            git = git or anywhere or ".git" in folder.parts
            into = into or (None if anywhere else _planted_why(folder, roots=roots, home=self.ctx.home))
        return home, git, into

    def _refused_read(self) -> PermissionDecision | None:
        """A read-only command naming a file a Read deny rule covers is denied (and listed, as Claude Code does)."""
        denied = read_denied(self.rules, cwd=self.ctx.cwd, home=self.ctx.home)
        # who names each path: a redirection (None) or a command, whose text is written out only for
        # the path denied (a line of 20 000 operands would otherwise join its text 20 000 times)
        named: list[tuple[str, SimpleCommand | None]] = [(path, None) for path in self.shell.reads]
        for command in self.shell.commands:
            reading = read_only_operands(command)
            named.extend((path, command) for path in (reading.paths if reading else command.reads))
        for path, by in named:
            if denied(self._path(path)):
                who = "a redirection" if by is None else repr(by.text)
                why = f"Bash reads {path!r}, which a Read deny rule covers ({who})"
                return PermissionDecision(behavior="deny", rule=None, reason=why)
        return None

    def _path(self, operand: str) -> Path:
        return Path(os.path.normpath(self.ctx.cwd / operand))

    def _by_command(self, readings: Sequence[ReadOnlyReading | None]) -> PermissionDecision:
        """Every command needs an allow rule naming it or to be read-only; every written file needs leave."""
        first_rule: str | None = None
        for command, reading in zip(self.shell.commands, readings, strict=True):
            part = attrs.evolve(self.ctx, tool_input={**self.ctx.tool_input, "command": command.full_text})
            rule = _allowing_rule(self.rules.allow, part)
            if rule is not None:
                first_rule = first_rule or rule.text
                continue
            refusal = self._read_only_refusal(command, reading)
            if refusal is not None:
                return refusal
        for target in self.shell.writes:
            if not (self.mode == "acceptEdits" and self._inside(self._path(target))):
                return _ask(
                    f"Output redirection to {str(self._path(target))!r} needs approval: only a bare Bash allow "
                    "rule, acceptEdits mode (inside the working directories) or the sandbox allows it"
                )
        if not self.shell.commands:
            return _ask(f"Bash needs approval in {self.mode} mode")
        if first_rule is not None:
            return _allow(f"Bash is allowed by the rule {first_rule!r}", first_rule)
        return _allow("Bash runs only read-only commands")

    def _read_only_refusal(self, command: SimpleCommand, reading: ReadOnlyReading | None) -> PermissionDecision | None:
        """None when ``command`` is read-only and reads only what Read could; else why it asks."""
        if reading is None:
            return _ask(f"Bash needs approval in {self.mode} mode: {command.text!r} is not provably read-only")
        for operand in reading.paths:
            if not self._inside(self._path(operand)):
                return _ask(f"Bash reads {operand!r}, outside the working directories")
        if reading.reads_dirs and any(r.specifier is not None and r.tool == "Read" for r in self.rules.deny):
            return _ask(f"{command.text!r} reads a directory tree, and Read deny rules cover files in it")
        return None

    def _inside(self, path: Path) -> bool:
        return any(is_inside(path, d) for d in (self.ctx.cwd, *self.rules.additional_directories))


_CHANGES_DIRECTORY = frozenset({"cd", "pushd", "popd"})


def _roots(ctx: _CallContext, rules: PermissionRules) -> tuple[Path, ...]:
    """The working directories a written path is judged under (``runs_later``), as written and resolved."""
    given = (ctx.cwd, *rules.additional_directories)
    return tuple(dict.fromkeys((*given, *(Path(os.path.realpath(d)) for d in given))))


def _planted_why(path: Path, *, roots: Sequence[Path], home: Path) -> str | None:
    """Why writing ``path`` plants a file that runs later — at the path, or where its symlinks lead; else None."""
    path_env = os.environ.get("PATH")
    written = Path(os.path.normpath(path))
    for candidate in dict.fromkeys((written, Path(os.path.realpath(path)))):
        why = runs_later(candidate, roots=roots, home=home, path_env=path_env)
        if why is not None:
            return why if candidate == written else f"it leads to {candidate}, {why}"
    return None


def _anywhere(target: str, *, home: bool, git: bool) -> str | None:
    """Why the relative ``target`` would run later written in the home directory (``home``) or in a git directory."""
    parts = Path(os.path.normpath(target)).parts
    git_dirs = frozenset(parts[:depth] for depth in range(len(parts))) if git else frozenset()
    return RunsLater(home=() if home else None, git_dirs=git_dirs).why(parts)


def _planted_by_tool(ctx: _CallContext, rules: PermissionRules) -> PermissionDecision | None:
    """A file tool writing a file that runs later asks, in every mode and whatever the allow rules say."""
    target = _tool_path(ctx.tool_name, ctx.tool_input, cwd=ctx.cwd, home=ctx.home)
    why = _planted_why(target, roots=_roots(ctx, rules), home=ctx.home) if target is not None else None
    if why is None:
        return None
    shown = os.path.normpath(target) if target is not None else ""
    return _ask(
        f"{ctx.tool_name} writes {shown}, which runs later ({why}): no mode or rule allows that without asking",
        firm=True,
    )


def _mode_default(
    ctx: _CallContext, *, mode: PermissionMode, rules: PermissionRules, read_only_tools: frozenset[str]
) -> PermissionDecision:
    target = _tool_path(ctx.tool_name, ctx.tool_input, cwd=ctx.cwd, home=ctx.home)
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


def finalize_ask(decision: PermissionDecision, *, mode: PermissionMode, interactive: bool) -> PermissionDecision:
    """An ask as it stands when nobody may be asked: denied in ``dontAsk`` mode and in a non-interactive run."""
    if decision.behavior != "ask":
        return decision
    if mode == "dontAsk":
        return attrs.evolve(
            decision, behavior="deny", reason=f"{decision.reason}; dontAsk mode denies instead of asking", kind="mode"
        )
    if not interactive:
        return attrs.evolve(
            decision,
            behavior="deny",
            reason=f"{decision.reason}; denied because this run is non-interactive and cannot ask",
            unanswered=True,
        )
    return decision
