"""The Claude Agent SDK's session: ``--input-format stream-json`` and its control protocol on stdin and stdout.

Owns reading stdin (prompts played in turn; each ``control_request`` answered once) and what each request does
(docs/agent-sdk.md). Only the end of stdin ends the session.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from queryloop.fsm import JsonLimitError, loads_json
from queryloop.handlers.agents import agents_from_json, merge_agents
from queryloop.handlers.mcp import McpManager, McpServerConfig, tool_name
from queryloop.handlers.request import ModelBackend, model_info
from queryloop.handlers.tools import PERMISSION_MODES

from .. import __version__
from ..run.config import AgentOptions, session_of
from ..run.data import AgentData
from ..run.services import answer_elicitation
from ..run.sessions import SessionChoice, SessionChoiceError, apply_rewind, plan_rewind
from .api import _Conversation, _prompt_text
from .options import PermissionResult, PermissionResultAllow, PermissionResultDeny, ToolPermissionContext
from .options import permission_asker as options_permission_asker
from .renderer import Renderer
from .sdk_channel import Channel, ControlError, SdkAnswerError, SdkServer, hook_config, warn
from .stream_json import StreamJsonRenderer

__all__ = ["serve_sdk_session"]

# ---- the output -------------------------------------------------------------------------------------


class _SessionRenderer(StreamJsonRenderer):
    """The stream-json renderer, straight to stdout, with what the SDK's session adds to a prompt's lines."""

    def __init__(self, session: _SdkSession, options: AgentOptions, prompt: Mapping[str, Any]) -> None:
        super().__init__(
            session_id=options.session.session_id,
            stdout=session.out,
            partial_messages=session.args.include_partial_messages,
        )
        self.session = session
        self.prompt = prompt
        self.prompt_id = options.prompt_id

    def start(self, **fields: Any) -> None:
        fields["mcp_servers"] = [*(fields.get("mcp_servers") or []), *self.session.sdk_statuses()]
        self.session.mcp_seen = list(fields["mcp_servers"])
        super().start(**fields)
        if self.session.args.replay_user_messages:  # the prompt's uuid is the user message rewind_files names
            message = {"role": "user", "content": self.prompt.get("message", {}).get("content")}
            now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            line = {"type": "user", "message": message, "parent_tool_use_id": None, "uuid": self.prompt_id}
            self.line({**line, "timestamp": now, "isReplay": True})

    def finish(self, result: dict[str, Any], data: AgentData) -> None:
        self.session.last_data, self.session.last_error = data, bool(result.get("is_error"))
        super().finish(result, data)


class _SdkConversation(_Conversation):
    """The API's conversation, its prompts' lines written to stdout as the CLI prints them."""

    def __init__(
        self, session: _SdkSession, template: AgentOptions, choice: SessionChoice, backend: ModelBackend
    ) -> None:
        self._begin(template, choice, backend)
        self.owner = session
        self.prompt: Mapping[str, Any] = {}  # the user message being played

    def _renderer(self, options: AgentOptions, sink: io.StringIO) -> Renderer:
        return _SessionRenderer(self.owner, options, self.prompt)


# ---- the session ------------------------------------------------------------------------------------


def _started_servers(configs: Sequence[McpServerConfig], in_process: Mapping[str, object]) -> list[McpServerConfig]:
    """The configured servers to start: one named like an in-process server gives way to it (the SDK's
    ``--mcp-config`` wins a name clash), so no tool name is offered twice."""
    started = []
    for config in configs:
        if config.name in in_process:
            warn(
                f"warning: MCP server {config.name!r} of {config.source or 'the settings'} is not started: "
                "the Agent SDK's in-process server of that name is used instead"
            )
        else:
            started.append(config)
    return started


@attrs.frozen(kw_only=True)
class _Then:
    """A control request's success ``response``, and the ``lines`` printed after the answer (ids added)."""

    response: Mapping[str, Any]
    lines: tuple[Mapping[str, Any], ...]


