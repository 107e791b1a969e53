"""The agent's flags: the options of ``queryloop [options] [prompt]`` and ``queryloop run``, and their checks.

Owns the parsers' shape (one-line usage errors, the help ordered as Claude Code's) and what refuses a flag before
anything starts; the program (``cli``) dispatches the parsed flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from queryloop.fsm import FsmError
from queryloop.handlers.tools import PERMISSION_MODES, PermissionRuleError, parse_rule_list

from .. import __version__
from ..run.defaults import AUTO_COMPACT_THRESHOLD, CLAUDE_CODE_VERSION, DEFAULT_MODEL
from .argtypes import PARAM_FLAGS, at_least_one, beyond_declared_range, budget, models, percent, positive_int, seconds
from .formats import OUTPUT_FORMATS
from .sdk_flags import add_sdk_options, prepare_sdk_flags

if TYPE_CHECKING:
    from ..run.memory import MemoryKind

__all__ = [
    "AgentParser",
    "Parser",
    "add_agent_options",
    "opens_session",
    "refuse_beyond_range",
    "refuse_mistyped_command",
    "refuse_unsupported",
]


def _rules(text: str) -> str:
    """A ``--allowed-tools`` / ``--disallowed-tools`` value, checked here so a bad rule is a usage error."""
    try:
        parse_rule_list(text)
    except PermissionRuleError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _sources(text: str) -> tuple[MemoryKind, ...]:
    """A ``--setting-sources`` value: a comma-separated subset of user, project, local ('' for none)."""
    from ..run.memory import MEMORY_KINDS

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    wrong = [n for n in names if n not in MEMORY_KINDS]
    if wrong:
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(MEMORY_KINDS)}, got {', '.join(wrong)}")
    return tuple(k for k in MEMORY_KINDS if k in names)


class Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line on stderr (``PROG: error: …``) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _option_order(action: argparse.Action) -> str:
    """Where an option sorts in the help: by its first long name, without dashes (``-p, --print`` under p)."""
    longs = [name for name in action.option_strings if name.startswith("--")] or action.option_strings
    return longs[0].lstrip("-").lower()


class AgentParser(Parser):
    """The agent's parser, whose help is shaped as Claude Code's: the arguments, then every option in the
    order of its name, then the commands (one list of 45 options in the order they were added hid
    ``--scenario`` 43rd)."""

    def format_help(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        shown = [a for a in self._actions if a.help != argparse.SUPPRESS]
        for title, actions in (
            ("Arguments", [a for a in shown if not a.option_strings]),
            ("Options", sorted((a for a in shown if a.option_strings), key=_option_order)),
        ):
            formatter.start_section(title)
            formatter.add_arguments(actions)
            formatter.end_section()
        formatter.start_section("Commands")
        formatter.add_text(self.epilog)
        formatter.end_section()
        return formatter.format_help()


def add_agent_options(run: argparse.ArgumentParser) -> None:
    """The agent's options, the same for ``queryloop [options] [prompt]`` and ``queryloop run`` (the program sets
    what runs them)."""
    _add_io_options(run)
    _add_model_options(run)
    _add_limit_options(run)
    _add_context_options(run)
    _add_permission_options(run)
    _add_mcp_options(run)
    _add_session_options(run)
    add_sdk_options(run)
    run.add_argument("--verbose", action="store_true", help="show request failures, tombstones and totals")
    run.add_argument(
        "--cwd", type=Path, help="working directory for tools (default: current; a fresh temp dir with --scenario)"
    )
    run.add_argument(
        "--scenario",
        type=Path,
        metavar="NAME|FILE",
        help="run offline against the embedded server playing a scenario: a shipped one's name "
        "(queryloop mock-api --list) or a scenario file",
    )
    run.add_argument(
        "--machine",
        type=Path,
        metavar="FILE",
        help="run this machine file instead of the shipped query loop (a mutated copy, to replay a "
        "`check --counterexamples` scenario); a file that does not load is an error before any request",
    )


def _add_io_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("prompt", nargs="?", help="the prompt (default: stdin; given both, the prompt, then stdin)")
    run.add_argument(
        "-p",
        "--print",
        action="store_true",
        help="print the answer and exit (the default whenever a prompt is given); without it, no prompt and a "
        "terminal open the interactive session",
    )
    # Claude Code's `-v` shape, "<version> (...)": the Agent SDK reads the leading version. It is the Claude
    # Code release queryloop behaves as; the parenthesis says which program this really is.
    behaves_as = f"{CLAUDE_CODE_VERSION} (queryloop {__version__}; behaves as Claude Code)"
    run.add_argument("-v", "--version", action="version", version=behaves_as)
    run.add_argument("--output-format", choices=tuple(OUTPUT_FORMATS), default="text")
    run.add_argument(
        "--input-format",
        choices=("text", "stream-json"),
        default="text",
        help="stream-json: prompts and control requests as JSON lines on stdin (the Claude Agent SDK's session)",
    )
    run.add_argument(
        "--forward-subagent-text",
        action="store_true",
        help="accepted for Claude Code's command line: a sub-agent's text is always written, with its "
        "parent_tool_use_id",
    )


def _add_model_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--model",
        help="model to use: an id or an alias (opus, sonnet, haiku, fable, opusplan, best, default; [1m] allowed); "
        f"default: the scenario's, else ANTHROPIC_MODEL, else the settings' model, else {DEFAULT_MODEL}",
    )
    run.add_argument(
        "--fallback-model",
        type=models,
        metavar="A[,B,C]",
        help="models (ids or aliases) to fall back to on overload/unavailability (≤ 3)",
    )
    run.add_argument("--system-prompt", metavar="TEXT", help="replaces the default system prompt ('' for none)")
    run.add_argument("--append-system-prompt", metavar="TEXT", help="appended to the system prompt")
    run.add_argument(
        "--agents",
        metavar="JSON",
        help='custom sub-agents for the Agent tool: {"NAME": {"description": …, "prompt": …, "tools": [...], '
        '"model": …}} (above .claude/agents/*.md)',
    )
    run.add_argument(
        "--max-thinking-tokens",
        type=positive_int,
        metavar="N",
        help="accepted for Claude Code's command line and ignored: extended thinking is not requested yet",
    )


def _add_limit_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--max-turns", type=at_least_one, metavar="N", help="tool-use turns before stopping (default: no limit)"
    )
    run.add_argument(
        "--max-agent-turns",
        type=at_least_one,
        metavar="N",
        help="a sub-agent's tool turns at most (default: no limit, as in Claude Code); "
        "`queryloop check --set max_agent_turns=N` bounds a turn with its agents",
    )
    run.add_argument(
        "--max-retries",
        type=positive_int,
        metavar="N",
        help="retries per request (default: $CLAUDE_CODE_MAX_RETRIES, else the machine's max_retries)",
    )
    run.add_argument(
        "--max-retry-after",
        type=seconds,
        metavar="SECONDS",
        help="the longest retry-after to wait for; a longer one ends the run with when to retry "
        "(default: the machine's max_retry_after_s)",
    )
    run.add_argument("--max-budget-usd", type=budget, metavar="X", help="stop once the run has cost this much")
    run.add_argument(
        "--request-timeout",
        type=seconds,
        metavar="SECONDS",
        help="deadline of each model request attempt, then retried like a timeout "
        "(default: $QUERYLOOP_REQUEST_TIMEOUT_S, else none)",
    )
    run.add_argument(
        "--max-output-tokens",
        type=at_least_one,
        metavar="N",
        help="max_tokens per request (default: $CLAUDE_CODE_MAX_OUTPUT_TOKENS, else the model's own)",
    )
    run.add_argument(
        "--escalated-max-output-tokens",
        type=at_least_one,
        metavar="N",
        help="retry a truncated answer once with this max_tokens before continuing it",
    )


def _add_context_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--auto-compact-threshold",
        type=percent,
        metavar="PCT",
        help="compact before sending past PCT%% of the effective context window "
        f"(default {AUTO_COMPACT_THRESHOLD * 100:g})",
    )
    run.add_argument(
        "--no-auto-compact", action="store_true", help="never compact (prompt-too-long then surfaces at once)"
    )
    run.add_argument(
        "--no-microcompact",
        action="store_true",
        help="keep old tool results as they were (by default all but the newest 4 results of Read, Bash, Grep, "
        "Glob, Edit, Write and the web tools are cleared once that frees 10,000 tokens and what it rewrites)",
    )
    run.add_argument(
        "--settings", metavar="FILE|JSON", help="settings file or inline JSON, above the user/project/local files"
    )
    run.add_argument(
        "--setting-sources",
        type=_sources,
        metavar="user,project,local",
        help="which settings files (.claude/ and .queryloop/) and CLAUDE.md files to read (default: all three; "
        "'' for none)",
    )


def _add_permission_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--permission-mode", choices=PERMISSION_MODES, help="default: the settings' defaultMode, else 'default'"
    )
    run.add_argument(
        "--dangerously-skip-permissions",
        dest="permission_mode",
        action="store_const",
        const="bypassPermissions",
        help="the same as --permission-mode bypassPermissions",
    )
    run.add_argument(
        "--sandbox",
        action="store_true",
        help="run the model's Bash commands in the OS sandbox (bubblewrap), as the setting sandbox.enabled does",
    )
    for flag, camel, verb, example in (
        ("--allowed-tools", "--allowedTools", "allow", "Read Bash(git diff:*)"),
        ("--disallowed-tools", "--disallowedTools", "deny", "Bash(rm:*) WebFetch"),
    ):
        run.add_argument(
            flag,
            camel,
            type=_rules,
            nargs="+",
            action="extend",
            metavar="RULES",
            help=f'rules to {verb}, comma or space separated, one or more words, e.g. "{example}" '
            "(end the list with -- before a prompt)",
        )


def _add_mcp_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--mcp-config",
        metavar="FILE|JSON",
        action="extend",
        nargs="+",
        help='MCP servers, {"mcpServers": {...}} in a file or inline (repeatable; wins over .mcp.json and settings)',
    )
    run.add_argument(
        "--strict-mcp-config",
        action="store_true",
        help="use only the servers of --mcp-config (not .mcp.json nor settings)",
    )


def _add_session_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("-r", "--resume", metavar="SESSION_ID", help="continue the stored session SESSION_ID")
    run.add_argument(
        "-c", "--continue", dest="continue_", action="store_true", help="continue the newest session of this directory"
    )
    run.add_argument(
        "--fork-session", action="store_true", help="with --resume/--continue: continue under a new session id"
    )
    run.add_argument("--session-id", metavar="UUID", help="the new session's id (default: a fresh one)")
    run.add_argument(
        "--no-session-persistence",
        action="store_true",
        help="keep nothing: no transcript, no checkpoints, no ledger on disk ($QUERYLOOP_HOME, else ~/.queryloop)",
    )


def refuse_unsupported(args: argparse.Namespace) -> None:
    """Flags accepted for Claude Code's command line that this runtime cannot honour (yet): refused or noted."""
    prepare_sdk_flags(args)
    if args.max_thinking_tokens is not None:
        print(
            "queryloop: warning: --max-thinking-tokens is ignored: extended thinking is not requested yet",
            file=sys.stderr,
        )


