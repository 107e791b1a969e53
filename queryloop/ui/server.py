"""``queryloop ui``'s web application: Starlette routes behind a per-launch token.

Owns the token check (``X-Queryloop-Token``, constant time; never a cookie, which every local port would get) and
the routes: static pages and script for anyone, session data under ``/api/`` for the token only. Why: docs/ui.md.
"""

from __future__ import annotations

import hmac
import importlib.resources
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphviz import ExecutableNotFound
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queryloop.fsm import load_machine
from queryloop.handlers.session import is_session_id
from queryloop.machines import MACHINES_DIR

from .fleet import FleetSession, FleetView
from .pictures import NO_DOT, LayerPictures
from .reading import SessionFiles, UnknownSession, find_session, list_all_sessions, read_path

__all__ = ["CSP", "TOKEN_HEADER", "make_app"]

TOKEN_HEADER = "x-queryloop-token"
"""The header each request for a session's data carries the launch's token in."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
_STATIC = {"ui.js": "text/javascript; charset=utf-8", "ui.css": "text/css; charset=utf-8"}
_REFUSED = (
    "forbidden: this page needs the token of the `queryloop ui` that serves it; "
    "open the URL it printed (http://…/#token=…)\n"
)


class _TokenGate:
    """Every request under ``/api/`` carries the launch's token in :data:`TOKEN_HEADER`, or it is refused with 403.

    Only the header counts: a token in the query or a cookie is refused like a wrong one."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token

    def _matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if not request.url.path.startswith("/api/") or self._matches(request.headers.get(TOKEN_HEADER)):
            await self.app(scope, receive, _with_headers(send))
        else:
            await _secured(PlainTextResponse(_REFUSED, status_code=403))(scope, receive, send)


def _secured(response: Response) -> Response:
    response.headers.update(_HEADERS)
    return response


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in _HEADERS]
            headers += [(k.encode(), v.encode()) for k, v in _HEADERS.items()]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _asset(name: str) -> str:
    return importlib.resources.files("queryloop.ui").joinpath("static", name).read_text(encoding="utf-8")


def make_app(*, home: Path, traces: Path | None, token: str, fleet: FleetView | None = None) -> ASGIApp:
    """The inspector's ASGI application over ``home`` (and the run traces in ``traces``, the sessions of the
    ``fleet`` database), behind ``token``."""
    inspector = _Inspector(home=home, traces=traces, fleet=fleet)
    routes = [
        Route("/", inspector.page("sessions")),
        Route("/session/{sid}", inspector.page("session")),
        Route("/static/{name}", _static),
        Route("/api/sessions", inspector.sessions),
        Route("/api/sessions/{sid}", inspector.session),
        Route("/api/sessions/{sid}/path", inspector.path),
        Route("/api/sessions/{sid}/layers/{layer}.svg", inspector.layer),
        Route("/api/sessions/{sid}/rewind", inspector.rewind),
    ]
    return _TokenGate(Starlette(routes=routes), token)


def _static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _STATIC:
        return PlainTextResponse("not found\n", status_code=404)
    return Response(_asset(name), media_type=_STATIC[name])


class _Inspector:
    """The routes' endpoints over the sessions under ``home`` (and in the ``fleet`` database), the run traces in
    ``traces``, and the query loop's layers."""

    def __init__(self, *, home: Path, traces: Path | None, fleet: FleetView | None) -> None:
        self.home, self.traces, self.fleet = home, traces, fleet
        self.spec = load_machine(MACHINES_DIR / "query_loop.yaml", bind=False).spec
        self.pictures = LayerPictures(self.spec)
        self.pages = {"sessions": _asset("sessions.html"), "session": _asset("session.html")}

    def page(self, name: str) -> Callable[[Request], Response]:
        def show(request: Request) -> Response:
            return Response(self.pages[name], media_type="text/html; charset=utf-8")

        return show

    def session_of(self, request: Request) -> SessionFiles | FleetSession | None:
        try:
            return find_session(self.home, request.path_params["sid"])
        except UnknownSession:
            pass
        if self.fleet is not None and is_session_id(request.path_params["sid"]):
            return self.fleet.session(request.path_params["sid"])
        return None

    def unknown(self, request: Request) -> Response:
        return JSONResponse({"error": f"no session {request.path_params['sid']!r} under {self.home}"}, status_code=404)

    def sessions(self, request: Request) -> Response:
        rows, warnings, workers = list_all_sessions(self.home), list[str](), list[dict[str, Any]]()
        fleet = self.fleet
        if fleet is not None:
            fleet_rows, warnings = fleet.sessions()
            rows += fleet_rows
            workers = fleet.workers()
        database = fleet.shown if fleet is not None else None
        body = {
            "home": str(self.home),
            "sessions": rows,
            "warnings": warnings,
            "workers": workers,
            "database": database,
        }
        return JSONResponse(body)

    def session(self, request: Request) -> Response:
        found = self.session_of(request)
        return self.unknown(request) if found is None else JSONResponse(found.to_json())

    def path(self, request: Request) -> Response:
        found = self.session_of(request)
        if found is None:
            return self.unknown(request)
        body = read_path(self.spec, self.traces, request.path_params["sid"], found.steps_folder).json
        body["layers"] = list(self.pictures.layers)
        for step in body["steps"]:
            step["layer"] = self.spec.state(step["from"]).layer  # where the page scrolls each picture to
        body["layers_taken"] = sorted({s["layer"] for s in body["steps"]} - {""})
        return JSONResponse(body)

    def layer(self, request: Request) -> Response:
        sid, name = request.path_params["sid"], request.path_params["layer"]
        found = self.session_of(request)
        if found is None:
            return self.unknown(request)
        if name not in self.pictures.layers:
            return PlainTextResponse(f"no layer {name!r}\n", status_code=404)
        read = read_path(self.spec, self.traces, sid, found.steps_folder)
        try:
            svg = self.pictures.svg(sid, name, read.trace, running=read.running)
        except ExecutableNotFound:  # the page shows this line in the layer's box; the rest of it still works
            return PlainTextResponse(NO_DOT + "\n", status_code=503)
        return Response(svg, media_type="image/svg+xml")

    def rewind(self, request: Request) -> Response:
        found = self.session_of(request)
        if found is None:
            return self.unknown(request)
        return JSONResponse(found.rewind_dry_run(request.query_params.get("to") or None))