class _SdkSession:
    """One Agent SDK session: stdin read line by line, prompts played in turn, every control request answered."""

    def __init__(self, template: AgentOptions, backend: ModelBackend, args: argparse.Namespace) -> None:
        self.args = args
        self.out = sys.stdout
        self.channel = Channel(self.out)
        choice = session_of(template)
        if args.permission_prompt_tool == "stdio":
            asker = options_permission_asker(self._ask_permission, cwd=template.cwd, on_interrupt=self._interrupt)
            template = attrs.evolve(template, permissions=attrs.evolve(template.permissions, can_use_tool=asker))
        self.conversation = _SdkConversation(self, template, choice, backend)
        self.default_model = template.request.model
        self.servers = {name: SdkServer(self.channel, name) for name in args.sdk_mcp_servers}
        self.mcp = McpManager(
            _started_servers(template.tools.mcp_servers, self.servers),
            cwd=template.cwd,
            hidden=template.permissions.hides,
            taken=lambda name: any(name.startswith(tool_name(s, "")) for s in self.servers),
            roots=template.working_directories(),
            # the host answers through its Elicitation hook callback (registered at initialize), else declined
            elicit=lambda request: answer_elicitation(self.conversation.template, request),
        )
        self.conversation.mcp = (
            self.mcp if template.tools.mcp_servers else None
        )  # kept across prompts, as Claude Code's
        self.mcp_ready: asyncio.Task[None] | None = None
        self.initializing: asyncio.Task[Any] | None = None
        self.prompts: asyncio.Queue[Mapping[str, Any] | None] = asyncio.Queue()
        self.interrupt_next = False
        self.tasks: dict[str, asyncio.Task[None]] = {}  # control requests being answered, by request id
        self.mcp_seen: list[dict[str, Any]] = []
        self.last_data: AgentData | None = None
        self.last_error = False
        self.signalled: int | None = None
        self.lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.handlers: dict[str, Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any] | _Then | None]]] = {
            "initialize": self._initialize,
            "interrupt": self._on_interrupt,
            "set_permission_mode": self._set_permission_mode,
            "set_model": self._set_model,
            "mcp_status": self._mcp_status,
            "mcp_reconnect": self._mcp_reconnect,
            "mcp_toggle": self._mcp_toggle,
            "rewind_files": self._rewind_files,
            "get_context_usage": self._context_usage,
        }

    # ---- the loop ------------------------------------------------------------------------------
    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._on_signal, signum)
        threading.Thread(target=self._read_stdin, args=(loop,), daemon=True, name="queryloop-stdin").start()
        self.mcp_ready = asyncio.create_task(self.mcp.start())
        player = asyncio.create_task(self._play())
        try:
            line_number = 0
            while (raw := await self.lines.get()) is not None:
                line_number += 1
                self._dispatch(raw, line_number)
            self.channel.close()  # nobody can answer now: pending and later requests fail, prompts still play
            self.prompts.put_nowait(None)
            await player
        finally:
            player.cancel()
            for task in (*self.tasks.values(), self.initializing, self.mcp_ready):
                if task is not None:
                    task.cancel()
            await asyncio.gather(player, *self.tasks.values(), return_exceptions=True)
            await self.conversation.close()
            await self.mcp.close()
        if self.signalled is not None:
            return 128 + self.signalled
        return 1 if self.last_error else 0

    def _read_stdin(self, loop: asyncio.AbstractEventLoop) -> None:
        """In a thread: each line of stdin onto the queue, then None at its end."""
        try:
            for raw in sys.stdin.buffer:
                loop.call_soon_threadsafe(self.lines.put_nowait, raw)
        except (OSError, ValueError):
            pass  # stdin closed under us: its end
        try:
            loop.call_soon_threadsafe(self.lines.put_nowait, None)
        except RuntimeError:
            pass  # the loop is gone: the session ended first

    def _on_signal(self, signum: int) -> None:
        """SIGINT/SIGTERM: the prompt being played ends through its abort edge, the session ends after it."""
        if self.signalled is None:
            self.signalled = signum
            self._interrupt()
            self.lines.put_nowait(None)

    def _state(self, state: str) -> None:
        """The SDK asks for these (``CLAUDE_CODE_SDK_READS_SESSION_STATE``) to know when a run is over."""
        if os.environ.get("CLAUDE_CODE_SDK_READS_SESSION_STATE"):
            line = {"type": "system", "subtype": "session_state_changed", "state": state, "sdk_host_only": True}
            self.channel.send({**line, "uuid": str(uuid.uuid4()), "session_id": self.conversation.session.session_id})

    async def _play(self) -> None:
        while (prompt := await self.prompts.get()) is not None:
            if self.initializing is not None:
                await asyncio.gather(self.initializing, return_exceptions=True)
            if self.mcp_ready is not None:
                await asyncio.gather(self.mcp_ready, return_exceptions=True)
            interrupted, self.interrupt_next = self.interrupt_next or self.signalled is not None, False
            self._state("running")
            try:
                self.conversation.prompt = prompt
                await self.conversation.play(_prompt_text(prompt), lambda message: None, interrupted=interrupted)
            except Exception as exc:  # a prompt that cannot be played (no text, no session to continue, …)
                warn(f"the prompt was not played: {exc}")
                self._refuse(str(exc))
            if self.prompts.empty():
                self._state("idle")

    def _refuse(self, message: str) -> None:
        """A result line for a prompt that did not run, so the program waiting for one gets it."""
        self.last_error = True
        ids = {"session_id": self.conversation.session.session_id, "uuid": str(uuid.uuid4())}
        timing = {"duration_ms": 0, "duration_api_ms": 0, "num_turns": 0, "total_cost_usd": 0}
        head = {"type": "result", "subtype": "error_during_execution", "is_error": True}
        self.channel.send({**head, **timing, "errors": [message], **ids})

    def _dispatch(self, raw: bytes, line_number: int) -> None:
        try:
            message = loads_json(raw.decode("utf-8"))
        except JsonLimitError as exc:
            warn(f"error: stdin line {line_number} cannot be read safely ({exc}); skipped")
            return
        except ValueError as exc:  # not JSON, or not UTF-8
            if raw.strip():
                warn(f"error: stdin line {line_number} is not a JSON object ({exc}); skipped")
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "user":
            self.prompts.put_nowait(message)
        elif kind == "control_request":
            self._start_answer(message, line_number)
        elif kind == "control_response":
            self.channel.resolve(message)
        elif kind == "control_cancel_request":
            task = self.tasks.get(str(message.get("request_id")))
            if task is not None:
                task.cancel()
        elif kind != "keep_alive":
            warn(f"error: stdin line {line_number}: expected a user message or a control_request, got {kind!r}")

    def _start_answer(self, message: Mapping[str, object], line_number: int) -> None:
        request_id = message.get("request_id")
        if not isinstance(request_id, str) or not request_id:
            warn(f"error: stdin line {line_number}: a control_request without a request_id cannot be answered")
            return
        task = asyncio.create_task(self._answer(request_id, message.get("request")))
        self.tasks[request_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(request_id, None))

    async def _answer(self, request_id: str, request: object) -> None:
        subtype = request.get("subtype") if isinstance(request, Mapping) else None
        try:
            if not isinstance(request, Mapping) or not isinstance(subtype, str):
                raise ControlError('a control_request needs "request": {"subtype": ..., ...}')
            handler = self.handlers.get(subtype)
            if handler is None:
                raise ControlError(
                    f"Unsupported control request subtype: {subtype} (queryloop serves {', '.join(self.handlers)})",
                    "unsupported_request",
                )
            response = await handler(request)
        except ControlError as exc:
            self.channel.fail(request_id, str(exc), exc.code)
        except Exception as exc:  # our bug: the request fails, the session goes on
            self.channel.fail(request_id, f"{subtype} failed: {type(exc).__name__}: {exc}", "internal_error")
        else:
            self._succeed(request_id, response)

    def _succeed(self, request_id: str, response: Mapping[str, object] | _Then | None) -> None:
        """The success answer, then the lines a handler said follow it (Claude Code 2.1.235's order)."""
        if not isinstance(response, _Then):
            self.channel.succeed(request_id, response)
            return
        self.channel.succeed(request_id, response.response)
        for line in response.lines:
            self._announce(line)

    # ---- what the SDK asks ---------------------------------------------------------------------
    async def _initialize(self, request: Mapping[str, Any]) -> Mapping[str, object]:
        if self.initializing is not None:
            raise ControlError("already initialized: initialize is the session's first request, once")
        hooks = hook_config(self.channel, request.get("hooks"))
        self.initializing = asyncio.current_task()  # prompts wait for it
        await asyncio.gather(*(server.connect() for server in self.servers.values()))
        conversation = self.conversation
        served = tuple(t for server in self.servers.values() for t in server.tools)
        template = conversation.template
        try:
            agents = merge_agents(template.agents.definitions, agents_from_json(request.get("agents") or {}, "agents"))
            conversation.template = attrs.evolve(
                template,
                hooks=template.hooks.merged(hooks),
                tools=attrs.evolve(template.tools, custom_tools=(*template.tools.custom_tools, *served)),
                agents=attrs.evolve(template.agents, definitions=agents),
            )
        except ValueError as exc:  # a served tool's name clashes with another; an agent that cannot be used
            raise ControlError(f"initialize: {exc}") from None
        return {
            "commands": [],
            "agents": [{"name": a.name, "description": a.description} for a in agents],
            "output_style": "default",
            "available_output_styles": ["default"],
            "models": [],
            "pid": os.getpid(),
            "queryloop_version": __version__,  # not claude_code_version: this is not Claude Code
            "current_permission_mode": template.permissions.mode,
            "session_state": "idle",
        }

    async def _on_interrupt(self, request: Mapping[str, object]) -> Mapping[str, object]:
        self._interrupt()
        # Claude Code 2.1.235 answers this, empty even with a prompt queued behind the one interrupted (probed)
        return {"still_queued": []}

    def _interrupt(self) -> None:
        """The prompt being played takes its abort edge; if none is yet, the next one starts by taking it."""
        if not self.conversation.interrupt() and not self.prompts.empty():
            self.interrupt_next = True

    async def _ask_permission(
        self, tool: str, tool_input: Mapping[str, object], context: ToolPermissionContext
    ) -> PermissionResult:
        request = {"subtype": "can_use_tool", "tool_name": tool, "display_name": tool, "input": tool_input}
        why: dict[str, object] = {
            "permission_suggestions": [],
            "blocked_path": None,
            "decision_reason": context.decision_reason,
        }
        answer = await self.channel.ask({**request, **why, "tool_use_id": context.tool_use_id})
        if answer.get("behavior") == "allow":
            updated = answer.get("updatedInput")
            return PermissionResultAllow(updated_input=dict(updated) if isinstance(updated, Mapping) else None)
        if answer.get("behavior") == "deny":
            message = str(answer.get("message") or "")
            return PermissionResultDeny(message=message, interrupt=answer.get("interrupt") is True)
        raise SdkAnswerError(f"can_use_tool answered {json.dumps(answer)[:200]}: expected behavior allow or deny")

    async def _set_permission_mode(self, request: Mapping[str, object]) -> _Then:
        mode = request.get("mode")
        if mode not in PERMISSION_MODES:
            raise ControlError(
                f"Cannot set permission mode {mode!r}: must be one of {', '.join(PERMISSION_MODES)}", "invalid_mode"
            )
        template = self.conversation.template
        self.conversation.template = attrs.evolve(template, permissions=attrs.evolve(template.permissions, mode=mode))
        status = {"type": "system", "subtype": "status", "status": None, "permissionMode": mode}
        return _Then(response={"mode": mode}, lines=(status,))  # the status line after the answer, as Claude Code

    def _announce(self, line: Mapping[str, object]) -> None:
        """A line Claude Code 2.1.235 prints when a control request changed the session (its ids added)."""
        self.channel.send({**line, "uuid": str(uuid.uuid4()), "session_id": self.conversation.session.session_id})

    async def _set_model(self, request: Mapping[str, object]) -> None:
        model = request.get("model")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ControlError(f"set_model: model must be a model name or null (the default), got {model!r}")
        template = self.conversation.template
        env = {**os.environ, **template.tools.env}  # an alias is resolved as --model's is (not probed here)
        settings = template.request.switched_to(model or self.default_model, env)
        self.conversation.template = attrs.evolve(template, request=settings)
        # Claude Code 2.1.235 replays a local command's output as a user line (isReplay), in its marker
        said = {
            "role": "user",
            "content": f"<local-command-stdout>The model is now {settings.model}</local-command-stdout>",
        }
        self._announce({"type": "user", "message": said, "parent_tool_use_id": None, "isReplay": True})
        return None  # a success without a response, as Claude Code 2.1.235's

    async def _mcp_status(self, request: Mapping[str, object]) -> Mapping[str, object]:
        if self.mcp_ready is not None:
            await asyncio.gather(self.mcp_ready, return_exceptions=True)
        configs = {config.name: config for config in self.conversation.template.tools.mcp_servers}
        entries = [{**entry, **_config_entry(configs.get(entry["name"]))} for entry in self.mcp.statuses()]
        return {"mcpServers": [*entries, *self.sdk_statuses()]}

    def sdk_statuses(self) -> list[dict[str, object]]:
        return [server.status_entry() for server in self.servers.values()]

    async def _mcp_reconnect(self, request: Mapping[str, object]) -> Mapping[str, object]:
        name = request.get("serverName")
        if name in self.servers:
            server = self.servers[str(name)]
            await server.connect()
            if server.status != "connected":
                raise ControlError(f"Failed to reconnect {name}: {server.error}", "reconnect_failed")
            return {}
        if name not in self.mcp.names:
            raise ControlError(f"Server not found: {name}", "not_found")
        if self.mcp_ready is not None:
            await asyncio.gather(self.mcp_ready, return_exceptions=True)
        connected = await self.mcp.reconnect([str(name)])
        if not connected[str(name)]:
            failure = self.mcp.failure(str(name))
            why = failure.text() if failure else "down"
            raise ControlError(f"Failed to reconnect {name}: {why}", "reconnect_failed")
        return {}

    async def _mcp_toggle(self, request: Mapping[str, object]) -> None:
        """Turn a configured server off (its connection closed, its tools gone from the next request) or on
        again (connected anew), as Claude Code 2.1.235 does: a success without a response."""
        name = request.get("serverName")
        if name not in self.servers and name not in self.mcp.names:
            raise ControlError(f"Server not found: {name}", "not_found")  # as Claude Code 2.1.235 answers
        if name in self.servers:
            raise ControlError(
                f"mcp_toggle: {name} is the SDK's own server, which this session does not turn off or on",
                "unsupported_request",
            )
        if self.mcp_ready is not None:
            await asyncio.gather(self.mcp_ready, return_exceptions=True)
        if request.get("enabled") is False:
            await self.mcp.disable(str(name))
        elif not await self.mcp.enable(str(name)):
            failure = self.mcp.failure(str(name))
            raise ControlError(f"Failed to enable {name}: {failure.text() if failure else 'down'}", "reconnect_failed")

    async def _rewind_files(self, request: Mapping[str, object]) -> Mapping[str, object]:
        target = request.get("user_message_id")
        if not isinstance(target, str) or not target:
            raise ControlError("rewind_files needs user_message_id: the uuid of a user message of this session")
        if self.conversation.playing is not None:
            raise ControlError("a prompt is being played: interrupt it (or wait for its result) before rewinding")
        try:
            plan = plan_rewind(self.conversation.session.stored_as, target)
        except SessionChoiceError as exc:
            raise ControlError(str(exc), "not_found") from None
        changed = [item for item in plan.files if item.before != item.now]
        summary: dict[str, object] = {"canRewind": True, "filesChanged": [str(item.path) for item in changed]}
        if plan.irreversible:  # what no checkpoint covers (Bash, MCP calls): told, never undone
            summary["notUndone"] = [{"name": e["name"], "tool_use_id": e["tool_use_id"]} for e in plan.irreversible]
        if request.get("dry_run"):
            return summary
        return {**summary, "done": apply_rewind(plan)}

    async def _context_usage(self, request: Mapping[str, object]) -> Mapping[str, object]:
        return _context_usage(self.conversation.template, self.last_data)


