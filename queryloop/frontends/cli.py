"""The ``queryloop`` program: ``queryloop [options] [prompt]`` runs the agent; ``check``, ``diagram``, ``docs``.

Owns flag parsing, the prompt or the interactive session, ``--scenario``'s offline wiring, SIGINT and SIGTERM, and
the exit codes (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from queryloop.fsm import FsmError, ProgramWords, UsageError, inert, run_command
from queryloop.handlers.tools import PERMISSION_MODES, PermissionRuleError, parse_rule_list
from queryloop.machines import shipped_machines

from .. import __version__
from ..run.defaults import AUTO_COMPACT_THRESHOLD, CLAUDE_CODE_VERSION, DEFAULT_MODEL
from ..run.startup import Startup
from .argtypes import PARAM_FLAGS, at_least_one, beyond_declared_range, budget, models, percent, positive_int, seconds
from .commands import add_commands, command_names
from .formats import OUTPUT_FORMATS
from .sdk_flags import add_sdk_options, prepare_sdk_flags

# Only what building the parsers needs is imported above: `--help`, `--version`, `check` and `diagram`
# never load the agent, the SDKs, the embedded server or rich. A run imports them in `cmd_run` and `_run`.
if TYPE_CHECKING:
    import asyncio

    import anthropic

    from queryloop.fsm import Program
    from queryloop.handlers.request import ModelBackend

    from ..mockapi.replay import ScenarioReplayer
    from ..mockapi.scenario import Scenario
    from ..run.agent import AgentRun
    from ..run.config import AgentOptions, Resolved
    from ..run.memory import MemoryKind

__all__ = [
    "add_mock_commands",
    "add_run_command",
    "build_agent_parser",
    "build_parser",
    "engine_arguments",
    "main",
]

OFFLINE_HINT = (
    "queryloop: neither ANTHROPIC_API_KEY nor ANTHROPIC_AUTH_TOKEN is set. To run offline against the embedded "
    "server, try: queryloop -p --scenario fallback_chain 'bump the checkpoint' "
    "(queryloop mock-api --list names the shipped scenarios)"
)
STDIN_WAIT_S = 3.0
"""How long a run given a prompt argument waits for the first byte on a piped stdin (as Claude Code does)."""


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


class _Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line on stderr (``PROG: error: …``) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _option_order(action: argparse.Action) -> str:
    """Where an option sorts in the help: by its first long name, without dashes (``-p, --print`` under p)."""
    longs = [name for name in action.option_strings if name.startswith("--")] or action.option_strings
    return longs[0].lstrip("-").lower()


class _AgentParser(_Parser):
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


def _scenario_replayer() -> ScenarioReplayer:
    """What writes ``check --counterexamples``' runs as scenarios (imported only when asked for)."""
    from ..mockapi.replay import ScenarioReplayer

    return ScenarioReplayer()


def engine_arguments() -> dict[str, object]:
    """What the engine's commands (``queryloop.fsm.cli``) are given: the shipped machines, used when none is
    named, what writes ``check --counterexamples``' runs as scenarios, and this program's words for replaying
    one and for its log (the engine knows none of its flags)."""
    words = ProgramWords(
        replay="queryloop -p replay --scenario {scenario} --machine {machine}",
        trace_log="a `queryloop run --output-format stream-json --verbose` log",
    )
    return {"default_machines": shipped_machines, "replayer": _scenario_replayer, "words": words}


def add_run_command(sub: Any) -> None:
    """``run``: the agent by name, with the same options as no command."""
    run = sub.add_parser(
        "run", help="the same as no command: run the agent (kept for scripts that name it)", allow_abbrev=False
    )
    _add_agent_options(run)


