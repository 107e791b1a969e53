"""Hooks: the Claude Code ``hooks`` settings block, read into :class:`HookConfig`, and which hooks an event runs.

Owns the hook events, :func:`parse_hook_config` and the matchers. Running the hooks is ``runner``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, get_args

import attrs

__all__ = [
    "HOOK_CALLBACK_TIMEOUT_S",
    "HOOK_EVENTS",
    "HookCallback",
    "HookCommand",
    "HookConfig",
    "HookConfigError",
    "HookEvent",
    "HookFunction",
    "HookMatcher",
    "json_kind",
    "parse_hook_config",
]

HookEvent = Literal[
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "SubagentStop",
    "UserPromptSubmit",
    "SessionStart",
    "SessionEnd",
    "PreCompact",
    "Elicitation",
]
"""The hook events this runtime fires: the one list of them (settings, the Python API and the Agent SDK's
session read :data:`HOOK_EVENTS`; an effect fires one with ``hook(ctx, "<Event>", payload)``)."""
HOOK_EVENTS: Final[tuple[HookEvent, ...]] = get_args(HookEvent)
"""The events of :data:`HookEvent`, in its order."""

# The stdin field a matcher is tested against, per event. Events not listed here
# (Stop, UserPromptSubmit, ...) have no matcher: every configured hook runs.
_MATCH_FIELD: Final[Mapping[str, str]] = {
    "PreToolUse": "tool_name",
    "PostToolUse": "tool_name",
    "PreCompact": "trigger",
    "SessionStart": "source",
    "SessionEnd": "reason",
    "Elicitation": "mcp_server_name",
}
_EXACT_MATCHER_RE: Final = re.compile(r"[A-Za-z0-9_|, -]+")


class HookConfigError(ValueError):
    """The ``hooks`` settings block is not well formed; ``path`` is the JSON path of the problem."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.problem = message


@attrs.frozen(kw_only=True)
class HookCommand:
    """One configured hook. Only ``type: "command"`` hooks are run; others are kept and skipped."""

    type: str = "command"
    command: str = ""
    timeout_s: float | None = None


HookCallback = Callable[[dict[str, Any], str | None, dict[str, Any]], Awaitable[Mapping[str, Any] | None]]
"""A Python hook: ``(input_data, tool_use_id, context)`` → the JSON output a command hook would print."""

HOOK_CALLBACK_TIMEOUT_S: Final = 60.0
"""How long a Python hook may take by default (the Claude Agent SDK's default); a command's is 600 s."""


def _check_callable(_instance: object, _attribute: attrs.Attribute[HookCallback], value: HookCallback) -> None:
    if not callable(value):
        raise TypeError(
            f"a Python hook must be an async function (input_data, tool_use_id, context) -> dict, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class HookFunction:
    """One Python hook: an async callable with the Claude Agent SDK's hook signature.

    It gets the fields a command hook reads on stdin as ``input_data``, the call's
    ``tool_use_id`` (None outside tool events) and ``{"signal": None}`` as ``context``,
    and returns what a command hook prints as JSON (``continue_`` may stand for
    ``continue``, as in the SDK); None is an empty answer.
    """

    callback: HookCallback = attrs.field(validator=_check_callable)
    timeout_s: float | None = None

    @property
    def label(self) -> str:
        """How errors name this hook: ``python:<module>.<qualified name>``."""
        name = getattr(self.callback, "__qualname__", None) or type(self.callback).__qualname__
        module = getattr(self.callback, "__module__", None)
        return f"python:{module}.{name}" if module else f"python:{name}"


def _compile_matcher(matcher: str) -> re.Pattern[str] | frozenset[str] | None:
    """``None`` matches everything; a frozenset is exact names; else an unanchored regex."""
    text = matcher.strip()
    if text in {"", "*"}:
        return None
    if _EXACT_MATCHER_RE.fullmatch(text):
        return frozenset(name.strip() for name in re.split(r"[|,]", text) if name.strip())
    return re.compile(text)


@attrs.frozen(kw_only=True)
class HookMatcher:
    """A matcher group of one event: which values it fits and the hooks it runs."""

    event: str
    matcher: str = ""
    hooks: tuple[HookCommand | HookFunction, ...] = ()
    _compiled: re.Pattern[str] | frozenset[str] | None = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(lambda self: _compile_matcher(self.matcher), takes_self=True),
    )

    def matches(self, value: str | None) -> bool:
        """Whether this group applies to ``value`` (a tool name, compaction trigger, ...)."""
        compiled = self._compiled
        if compiled is None or self.event not in _MATCH_FIELD:
            return True
        if value is None:
            return False
        if isinstance(compiled, frozenset):
            return value in compiled
        return compiled.search(value) is not None


