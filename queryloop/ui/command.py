"""``queryloop ui``, the command: its flags, the checks before serving, the socket and the URL it prints.

Owns refusing a ``$QUERYLOOP_HOME`` another user owns, the listening socket, the per-launch token and the URL line.
Imports the web server only when it runs.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from pathlib import Path
from typing import Any

# queryloop.run.tracing.TRACE_DIR_ENV, not imported so that `--help` loads no engine (a test holds them equal)
TRACE_DIR_ENV = "QUERYLOOP_TRACE_DIR"
DATABASE_ENV = "QUERYLOOP_DATABASE_URL"  # queryloop.fleet.database.DATABASE_ENV, likewise

__all__ = ["UiError", "add_ui_command", "check_home_owner"]


class UiError(Exception):
    """``queryloop ui`` cannot serve: the message, exit 1."""


def check_home_owner(home: Path) -> None:
    """Refuse a ``$QUERYLOOP_HOME`` that another user owns: its sessions are theirs, and they may have crafted it."""
    try:
        owner = home.stat().st_uid
    except FileNotFoundError:
        return  # nothing written yet: the page lists no session
    if owner != os.geteuid():
        raise UiError(
            f"{home} (QUERYLOOP_HOME) belongs to uid {owner}, not to you (uid {os.geteuid()}); "
            "queryloop ui serves only your own sessions: set QUERYLOOP_HOME to a folder you own"
        )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UiError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(64)
    return sock


def cmd_ui(args: argparse.Namespace) -> int:
    import uvicorn  # here: `--help` and the other commands load neither the server nor the session layer

    from queryloop.handlers.session import queryloop_home

    from .pictures import NO_DOT, can_draw
    from .server import make_app

    home = queryloop_home()
    traces = args.traces or (Path(os.environ[TRACE_DIR_ENV]) if os.environ.get(TRACE_DIR_ENV) else None)
    try:
        check_home_owner(home)
        fleet = _fleet(args.database_url)
        sock = _bind(args.host, args.port)
    except UiError as exc:
        print(f"queryloop ui: {exc}", file=sys.stderr)
        return 1
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    app = make_app(home=home, traces=traces, token=token, fleet=fleet)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    if not can_draw():
        print(f"queryloop ui: warning: {NO_DOT}; the rest of the page works", file=sys.stderr)
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        print(f"queryloop ui: warning: listening on {args.host}, not loopback; the token is all that guards it")
    print(
        f"queryloop ui: the sessions under {home}"
        + (f" and in the fleet database {fleet.shown}" if fleet else "")
        + (f", paths from {traces}" if traces else "")
    )
    # in the fragment: the browser never sends it, the page's script keeps it for this origin (host and port)
    print(f"open http://{shown}:{port}/#token={token}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _fleet(given: str | None) -> Any:
    """The fleet's database to list beside the files: ``--database-url``, else ``$QUERYLOOP_DATABASE_URL``;
    None when neither is given."""
    raw = given or os.environ.get(DATABASE_ENV)
    if not raw:
        return None
    try:
        from queryloop.fleet.database import DatabaseUrlError, database_url

        from .fleet import FleetView
    except ImportError as exc:
        raise UiError(
            f"reading the fleet's database needs the fleet extra ({exc.name} is missing): "
            "pip install 'queryloop[fleet]'"
        ) from None
    try:
        return FleetView(database_url(raw))
    except DatabaseUrlError as exc:
        raise UiError(str(exc)) from None


def _port(text: str) -> int:
    """``--port``: 0 (any free one) to 65535, else a usage error before anything starts."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give a number from 0 (any free one) to 65535")
    return value


def add_ui_command(sub: Any) -> None:
    """``ui`` on the commands' parser."""
    ui = sub.add_parser(
        "ui",
        help="a local web page over the stored sessions: transcript, path on the graph (live), ledger, rewind",
        description="Serve a web page listing the sessions under QUERYLOOP_HOME; for each, its transcript, its path "
        "on each layer of the recovery graph (live while it runs), its counters, ledger and checkpoints. Prints "
        "the URL to open: it carries a random token, required on every request for a session's data.",
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, loopback)")
    ui.add_argument("--port", type=_port, default=0, metavar="N", help="port (default: any free one)")
    ui.add_argument(
        "--traces",
        type=Path,
        metavar="DIR",
        help=f"a directory runs recorded their paths in (default: ${TRACE_DIR_ENV}), read beside each "
        "session's own steps/ folder",
    )
    ui.add_argument(
        "--database-url",
        metavar="URL",
        help=f"also list the sessions of a fleet's database (sqlite:///PATH or postgresql://…; default: "
        f"${DATABASE_ENV} when set)",
    )
    ui.set_defaults(func=cmd_ui)