def add_mock_commands(sub: Any) -> None:
    """``mock-api`` and ``mock-mcp-deploy``: the embedded server and the seed chain's deploy MCP server."""
    mock = sub.add_parser(
        "mock-api",
        help="serve the embedded Anthropic-compatible API for a scenario",
        description="Serve the embedded Anthropic-compatible API playing SCENARIO on 127.0.0.1, until interrupted. "
        "Point a client at it with ANTHROPIC_BASE_URL=http://127.0.0.1:N and ANTHROPIC_API_KEY set to any value "
        "(the Python API too); ask for the scenario's model (--list shows it; hello answers any).",
    )
    mock.add_argument(
        "scenario", nargs="?", metavar="SCENARIO", help="a shipped scenario's name (see --list) or a scenario file"
    )
    mock.add_argument("--scenario", dest="scenario_option", type=Path, metavar="NAME|FILE", help="the same, as a flag")
    mock.add_argument("--list", action="store_true", help="list the shipped scenarios and exit")
    mock.add_argument("--port", type=positive_int, default=0, metavar="N", help="port (default: any free one)")
    mock.set_defaults(func=cmd_mock_api)
    deploy = sub.add_parser("mock-mcp-deploy", help="serve the small deploy MCP server of the seed's chain (stdio)")
    deploy.add_argument("--state", type=Path, default=Path("deployments.json"), metavar="FILE")
    deploy.add_argument("--http", type=positive_int, metavar="PORT", help="serve streamable HTTP instead of stdio")
    deploy.set_defaults(func=cmd_mock_mcp_deploy)


