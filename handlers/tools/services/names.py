"""Claude Code's tool names and what each one is: the one table every set of tool names is made from.

Per name: the rules that cover it, its path field, whether it asks, whether microcompaction clears it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

import attrs

__all__ = [
    "AGENT_TOOL",
    "AGENT_TOOL_EARLIER_NAME",
    "BASH_TOOLS",
    "CHANGES_CODE",
    "CLEARABLE_TOOLS",
    "DEFAULT_READ_ONLY_TOOLS",
    "EDIT_TOOLS",
    "KNOWN_TOOLS",
    "KnownTool",
    "LIST_RESOURCES",
    "PATH_FIELDS",
    "READ_RESOURCE",
    "READ_TOOLS",
    "SEARCHES_CWD",
    "SHOWN_ABSOLUTE",
    "STRUCTURED_OUTPUT",
]

RuleFamily = Literal["Read", "Edit", "Bash"]

AGENT_TOOL: Final = "Agent"
"""The tool that starts a sub-agent (``queryloop.handlers.agents``)."""
AGENT_TOOL_EARLIER_NAME: Final = "Task"
"""Claude Code's earlier name of the Agent tool, which its ``init`` line and ``--tools`` still use."""
LIST_RESOURCES: Final = "ListMcpResourcesTool"
"""The tool listing the MCP servers' resources (``queryloop.handlers.mcp``)."""
READ_RESOURCE: Final = "ReadMcpResourceTool"
"""The tool reading one MCP resource (``queryloop.handlers.mcp``)."""
STRUCTURED_OUTPUT: Final = "StructuredOutput"
"""The tool the model answers with under ``--json-schema`` (``services/structured_output``)."""


@attrs.frozen(kw_only=True)
class KnownTool:
    """One tool name and what it is, as Claude Code 2.1.235 treats it."""

    name: str
    rules: RuleFamily | None = None
    """The family whose rules cover it: a ``Read(...)`` rule covers every reading tool, an ``Edit(...)`` or
    ``Write(...)`` rule every editing one (so ``deny: ["Edit(./.env)"]`` cannot be side-stepped with ``Write``)."""
    path_field: str | None = None
    """The input field holding the file or folder it works on (a path rule is matched against it)."""
    searches_cwd: bool = False
    """With no path given it works on the working directory (Glob, Grep, LS)."""
    never_asks: bool = False
    """Needs no prompt in ``default`` mode (when its path, if any, is inside a working directory), and is one of
    the only tools ``plan`` mode lets through."""
    shown_absolute: bool = False
    """A permission callback sees its path absolute (``~`` expanded, ``..`` folded), as Claude Code makes it for
    its ``can_use_tool``; other tools' inputs reach the callback as the model wrote them."""
    clearable: bool = False
    """A microcompaction clears its old results: what it returned can be had again (read, listed, searched or
    fetched anew) or was only a confirmation."""
    changes_code: bool = False
    """Its decisions are counted as ``claude_code.code_edit_tool.decision``, and the read-only built-in agents
    (Explore, Plan) may not use it."""


def _tools(*tools: KnownTool) -> Mapping[str, KnownTool]:
    return {tool.name: tool for tool in tools}


KNOWN_TOOLS: Final[Mapping[str, KnownTool]] = _tools(
    KnownTool(name="Read", rules="Read", path_field="file_path", never_asks=True, shown_absolute=True, clearable=True),
    KnownTool(
        name="Edit", rules="Edit", path_field="file_path", shown_absolute=True, clearable=True, changes_code=True
    ),
    KnownTool(
        name="Write", rules="Edit", path_field="file_path", shown_absolute=True, clearable=True, changes_code=True
    ),
    KnownTool(name="MultiEdit", rules="Edit", path_field="file_path"),
    KnownTool(name="NotebookRead", rules="Read", path_field="notebook_path", never_asks=True),
    KnownTool(name="NotebookEdit", rules="Edit", path_field="notebook_path", shown_absolute=True, changes_code=True),
    KnownTool(name="Glob", rules="Read", path_field="path", searches_cwd=True, never_asks=True, clearable=True),
    KnownTool(name="Grep", rules="Read", path_field="path", searches_cwd=True, never_asks=True, clearable=True),
    KnownTool(name="LS", rules="Read", path_field="path", searches_cwd=True, never_asks=True),
    KnownTool(name="Bash", rules="Bash", clearable=True),
    KnownTool(name="PowerShell", clearable=True),
    KnownTool(name="WebFetch", clearable=True),
    KnownTool(name="WebSearch", clearable=True),
    KnownTool(name=LIST_RESOURCES, never_asks=True),
    KnownTool(name=READ_RESOURCE, never_asks=True),
    # Agent changes nothing itself: each call of the sub-agent it starts passes the gate under the same rules and mode
    KnownTool(name=AGENT_TOOL, never_asks=True),
    # the answer itself under --json-schema: it changes nothing and runs nothing
    KnownTool(name=STRUCTURED_OUTPUT, never_asks=True),
)


def _named(*, rules: RuleFamily | None = None, **flags: bool) -> frozenset[str]:
    return frozenset(
        t.name
        for t in KNOWN_TOOLS.values()
        if (rules is None or t.rules == rules) and all(getattr(t, k) == v for k, v in flags.items())
    )


READ_TOOLS: Final = _named(rules="Read")
"""The tools a ``Read(...)`` rule covers: those whose rules are path rules about reading."""
EDIT_TOOLS: Final = _named(rules="Edit")
"""The tools that change files: an ``Edit(...)`` or ``Write(...)`` rule covers them all."""
BASH_TOOLS: Final = _named(rules="Bash")
"""The tools whose rules are command patterns."""
DEFAULT_READ_ONLY_TOOLS: Final = _named(never_asks=True)
"""The tools that never need a prompt in ``default`` mode and the only ones ``plan`` mode lets through."""
PATH_FIELDS: Final[Mapping[str, str]] = {t.name: t.path_field for t in KNOWN_TOOLS.values() if t.path_field}
"""The input field holding the path each path-taking tool works on."""
SEARCHES_CWD: Final = _named(searches_cwd=True)
"""The tools that search the working directory when no path is given."""
SHOWN_ABSOLUTE: Final = _named(shown_absolute=True)
"""The tools whose path a permission callback sees absolute and normalised."""
CLEARABLE_TOOLS: Final = _named(clearable=True)
"""The tools whose old results a microcompaction clears."""
CHANGES_CODE: Final = tuple(t.name for t in KNOWN_TOOLS.values() if t.changes_code)
"""The tools that change code, in the table's order (Claude Code's ``code_edit_tool``)."""
