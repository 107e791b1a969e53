"""The permission decision for one Bash call the deny rules let through: the gate's own order for a command line.

Owns :class:`BashCall`. Rules are matched against every command the line runs (``matching``); a file a
redirection writes needs what a Write of it needs. Deny rules and the rest of the order: ``permissions``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .decision import PermissionDecision, allow, ask
from .matching import CallContext, allowing_rule, allows_all_bash, first_restricting_match, restricts_bash
from .planted import planted_in_home_or_git, planted_why, write_roots
from .read_only import ReadOnlyReading, read_only_operands
from .rules import PermissionMode, PermissionRules, is_inside, read_denied
from .runs import unreadable
from .shell import ShellCommand, SimpleCommand

if TYPE_CHECKING:
    from .sandbox.policy import SandboxPolicy

__all__ = ["BashCall"]

_CHANGES_DIRECTORY = frozenset({"cd", "pushd", "popd"})


@attrs.frozen(kw_only=True)
class BashCall:
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

    ctx: CallContext
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
        hidden = unreadable(self.shell) if restricts_bash(self.rules) else None
        if hidden is not None:  # in every mode: bypass and a bare Bash rule cannot apply rules to what is not read
            why = f"the command runs code the gate cannot read ({hidden}), so the Bash deny and ask rules cannot apply"
            return (
                PermissionDecision(behavior="deny", rule=None, reason=why)
                if self.mode == "plan"
                else ask(why, firm=True)
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
            return allow("bypassPermissions mode allows every tool not denied by a rule")
        rule = first_restricting_match(self.rules.ask, self.ctx, self.shell)
        if rule is not None:
            return attrs.evolve(ask(f"Bash needs approval by the rule {rule.text!r}", rule.text), kind="rule")
        if self._leaves_sandbox():  # Claude Code's sandbox override: the user decides, whatever the rules allow
            return ask(
                "Run outside of the sandbox: the command asks to leave it (dangerouslyDisableSandbox)", firm=True
            )
        if self._auto_allowed():
            return allow("the command runs in the sandbox (autoAllowBashIfSandboxed)")
        everything = allows_all_bash(self.rules)
        if everything is not None:
            return allow(f"Bash is allowed by the rule {everything.text!r}", everything.text)
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
        if restricts_bash(self.rules):
            return ask(f"{why}, so the Bash deny and ask rules cannot be applied to it", firm=True)
        if self.mode == "bypassPermissions":
            return allow("bypassPermissions mode allows every tool")
        if self._leaves_sandbox():
            return ask(f"{why}; and it asks to run outside the sandbox (dangerouslyDisableSandbox)", firm=True)
        if self._auto_allowed():
            return allow("the command runs in the sandbox (autoAllowBashIfSandboxed)")
        everything = allows_all_bash(self.rules)
        if everything is not None:
            return allow(f"Bash is allowed by the rule {everything.text!r}", everything.text)
        return ask(why)

    def _refused_write(self) -> PermissionDecision | None:
        """A redirection writing a file an Edit/Write deny rule covers is denied, whatever else allows the line."""
        for target in self.shell.writes:
            ctx = attrs.evolve(self.ctx, tool_name="Write", tool_input={"file_path": target})
            rule = first_restricting_match(self.rules.deny, ctx, None)
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
        roots = write_roots(self.ctx, self.rules)
        home, git, into = self._cd_may_reach(roots)
        for target in self.shell.writes:
            path = self._path(target)
            why = planted_why(path, roots=roots, home=self.ctx.home)
            if why is None and not os.path.isabs(target) and (home or git or into):
                why = into or planted_in_home_or_git(target, home=home, git=git)
                why = f"the command changes directory first, and there it may be {why}" if why else None
            if why is not None:
                return ask(
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
            into = into or (None if anywhere else planted_why(folder, roots=roots, home=self.ctx.home))
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
            rule = allowing_rule(self.rules.allow, part)
            if rule is not None:
                first_rule = first_rule or rule.text
                continue
            refusal = self._read_only_refusal(command, reading)
            if refusal is not None:
                return refusal
        for target in self.shell.writes:
            if not (self.mode == "acceptEdits" and self._inside(self._path(target))):
                return ask(
                    f"Output redirection to {str(self._path(target))!r} needs approval: only a bare Bash allow "
                    "rule, acceptEdits mode (inside the working directories) or the sandbox allows it"
                )
        if not self.shell.commands:
            return ask(f"Bash needs approval in {self.mode} mode")
        if first_rule is not None:
            return allow(f"Bash is allowed by the rule {first_rule!r}", first_rule)
        return allow("Bash runs only read-only commands")

    def _read_only_refusal(self, command: SimpleCommand, reading: ReadOnlyReading | None) -> PermissionDecision | None:
        """None when ``command`` is read-only and reads only what Read could; else why it asks."""
        if reading is None:
            return ask(f"Bash needs approval in {self.mode} mode: {command.text!r} is not provably read-only")
        for operand in reading.paths:
            if not self._inside(self._path(operand)):
                return ask(f"Bash reads {operand!r}, outside the working directories")
        if reading.reads_dirs and any(r.specifier is not None and r.tool == "Read" for r in self.rules.deny):
            return ask(f"{command.text!r} reads a directory tree, and Read deny rules cover files in it")
        return None

    def _inside(self, path: Path) -> bool:
        return any(is_inside(path, d) for d in (self.ctx.cwd, *self.rules.additional_directories))