def refuse_beyond_range(args: argparse.Namespace) -> None:
    """A flag above the most its param of the machine accepts (its ``max:``) is a usage error: the figures
    ``queryloop check`` proves hold for every value within the declared ranges, and for no other."""
    from ..run.agent import query_loop_program  # loaded once per process: the run takes the same one

    serving = args.input_format == "stream-json" or opens_session(args)  # a session runs the shipped machine
    try:
        spec = (query_loop_program(str(args.machine)) if args.machine and not serving else query_loop_program()).spec
    except FsmError:
        return  # the run says why the machine does not load, before any request
    given = {attribute: getattr(args, attribute, None) for attribute, _, _ in PARAM_FLAGS.values()}
    problem = beyond_declared_range(given, {p.name: p.most for p in spec.params})
    if problem is not None:
        args.usage_error(problem)


def opens_session(args: argparse.Namespace) -> bool:
    """No prompt and no ``-p`` on a terminal: the interactive session (``queryloop.frontends.interactive``)."""
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    return terminal and args.prompt is None and not args.print and args.output_format == "text"


def refuse_mistyped_command(agent: argparse.ArgumentParser, args: argparse.Namespace, names: Collection[str]) -> None:
    """A one-word prompt that reads like a misspelt command name (``chek``) is a usage error, with the command.

    Claude Code 2.1.235 does the same (``claude doctr``: unknown command, did you mean
    ``doctor``?) and, like it, ``-p`` sends the word as a prompt anyway. Only near misses
    count (difflib's ratio ≥ 0.8, ignoring case), so ``queryloop hello`` is still a prompt.
    """
    import difflib
    import shlex

    word = args.prompt
    if args.print or not isinstance(word, str) or not word or any(c.isspace() for c in word) or word in names:
        return
    close = difflib.get_close_matches(word.lower(), list(names), n=1, cutoff=0.8)
    if close:
        agent.error(
            f"unknown command {word!r} (did you mean {close[0]!r}?); "
            f"to send it to the model as a prompt: queryloop -p {shlex.quote(word)}"
        )