@attrs.frozen(kw_only=True)
class HookConfig:
    """Every hook matcher group, in settings order."""

    matchers: tuple[HookMatcher, ...] = ()

    def commands_for(self, event: str, payload: Mapping[str, object]) -> tuple[HookCommand | HookFunction, ...]:
        """The hooks to run for ``event``: commands and Python callbacks; identical ones run once."""
        field = _MATCH_FIELD.get(event)
        value = payload.get(field) if field is not None else None
        seen: set[object] = set()
        out: list[HookCommand | HookFunction] = []
        for group in self.matchers:
            if group.event != event or not group.matches(value if isinstance(value, str) else None):
                continue
            for hook in group.hooks:
                key = hook.command if isinstance(hook, HookCommand) else id(hook.callback)
                if (isinstance(hook, HookFunction) or hook.type == "command") and key not in seen:
                    seen.add(key)
                    out.append(hook)
        return tuple(out)

    def merged(self, other: HookConfig) -> HookConfig:
        """This configuration's matcher groups, then ``other``'s (all of them run)."""
        return HookConfig(matchers=(*self.matchers, *other.matchers))


def json_kind(value: object) -> str:
    """How an error message names a JSON value it found: ``an object``, ``an array``, or the value itself."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return json.dumps(value)


def parse_hook_config(hooks: object, *, path: str = "$.hooks") -> HookConfig:
    """Build a :class:`HookConfig` from the value of the settings key ``hooks``.

    Raises :class:`HookConfigError` naming the JSON path of the first problem. Unknown
    event names are kept (Claude Code has events this runtime never fires).
    """
    if not isinstance(hooks, Mapping):
        raise HookConfigError(
            path, f"expected an object mapping event names to matcher lists, found {json_kind(hooks)}"
        )
    matchers: list[HookMatcher] = []
    for event, groups in hooks.items():
        event_path = f"{path}.{event}"
        if not isinstance(groups, list):
            raise HookConfigError(event_path, f"expected an array of matcher groups, found {json_kind(groups)}")
        for i, group in enumerate(groups):
            group_path = f"{event_path}[{i}]"
            if not isinstance(group, Mapping):
                raise HookConfigError(group_path, f"expected an object, found {json_kind(group)}")
            matcher = group.get("matcher", "")
            if matcher is None:
                matcher = ""
            if not isinstance(matcher, str):
                raise HookConfigError(f"{group_path}.matcher", f"expected a string, found {json_kind(matcher)}")
            commands = group.get("hooks")
            if not isinstance(commands, list):
                raise HookConfigError(
                    f"{group_path}.hooks",
                    f"expected an array of hooks, found {json_kind(commands) if 'hooks' in group else 'nothing'}",
                )
            parsed = tuple(_parse_hook_command(h, f"{group_path}.hooks[{j}]") for j, h in enumerate(commands))
            try:
                matchers.append(HookMatcher(event=str(event), matcher=matcher, hooks=parsed))
            except re.error as exc:
                raise HookConfigError(
                    f"{group_path}.matcher",
                    f"{matcher!r} is not a valid regular expression ({exc}); use 'A|B' for exact tool names",
                ) from None
    return HookConfig(matchers=tuple(matchers))


def _parse_hook_command(hook: object, path: str) -> HookCommand:
    if not isinstance(hook, Mapping):
        raise HookConfigError(path, f"expected an object, found {json_kind(hook)}")
    kind = hook.get("type", "command")
    if not isinstance(kind, str):
        raise HookConfigError(f"{path}.type", f"expected a string, found {json_kind(kind)}")
    command = hook.get("command", "")
    if kind == "command" and (not isinstance(command, str) or not command.strip()):
        found = "nothing" if "command" not in hook else json_kind(command)
        raise HookConfigError(f"{path}.command", f"expected a non-empty string, found {found}")
    timeout = hook.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise HookConfigError(f"{path}.timeout", f"expected a positive number of seconds, found {json_kind(timeout)}")
    return HookCommand(
        type=kind,
        command=command if isinstance(command, str) else "",
        timeout_s=None if timeout is None else float(timeout),
    )
