"""The hook layer: Claude Code's hooks as real subprocesses or Python callbacks, and the prompt and Stop hook states.

Its states are ``submitting_prompt`` and ``running_stop_hooks``. Here: ``data``, ``lifecycle`` and ``services``
(``config``, ``runner``, ``process``, ``results``, ``calling``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queryloop.fsm import lazy_exports

if TYPE_CHECKING:
    from .data import HooksData, HooksRun
    from .lifecycle import (
        PromptAccepted,
        record_block_limit,
        record_hook_stop,
        record_prompt_context,
        run_stop_hooks,
        send_stop_feedback,
        submit_prompt,
    )
    from .services.calling import HookReported, HookRunner, HookServices, hook, stopped
    from .services.config import (
        HOOK_EVENTS,
        HookCallback,
        HookCommand,
        HookConfig,
        HookConfigError,
        HookFunction,
        HookMatcher,
        parse_hook_config,
    )
    from .services.context import context_notes, reminder_block, tool_hook_notes
    from .services.results import HookError, HookOutcome
    from .services.runner import run_hooks
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".data": (
                "HooksData",
                "HooksRun",
            ),
            ".lifecycle": (
                "PromptAccepted",
                "record_block_limit",
                "record_hook_stop",
                "record_prompt_context",
                "run_stop_hooks",
                "send_stop_feedback",
                "submit_prompt",
            ),
            ".services.calling": (
                "HookReported",
                "HookRunner",
                "HookServices",
                "hook",
                "stopped",
            ),
            ".services.context": (
                "context_notes",
                "reminder_block",
                "tool_hook_notes",
            ),
            ".services.config": (
                "HOOK_EVENTS",
                "HookCallback",
                "HookCommand",
                "HookConfig",
                "HookConfigError",
                "HookFunction",
                "HookMatcher",
                "parse_hook_config",
            ),
            ".services.results": (
                "HookError",
                "HookOutcome",
            ),
            ".services.runner": ("run_hooks",),
        },
    )

__all__ = [
    "HOOK_EVENTS",
    "HookCallback",
    "HookCommand",
    "HookConfig",
    "HookConfigError",
    "HookError",
    "HookFunction",
    "HookMatcher",
    "HookOutcome",
    "HookReported",
    "HookRunner",
    "HookServices",
    "HooksData",
    "HooksRun",
    "PromptAccepted",
    "context_notes",
    "hook",
    "parse_hook_config",
    "record_block_limit",
    "record_hook_stop",
    "record_prompt_context",
    "reminder_block",
    "run_hooks",
    "run_stop_hooks",
    "send_stop_feedback",
    "stopped",
    "submit_prompt",
    "tool_hook_notes",
]