def _config_entry(config: McpServerConfig | None) -> dict[str, object]:
    """What ``mcp_status`` says of a server's configuration, as Claude Code 2.1.235 does: ``config`` and ``scope``.

    ``env`` and ``headers`` are left out: they may hold credentials. The scope is where it was
    declared: ``dynamic`` for ``--mcp-config`` (probed), ``project`` for ``.mcp.json``,
    ``user`` for settings.
    """
    if config is None:
        return {}
    where = config.type if config.type != "stdio" else None
    shown: dict[str, object] = {"type": config.type}
    shown.update({"url": config.url} if where else {"command": config.command, "args": list(config.args)})
    scope = {".mcp.json": "project", "settings": "user"}.get(config.source, "dynamic")
    return {"config": shown, "scope": scope}


def _context_usage(template: AgentOptions, data: AgentData | None) -> dict[str, object]:
    """What the last prompt's requests held, by part, against the model's window (estimates, as compaction's)."""
    model = data.request.model if data is not None else template.request.model
    info = model_info(model)
    window = info.context_window if info else 200_000
    if data is None:
        parts = {"System prompt and tools": 0, "Messages": 0}
    else:
        parts = {
            "System prompt and tools": data.context.overhead + data.request.tool_catalog_tokens,
            "Messages": data.messages.tokens,
        }
    total = sum(parts.values())
    effective = max(1, window - min(template.request.max_tokens, 20_000))
    categories = [{"name": name, "tokens": tokens, "color": "inactive"} for name, tokens in parts.items()]
    return {
        "categories": categories,
        "totalTokens": total,
        "maxTokens": effective,
        "rawMaxTokens": window,
        "percentage": round(100 * total / window, 1),
        "model": model,
        "isAutoCompactEnabled": template.context.auto_compact,
        "autoCompactThreshold": int(effective * template.context.auto_compact_threshold),
        "memoryFiles": [{"path": str(f.path), "type": f.kind} for f in template.context.instructions],
        "mcpTools": [],
        "agents": [],
        "gridRows": [],
    }


async def serve_sdk_session(template: AgentOptions, backend: ModelBackend, args: argparse.Namespace) -> int:
    """Serve the Agent SDK on stdin and stdout until stdin ends; the exit code (1 if the last result is an error)."""
    return await _SdkSession(template, backend, args).serve()
