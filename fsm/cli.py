"""The engine's commands: ``check``, ``diagram`` and ``docs``, for any machine file.

Owns their flags and :func:`run_command` (exit codes, one-line user errors); each command is
``cli_check``'s or ``cli_draw``'s. The program and the agent's commands are ``queryloop.frontends.cli``'s.
Each command imports the engine parts it runs only when it runs, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from .cli_check import cmd_check
from .cli_draw import DIAGRAM_FORMATS, DiagramFile, cmd_diagram, cmd_docs, diagram_files, recovery_document, render_view
from .cli_files import DefaultMachines, UsageError
from .errors import FsmError

if TYPE_CHECKING:
    from .verify.counterexample import Replayer

__all__ = [
    "DiagramFile",
    "ProgramWords",
    "UsageError",
    "add_engine_commands",
    "diagram_files",
    "recovery_document",
    "render_view",
    "run_command",
]

MakeReplayer = Callable[[], "Replayer"]


@attrs.frozen(kw_only=True)
class ProgramWords:
    """How the program that adds the engine's commands names what they point to: the engine knows none of its flags."""

    replay: str | None = None
    """The command that replays a run ``check --counterexamples`` wrote, with ``{scenario}`` and ``{machine}``
    where their paths go (None: not shown)."""
    trace_log: str = "a JSON-lines log of its steps"
    """The log of one run that ``diagram --trace`` reads, as the program's users know it."""


def add_engine_commands(
    sub: Any,
    *,
    default_machines: DefaultMachines,
    replayer: MakeReplayer | None = None,
    words: ProgramWords | None = None,
) -> None:
    """Add ``check`` and ``diagram`` to a subparsers action; ``default_machines`` lists what they use unasked.

    ``replayer`` makes what writes ``check --counterexamples``' runs as files to replay (None: the
    option is refused); ``words`` says how the program replays such a run and which log it writes.
    """
    words = words or ProgramWords()
    check = sub.add_parser("check", help="model-check machine declarations (default: every shipped machine)")
    check.add_argument(
        "--machine", action="append", default=[], metavar="FILE", help="a machine YAML file (repeatable)"
    )
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="override a param for the check"
    )
    check.add_argument(
        "--coverage",
        metavar="DIR",
        help="instead of checking: which transitions the runs recorded in DIR took (QUERYLOOP_TRACE_DIR)",
    )
    check.add_argument(
        "--fail-under", type=float, metavar="PCT", help="with --coverage: exit 1 when a machine's coverage is lower"
    )
    check.add_argument(
        "--explore",
        action="store_true",
        help="also explore every (state, counters) configuration at the params' check values (seconds): "
        "stuck configurations, edges that never fire, and the exact figures there beside the bounds",
    )
    check.add_argument(
        "--spin",
        action="store_true",
        help="also verify each machine with SPIN (exported as Promela): configurations, properties and "
        "liveness, at the explored params and at the smallest caps with the nullable ones flipped, beside ours "
        "(implies --explore)",
    )
    check.add_argument(
        "--counterexamples",
        metavar="DIR",
        help="also write the shortest run showing each finding as a scenario in DIR"
        + (f", to replay with `{words.replay.format(scenario='FILE', machine='MACHINE')}`" if words.replay else "")
        + " (waits scaled down to milliseconds)",
    )
    check.set_defaults(func=cmd_check, default_machines=default_machines, make_replayer=replayer, words=words)

    diagram = sub.add_parser(
        "diagram",
        help="draw machines with Graphviz / Mermaid: an overview and one diagram per layer; or one run on the graph",
    )
    diagram.add_argument("--machine", action="append", default=[], metavar="FILE")
    diagram.add_argument(
        "--format",
        action="append",
        choices=DIAGRAM_FORMATS,
        help="repeatable; default svg and mermaid, the committed pair (with --trace or --coverage: dot and svg)",
    )
    diagram.add_argument("--out", default="diagrams", metavar="DIR")
    diagram.add_argument(
        "--layer", action="append", default=[], metavar="NAME", help="draw only this layer (repeatable)"
    )
    diagram.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when a Mermaid (or asked-for DOT) file in --out is stale or a view is gone",
    )
    diagram.add_argument(
        "--trace",
        metavar="FILE",
        help=f"overlay one run ({words.trace_log}) on the machine: writes <out>/<FILE stem>.trace[.<layer>].<format>",
    )
    diagram.add_argument(
        "--whole",
        action="store_true",
        help="with --trace: draw the whole machine under the run, not only the states it visited",
    )
    diagram.add_argument(
        "--coverage",
        metavar="DIR",
        help="overlay the runs recorded in DIR (QUERYLOOP_TRACE_DIR): edges taken with their summed counts, "
        "the others dashed red; writes <out>/<machine>.coverage[.<layer>].<format>",
    )
    diagram.set_defaults(func=cmd_diagram, default_machines=default_machines)

    docs = sub.add_parser("docs", help="write the recovery ladders (per event, the candidates in order) as Markdown")
    docs.add_argument("--machine", action="append", default=[], metavar="FILE")
    docs.add_argument("--out", default="docs/recovery.md", metavar="FILE")
    docs.add_argument("--check", action="store_true", help="write nothing; exit 1 when --out is stale")
    docs.set_defaults(func=cmd_docs, default_machines=default_machines)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command: user errors become one line on stderr and an exit code, never a traceback."""
    try:
        rc: int = args.func(args)
    except UsageError as exc:
        print(f"queryloop: error: {exc}", file=sys.stderr)
        return 2
    except FsmError as exc:
        print(f"queryloop: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`queryloop check | head`): stop quietly, like other tools
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 141
    return rc
