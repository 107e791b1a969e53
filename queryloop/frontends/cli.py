"""The ``queryloop`` program: ``queryloop [options] [prompt]`` runs the agent; ``check``, ``diagram``, ``docs``.

Owns the dispatch to a command, the prompt (argument and stdin), the run's configuration, ``--scenario``'s offline
wiring and which session serves the run; the flags are ``flags``', a ``-p`` run with SIGINT, SIGTERM and its exit
code ``print_run``'s (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import sys
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queryloop.fsm import ProgramWords, UsageError, inert, run_command
from queryloop.machines import shipped_machines

from ..run.startup import Startup
from .argtypes import positive_int
from .commands import add_commands, command_names
from .flags import (
    AgentParser,
    Parser,
    add_agent_options,
    opens_session,
    refuse_beyond_range,
    refuse_mistyped_command,
    refuse_unsupported,
)

# Only what building the parsers needs is imported above: `--help`, `--version`, `check` and `diagram`
# never load the agent, the SDKs, the embedded server or rich. A run imports them in `cmd_run` and `_run`.
if TYPE_CHECKING:
    import anthropic

    from queryloop.fsm import Program

    from ..mockapi.replay import ScenarioReplayer
    from ..mockapi.scenario import Scenario
    from ..run.config import AgentOptions, Resolved
    from .print_run import Interrupts

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
    parser = Parser(prog="queryloop", description="The queryloop commands; the agent itself is `queryloop [prompt]`.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_commands(sub, names)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The commands' parser, every command in it (``queryloop.frontends.commands`` lists them)."""
    return _commands()


def build_agent_parser(commands: Collection[str] = ()) -> argparse.ArgumentParser:
    """``queryloop [options] [prompt]``: the agent, as Claude Code's command line is shaped."""
    names = ", ".join(c for c in commands if c != "run")
    parser = AgentParser(
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
    refuse_mistyped_command(agent, args, names)
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


def _add_agent_options(run: argparse.ArgumentParser) -> None:
    """The agent's options (``queryloop.frontends.flags``), which :func:`cmd_run` runs."""
    add_agent_options(run)
    run.set_defaults(func=cmd_run, usage_error=run.error)


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


def _has_credentials() -> bool:
    """An API key (``x-api-key``) or an auth token (``Authorization: Bearer``); the SDK reads either."""
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"))


def cmd_run(args: argparse.Namespace) -> int:
    if args.output_format == "stream-json" and not args.verbose:  # Claude Code 2.1.235 refuses it too, exit 1
        print("queryloop: --output-format stream-json needs --verbose (as in Claude Code)", file=sys.stderr)
        return 1
    refuse_unsupported(args)  # a refused flag starts nothing
    if args.json_schema is not None:
        from queryloop.handlers.tools import read_schema

        try:  # as Claude Code 2.1.235: one line, exit 1, nothing started
            args.json_schema = read_schema(args.json_schema)
        except ValueError as exc:
            print(f"queryloop: error: {exc}", file=sys.stderr)
            return 1
    startup = Startup()  # the SDK loads in the background while the agent's imports, settings and session go on
    try:
        refuse_beyond_range(args)  # as a bad flag: one line, exit 2, nothing sent
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
    args.interactive = opens_session(args)
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
            from .print_run import refused_result

            print(json.dumps(refused_result(str(exc), args.resume or args.session_id)))
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


async def _run(options: AgentOptions, scenario: Scenario | None, args: argparse.Namespace, startup: Startup) -> int:
    import asyncio

    import attrs

    from ..run.agent import query_loop_program

    # the modules a prompt's run needs load now, while the SDK still loads in the background (..run.startup)
    from . import console, print_commands  # noqa: F401
    from .print_run import Interrupts

    task = asyncio.current_task()
    assert task is not None
    interrupts = Interrupts(asyncio.get_running_loop(), task)  # first: a signal while starting up is not fatal
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
        client = _anthropic_client(startup, None if server is None else server.url, mcp=bool(options.tools.mcp_servers))
        if args.output_format == "stream-json":  # each user line's tool_use_result is the tool's own record
            options = attrs.evolve(options, tools=attrs.evolve(options.tools, records=True))
        return await _serve(options, args, program, client, interrupts)
    finally:
        if client is not None:
            await client.close()
        if server is not None:
            await server.stop()
        interrupts.close()


def _anthropic_client(startup: Startup, scenario_url: str | None, *, mcp: bool) -> anthropic.AsyncAnthropic:
    """The SDK's client, to the embedded server of a scenario when there is one (the SDK never retries: we do).

    ``mcp``: servers are configured, so the MCP SDK is imported with the Anthropic one (..run.startup).
    """
    also: tuple[Callable[[], None], ...] = ()
    if mcp:
        from ..handlers.mcp import load_sdk

        also = (load_sdk,)
    http_client = startup.http_client(also=also)  # here the run waits for the SDK, if it is still loading
    import anthropic  # loaded by now; not at the top: `queryloop check` and the engine commands never need it

    spans = _unseen_sdk_spans_off()
    if scenario_url is not None:
        return anthropic.AsyncAnthropic(
            api_key="offline-scenario", base_url=scenario_url, max_retries=0, http_client=http_client, **spans
        )
    return anthropic.AsyncAnthropic(max_retries=0, http_client=http_client, **spans)


_OTEL_NAMES = ("OTEL_", "ANTHROPIC_OPEN_TELEMETRY", "CLAUDE_CODE_ENABLE_TELEMETRY")


def _unseen_sdk_spans_off() -> dict[str, Any]:
    """``open_telemetry=False`` for the CLI's client when the SDK's span per request could reach no one; else {}.

    The SDK (2.x) starts a span for every request and asks the propagators for trace headers. With no
    tracer provider set, no propagator chosen and no setting of its own, that span records nothing and
    no header comes of it: work for nothing on every turn. Whatever could make it count keeps the SDK's
    default: an ``OTEL_*``, ``ANTHROPIC_OPEN_TELEMETRY*`` or telemetry variable, a provider or propagator
    set before the run (``opentelemetry-instrument``), an SDK without the option. The CLI runs no
    user Python that could set one later, and queryloop's own telemetry uses a provider of its own.
    """
    if any(name.startswith(_OTEL_NAMES) for name in os.environ) or "opentelemetry.propagate" in sys.modules:
        return {}
    import inspect

    import anthropic

    if "open_telemetry" not in inspect.signature(anthropic.AsyncAnthropic).parameters:
        return {}
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return {}
    return {"open_telemetry": False}


async def _serve(
    options: AgentOptions,
    args: argparse.Namespace,
    program: Program,
    client: anthropic.AsyncAnthropic,
    interrupts: Interrupts,
) -> int:
    """The run the flags ask for: the Agent SDK's session, the interactive one, or one prompt; its exit code."""
    from queryloop.handlers.request import AnthropicBackend

    from .print_run import run_prompt

    if args.input_format == "stream-json":  # the Agent SDK's session: prompts and control requests on stdin
        from .sdk_protocol import serve_sdk_session

        return await serve_sdk_session(options, AnthropicBackend(client), args)
    if args.interactive:
        from .interactive import serve_interactive  # here: prompt_toolkit loads only for a session

        interrupts.close()  # the session takes Ctrl-C and SIGTERM itself
        return await serve_interactive(options, AnthropicBackend(client), args)
    return await run_prompt(options, args, program, AnthropicBackend(client), interrupts)


if __name__ == "__main__":
    sys.exit(main())
