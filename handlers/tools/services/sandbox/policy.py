"""The sandbox settings as Claude Code spells them, and which Bash calls run inside the sandbox.

Owns :class:`SandboxPolicy`: the ``sandbox`` settings as a record, and :meth:`SandboxPolicy.sandboxes`, the one
answer the gate and Bash share. The settings: docs/security.md (the sandbox).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..shell import analyse, bash_command_matches  # the permission rules' reading and matcher: one syntax for both

__all__ = ["FilesystemPlaces", "SandboxPolicy"]


def _strings(value: Sequence[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class FilesystemPlaces:
    """``sandbox.filesystem``'s paths, absolute, and each entry that could not be placed (with why)."""

    allow_write: tuple[Path, ...] = ()
    deny_write: tuple[Path, ...] = ()
    deny_read: tuple[Path, ...] = ()
    problems: tuple[str, ...] = ()


def _place(raw: str, home: Path) -> Path | None:
    """An absolute path (``//x`` is ``/x``) or one under the home directory (``~``, ``~/x``); None otherwise."""
    if raw == "~" or raw.startswith("~/"):
        return Path(home, raw[2:])
    if raw.startswith("/"):
        return Path("/" + raw.lstrip("/"))
    return None


@attrs.frozen(kw_only=True)
class SandboxPolicy:
    """What the user asked of the sandbox; ``enabled`` False means every command runs as before, unsandboxed."""

    enabled: bool = False
    auto_allow: bool = True  # autoAllowBashIfSandboxed: a sandboxed command that would ask is allowed
    allow_unsandboxed: bool = True  # allowUnsandboxedCommands: dangerouslyDisableSandbox may leave, through the gate
    fail_if_unavailable: bool = False  # failIfUnavailable: no working sandbox, no run
    excluded_commands: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    allowed_domains: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    allow_write: tuple[str, ...] = attrs.field(default=(), converter=_strings)  # filesystem.allowWrite, as written
    deny_write: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    deny_read: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    @classmethod
    def from_settings(cls, raw: Mapping[str, Any] | None, *, force: bool = False) -> SandboxPolicy:
        """The policy from a validated ``sandbox`` settings object; ``force`` (``--sandbox``) turns it on."""
        raw = raw or {}
        network = raw.get("network") or {}
        filesystem = raw.get("filesystem") or {}
        return cls(
            enabled=force or bool(raw.get("enabled", False)),
            auto_allow=bool(raw.get("autoAllowBashIfSandboxed", True)),
            allow_unsandboxed=bool(raw.get("allowUnsandboxedCommands", True)),
            fail_if_unavailable=bool(raw.get("failIfUnavailable", False)),
            excluded_commands=tuple(raw.get("excludedCommands") or ()),
            allowed_domains=tuple(network.get("allowedDomains") or ()),
            allow_write=tuple(filesystem.get("allowWrite") or ()),
            deny_write=tuple(filesystem.get("denyWrite") or ()),
            deny_read=tuple(filesystem.get("denyRead") or ()),
        )

    def places(self, home: Path) -> FilesystemPlaces:
        """The ``filesystem`` paths made absolute; a relative one is left out and said (no file's folder is known
        once settings are merged, and Claude Code 2.1.235 does not place them either)."""
        problems: list[str] = []

        def placed(key: str, entries: tuple[str, ...]) -> tuple[Path, ...]:
            paths = []
            for raw in entries:
                path = _place(raw, home)
                if path is None:
                    problems.append(f"sandbox.filesystem.{key} {raw!r} is not absolute or under ~/; it is left out")
                else:
                    paths.append(path)
            return tuple(paths)

        allow = placed("allowWrite", self.allow_write)
        deny_write = placed("denyWrite", self.deny_write)
        deny_read = placed("denyRead", self.deny_read)
        return FilesystemPlaces(allow_write=allow, deny_write=deny_write, deny_read=deny_read, problems=tuple(problems))

    def problem(self) -> str | None:
        """Why an enabled sandbox cannot start here (None: it can, or it is not enabled); probed once per process."""
        if not self.enabled:
            return None
        from .probe import unavailable_reason

        return unavailable_reason()

    def leaves_on_request(self, tool_input: Mapping[str, object]) -> bool:
        """The call asks to run outside (``dangerouslyDisableSandbox``) and the settings let it ask."""
        return self.enabled and self.allow_unsandboxed and tool_input.get("dangerouslyDisableSandbox") is True

    def excluded(self, commands: Sequence[str]) -> str | None:
        """The ``excludedCommands`` pattern one of these (normalised) commands matches, if any."""
        for pattern in self.excluded_commands:
            if any(bash_command_matches(pattern, command) for command in commands):
                return pattern
        return None

    def sandboxes(self, tool_input: Mapping[str, object]) -> bool:
        """Does a Bash call with this input run inside the sandbox? (Its commands as ``shell`` reads them.)"""
        if not self.enabled or self.leaves_on_request(tool_input):
            return False
        command = tool_input.get("command")
        commands = [c.text for c in analyse(command).commands] if isinstance(command, str) else []
        return self.excluded(commands) is None
