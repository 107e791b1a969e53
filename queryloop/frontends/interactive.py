"""The interactive session: ``queryloop`` on a terminal without a prompt, the recovery graph live.

Owns the prompt line, slash commands and the inline permission question, every line made inert; the status line is
``status_line``'s. Each prompt is one run of the same session (docs/cli.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
from prompt_toolkit import PromptSession
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from rich.console import Console
from rich.text import Text

from queryloop.fsm import Step, Trace, TraceStep, check_trace, inert
from queryloop.handlers.mcp import ElicitAnswer, Elicitation, McpManager, McpProgress
from queryloop.handlers.messages import ToolCall
from queryloop.handlers.request import ModelBackend
from queryloop.handlers.session import SessionPaths, queryloop_home, read_jsonl
from queryloop.handlers.tools import (
    PermissionAnswer,
    PermissionMode,
    PermissionRules,
    decide,
    parse_rule,
    suggest_rules,
)

from ..run.agent import query_loop_program
from ..run.config import AgentOptions, session_of
from ..run.data import AgentData
from ..run.services import answer_elicitation
from ..run.sessions import (
    PROMPT_REASONS,
    SessionChoice,
    SessionChoiceError,
    apply_rewind,
    choose_session,
    list_sessions,
    plan_rewind,
    print_rewind,
)
from ..run.telemetry import end_session_trace
from .api import _Conversation
from .options import OptionsError
from .renderer import Renderer
from .status_line import TerminalRenderer, brief, status_line

__all__ = ["serve_interactive", "status_line"]

MODE_CYCLE: tuple[PermissionMode, ...] = (
    "default",
    "acceptEdits",
    "plan",
)  # what Shift-Tab cycles through, as Claude Code's
HELP = """\
/compact [instructions]  summarise the conversation so far (optional instructions for the summary)
/rewind [N]              put the files back as they were before prompt N (shows the diff, asks first)
/resume [ID|N]           continue another stored session of this directory (no argument: list them)
/clear                   start a new session (the old one stays stored)
/cost                    what the session has cost so far
/model [NAME]            show or set the model of the next prompts
/permissions             the permission mode, the rules and what was answered this session
/graph                   where the session is on the recovery graph, and the path this prompt took
/add-dir PATH            another working directory (the MCP servers' roots follow)
/mcp__SERVER__PROMPT ... an MCP server's prompt, the words after it its arguments (/help lists them)
/help                    this list
/exit                    end the session (also /quit, or Ctrl-D)
Ctrl-C interrupts a prompt (twice in a row exits), Ctrl-D exits, Shift-Tab cycles the permission mode,
Alt-Enter starts a new line."""


def _typed(text: str, kind: object) -> object:
    """A form field's answer as its schema type; ValueError naming the type when it is not one."""
    if kind == "boolean":
        if text.lower() in ("y", "yes", "true"):
            return True
        if text.lower() in ("n", "no", "false"):
            return False
        raise ValueError("answer yes or no")
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("answer a whole number") from None
    if kind == "number":
        try:
            return float(text)
        except ValueError:
            raise ValueError("answer a number") from None
    return text


class _TerminalConversation(_Conversation):
    """The API's conversation, each prompt shown on the terminal; ``compact``: the next run is a /compact."""

    def __init__(self, session: _Interactive, template: AgentOptions, choice: SessionChoice, backend: ModelBackend):
        self._begin(template, choice, backend)
        self.owner = session
        self.compact: str | None = None

    def _run_options(self, prompt: str) -> AgentOptions:
        return attrs.evolve(super()._run_options(prompt), compact=self.compact)

    def _renderer(self, options: AgentOptions, sink: object) -> Renderer:
        renderer = TerminalRenderer(self.owner, options)
        self.owner.renderer = renderer
        return renderer


class _Interactive:
    """One interactive session on the terminal: the prompt loop, the commands, the inline questions."""

    def __init__(self, template: AgentOptions, backend: ModelBackend) -> None:
        choice = session_of(template)
        template = attrs.evolve(
            template,
            tools=attrs.evolve(template.tools, ask_input=self._ask_input),
            permissions=attrs.evolve(template.permissions, can_use_tool=self._ask_permission, interactive=False),
        )
        self.conversation = _TerminalConversation(self, template, choice, backend)
        # The MCP servers live as long as the session (as Claude Code's): their prompts are commands, and
        # /add-dir changes the roots they were told
        self.mcp = (
            McpManager(
                template.tools.mcp_servers,
                cwd=template.cwd,
                hidden=template.permissions.hides,
                taken=frozenset(t.name for t in template.tools.custom_tools).__contains__,
                roots=template.working_directories(),
                elicit=lambda request: answer_elicitation(self.template, request),
                progress=self._progress,
            )
            if template.tools.mcp_servers
            else None
        )
        self.conversation.mcp = self.mcp
        self.renderer: TerminalRenderer | None = None
        self.steps: list[Step] = []  # the steps of the prompt being played (or the last one)
        self.results: list[dict[str, Any]] = []
        self.last_state = "idle"
        self.mcp_commands: list[str] = []  # the MCP servers' prompts, as commands (/mcp__<server>__<prompt>)
        self.always: list[str] = []  # allow rules the user created by answering "always"
        self.denied: set[str] = set()  # calls the user refused (name and input), refused again without asking
        self.ctrl_c = False  # the last key was a Ctrl-C (a second one in a row exits)
        self.exit_requested = False  # Ctrl-C twice while a prompt ran: the session ends after it
        self.console = Console(file=sys.stderr, highlight=False, soft_wrap=True)
        keys = KeyBindings()
        keys.add("s-tab")(self._cycle_mode)
        keys.add("escape", "enter")(lambda event: event.current_buffer.insert_text("\n"))
        self.prompts: PromptSession[str] = PromptSession(
            history=InMemoryHistory(), key_bindings=keys, bottom_toolbar=self._toolbar
        )
        self.questions: PromptSession[str] = PromptSession()
        self.commands: dict[str, Callable[[str], Awaitable[bool]]] = {
            "compact": self._compact,
            "rewind": self._rewind,
            "resume": self._resume,
            "clear": self._clear,
            "cost": self._cost,
            "model": self._model,
            "permissions": self._permissions,
            "add-dir": self._add_dir,
            "graph": self._graph,
            "help": self._help,
            "exit": self._exit,
            "quit": self._exit,
        }

    @property
    def template(self) -> AgentOptions:
        return self.conversation.template

    def _set_permissions(self, **changes: Any) -> None:
        """The next prompts' gate: the session's permission mode or rules changed (Shift-Tab, /add-dir, always)."""
        template = self.template
        self.conversation.template = attrs.evolve(template, permissions=attrs.evolve(template.permissions, **changes))

    # ---- the loop ------------------------------------------------------------------------------
    async def serve(self) -> int:
        """Prompts until the session ends; Ctrl-C is ours throughout (a key at a prompt, SIGINT meanwhile)."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        loop.add_signal_handler(signal.SIGINT, self._interrupt)
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            if self.mcp is not None:
                await self.mcp.start()
                for warning in self.mcp.take_warnings():
                    self._say(f"queryloop: warning: {warning}", "yellow")
                self.mcp_commands = list(await self.mcp.prompts())
            await self._loop()
        except asyncio.CancelledError:  # SIGTERM: the prompt being played took its abort edge
            task.uncancel()
            return 128 + signal.SIGTERM
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            await self.conversation.close()
            if self.mcp is not None:
                await self.mcp.close()
        return 0

    async def _loop(self) -> None:
        self._say(
            f"queryloop · session {self.conversation.session.session_id} · {self.template.cwd}\n"
            f"{_sandbox_line(self.template)}\n"
            "/help for commands · Ctrl-C interrupts · Ctrl-D exits",
            "dim",
        )
        while True:
            try:
                text = await self.prompts.prompt_async("> ", handle_sigint=False)
            except KeyboardInterrupt:
                if self.ctrl_c:
                    break
                self.ctrl_c = True
                self._say("(Ctrl-C again to exit)", "dim")
                continue
            except EOFError:
                break
            self.ctrl_c = False
            text = text.strip()
            if text.startswith("/"):
                name, _, rest = text[1:].partition(" ")
                command = self.commands.get(name)
                if command is None and name.startswith("mcp__"):
                    await self._play(text)  # an MCP server's prompt: the run fills it in (or says what it needs)
                elif command is None:
                    self._say(f"unknown command /{name}: /help lists them", "red")
                elif not await command(rest.strip()):
                    break
            elif text:
                await self._play(text)
            if self.exit_requested:
                break

    async def _play(self, prompt: str, *, compact: str | None = None) -> None:
        """One prompt (or a /compact) to its end; Ctrl-C meanwhile takes the machine's abort edges."""
        self.steps = []
        self.conversation.compact = compact
        try:
            await self.conversation.play(prompt, lambda message: None)
        except OptionsError as exc:
            self._say(f"queryloop: {exc}", "red")
        finally:
            self.conversation.compact = None
            if self.renderer is not None:
                self.renderer.pause()

    def _progress(self, progress: McpProgress) -> None:
        """A running MCP call's progress: on the status line of the prompt being played."""
        if self.renderer is not None and not self.renderer.finished:
            self.renderer.show_progress(progress)

    def _interrupt(self) -> None:
        """Ctrl-C while a prompt runs: interrupt it; a second one before it ended also ends the session."""
        if self.ctrl_c:
            self.exit_requested = True
        self.ctrl_c = True
        if self.conversation.interrupt():
            self._say("interrupted: the machine takes its abort edge", "yellow")

    def finished(self, result: dict[str, Any], data: AgentData) -> None:
        self.results.append(result)
        self.last_state = self.steps[-1].dest if self.steps else "idle"

    def _say(self, text: str, style: str = "") -> None:
        """One line for the user on stderr (never markup), the status line stopped first."""
        if self.renderer is not None:
            self.renderer.pause()
        self.console.print(Text(inert(text), style=style))

    def _toolbar(self) -> str:
        session = self.conversation.session.session_id[:8]
        cost = sum(r.get("total_cost_usd") or 0 for r in self.results)
        mode, model = self.template.permissions.mode, self.template.request.model
        return f" {self.last_state} · mode {mode} (Shift-Tab) · {model} · session {session} · ${cost:.4f}"

    def _cycle_mode(self, event: KeyPressEvent) -> None:
        mode = self.template.permissions.mode
        following: PermissionMode = "default"
        if mode in MODE_CYCLE:
            following = MODE_CYCLE[(MODE_CYCLE.index(mode) + 1) % len(MODE_CYCLE)]
        self._set_permissions(mode=following)
        event.app.invalidate()

    # ---- permissions ---------------------------------------------------------------------------
    async def _ask_permission(self, call: ToolCall, reason: str) -> PermissionAnswer:
        """A call that would ask: asked inline (yes once / always / no); earlier answers are remembered."""
        key = json.dumps([call.name, call.input], sort_keys=True)
        if key in self.denied:
            return PermissionAnswer(allow=False, message="the user refused this very call earlier in the session")
        if self._allowed_always(call):
            return PermissionAnswer(allow=True)
        offer = suggest_rules(call.name, call.input, cwd=self.template.cwd)
        choices = inert(f"[y]es once · [a]lways ({', '.join(offer)}) · [n]o" if offer else "[y]es once · [n]o")
        self._say(f"{call.name}({brief(call.input, 200)}) needs permission: {reason}", "yellow")
        while True:
            try:
                answer = (await self.questions.prompt_async(f"allow? {choices} ", handle_sigint=False)).strip().lower()
            except (KeyboardInterrupt, EOFError):
                self._interrupt()
                await asyncio.sleep(0)  # the interrupt lands here, at the gate, whose abort edge ends the prompt
                return PermissionAnswer(allow=False, message="the user interrupted")
            if answer in ("y", "yes"):
                return PermissionAnswer(allow=True)
            if offer and answer in ("a", "always"):
                self._allow_always(offer)
                return PermissionAnswer(allow=True)
            if answer in ("n", "no"):
                self.denied.add(key)
                return PermissionAnswer(allow=False, message="the user said no")

    def _allowed_always(self, call: ToolCall) -> bool:
        if not self.always:
            return False
        rules = PermissionRules(allow=tuple(parse_rule(r) for r in self.always))
        verdict = decide(call.name, call.input, mode="default", rules=rules, cwd=self.template.cwd, interactive=True)
        return verdict.behavior == "allow"

    def _allow_always(self, rules: tuple[str, ...]) -> None:
        """The rules hold for the rest of the session: this prompt's later calls, and the next prompts' gate."""
        self.always.extend(r for r in rules if r not in self.always)
        current = self.template.permissions.rules
        added = attrs.evolve(current, allow=(*current.allow, *(parse_rule(r) for r in rules)))
        self._set_permissions(rules=added)
        self._say(f"allowed for the rest of the session: {', '.join(rules)}", "green")

    # ---- an MCP server's request for input (elicitation) ----------------------------------------
    async def _ask_input(self, request: Elicitation) -> ElicitAnswer:
        """Asked inline: answer (each field of the form in turn), decline or cancel."""
        self._say(f"MCP server {request.server!r} asks: {request.message}", "yellow")
        if request.mode == "url":
            self._say(f"  open: {request.url}")
        choice = (await self._question("answer it? [y]es · [n]o (decline) · [c]ancel ")).lower()
        if choice in ("c", "cancel", ""):
            return ElicitAnswer(action="cancel")
        if choice not in ("y", "yes"):
            return ElicitAnswer(action="decline")
        if request.mode == "url":
            return ElicitAnswer(action="accept")
        values: dict[str, object] = {}
        required = set(request.schema.get("required") or ())
        properties = request.schema.get("properties") or {}
        for name, field in properties.items() if isinstance(properties, dict) else ():
            value = await self._field(name, field if isinstance(field, dict) else {}, name in required)
            if value is not None:
                values[name] = value
        return ElicitAnswer(action="accept", content=values)

    async def _field(self, name: str, field: Mapping[str, object], required: bool) -> object:
        """One form field, asked until its answer has the field's type; None: left out (not required, no answer)."""
        kind = field.get("type", "string")
        choices = field.get("enum")
        hint = " · ".join(str(c) for c in choices) if isinstance(choices, list) else kind
        about = field.get("description") or field.get("title") or ""
        label = inert(f"  {name}{' (required)' if required else ''}: {about} [{hint}] ")
        while True:
            text = await self._question(label)
            if not text:
                if required:
                    continue
                return None
            try:
                value: object = _typed(text, kind)
            except ValueError as exc:
                self._say(f"  {exc}", "red")
                continue
            if isinstance(choices, list) and value not in choices:
                self._say(f"  one of: {hint}", "red")
                continue
            return value

    # ---- commands (each returns False to end the session) ----------------------------------------
    async def _compact(self, instructions: str) -> bool:
        await self._play("", compact=instructions)
        return True

    async def _rewind(self, argument: str) -> bool:
        paths = self.conversation.session.stored_as
        prompts = _prompts(paths)
        if not prompts:
            self._say("nothing to rewind: this session has no prompt yet", "dim")
            return True
        if not argument:
            for number, (_, text) in enumerate(prompts, start=1):
                self._say(f"  {number}. {brief(text, 70)}")
            argument = (await self._question(f"rewind the files to before which prompt? [1-{len(prompts)}] ")) or ""
        if not argument.isdigit() or not 1 <= int(argument) <= len(prompts):
            self._say(f"no rewind: give a prompt's number, 1 to {len(prompts)}", "dim")
            return True
        try:
            plan = plan_rewind(paths, prompts[int(argument) - 1][0])
        except SessionChoiceError as exc:
            self._say(f"queryloop: {exc}", "red")
            return True
        print_rewind(plan, dry_run=False)
        if not any(f.before != f.now for f in plan.files):
            return True
        if (await self._question("restore these files? [y/N] ")).lower() in ("y", "yes"):
            for line in apply_rewind(plan):
                self._say(line, "green")
            self._say("the conversation is not rewound: only the files are", "dim")
        return True

    async def _question(self, text: str) -> str:
        try:
            return (await self.questions.prompt_async(text, handle_sigint=False)).strip()
        except (KeyboardInterrupt, EOFError):
            return ""

    async def _resume(self, argument: str) -> bool:
        rows = list_sessions(self.template.cwd, self.template.session.home)
        if not argument:
            for number, row in enumerate(rows, start=1):
                self._say(
                    f"  {number}. {row.session_id}  {row.started}  {row.prompts} prompt(s)  {row.terminal_reason}"
                )
            if not rows:
                self._say("no stored session in this directory", "dim")
            return True
        chosen = (
            rows[int(argument) - 1].session_id if argument.isdigit() and 0 < int(argument) <= len(rows) else argument
        )
        try:
            choice = choose_session(
                cwd=self.template.cwd, resume=chosen, home=self.template.session.home, printing=False
            )
        except SessionChoiceError as exc:
            self._say(str(exc), "red")
            return True
        self._switch(choice)
        self._say(f"resumed session {choice.session_id}", "green")
        return True

    async def _clear(self, argument: str) -> bool:
        session_id = str(uuid.uuid4())
        home = self.template.session.home if self.template.session.home is not None else queryloop_home()
        paths = SessionPaths(home=home, cwd=self.template.cwd.resolve(), session_id=session_id)
        self._switch(SessionChoice(session_id=session_id, stored_as=paths))
        self._say(f"new session {session_id} (the last one stays stored: /resume)", "green")
        return True

    def _switch(self, choice: SessionChoice) -> None:
        end_session_trace(self.conversation.session.session_id)
        self.conversation.session = choice
        self.conversation.prompts = 0  # the next prompt opens ``choice`` (resumed or new)
        self.steps, self.last_state = [], "idle"

    async def _cost(self, argument: str) -> bool:
        cost = sum(r.get("total_cost_usd") or 0 for r in self.results)
        api = sum(r.get("duration_api_ms") or 0 for r in self.results)
        tokens = [
            sum((r.get("usage") or {}).get(k) or 0 for r in self.results) for k in ("input_tokens", "output_tokens")
        ]
        self._say(
            f"total cost ${cost:.4f} · {len(self.results)} prompt(s) · API time {api / 1000:.1f} s · "
            f"{tokens[0]} input, {tokens[1]} output tokens"
        )
        return True

    async def _model(self, argument: str) -> bool:
        if argument:
            template = self.template
            env = {**os.environ, **template.tools.env}  # an alias is resolved as --model's is
            self.conversation.template = attrs.evolve(template, request=template.request.switched_to(argument, env))
        self._say(f"model: {self.template.request.model}" + (" (from the next prompt)" if argument else ""))
        return True

    async def _permissions(self, argument: str) -> bool:
        rules = self.template.permissions.rules
        self._say(f"mode: {self.template.permissions.mode} (Shift-Tab cycles {' → '.join(MODE_CYCLE)})")
        for kind in ("allow", "ask", "deny"):
            listed = ", ".join(str(r) for r in getattr(rules, kind)) or "none"
            self._say(f"{kind}: {listed}")
        self._say(f"answered 'always' this session: {', '.join(self.always) or 'none'}")
        self._say(f"refused this session (asked no more): {len(self.denied)} call(s)")
        return True

    async def _graph(self, argument: str) -> bool:
        for line in graph_text(self.steps, self.last_state):
            self._say(line)
        return True

    async def _help(self, argument: str) -> bool:
        self._say(HELP)
        if self.mcp_commands:
            lines = "\n".join(f"/{c}" for c in self.mcp_commands)
            self._say(f"MCP servers' prompts (the words after one fill its arguments):\n{lines}")
        return True

    async def _add_dir(self, argument: str) -> bool:
        """Another working directory for the rest of the session (the MCP servers' roots follow)."""
        path = (self.template.cwd / argument).resolve() if argument else None
        if path is None or not path.is_dir():
            self._say("/add-dir needs a directory that exists: /add-dir PATH", "red")
            return True
        rules = self.template.permissions.rules
        if path != self.template.cwd and path not in rules.additional_directories:
            added = attrs.evolve(rules, additional_directories=(*rules.additional_directories, path))
            self._set_permissions(rules=added)
        self._say(f"working directories: {', '.join(str(d) for d in self.template.working_directories())}", "green")
        return True

    async def _exit(self, argument: str) -> bool:
        return False


def _prompts(paths: SessionPaths) -> list[tuple[str, str]]:
    """The session's user prompts, oldest first: their uuid (what a rewind names) and their text."""
    entries, _ = read_jsonl(paths.transcript)
    found = []
    for entry in entries:
        if entry.get("type") == "user" and entry.get("reason") in PROMPT_REASONS:
            content = (entry.get("message") or {}).get("content")
            found.append((str(entry["uuid"]), content if isinstance(content, str) else json.dumps(content)))
    return found


def graph_text(steps: list[Step], current: str) -> list[str]:
    """The recovery graph as text with the run overlay: every layer's states, where the session is (▶), what
    this prompt visited (● with the edges it took out of it, ×count) — the data of ``queryloop diagram --trace``."""
    spec = query_loop_program().spec
    trace = Trace(
        path="<this session>",
        steps=tuple(
            TraceStep(number=n, line=n, source=s.source, event=s.event, reason=s.reason, dest=s.dest)
            for n, s in enumerate(steps, start=1)
        ),
    )
    check_trace(spec, trace)
    counts = trace.edge_counts()
    lines = [f"recovery graph ({spec.name}): ▶ where the session is, ● visited this prompt"]
    layers: dict[str, list[str]] = {}
    for state in spec.states:
        layers.setdefault("end" if state.terminal else state.layer or "-", []).append(state.name)
    for layer, names in layers.items():
        marked = [("▶ " if n == current else "● " if n in trace.visited else "  ") + n for n in names]
        if layer == "end":
            marked = [m for m in marked if not m.startswith("  ")] or ["  (not reached)"]
        lines.append(f"  {layer}: " + "  ".join(m.strip() if m.startswith("  ") else m for m in marked))
    lines.append("path this prompt took:" if steps else "no prompt played yet")
    for (source, reason), count in counts.items():
        dest = next(s.dest for s in steps if (s.source, s.reason) == (source, reason))
        lines.append(f"  {source} --{reason}--> {dest}" + (f"  ×{count}" if count > 1 else ""))
    return lines


async def serve_interactive(template: AgentOptions, backend: ModelBackend, args: argparse.Namespace) -> int:
    """The interactive session on this terminal until Ctrl-D, ``/exit`` or Ctrl-C twice in a row; exit code 0."""
    return await _Interactive(template, backend).serve()


def _sandbox_line(options: AgentOptions) -> str:
    """What the first screen says of the sandbox: on (bubblewrap works), unavailable (why), or off."""
    policy = options.sandbox
    if not policy.enabled:
        from queryloop.handlers.tools import unavailable_reason

        works = unavailable_reason() is None
        return "sandbox: off" + (" (bubblewrap works here: --sandbox or sandbox.enabled turns it on)" if works else "")
    problem = policy.problem()
    if problem is not None:
        return f"sandbox: unavailable ({problem}); Bash commands go through the permission gate alone"
    network = ", ".join(policy.allowed_domains) or "none"
    return f"sandbox: on · Bash writes only here and in its own /tmp · network: {network}"