def _commands(names: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The commands' parser, with the commands ``names`` (None: all of them; ``queryloop.frontends.commands``)."""
    parser = _Parser(prog="queryloop", description="The queryloop commands; the agent itself is `queryloop [prompt]`.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_commands(sub, names)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The commands' parser, every command in it (``queryloop.frontends.commands`` lists them)."""
    return _commands()


def build_agent_parser(commands: Collection[str] = ()) -> argparse.ArgumentParser:
    """``queryloop [options] [prompt]``: the agent, as Claude Code's command line is shaped."""
    names = ", ".join(c for c in commands if c != "run")
    parser = _AgentParser(
        prog="queryloop",
        usage="%(prog)s [options] [prompt]\n       %(prog)s COMMAND ...",
        description="Run the agent query loop on PROMPT (an argument, or stdin) and print the answer; "
        "online, or offline against the embedded server with --scenario. With no prompt on a terminal, "
        "an interactive session opens (/help lists its commands).",
        allow_abbrev=False,  # as Claude Code's: `--agent` is not `--agents`
        epilog=f"a first word that names one runs it: {names}; `queryloop COMMAND --help` for each. "
        "`queryloop run [options] [prompt]` is the same as no command.",
    )
    _add_agent_options(parser)
    return parser


def _from_here(value: str | None) -> str | None:
    """A file named on the command line, made absolute against the directory the program was run in
    (not ``--cwd``): inline JSON, ``~`` paths and absolute paths stay as they are."""
    if value is None or value.lstrip().startswith("{") or value.startswith("~") or Path(value).is_absolute():
        return value
    return str(Path.cwd() / value)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    names = command_names()
    if words and words[0] in names:  # only that command's module is imported
        return _run_drawing(_commands((words[0],)).parse_args(words))
    agent = build_agent_parser(names)
    if not words and sys.stdin.isatty() and not sys.stdout.isatty():  # no prompt can come, no session to open
        agent.print_help(sys.stderr)
        return 2
    args = agent.parse_args(words)
    _refuse_mistyped_command(agent, args, names)
    return run_command(args)


GRAPHVIZ_PROGRAM_MISSING = (
    "queryloop: drawing needs Graphviz's `dot` program, which is not on PATH: install the graphviz package "
    "(apt-get install graphviz, brew install graphviz, or https://graphviz.org/download)"
)
GRAPHVIZ_PACKAGE_MISSING = "queryloop: drawing needs the Python package graphviz: pip install graphviz"


def _graphviz_missing(exc: BaseException) -> str | None:
    """The one line saying what to install, when ``exc`` says Graphviz (the program or the package) is missing."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "graphviz":
        return GRAPHVIZ_PACKAGE_MISSING
    graphviz = sys.modules.get("graphviz")  # imported only by what draws, so only then can its error be raised
    not_found = getattr(graphviz, "ExecutableNotFound", None)
    if isinstance(not_found, type) and isinstance(exc, not_found):
        return GRAPHVIZ_PROGRAM_MISSING
    return None


def _run_drawing(args: argparse.Namespace) -> int:
    """Run a command; a missing Graphviz (``diagram``) is one line saying what to install, exit 1."""
    try:
        return run_command(args)
    except (ImportError, RuntimeError) as exc:
        hint = _graphviz_missing(exc)
        if hint is None:
            raise
        print(hint, file=sys.stderr)
        return 1


def _refuse_mistyped_command(agent: argparse.ArgumentParser, args: argparse.Namespace, names: Collection[str]) -> None:
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


def _add_agent_options(run: argparse.ArgumentParser) -> None:
    """The agent's options, the same for ``queryloop [options] [prompt]`` and ``queryloop run``."""
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
    run.set_defaults(func=cmd_run, usage_error=run.error)


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


def cmd_mock_api(args: argparse.Namespace) -> int:
    from ..mockapi.scenario import ScenarioError, load_scenario, scenario_names
    from ..mockapi.server import serve_forever

    if args.list:  # each shipped scenario: its name, its model (what a client asks for) and its first sentence
        for name in scenario_names():
            scenario = load_scenario(name)
            first = " ".join(scenario.doc.split()).split(". ")[0].removesuffix(".")
            print(f"{name:<26} {scenario.model:<14} {first if len(first) <= 72 else first[:71] + '…'}")
        return 0
    if args.scenario is not None and args.scenario_option is not None:
        raise UsageError("mock-api: give the scenario once, as SCENARIO or as --scenario")
    scenario_ref = args.scenario if args.scenario is not None else args.scenario_option
    if scenario_ref is None:
        raise UsageError(f"mock-api: which scenario? one of: {', '.join(scenario_names())} (or a scenario file)")
    try:
        serve_forever(str(scenario_ref), args.port)
    except ScenarioError as exc:
        print(f"queryloop: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_mock_mcp_deploy(args: argparse.Namespace) -> int:
    from ..mockapi.deploy_mcp import main as serve

    serve(["--state", str(args.state), *(["--http", str(args.http)] if args.http else [])])
    return 0


def _prompt(args: argparse.Namespace, scenario: Scenario | None) -> str:
    """The prompt argument and stdin, as Claude Code joins them (the argument, a newline, stdin)."""
    given: str | None = args.prompt
    piped = None if sys.stdin.isatty() else _read_stdin(wait_s=STDIN_WAIT_S if given else None)
    text = f"{given}\n{piped}" if given and piped else (given or piped or "")
    if text.strip():
        return text
    if scenario is not None and scenario.cli.get("prompt"):
        return str(scenario.cli["prompt"])
    if text:
        raise UsageError("the prompt is only whitespace: give it as an argument or on stdin")
    raise UsageError("no prompt: give it as an argument (queryloop -p 'PROMPT') or on stdin")


def _read_stdin(*, wait_s: float | None) -> str | None:
    """All of a piped stdin; with ``wait_s``, None when nothing has come by then (a pipe nobody writes to)."""
    if wait_s is not None:
        try:
            ready, _, _ = select.select([sys.stdin], [], [], wait_s)
        except (OSError, ValueError):  # not selectable (e.g. closed): read it as it is
            ready = [sys.stdin]
        if not ready:
            print(
                f"queryloop: nothing on stdin after {wait_s:g} s; going on with the prompt argument alone "
                "(redirect stdin from /dev/null to skip the wait)",
                file=sys.stderr,
            )
            return None
    return sys.stdin.read()


def _prepare_cwd(args: argparse.Namespace, scenario: Scenario | None) -> Path:
    cwd: Path
    if args.cwd is not None:
        cwd = Path(args.cwd).resolve()
        if not cwd.is_dir():
            raise UsageError(f"--cwd {args.cwd}: not a directory")
    elif scenario is not None:
        cwd = Path(tempfile.mkdtemp(prefix=f"queryloop-{scenario.name}-"))  # announced once the run is configured
    else:
        cwd = Path.cwd()
    if scenario is not None:
        for rel, content in scenario.files.items():
            target = cwd / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
    return cwd


def _refuse_unsupported(args: argparse.Namespace) -> None:
    """Flags accepted for Claude Code's command line that this runtime cannot honour (yet): refused or noted."""
    prepare_sdk_flags(args)
    if args.max_thinking_tokens is not None:
        print(
            "queryloop: warning: --max-thinking-tokens is ignored: extended thinking is not requested yet",
            file=sys.stderr,
        )


def _refuse_beyond_range(args: argparse.Namespace) -> None:
    """A flag above the most its param of the machine accepts (its ``max:``) is a usage error: the figures
    ``queryloop check`` proves hold for every value within the declared ranges, and for no other."""
    from ..run.agent import query_loop_program  # loaded once per process: the run takes the same one

    serving = args.input_format == "stream-json" or _opens_session(args)  # a session runs the shipped machine
    try:
        spec = (query_loop_program(str(args.machine)) if args.machine and not serving else query_loop_program()).spec
    except FsmError:
        return  # the run says why the machine does not load, before any request
    given = {attribute: getattr(args, attribute, None) for attribute, _, _ in PARAM_FLAGS.values()}
    problem = beyond_declared_range(given, {p.name: p.most for p in spec.params})
    if problem is not None:
        args.usage_error(problem)


def _refused_result(message: str, session_id: str | None) -> dict[str, object]:
    """The result line of a run refused before it started (no such session): nothing ran, nothing cost.

    Claude Code 2.1.235's keys for it: a run's ``stop_reason``, ``usage``, ``modelUsage`` and
    ``permission_denials``, all empty, and no ``terminal_reason`` (no machine ran).
    """
    from queryloop.handlers.request import UsageTotals

    return {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "num_turns": 0,
        "duration_ms": 0,
        "duration_api_ms": 0,
        "stop_reason": None,
        "session_id": session_id or str(uuid.uuid4()),
        "total_cost_usd": 0,
        "usage": UsageTotals().usage(),
        "modelUsage": {},
        "permission_denials": [],
        "errors": [message],
        "uuid": str(uuid.uuid4()),
    }


def _local_result(text: str, session_id: str) -> dict[str, object]:
    """The result line of a slash command answered without a request: a success with no turn (Claude Code's shape)."""
    result = {**_refused_result("", session_id), "subtype": "success", "is_error": False, "result": text}
    del result["errors"]
    return result


def _missing_prompt_tool(run: AgentRun) -> str | None:
    """Why ``--permission-prompt-tool``'s MCP tool cannot answer (no server offers it), or None."""
    name = run.options.permissions.prompt_tool
    mcp = run.services.mcp
    if name is None or (mcp is not None and mcp.tool_spec(name) is not None):
        return None
    offered = [t.name for t in mcp.catalog()] if mcp is not None else []
    listed = f" (the MCP tools: {', '.join(offered)})" if offered else " (no MCP tool is offered)"
    return f"--permission-prompt-tool {name}: no MCP server offers this tool{listed}"


def _has_credentials() -> bool:
    """An API key (``x-api-key``) or an auth token (``Authorization: Bearer``); the SDK reads either."""
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"))


def cmd_run(args: argparse.Namespace) -> int:
    if args.output_format == "stream-json" and not args.verbose:  # Claude Code 2.1.235 refuses it too, exit 1
        print("queryloop: --output-format stream-json needs --verbose (as in Claude Code)", file=sys.stderr)
        return 1
    _refuse_unsupported(args)  # a refused flag starts nothing
    if args.json_schema is not None:
        from queryloop.handlers.tools import read_schema

        try:  # as Claude Code 2.1.235: one line, exit 1, nothing started
            args.json_schema = read_schema(args.json_schema)
        except ValueError as exc:
            print(f"queryloop: error: {exc}", file=sys.stderr)
            return 1
    startup = Startup()  # the SDK loads in the background while the agent's imports, settings and session go on
    try:
        _refuse_beyond_range(args)  # as a bad flag: one line, exit 2, nothing sent
        return _prepare_and_run(args, startup)
    finally:
        startup.close()  # the garbage collector runs again, whichever way the run ended


def _prepare_and_run(args: argparse.Namespace, startup: Startup) -> int:
    import asyncio

    from ..run.config import ConfigError, with_session
    from ..run.sessions import SessionChoiceError, choose_session

    scenario: Scenario | None = None
    if args.scenario is not None:
        from ..mockapi.scenario import ScenarioError, load_scenario  # here: a run without --scenario never loads it

        try:
            scenario = load_scenario(args.scenario)
        except ScenarioError as exc:
            print(f"queryloop: {exc}", file=sys.stderr)
            return 1
    elif not _has_credentials():
        print(OFFLINE_HINT, file=sys.stderr)
        return 1
    args.interactive = _opens_session(args)
    no_prompt = args.input_format == "stream-json" or args.interactive  # on stdin, or typed in the session
    prompt = "" if no_prompt else _prompt(args, scenario)
    settings_cwd = Path(args.cwd).resolve() if args.cwd else Path.cwd()
    cwd = _prepare_cwd(args, scenario)
    try:  # every settings, rule or MCP problem is reported before the run or its session starts
        resolved = _resolve(args, scenario, prompt=prompt, cwd=cwd, settings_cwd=settings_cwd)
        if args.interactive and resolved.ignored and _trusted_now(settings_cwd, resolved.ignored):
            resolved = _resolve(args, scenario, prompt=prompt, cwd=cwd, settings_cwd=settings_cwd)
        if scenario is not None and args.cwd is None:
            announce = f"queryloop: offline run of scenario {scenario.name!r} in {cwd} (removed at the end)"
            print(announce, file=sys.stderr)
        session = choose_session(
            cwd=cwd,
            resume=args.resume,
            continue_=args.continue_,
            fork=args.fork_session,
            session_id=args.session_id,
            printing=args.print,
        )
    except (ConfigError, SessionChoiceError) as exc:
        if scenario is not None and args.cwd is None:  # the scenario's fresh temp dir
            shutil.rmtree(cwd, ignore_errors=True)
        if isinstance(exc, ConfigError):
            what = "invalid MCP configuration: " if exc.kind == "mcp" else ""
            print(f"queryloop: {what}{exc}", file=sys.stderr)
            return 1
        print(exc, file=sys.stderr)
        if args.output_format == "stream-json":  # as Claude Code: the error as the stream's result line too
            print(json.dumps(_refused_result(str(exc), args.resume or args.session_id)))
        return 1
    for warning in resolved.warnings:
        print(inert(f"queryloop: warning: {warning}"), file=sys.stderr)
    options = with_session(resolved.options, session)
    try:
        return asyncio.run(_run(options, scenario, args, startup))
    finally:
        if scenario is not None and args.cwd is None:  # the scenario's fresh temp dir
            shutil.rmtree(cwd, ignore_errors=True)


def _resolve(
    args: argparse.Namespace, scenario: Scenario | None, *, prompt: str, cwd: Path, settings_cwd: Path
) -> Resolved:
    """The run's configuration from the program's flags (:class:`ConfigError` when it cannot run)."""
    from ..run.config import (
        AskedContext,
        AskedLimits,
        AskedRequest,
        AskedSession,
        AskedTools,
        ConfigSources,
        resolve_config,
    )
    from ..run.memory import MEMORY_KINDS

    threshold = args.auto_compact_threshold  # a percentage
    return resolve_config(
        cwd=cwd,  # where the tools work: a scenario's fresh temp dir is the one the rules speak of
        prompt=prompt,
        scenario=_scenario_hints(scenario),
        sources=ConfigSources(
            settings_cwd=settings_cwd,
            setting_sources=MEMORY_KINDS if args.setting_sources is None else args.setting_sources,
            settings=_from_here(args.settings),
            mcp_config=[v for v in map(_from_here, args.mcp_config or ()) if v is not None],
            strict_mcp_config=args.strict_mcp_config,
            agents=args.agents,
        ),
        request=AskedRequest(
            model=args.model,
            fallback_models=args.fallback_model,
            max_tokens=args.max_output_tokens,
            escalated_max_tokens=args.escalated_max_output_tokens,
            request_timeout_s=args.request_timeout,
            system_prompt=args.system_prompt,
            append_system_prompt=args.append_system_prompt,
        ),
        limits=AskedLimits(
            max_turns=args.max_turns,
            max_retries=args.max_retries,
            max_budget_usd=args.max_budget_usd,
            max_retry_after_s=args.max_retry_after,
            params={} if args.max_agent_turns is None else {"max_agent_turns": args.max_agent_turns},
        ),
        tools=AskedTools(
            tools=args.tools,
            allowed_tools=args.allowed_tools,
            disallowed_tools=args.disallowed_tools,
            permission_mode=args.permission_mode,
            sandbox=args.sandbox,
            interactive=sys.stdin.isatty() and sys.stderr.isatty(),
            add_dirs=args.add_dir or (),
            json_schema=args.json_schema,
            # stdio is the Agent SDK's session answering (queryloop.frontends.sdk_protocol); any other name an MCP tool
            permission_prompt_tool=None if args.permission_prompt_tool == "stdio" else args.permission_prompt_tool,
        ),
        context=AskedContext(
            auto_compact=not args.no_auto_compact,
            microcompact=not args.no_microcompact,
            auto_compact_threshold=None if threshold is None else threshold / 100,
        ),
        session=AskedSession(persist=not args.no_session_persistence),
    )


def _trusted_now(folder: Path, ignored: Sequence[str]) -> bool:
    """Ask on the terminal whether to trust ``folder``, whose settings would widen what runs; record a yes."""
    from ..run.trust import TrustError, set_trust

    print(f"queryloop: {folder} is not trusted, so its settings may not widen what runs:", file=sys.stderr)
    for line in ignored:
        print(inert(f"  {line}"), file=sys.stderr)
    try:
        answer = input("Trust this folder and use them (recorded in the trust record Claude Code reads)? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        return False
    try:
        set_trust(folder)
    except TrustError as exc:
        print(f"queryloop: {exc}", file=sys.stderr)
        return False
    return True


def _scenario_hints(scenario: Scenario | None) -> dict[str, object] | None:
    """What a scenario says of the run (its ``cli`` section, model and fallbacks): used where the flags are silent."""
    if scenario is None:
        return None
    return {**scenario.cli, "model": scenario.model, "fallback_models": scenario.fallback_models}


def _opens_session(args: argparse.Namespace) -> bool:
    """No prompt and no ``-p`` on a terminal: the interactive session (``queryloop.frontends.interactive``)."""
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    return terminal and args.prompt is None and not args.print and args.output_format == "text"


class _Interrupts:
    """SIGINT and SIGTERM during a run: the first one cancels the run task, so the machine takes its abort edges.

    A signal before the run starts cancels it as soon as it starts; one after it ended
    (or a second one) changes nothing. Signal callbacks run on the event loop, only at
    an ``await``, so arming and disarming around the run leaves no window.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self.loop = loop
        self.task = task
        self.received: int | None = None
        self.cancelled_by: int | None = None
        self.armed = False
        for signum in self.SIGNALS:
            loop.add_signal_handler(signum, self._received, signum)

    def _received(self, signum: int) -> None:
        if self.received is None:
            self.received = signum
            self._cancel_if_armed()

    def _cancel_if_armed(self) -> None:
        if self.armed and self.received is not None and self.cancelled_by is None:
            self.cancelled_by = self.received
            self.task.cancel()

    def arm(self) -> None:
        self.armed = True
        self._cancel_if_armed()

    def disarm(self) -> None:
        self.armed = False

    def close(self) -> None:
        for signum in self.SIGNALS:
            self.loop.remove_signal_handler(signum)

    def exit_code(self, result: dict[str, Any]) -> int:
        """128 + the signal's number after an interruption (like a shell), else 1 for an error result, else 0."""
        if self.cancelled_by is not None:
            return 128 + self.cancelled_by
        return 1 if result["is_error"] else 0


async def _run(options: AgentOptions, scenario: Scenario | None, args: argparse.Namespace, startup: Startup) -> int:
    import asyncio

    import attrs

    from ..run.agent import query_loop_program

    # the modules a prompt's run needs load now, while the SDK still loads in the background (..run.startup)
    from . import console, print_commands  # noqa: F401

    task = asyncio.current_task()
    assert task is not None
    interrupts = _Interrupts(asyncio.get_running_loop(), task)  # first: a signal while starting up is not fatal
    server = None
    client: anthropic.AsyncAnthropic | None = None  # annotations are not evaluated: the SDK is imported below
    try:
        if scenario is not None:
            from ..mockapi.server import MockServer

            server = MockServer(scenario)
            await server.start()
        # The machine loads (its handlers imported) while the SDK may still be loading in the background; a
        # session (stream-json, interactive) runs the shipped one.
        serving = args.input_format == "stream-json" or args.interactive
        program = query_loop_program(str(args.machine)) if args.machine and not serving else query_loop_program()
        client = _anthropic_client(startup, None if server is None else server.url)
        if args.output_format == "stream-json":  # each user line's tool_use_result is the tool's own record
            options = attrs.evolve(options, tools=attrs.evolve(options.tools, records=True))
        return await _serve(options, args, program, client, interrupts)
    finally:
        if client is not None:
            await client.close()
        if server is not None:
            await server.stop()
        interrupts.close()


def _anthropic_client(startup: Startup, scenario_url: str | None) -> anthropic.AsyncAnthropic:
    """The SDK's client, to the embedded server of a scenario when there is one (the SDK never retries: we do)."""
    http_client = startup.http_client()  # here the run waits for the SDK, if it is still loading
    import anthropic  # loaded by now; not at the top: `queryloop check` and the engine commands never need it

    if scenario_url is not None:
        return anthropic.AsyncAnthropic(
            api_key="offline-scenario", base_url=scenario_url, max_retries=0, http_client=http_client
        )
    return anthropic.AsyncAnthropic(max_retries=0, http_client=http_client)


async def _serve(
    options: AgentOptions,
    args: argparse.Namespace,
    program: Program,
    client: anthropic.AsyncAnthropic,
    interrupts: _Interrupts,
) -> int:
    """The run the flags ask for: the Agent SDK's session, the interactive one, or one prompt; its exit code."""
    from queryloop.handlers.request import AnthropicBackend

    if args.input_format == "stream-json":  # the Agent SDK's session: prompts and control requests on stdin
        from .sdk_protocol import serve_sdk_session

        return await serve_sdk_session(options, AnthropicBackend(client), args)
    if args.interactive:
        from .interactive import serve_interactive  # here: prompt_toolkit loads only for a session

        interrupts.close()  # the session takes Ctrl-C and SIGTERM itself
        return await serve_interactive(options, AnthropicBackend(client), args)
    return await _run_prompt(options, args, program, AnthropicBackend(client), interrupts)


async def _run_prompt(
    options: AgentOptions, args: argparse.Namespace, program: Program, backend: ModelBackend, interrupts: _Interrupts
) -> int:
    """One prompt (``-p``) run to its end, rendered in the output format; its exit code."""
    import attrs

    from ..run.agent import AgentRun
    from .console import renderer_for
    from .print_commands import local_answer, print_command

    command = print_command(options.prompt)  # /compact, /clear, an unknown /name: never sent as it is
    if command is not None and command.name == "compact":
        options = attrs.evolve(options, prompt="", compact=command.argument)
    renderer = renderer_for(
        args.output_format,
        session_id=options.session.session_id,
        verbose=args.verbose,
        partial_messages=args.include_partial_messages,
    )
    run = AgentRun(options, backend, program=program, observers=(renderer,))
    refused = await _connect_mcp(run)
    if refused is not None:  # found before anything is sent
        await run.close_mcp()
        sys.stderr.write(inert(refused))
        return 1
    renderer.start(**run.init_fields())
    answer = None if command is None else local_answer(command)
    if answer is not None:  # answered here: no request, no turn
        await run.close_mcp()
        renderer.finish(_local_result(answer, options.session.session_id), run.data)
        return 0
    await _run_interruptibly(run, interrupts)
    result = run.result()
    renderer.finish(result, run.data)
    failure = run.runner.error
    if failure is not None:  # the machine's Python raised: its traceback goes to stderr, never stdout
        sys.stderr.write(inert(f"queryloop: the run ended in internal_error:\n{failure.traceback}"))
        sys.stderr.flush()
    return interrupts.exit_code(result)


async def _connect_mcp(run: AgentRun) -> str | None:
    """Connect the run's MCP servers (the init line lists each one's status and tools); the line saying why the
    run cannot go on, or None."""
    from queryloop.handlers.mcp import PromptCommandError

    try:
        await run.connect_mcp()
    except PromptCommandError as exc:  # /mcp__server__prompt without its arguments: nothing was sent
        return f"queryloop: {exc}\n"
    missing = _missing_prompt_tool(run)  # Claude Code 2.1.235 fails only at the first ask
    return None if missing is None else f"queryloop: error: {missing}\n"


async def _run_interruptibly(run: AgentRun, interrupts: _Interrupts) -> None:
    """Every step of ``run``; SIGINT or SIGTERM meanwhile makes it take its abort edge and end as any run ends."""
    import asyncio

    interrupts.arm()
    try:
        async for _ in run.events():  # the renderer is told every item, the abort step included
            pass
    except asyncio.CancelledError:
        if interrupts.cancelled_by is None:
            raise  # not ours
        interrupts.task.uncancel()  # we asked for it: the run took its abort edge; report it like any other end
    finally:
        interrupts.disarm()


if __name__ == "__main__":
    sys.exit(main())
