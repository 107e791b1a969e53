"""Coverage of Claude Code 2.1.235's names: each result subtype, stream-json line and control request has a row.

A name has a row when some row of the suite names it in what it expects or sends (its
values, its conversation), or when :data:`READ_BY` names the row that reads it through a
function. A name no row probes is listed in :data:`NOT_PROBED` with the reason. The lists
of system lines, result subtypes and control requests are read from the installed package
(its schemas name them), so a name a new release adds fails here first; the line types are
listed by hand (the package names them in too many places to read them reliably).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from . import reference

pytestmark = pytest.mark.slow  # beside the rows it counts

RESULT_SUBTYPES = (
    *("success", "error_during_execution", "error_max_turns", "error_max_budget_usd"),
    "error_max_structured_output_retries",
)
LINE_TYPES = (  # by hand: the SDK's message types (``type`` of a stream-json line)
    *("assistant", "user", "result", "system", "stream_event", "tool_progress", "tool_use_summary"),
    *("rate_limit_event", "prompt_suggestion", "control_request", "control_response", "control_cancel_request"),
    *("keep_alive", "auth_status"),
)
SYSTEM_SUBTYPES = (
    *("agents_killed", "api_error", "api_retry", "away_summary", "background_tasks_changed"),
    *("code_change_published", "commands_changed", "compact_boundary", "control_request_progress"),
    *("elicitation_complete", "feedback_draft_queued", "file_snapshot", "files_persisted", "hook_progress"),
    *("hook_response", "hook_started", "informational", "init", "local_command_output", "memory_recall"),
    *("memory_saved", "mirror_error", "model_consent_fallback", "model_fallback", "model_refusal_fallback"),
    *("model_refusal_no_fallback", "notification", "permission_denied", "permission_retry", "plugin_install"),
    *("post_turn_summary", "scheduled_task_fire", "session_state_changed", "status", "stop_hook_summary"),
    *("task_notification", "task_progress", "task_started", "task_summary", "task_updated", "thinking"),
    *("thinking_tokens", "turn_duration", "vcs_state_changed", "worker_shutting_down"),
)
CONTROL_SUBTYPES = (  # the requests' subtypes (a response's are success and error)
    *("apply_flag_settings", "background_tasks", "can_use_tool", "cancel_async_message", "elicitation"),
    *("file_suggestions", "get_binary_version", "get_context_usage", "get_plan", "get_session_cost"),
    *("get_settings", "get_usage", "get_workspace_diff", "hook_callback", "host_auth_token_refresh"),
    *("initialize", "interrupt", "list_models", "mcp_call", "mcp_message", "mcp_reconnect", "mcp_set_servers"),
    *("mcp_status", "mcp_toggle", "message_rated", "oauth_token_refresh", "read_file", "register_repo_root"),
    *("reload_plugins", "reload_skills", "rename_session", "request_user_dialog", "rewind_files"),
    *("seed_read_state", "set_color", "set_cwd", "set_max_thinking_tokens", "set_mcp_permission_mode_override"),
    *("set_model", "set_permission_mode", "stop_task", "submit_feedback"),
)

#: Names a row reads through a function (so its values do not spell them): the module and the row.
READ_BY = {
    "stream_event": ("test_media", "partial messages: the event types"),
    "control_response": ("test_control", "initialize: the answer's keys"),
}

_INTERACTIVE = (
    "not written in any -p probe (tools, hooks, Stop, retries, fallback, denials); by its name and schema a line "
    "of Claude Code's interactive, remote or background-session features"
)
_HOOK_EVENTS = "written with --include-hook-events, which queryloop accepts and ignores (test_flags.py)"
_REMOTE = "a request of Claude Code's own hosts (IDE, web, remote sessions), which the Python Agent SDK does not send"
_SETTINGS = "a request for a feature queryloop does not have (plugins, skills reload, colours, feedback, ratings)"
_NOT_YET = "not probed yet"
_UNSERVED = (
    "probed by hand: Claude Code answers it, queryloop answers an unsupported_request error; the Python "
    "Agent SDK does not send it"
)

#: Names no row probes, each with the reason.
NOT_PROBED: dict[str, str] = {
    # ---- result subtypes: every one has a row ----
    # ---- line types ----
    "tool_progress": f"{_NOT_YET}: written while a long tool runs, after a delay of Claude Code's own",
    "tool_use_summary": _INTERACTIVE,
    "rate_limit_event": "written for claude.ai subscriptions' limits; an API key has none",
    "prompt_suggestion": "written only with --prompt-suggestions, which queryloop refuses (test_flags.py)",
    "control_cancel_request": f"{_NOT_YET}: the SDK sends it to withdraw a can_use_tool request still open",
    "keep_alive": "a transport line of remote sessions",
    "auth_status": "written while a claude.ai login runs; an API key needs none",
    # ---- system subtypes ----
    "api_error": "Claude Code's inner message: it prints it as the api_retry line (test_stream.py)",
    "compact_boundary": f"{_NOT_YET}: compaction needs a history the server's count agrees is long",
    "hook_progress": _HOOK_EVENTS,
    "model_refusal_fallback": f"{_NOT_YET}: a refusal answered by another model",
    "model_refusal_no_fallback": f"{_NOT_YET}: a refusal with no other model",
    "model_consent_fallback": _INTERACTIVE,
    "task_started": f"{_NOT_YET}: a background agent's lines (test_agents rows are planned)",
    "task_progress": f"{_NOT_YET}: a background agent's lines",
    "task_notification": f"{_NOT_YET}: a background agent's lines",
    "task_updated": f"{_NOT_YET}: a background agent's lines",
    "task_summary": f"{_NOT_YET}: a background agent's lines",
    "local_command_output": f"{_NOT_YET}: a slash command's output in -p (/cost and the like, unknown here)",
    "files_persisted": "Claude Code's file checkpoints in headless mode, off unless asked for",
    "file_snapshot": "Claude Code's file checkpoints in headless mode, off unless asked for",
    **dict.fromkeys(
        (
            *("agents_killed", "away_summary", "background_tasks_changed", "code_change_published"),
            *("commands_changed", "control_request_progress", "elicitation_complete", "feedback_draft_queued"),
            *("informational", "memory_recall", "memory_saved", "mirror_error", "notification", "permission_retry"),
            *("plugin_install", "post_turn_summary", "scheduled_task_fire", "session_state_changed"),
            *("stop_hook_summary", "thinking", "thinking_tokens", "turn_duration", "vcs_state_changed"),
            "worker_shutting_down",
        ),
        _INTERACTIVE,
    ),
    # ---- control requests ----
    **dict.fromkeys(
        (
            *("apply_flag_settings", "background_tasks", "cancel_async_message", "file_suggestions"),
            *("get_plan", "get_workspace_diff", "host_auth_token_refresh", "oauth_token_refresh", "read_file"),
            *("register_repo_root", "request_user_dialog", "seed_read_state", "set_cwd"),
            "set_mcp_permission_mode_override",
        ),
        _REMOTE,
    ),
    **dict.fromkeys(
        ("message_rated", "reload_plugins", "reload_skills", "rename_session", "set_color", "submit_feedback"),
        _SETTINGS,
    ),
    "elicitation": f"{_NOT_YET}: the program asks it of the SDK for an MCP server's elicitation",
    "mcp_call": f"{_NOT_YET}: the host calls an SDK MCP server's tool",
    "mcp_message": f"{_NOT_YET}: the program asks it of the SDK for an in-process (SDK) MCP server",
    **dict.fromkeys(
        ("get_binary_version", "get_session_cost", "get_settings", "get_usage", "list_models", "mcp_set_servers"),
        _UNSERVED,
    ),
    "set_max_thinking_tokens": f"queryloop asks for no thinking; {_UNSERVED}",
}


def _rows_text() -> str:
    """Every row of every module of the suite, as its repr (values, probe, conversation)."""
    texts: list[str] = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        for value in vars(module).values():
            if isinstance(value, dict) and value and all(_is_row(row) for row in value.values()):
                texts.extend(repr(row) for row in value.values())
    return "\n".join(texts)


def _is_row(value: object) -> bool:
    items = value if isinstance(value, tuple) else (value,)
    return any(hasattr(item, "probe") for item in items)


def _has_row(name: str, text: str, parent: str) -> bool:
    """A row names ``name`` as a line's or a request's kind: its subtype, ``(parent, name)``, or its type."""
    if name in READ_BY:
        module, row = READ_BY[name]
        return row in importlib.import_module(f"{__package__}.{module}").ROWS
    spellings = [f"'subtype': '{name}'", f"subtype='{name}'", f"('{parent}', '{name}')"]
    if not parent:  # a line type: ``'type': name`` or a (type, subtype) pair
        spellings += [f"'type': '{name}'", f"('{name}', "]
    return any(spelling in text for spelling in spellings)


@pytest.mark.parametrize(
    ("kind", "parent", "names"),
    [
        ("result subtype", "result", RESULT_SUBTYPES),
        ("stream-json line type", "", LINE_TYPES),
        ("system line subtype", "system", SYSTEM_SUBTYPES),
        ("control request", "control_request", CONTROL_SUBTYPES),
    ],
)
def test_every_name_of_claude_code_has_a_row_or_a_reason(kind: str, parent: str, names: tuple[str, ...]) -> None:
    text = _rows_text()
    missing = [n for n in names if not _has_row(n, text, parent) and n not in NOT_PROBED]
    assert missing == [], f"{kind}s of Claude Code 2.1.235 without a row or a reason: {missing}"
    probed = [n for n in names if _has_row(n, text, parent) and n in NOT_PROBED]
    assert probed == [], f"{kind}s with a row, still listed in NOT_PROBED: {probed}"


def test_every_name_not_probed_is_one_of_claude_codes() -> None:
    known = {*RESULT_SUBTYPES, *LINE_TYPES, *SYSTEM_SUBTYPES, *CONTROL_SUBTYPES}
    assert sorted(set(NOT_PROBED) - known) == []


def _package_names(pattern: bytes) -> set[str]:
    reference.reference()  # skips, saying how to install it, where it is missing
    data = (reference.CLAUDE.parent.parent / "@anthropic-ai" / "claude-code-linux-x64" / "claude").read_bytes()
    return {m.decode() for found in re.findall(pattern, data) for m in re.findall(rb"[a-z_]+", found)}


def test_the_lists_are_the_installed_packages_names() -> None:
    """The system lines, result subtypes and control requests its schemas declare (minified: ``ye({subtype:wt(…)``)."""
    system = _package_names(rb'[\w$]+\(\{type:[\w$]+\("system"\),subtype:[\w$]+\("([a-z_]+)"\)')
    result = _package_names(rb'type:[\w$]+\("result"\),subtype:[\w$]+\(((?:"[a-z_]+")|\[[^\]]*\])\)')
    control = _package_names(rb'[\w$]+\(\{subtype:[\w$]+\("([a-z_]+)"\)') - {"success", "error"}
    assert (sorted(system), sorted(result), sorted(control)) == (
        sorted(SYSTEM_SUBTYPES),
        sorted(RESULT_SUBTYPES),
        sorted(CONTROL_SUBTYPES),
    )
