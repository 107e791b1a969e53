"""MCP layer, the connections: one official ``mcp`` client per configured server, its tools, its calls, its failures.

Owns :class:`McpManager`. Each connection lives in its own task; a call that finds it gone is an ``is_error``
result, never an exception. Reconnecting is the machine's choice. Its records: ``listing``, ``connection``,
``failures``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import attrs

from ...tools import ToolContext, ToolError, ToolOutput, ToolRun, ToolSpec
from .checked import checked_transport, protocol_problem
from .config import McpServerConfig, tool_name
from .connection import Connection
from .content import Block, MalformedContent, PromptMessage, prompt_messages, resource_text, tool_result_content
from .failures import McpFailure, describe_failure, gave_up, malformed
from .host import Elicit, ElicitAnswer, McpProgress, elicitation_callback, roots_callback
from .listing import McpTool, all_pages, list_prompts, list_tools, resource_tools, tool_description
from .resources import RESOURCE_TOOLS, ResourceSource, resource_runs

if TYPE_CHECKING:  # the SDK (and pydantic under it) is imported where a server is connected: a run without one,
    # and `queryloop check`, never pay for it
    import mcp.types
    from mcp import Client

__all__ = ["McpManager", "load_sdk"]

T = TypeVar("T")


def load_sdk() -> None:
    """Import the ``mcp`` SDK's client side now, the modules a connection uses (:meth:`McpManager._client`).

    The CLI calls it at start-up while the garbage collector is paused (``queryloop.run.startup``),
    so the objects the import builds are frozen with the SDK's and never scanned; imported later,
    at the first connection, the collector runs through them while they are built and after.
    """
    import mcp.client.sse
    import mcp.client.stdio
    import mcp.client.streamable_http  # noqa: F401


class McpManager:
    """The run's MCP servers: connect them, list and call their tools, report and repair their failures.

    ``connect_timeout_s``: how long a server may take to start and answer a listing or a read, unless its
    configuration says (``startup_timeout_s``, from ``MCP_TIMEOUT``); a call may take its configuration's
    ``tool_timeout_s`` (``MCP_TOOL_TIMEOUT``), else the tool layer's deadline;
    ``log_dir``: where each stdio server's stderr goes (``<name>.log``; default: discarded);
    ``hidden``: tool names a bare deny rule removes from what the model is offered;
    ``taken``: the names of the tools offered beside the servers' (custom tools, the Agent
    SDK's in-process servers'): a listed tool that would be offered under one of them is not
    offered, with a warning, so no rule meant for one tool covers another.
    ``roots``: the working directories, declared to every server as its roots (:meth:`set_roots`
    changes them and tells the servers); ``elicit``: who answers a server's request for
    input (None: every request is declined, with a warning saying so); ``progress``: told
    each progress notification of a running call.
    """

    def __init__(
        self,
        configs: Iterable[McpServerConfig],
        *,
        cwd: Path | None = None,
        connect_timeout_s: float = 30.0,
        log_dir: Path | None = None,
        hidden: Callable[[str], bool] = lambda name: False,
        taken: Callable[[str], bool] = lambda name: False,
        roots: Sequence[Path] = (),
        elicit: Elicit | None = None,
        progress: Callable[[McpProgress], None] | None = None,
    ) -> None:
        self._connections = {c.name: Connection(config=c) for c in configs}
        self.roots: tuple[Path, ...] = tuple(roots) if roots else ((cwd,) if cwd is not None else ())
        self.elicit = elicit
        self.progress = progress
        self.taken = taken
        self.cwd = cwd
        self.connect_timeout_s = connect_timeout_s
        self.log_dir = log_dir
        self.hidden = hidden
        self._logs: list[TextIO] = []
        self.started = False
        source = ResourceSource(
            servers=self.resource_servers,
            listing=self.list_resources,
            read=self.read_resource,
            contents=self.resource_contents,
        )
        runs = resource_runs(source)
        self._resource_specs = {t.name: attrs.evolve(self._spec(t), run=runs[t.name]) for t in resource_tools()}

    # ---- what the loop asks -----------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._connections)

    def statuses(self) -> list[dict[str, str]]:
        """``[{name, status}]`` for the ``init`` line, in configuration order."""
        return [{"name": n, "status": c.status} for n, c in self._connections.items()]

    def down(self, exclude: Iterable[str] = ()) -> tuple[str, ...]:
        """Servers not connected (failed at start, or their connection broke), except ``exclude`` and those
        turned off (:meth:`disable`)."""
        skip = set(exclude)
        return tuple(
            n for n, c in self._connections.items() if c.status not in ("connected", "disabled") and n not in skip
        )

    def changed(self) -> tuple[str, ...]:
        """Connected servers that announced a changed tool list since they were last listed."""
        return tuple(n for n, c in self._connections.items() if c.status == "connected" and c.list_changed)

    def failure(self, server: str) -> McpFailure | None:
        return self._connections[server].error

    def generations(self, exclude: Iterable[str] = ()) -> dict[str, int]:
        """Each connected server's tool generation (what a catalog built now would be built from)."""
        skip = set(exclude)
        return {n: c.generation for n, c in self._connections.items() if c.status == "connected" and n not in skip}

    def catalog(self, exclude: Iterable[str] = ()) -> tuple[McpTool, ...]:
        """The tools of every connected server but ``exclude``, sorted by the name offered (as Claude Code)."""
        skip = set(exclude)
        tools = (
            t
            for n, c in self._connections.items()
            if c.status == "connected" and n not in skip
            for t in c.tools
            if not self.hidden(t.name)
        )
        resources = resource_tools() if self.resource_servers(exclude=skip) else ()
        return (*(t for t in resources if not self.hidden(t.name)), *sorted(tools, key=lambda t: t.name))

    def resource_servers(self, exclude: Iterable[str] = ()) -> tuple[str, ...]:
        """Connected servers that declare the ``resources`` capability (the resource tools are offered for them)."""
        skip = set(exclude)
        return tuple(
            n for n, c in self._connections.items() if c.status == "connected" and c.resources and n not in skip
        )

    def take_warnings(self) -> list[str]:
        """Warnings gathered while connecting and listing (tools skipped, servers failing), once each."""
        out: list[str] = []
        for connection in self._connections.values():
            out.extend(connection.warnings)
            connection.warnings.clear()
        return out

    def tool_spec(self, name: str) -> ToolSpec | None:
        """The tool the model calls as ``name``, as the tool layer runs it (None if no server lists it now)."""
        if name in RESOURCE_TOOLS:
            return self._resource_specs.get(name) if self.resource_servers() and not self.hidden(name) else None
        return next(
            (c.specs[name] for c in self._connections.values() if name in c.specs and c.status != "disabled"), None
        )

    def _spec(self, tool: McpTool) -> ToolSpec:
        """``tool`` as the tool layer runs it (its schema compiled once, here); ValueError if the API refuses it."""
        return ToolSpec(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema,
            concurrency_safe=tool.read_only,
            read_only=tool.read_only,
            idempotent=tool.idempotent or tool.read_only,
            attempt_fields=tool.attempt_fields(),
            run=self._runner(tool),
            own_timeout_s=self._call_deadline(tool.server),
        )

    def _call_timeout_s(self, server: str) -> float | None:
        """How long a call of ``server``'s tools may take (its ``timeout``, ``MCP_TOOL_TIMEOUT``); None: not said."""
        connection = self._connections.get(server)  # a resource tool is no one server's
        return None if connection is None else connection.config.tool_timeout_s

    def _call_deadline(self, server: str) -> Callable[[Mapping[str, object], ToolContext], float] | None:
        """The dispatcher's deadline for a call of ``server``'s tools when its configuration sets one (the
        dispatcher adds its grace: the client's own timeout ends the call first, with its structured error)."""
        own = self._call_timeout_s(server)
        return None if own is None else (lambda _input, _ctx: own)

    def _runner(self, tool: McpTool) -> ToolRun:
        async def run(arguments: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
            own = self._call_timeout_s(tool.server)
            return await self.call(tool, arguments, timeout_s=ctx.tool_timeout_s if own is None else own)

        return run

    async def set_roots(self, roots: Sequence[Path]) -> None:
        """The working directories changed: declare ``roots`` from now on and tell every connected server."""
        if tuple(roots) == self.roots:
            return
        self.roots = tuple(roots)
        for connection in self._connections.values():
            if connection.client is not None and connection.status == "connected":
                with contextlib.suppress(Exception):  # a server gone meanwhile is repaired at the next boundary
                    await connection.client.send_roots_list_changed()

    async def _answer(self, server: str, request: Any) -> ElicitAnswer:
        """A server's request for input, answered by ``elicit``; declined (and said so) when there is none."""
        if self.elicit is not None:
            return await self.elicit(request)
        return ElicitAnswer(action="decline", reason="no one can answer it here")

    def _answered(self, server: str, answer: ElicitAnswer) -> None:
        if answer.reason is not None:
            self._connections[server].warnings.append(
                f"MCP server {server!r} asked for input, which was {answer.action}d: {answer.reason}"
            )

    # ---- connecting ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect every server at once; each ends connected or failed (with its failure) within the timeout."""
        self.started = True
        await asyncio.gather(*(self._connect(c) for c in self._connections.values()))

    async def reconnect(self, names: Sequence[str]) -> dict[str, bool]:
        """Close and connect again each of ``names`` (concurrently); which ones are connected now."""
        await asyncio.gather(*(self._reconnect_one(self._connections[n]) for n in names))
        return {n: self._connections[n].status == "connected" for n in names}

    async def disable(self, name: str) -> None:
        """Turn ``name`` off for the rest of the session (the SDK's ``mcp_toggle``): its connection closes, and
        its tools leave the catalog at the next request boundary (its generation is no longer offered)."""
        connection = self._connections[name]
        await self._disconnect(connection)
        connection.status = "disabled"
        connection.error = None
        connection.warnings.clear()  # a failure noticed while it closed is no news: it was turned off

    async def enable(self, name: str) -> bool:
        """Turn ``name`` on again (or connect it anew): whether it is connected now; its tools are offered
        from the next request boundary on."""
        connection = self._connections[name]
        if connection.status == "disabled":
            connection.status = "pending"
        if connection.status != "connected":
            await self._reconnect_one(connection)
        return connection.status == "connected"

    async def relist(self, names: Sequence[str]) -> None:
        """List again the tools of ``names`` (their generation moves if the list differs); a failure marks one down."""
        await asyncio.gather(*(self._relist_one(self._connections[n]) for n in names))

    async def close(self) -> None:
        """Stop every connection (stdio servers are terminated by the SDK) and close the logs."""
        try:
            await asyncio.gather(*(self._disconnect(c) for c in self._connections.values()))
        finally:  # a disconnect that failed, or a cancel, leaves no log file open
            for log in self._logs:
                log.close()
            self._logs.clear()

    async def _reconnect_one(self, connection: Connection) -> None:
        await self._disconnect(connection)
        await self._connect(connection)

    async def _disconnect(self, connection: Connection, *, grace_s: float = 5.0) -> None:
        """Stop ``connection``: its task is told to close, and cancelled if it has not within ``grace_s``."""
        task = connection.task
        connection.stop.set()
        if task is not None:
            if grace_s > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), timeout=grace_s)
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        connection.task = None
        connection.client = None

    async def _connect(self, connection: Connection) -> None:
        connection.stop = asyncio.Event()
        connection.starts += 1
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        connection.task = asyncio.create_task(self._hold(connection, ready), name=f"mcp:{connection.config.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout=self._startup_s(connection))
        except TimeoutError:
            waited = f"did not finish starting within {self._startup_s(connection):g} s (MCP_TIMEOUT, in ms, sets it)"
            connection.fail(McpFailure(server=connection.config.name, kind="timeout", message=waited))
            await self._disconnect(connection, grace_s=0.0)  # a start still under way has nothing to close cleanly

    async def _hold(self, connection: Connection, ready: asyncio.Future[None]) -> None:
        """The connection's task: open it, list the tools, then keep it open until told to stop."""
        import anyio

        name = connection.config.name
        try:
            with anyio.CancelScope() as scope:  # cancelled by `abort`: what waits for an answer stops waiting
                connection.abort = scope.cancel
                async with self._client(connection) as client:
                    await self._open(connection, client, ready)
                    await connection.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a transport's task group raises groups; everything is a failure here
            kind, message = describe_failure(exc)
            connection.fail(McpFailure(server=name, kind=kind, message=message))
        finally:
            connection.abort = None
            connection.client = None
            if not ready.done():
                ready.set_result(None)

    async def _open(self, connection: Connection, client: Client, ready: asyncio.Future[None]) -> None:
        """List what a server just connected offers, then mark it connected."""
        self._absorb(connection, await list_tools(client, self._startup_s(connection)))
        connection.resources = client.server_capabilities.resources is not None
        connection.resource_list = None
        prompts = client.server_capabilities.prompts
        connection.prompts = await list_prompts(client, self._startup_s(connection)) if prompts else ()
        connection.client = client
        connection.status = "connected"
        connection.error = None
        if not ready.done():
            ready.set_result(None)

    def _client(self, connection: Connection) -> Client:
        import httpx2
        import mcp.types
        from mcp import Client, StdioServerParameters
        from mcp.client.sse import sse_client
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        config = connection.config

        async def on_message(message: object) -> None:
            problem = protocol_problem(message) if isinstance(message, Exception) else None
            if problem is not None:
                connection.broke_protocol(problem)
                return
            notification = getattr(message, "root", message)
            if isinstance(notification, mcp.types.ToolListChangedNotification):
                connection.list_changed = True
            elif isinstance(notification, mcp.types.ResourceListChangedNotification):
                connection.resource_list = None  # listed again when the model next asks
            elif isinstance(notification, mcp.types.PromptListChangedNotification):
                connection.prompts_changed = True

        elicit = elicitation_callback(
            config.name, lambda request: self._answer(config.name, request), lambda a: self._answered(config.name, a)
        )
        common: dict[str, Any] = {
            "mode": "legacy",
            "message_handler": on_message,
            "cache": None,
            "list_roots_callback": roots_callback(lambda: self.roots),
            "elicitation_callback": elicit,
        }
        if config.type == "stdio":
            assert config.command is not None
            params = StdioServerParameters(
                command=config.command, args=list(config.args), env=dict(config.env) or None, cwd=self.cwd
            )
            return Client(checked_transport(stdio_client(params, errlog=self._log(config.name))), **common)
        assert config.url is not None
        if config.type == "sse":
            return Client(checked_transport(sse_client(config.url, headers=dict(config.headers) or None)), **common)
        http = httpx2.AsyncClient(headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0))
        return Client(checked_transport(streamable_http_client(config.url, http_client=http)), **common)

    def _log(self, server: str) -> TextIO:
        """Where a stdio server's stderr goes: ``<log_dir>/<server>.log`` (appended), else nowhere."""
        if self.log_dir is not None:
            try:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                log = open(self.log_dir / f"{server}.log", "a", encoding="utf-8")
            except OSError:
                log = open(os.devnull, "w", encoding="utf-8")
        else:
            log = open(os.devnull, "w", encoding="utf-8")
        self._logs.append(log)
        return log

    def _startup_s(self, connection: Connection) -> float:
        """How long ``connection``'s server may take to start, to answer a listing or a read (``MCP_TIMEOUT``)."""
        own = connection.config.startup_timeout_s
        return self.connect_timeout_s if own is None else own

    async def _relist_one(self, connection: Connection) -> None:
        client = connection.client
        if client is None:
            return
        connection.list_changed = False
        try:
            listed = await list_tools(client, self._startup_s(connection))
        except Exception as exc:
            kind, message = describe_failure(exc)
            connection.fail(McpFailure(server=connection.config.name, kind=kind, message=message))
            connection.stop.set()
            return
        self._absorb(connection, listed)

    def _absorb(self, connection: Connection, listed: Sequence[mcp.types.Tool]) -> None:
        """Take a listing: the tools that can be offered, warnings for the others, a new generation if it differs."""
        server = connection.config.name
        tools: list[McpTool] = []
        specs: dict[str, ToolSpec] = {}
        for raw in listed:
            name = tool_name(server, raw.name)
            annotations = raw.annotations
            tool = McpTool(
                server=server,
                name=name,
                remote=raw.name,
                description=tool_description(raw),
                input_schema=dict(raw.input_schema),
                read_only=bool(annotations and annotations.read_only_hint),
                idempotent=bool(annotations and annotations.idempotent_hint),
                destructive=annotations is None or annotations.destructive_hint is not False,
            )
            try:
                if len(name) > 64:
                    raise ValueError(f"its name as offered, {name!r}, is longer than the API's 64 characters")
                if name in specs:
                    raise ValueError(f"another tool of the server is offered as {name!r}")
                if self.taken(name):
                    raise ValueError(f"its name as offered, {name!r}, is another tool's (a custom or in-process tool)")
                specs[name] = self._spec(tool)
            except ValueError as exc:
                connection.warnings.append(f"MCP server {server!r}: tool {raw.name!r} is not offered: {exc}")
                continue
            tools.append(tool)
        if tuple(tools) != connection.tools or connection.generation == 0:
            connection.generation += 1
        connection.tools = tuple(tools)
        connection.specs = specs

    def _on_progress(self, tool: McpTool) -> Any:
        """The SDK's progress callback for a call of ``tool`` (None when no one listens: no token is sent)."""
        listener = self.progress
        if listener is None:
            return None

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            listener(McpProgress(server=tool.server, tool=tool.name, progress=progress, total=total, message=message))

        return on_progress

    # ---- prompts ------------------------------------------------------------------------------

    async def prompts(self) -> dict[str, tuple[str, mcp.types.Prompt]]:
        """Every connected server's prompts by their command name (``mcp__<server>__<prompt>``): server, prompt."""
        found: dict[str, tuple[str, mcp.types.Prompt]] = {}
        for name, connection in self._connections.items():
            if connection.status != "connected" or connection.client is None:
                continue
            if connection.prompts_changed:
                connection.prompts_changed = False
                with contextlib.suppress(Exception):  # keeps the last listing; a broken server is repaired later
                    connection.prompts = await list_prompts(connection.client, self._startup_s(connection))
            for prompt in connection.prompts:
                found[tool_name(name, prompt.name)] = (name, prompt)
        return found

    async def get_prompt(self, server: str, prompt: str, arguments: Mapping[str, str]) -> list[PromptMessage]:
        """``prompt`` of ``server`` filled with ``arguments``: its messages (ToolError when the server refuses)."""
        connection = self._connections[server]
        result = await self._guarded(connection, connection.live().get_prompt(prompt, dict(arguments)))
        try:
            return prompt_messages(result, server)
        except MalformedContent as exc:
            raise ToolError(malformed(server, exc)) from None

    # ---- resources ----------------------------------------------------------------------------

    async def list_resources(self, server: str) -> tuple[mcp.types.Resource, ...]:
        """``server``'s resources: its listing, listed again once it said the list changed."""
        connection = self._connections[server]
        if connection.resource_list is None:
            client = connection.live()
            listed = await all_pages(
                lambda cursor: self._guarded(connection, client.list_resources(cursor=cursor)),
                lambda page: page.resources,
            )
            connection.resource_list = tuple(listed)
        return connection.resource_list

    async def read_resource(self, server: str, uri: str) -> str | list[Block]:
        """The contents of ``uri`` on ``server``, as the model gets them."""
        connection = self._connections[server]
        client = connection.live()
        result = await self._guarded(connection, client.read_resource(uri))
        try:
            return resource_text(result, server)
        except MalformedContent as exc:
            raise ToolError(malformed(server, exc)) from None

    async def resource_contents(self, server: str, uri: str) -> mcp.types.ReadResourceResult:
        """The contents of ``uri`` on ``server`` as the server answered (``ReadMcpResourceTool`` shows text ones)."""
        connection = self._connections[server]
        return await self._guarded(connection, connection.live().read_resource(uri))

    async def _guarded(self, connection: Connection, request: Awaitable[T]) -> T:
        """``request``'s answer; a failure is a ``ToolError`` naming it (a broken connection marks the server down)."""
        try:
            return await asyncio.wait_for(request, timeout=self._startup_s(connection))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = connection.request_failure(exc)
            raise ToolError(f"MCP server {failure.server!r} failed ({failure.kind}): {failure.message}") from exc

    # ---- calling ------------------------------------------------------------------------------

    async def call(self, tool: McpTool, arguments: Mapping[str, object], *, timeout_s: float) -> ToolOutput:
        """Call ``tool``; the server's answer, or an ``is_error`` output with the structured failure."""
        connection = self._connections[tool.server]
        client = connection.client
        if client is None or connection.status != "connected":
            failure = connection.error or McpFailure(server=tool.server, kind="transport", message="not connected")
            failure = attrs.evolve(failure, tool=tool.remote)
            return ToolOutput(content=failure.text() + "\nIt is reconnected before the next request.", is_error=True)
        try:
            result = await client.call_tool(
                tool.remote, dict(arguments), read_timeout_seconds=timeout_s, progress_callback=self._on_progress(tool)
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = connection.request_failure(exc, tool=tool.remote)
            if failure.kind == "timeout":  # the server is still connected; the call was cancelled
                failure = attrs.evolve(failure, message=gave_up(timeout_s))
            return ToolOutput(content=failure.text(), is_error=True)
        try:
            content = tool_result_content(result, tool.name, tool.server)
        except MalformedContent as exc:  # as Claude Code 2.1.235: a result the protocol refuses is an error, whole
            return ToolOutput(content=malformed(tool.server, exc), is_error=True)
        return ToolOutput(content=content, is_error=bool(result.is_error))
