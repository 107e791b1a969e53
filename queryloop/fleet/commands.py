"""The ``worker`` and ``submit`` commands: their flags, and what each runs (imported only when it runs).

Importing it loads neither DBOS, SQLAlchemy nor the SDK. Bad input is one line and exit 1; a bad flag, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from queryloop.frontends.argtypes import at_least_one, seconds
from queryloop.handlers.tools import PERMISSION_MODES
from queryloop.run.defaults import DEFAULT_MODEL

__all__ = ["add_fleet_commands", "cmd_submit", "cmd_worker"]

_DB_HELP = (
    "the fleet's database: sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
    "(default: $QUERYLOOP_DATABASE_URL, else a SQLite file under $QUERYLOOP_HOME)"
)


def _session_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a session id is a UUID, got {text!r}") from None


def add_fleet_commands(sub: Any) -> None:
    """``worker`` and ``submit`` on the commands' parser."""
    worker = sub.add_parser("worker", help="run submitted sessions (a DBOS executor); recover dead workers' sessions")
    worker.add_argument("--database-url", metavar="URL", help=_DB_HELP)
    worker.add_argument("--executor-id", metavar="ID", help="this worker's name in the fleet (default: a fresh one)")
    worker.add_argument("--concurrency", type=at_least_one, default=8, metavar="N", help="sessions at once (default 8)")
    worker.add_argument(
        "--heartbeat", type=seconds, default=2.0, metavar="SECONDS", help="heartbeat interval (default 2)"
    )
    worker.add_argument(
        "--dead-after",
        type=seconds,
        default=15.0,
        metavar="SECONDS",
        help="a worker silent this long is dead and its sessions are recovered (default 15)",
    )
    worker.set_defaults(func=cmd_worker)
    submit = sub.add_parser("submit", help="put a session on the fleet's queue; print its id (or, waiting, its result)")
    submit.add_argument("prompt", nargs="?", help="the prompt (default: stdin)")
    submit.add_argument("--database-url", metavar="URL", help=_DB_HELP)
    submit.add_argument("--model", default=DEFAULT_MODEL, help=f"model to use (default {DEFAULT_MODEL})")
    submit.add_argument("--fallback-model", metavar="A[,B,C]", help="models to fall back to on overload (≤ 3)")
    submit.add_argument("--base-url", metavar="URL", help="the Messages API the workers call (default: theirs)")
    submit.add_argument("--cwd", type=Path, help="the tools' working directory, reached by every worker (default: .)")
    submit.add_argument("--max-turns", type=at_least_one, metavar="N", help="tool-use turns before stopping")
    submit.add_argument("--max-budget-usd", type=float, metavar="X", help="stop once the session has cost this much")
    submit.add_argument("--permission-mode", choices=PERMISSION_MODES, help="default: 'default'")
    submit.add_argument("--allowed-tools", nargs="+", action="extend", metavar="RULES", help="rules to allow")
    submit.add_argument("--disallowed-tools", nargs="+", action="extend", metavar="RULES", help="rules to deny")
    submit.add_argument("--system-prompt", metavar="TEXT", help="replaces the default system prompt")
    submit.add_argument("--session-id", type=_session_id, metavar="UUID", help="the session's id (default: fresh)")
    submit.add_argument("--wait", action="store_true", help="wait for the session's end and print its result JSON")
    submit.add_argument(
        "--result",
        type=_session_id,
        metavar="SESSION_ID",
        help="submit nothing: wait for this session's end and print its result JSON",
    )
    submit.add_argument("--timeout", type=seconds, metavar="SECONDS", help="with --wait/--result: give up after this")
    submit.set_defaults(func=cmd_submit)


def _fail(message: str) -> int:
    print(f"queryloop: {message}", file=sys.stderr)
    return 1


def _without_fleet_extra() -> bool:
    """Whether DBOS (and the SQLAlchemy it brings) cannot be imported; if so, say which install adds them."""
    try:
        import dbos  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError:
        print("queryloop: the fleet needs the 'fleet' extra: pip install 'queryloop[fleet]'", file=sys.stderr)
        return True
    return False


def cmd_worker(args: argparse.Namespace) -> int:
    if _without_fleet_extra():
        return 2
    from .database import DatabaseUrlError, database_url
    from .worker import WorkerConfig, serve

    try:
        url = database_url(args.database_url)
    except DatabaseUrlError as exc:
        return _fail(str(exc))
    config = WorkerConfig(
        database_url=url,
        concurrency=args.concurrency,
        heartbeat_s=args.heartbeat,
        dead_after_s=args.dead_after,
        **({"executor_id": args.executor_id} if args.executor_id else {}),
    )
    try:
        return serve(config)
    except Exception as exc:  # the database refused us: one line, not DBOS's traceback
        return _fail(f"the worker cannot run on {args.database_url or url}: {str(exc).strip().splitlines()[0]}")


def _prompt(args: argparse.Namespace) -> str:
    text = args.prompt if args.prompt is not None else ("" if sys.stdin.isatty() else sys.stdin.read())
    if not text.strip():
        raise ValueError("no prompt: give it as an argument (queryloop submit 'PROMPT') or on stdin")
    return str(text)


def cmd_submit(args: argparse.Namespace) -> int:
    if _without_fleet_extra():
        return 2
    from .database import DatabaseUrlError, database_url
    from .session import SessionSpec
    from .submit import FleetError, enqueue, result_line, wait_for_result

    try:
        url = database_url(args.database_url)
        if args.result is not None:
            print(result_line(wait_for_result(url, args.result, timeout_s=args.timeout)))
            return 0
        cwd = (args.cwd or Path.cwd()).resolve()
        if not cwd.is_dir():
            raise ValueError(f"--cwd {args.cwd}: not a directory")
        fallbacks = tuple(m.strip() for m in (args.fallback_model or "").split(",") if m.strip())
        if len(fallbacks) > 3:
            raise ValueError(f"at most 3 fallback models, got {len(fallbacks)}")
        spec = SessionSpec(
            **({"session_id": args.session_id} if args.session_id else {}),
            prompt=_prompt(args),
            model=args.model,
            fallback_models=fallbacks,
            base_url=args.base_url,
            cwd=str(cwd),
            max_turns=args.max_turns,
            max_budget_usd=args.max_budget_usd,
            permission_mode=args.permission_mode,
            allowed_tools=tuple(args.allowed_tools or ()),
            disallowed_tools=tuple(args.disallowed_tools or ()),
            system_prompt=args.system_prompt,
        )
        live = enqueue(url, spec, live_within_s=_live_window(), require_worker=args.wait)
        if not args.wait:
            if not live:
                print(
                    "queryloop: no worker is running now: the session waits on the queue until `queryloop worker` "
                    "starts on this database",
                    file=sys.stderr,
                )
            print(spec.session_id)
            return 0
        print(f"queryloop: submitted session {spec.session_id}", file=sys.stderr, flush=True)
        result = wait_for_result(url, spec.session_id, timeout_s=args.timeout)
    except (DatabaseUrlError, FleetError, ValueError) as exc:
        return _fail(str(exc))
    print(result_line(result))
    return 1 if result.get("is_error") else 0


def _live_window() -> float:
    """How recent a heartbeat must be for ``submit --wait`` to count a worker as running."""
    return float(os.environ.get("QUERYLOOP_WORKER_DEAD_AFTER_S", "30"))
