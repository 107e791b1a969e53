"""The Python API: :func:`query` for one prompt, :class:`QueryClient` for a conversation.

Shaped as the Claude Agent SDK's. Each prompt is one run whose items come out as the messages ``stream-json`` prints
(docs/python-api.md).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from typing import Any, Self

import attrs

from queryloop.handlers.mcp import McpManager, PromptCommandError
from queryloop.handlers.request import AnthropicBackend, ModelBackend

from ..run.agent import AgentRun
from ..run.config import AgentOptions, with_session
from ..run.observe import Observation
from ..run.sessions import SessionChoice, SessionChoiceError, choose_session
from ..run.telemetry import end_session_trace
from .messages import Message, ResultMessage, parse_message
from .options import OptionsError, QueryOptions, agent_options, permission_asker
from .renderer import Renderer
from .stream_json import StreamJsonRenderer

__all__ = ["ClaudeSDKClient", "QueryClient", "query"]

OFFLINE_HINT = (
    "no model to talk to: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN), or pass backend= in the options. "
    "To run offline, serve the embedded server in another shell, `queryloop mock-api hello --port 8123`, and set "
    "ANTHROPIC_BASE_URL=http://127.0.0.1:8123 and ANTHROPIC_API_KEY=offline (any value): the hello scenario answers "
    "every request; the others (`queryloop mock-api --list`) script the model QueryOptions(model='mock-primary')"
)
"""Why :func:`query` cannot start without credentials, and the offline recipe that works from any install."""

Emit = Callable[[Message], None]


class _Conversation:
    """One conversation: its options resolved once, its backend and session, the prompt being played."""

    def __init__(self, options: QueryOptions) -> None:
        self.options = options
        self.template = agent_options(options, can_use_tool=None)
        if options.can_use_tool is not None:
            asker = permission_asker(options.can_use_tool, cwd=self.template.cwd, on_interrupt=self.interrupt)
            template = self.template
            self.template = attrs.evolve(template, permissions=attrs.evolve(template.permissions, can_use_tool=asker))
        try:
            session = choose_session(
                cwd=self.template.cwd,
                resume=options.resume,
                continue_=options.continue_conversation,
                fork=options.fork_session,
                session_id=options.session_id,
                home=self.template.session.home,
                printing=False,  # options, not flags: no message names --print
            )
        except SessionChoiceError as exc:
            raise OptionsError(str(exc)) from None
        self._begin(self.template, session, options.backend)

    def _begin(self, template: AgentOptions, session: SessionChoice, backend: ModelBackend | None) -> None:
        """Nothing played yet: the options every prompt starts from, the session and the backend."""
        self.template = template
        self.session: SessionChoice = session
        self.prompts = 0  # prompts played so far
        self.backend: ModelBackend | None = backend
        self.mcp: McpManager | None = None  # MCP servers kept across prompts (None: each prompt connects its own)
        self.client: Any = None  # the anthropic client this conversation made (closed with it), if any
        self.playing: asyncio.Task[Any] | None = None
        self.interrupting = False  # an interrupt() cancelled (or will cancel) the prompt being played

    async def open(self) -> None:
        if self.backend is not None:
            return
        if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
            raise OptionsError(OFFLINE_HINT)
        import anthropic  # here: importing queryloop never loads the SDK

        self.client = anthropic.AsyncAnthropic(max_retries=0)  # the machine owns retries
        self.backend = AnthropicBackend(self.client)

    async def close(self) -> None:
        end_session_trace(self.session.session_id)
        if self.client is not None:
            await self.client.close()
            self.client = None
            self.backend = None

    def interrupt(self) -> bool:
        """Cancel the prompt being played (its abort edges run); False when none is."""
        if self.playing is None or self.playing.done():
            return False
        if not self.interrupting:  # once: a second cancel would outlive the one interrupt() takes back
            self.interrupting = True
            self.playing.cancel()
        return True

    def _run_options(self, prompt: str) -> AgentOptions:
        """This prompt's options: the first one opens the chosen session, later ones continue it."""
        if self.prompts and not self.template.session.persist:
            raise OptionsError(
                "a second prompt continues the conversation's stored session, and persist_session=False "
                "keeps none: leave persist_session on (home= chooses where sessions are kept)"
            )
        options = with_session(self.template, self.session, continuing=self.prompts > 0)
        return attrs.evolve(options, prompt=prompt, prompt_id=str(uuid.uuid4()))

    async def play(self, prompt: str, emit: Emit, *, interrupted: bool = False) -> None:
        """Run one prompt to its end, handing each message to ``emit``; the last is its ResultMessage.

        ``interrupted``: an interrupt came before it started, so it starts by taking its abort edge.
        """
        self.playing = asyncio.current_task()
        try:
            options = self._run_options(prompt)
            assert self.backend is not None, "open() the conversation first"
            sink = _Lines()
            renderer = self._renderer(options, sink)
            run = AgentRun(options, self.backend, observers=(renderer, _Emitting(sink, emit)), mcp=self.mcp)
            try:
                await run.connect_mcp()  # as the CLI: the init message lists each MCP server's status and tools
            except PromptCommandError as exc:  # /mcp__server__prompt without its arguments: nothing was sent
                await run.close_mcp()
                raise OptionsError(str(exc)) from None
            except asyncio.CancelledError:
                if not self._was_interrupt():
                    raise
                interrupted = True  # the run takes its abort edge as it starts
            renderer.start(**run.init_fields())
            _drain(sink, emit)
            if interrupted:
                self.interrupt()
            await self._drive(run)
            renderer.finish(run.result(), run.data)
            _drain(sink, emit)
            self.prompts += 1
        finally:
            self.playing = None
            self.interrupting = False

    def _renderer(self, options: AgentOptions, sink: _Lines) -> Renderer:
        """How a prompt is shown: its stream-json lines go to ``sink``, read back as messages."""
        return _MessageRenderer(session_id=options.session.session_id, sink=sink)

    def _was_interrupt(self) -> bool:
        """Whether the cancellation being handled is interrupt()'s (then it is taken back), not the caller's."""
        task = asyncio.current_task()
        if not self.interrupting or task is None:
            return False
        task.uncancel()
        self.interrupting = False
        return True

    async def _drive(self, run: AgentRun) -> None:
        """``run`` to its end (its observers told each item); an interrupt ends it through its abort edge."""
        try:
            async for _ in run.events():
                pass
        except asyncio.CancelledError:
            if not self._was_interrupt():
                raise


class _Emitting:
    """An observer after the renderer: the lines it wrote for an item, handed on as messages at once."""

    def __init__(self, sink: _Lines, emit: Emit) -> None:
        self.sink = sink
        self.emit = emit

    def observe(self, item: Observation) -> None:
        _drain(self.sink, self.emit)


class _Lines(io.StringIO):
    """Where a prompt's stream-json lines go: kept as objects by the API's renderer, as text by another."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: list[dict[str, Any]] = []


class _MessageRenderer(StreamJsonRenderer):
    """The ``stream-json`` renderer whose lines are kept as objects: read back as messages without their text.

    Printing each line and parsing it back cost the API a third of a tool turn's time; a
    copy (:func:`_json_copy`) gives the same messages.
    """

    def __init__(self, *, session_id: str, sink: _Lines) -> None:
        super().__init__(session_id=session_id, stdout=sink)
        self.sink = sink

    def write_line(self, obj: dict[str, Any]) -> None:
        self.sink.objects.append(obj)


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})  # exact types: a subclass takes the round trip


def _json_copy(value: Any) -> Any:
    """``value`` as ``json.loads(json.dumps(value))`` gives it back, without the text in between.

    Exact dicts with str keys, lists, tuples, str, int, float, bool and None are copied here;
    anything else (a subclass, another key type) takes the round trip, so the result is the
    same either way, and so is the error for what JSON cannot hold. A copy, so a program
    that changes a message never changes the run's own data.
    """
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is dict:
        copied = dict(value)  # one C-level copy; only what is not a scalar is copied again, in place
        for key, item in copied.items():
            if type(key) is not str:
                return json.loads(json.dumps(value, ensure_ascii=False))
            if type(item) not in _JSON_SCALARS:
                copied[key] = _json_copy(item)  # a value replaced, no key added: the iteration goes on
        return copied
    if kind is list or kind is tuple:
        return [item if type(item) in _JSON_SCALARS else _json_copy(item) for item in value]
    return json.loads(json.dumps(value, ensure_ascii=False))


def _drain(sink: _Lines, emit: Emit) -> None:
    """The lines the renderer wrote since the last drain, as messages."""
    if sink.objects:
        objects, sink.objects = sink.objects, []
        for obj in objects:
            message = parse_message(_json_copy(obj))
            if message is not None:
                emit(message)
    text = sink.getvalue()
    if not text:
        return
    sink.seek(0)
    sink.truncate()
    for line in text.splitlines():
        message = parse_message(json.loads(line))
        if message is not None:
            emit(message)


def _prompt_text(message: Mapping[str, Any]) -> str:
    """The text of one streamed user message (``{"type": "user", "message": {"role": "user", "content": ...}}``)."""
    content = message.get("message", {}).get("content") if isinstance(message.get("message"), Mapping) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, Mapping) and b.get("type") == "text" for b in content):
        return "\n".join(str(b.get("text", "")) for b in content)
    raise OptionsError(
        'a streamed prompt message must be {"type": "user", "message": {"role": "user", "content": "..."}} '
        f"with text content, got {message!r}"
    )


async def query(
    *, prompt: str | AsyncIterable[Mapping[str, Any]], options: QueryOptions | None = None
) -> AsyncIterator[Message]:
    """Run ``prompt`` and yield its messages: ``system/init``, assistant and tool-result messages, … the result.

    A string is one prompt. An async iterable of user messages (the SDK's streaming
    input) is a conversation: each message is played after the previous one ended,
    continuing the same session. Closing the iterator early interrupts the prompt
    being played (its abort edges run). Bad options raise :class:`OptionsError` before
    anything runs.
    """
    conversation = _Conversation(options or QueryOptions())
    await conversation.open()
    outbox: asyncio.Queue[Message | None] = asyncio.Queue()

    async def produce() -> None:
        if isinstance(prompt, str):
            await conversation.play(prompt, outbox.put_nowait)
            return
        async for message in prompt:
            await conversation.play(_prompt_text(message), outbox.put_nowait)

    producer = asyncio.create_task(produce())
    producer.add_done_callback(lambda _: outbox.put_nowait(None))
    try:
        while (message := await outbox.get()) is not None:
            yield message
        producer.result()  # its exception, if it failed
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        await conversation.close()


class QueryClient:
    """A conversation of several prompts in one session (the SDK's ``ClaudeSDKClient``).

    ``async with QueryClient(options) as client:`` then, per prompt, ``await
    client.query("...")`` and ``async for message in client.receive_response(): ...``
    (which ends after the prompt's :class:`~queryloop.frontends.messages.ResultMessage`). Each
    prompt continues the conversation's session: the next request carries the earlier
    exchanges. Prompts sent while one is being played wait their turn.
    :meth:`interrupt` ends the prompt being played through the machine's abort edges.
    """

    def __init__(self, options: QueryOptions | None = None) -> None:
        self.options = options or QueryOptions()
        self._conversation: _Conversation | None = None
        self._prompts: asyncio.Queue[str] = asyncio.Queue()
        self._outbox: asyncio.Queue[Message | BaseException | None] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._interrupt_next = False  # interrupt() came while the next prompt waited to start

    async def connect(self, prompt: str | None = None) -> None:
        """Open the conversation (its options are checked here); send ``prompt`` if given."""
        if self._conversation is not None:
            return
        conversation = _Conversation(self.options)
        await conversation.open()
        self._conversation = conversation
        self._worker = asyncio.create_task(self._serve(conversation))
        if prompt is not None:
            await self.query(prompt)

    async def _serve(self, conversation: _Conversation) -> None:
        try:
            while True:
                prompt = await self._prompts.get()
                interrupted, self._interrupt_next = self._interrupt_next, False
                try:
                    await conversation.play(prompt, self._outbox.put_nowait, interrupted=interrupted)
                except Exception as exc:  # handed to the reader, who sees it raised
                    self._outbox.put_nowait(exc)
        finally:
            self._outbox.put_nowait(None)

    def _connected(self) -> _Conversation:
        if self._conversation is None:
            raise OptionsError(
                "the client is not connected: `await client.connect()` or use `async with QueryClient(...)`"
            )
        return self._conversation

    async def query(self, prompt: str, session_id: str = "default") -> None:
        """Send a prompt; its messages come from :meth:`receive_response`.

        ``session_id`` is the SDK's; the conversation has one session, chosen by the options.
        """
        self._connected()
        if not isinstance(prompt, str):
            raise OptionsError(f"a prompt is a str, got {type(prompt).__name__}")
        self._prompts.put_nowait(prompt)

    async def receive_messages(self) -> AsyncIterator[Message]:
        """Every message of every prompt, until the client disconnects."""
        self._connected()
        while (item := await self._outbox.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item

    async def receive_response(self) -> AsyncIterator[Message]:
        """The messages of the next prompt, up to and including its ResultMessage."""
        async for message in self.receive_messages():
            yield message
            if isinstance(message, ResultMessage):
                return

    async def interrupt(self) -> None:
        """End the prompt being played (or about to be) through the machine's abort edges; its result follows."""
        conversation = self._connected()
        if not conversation.interrupt() and not self._prompts.empty():
            self._interrupt_next = True

    async def disconnect(self) -> None:
        """Stop: a prompt being played is cancelled (its abort edges run), the backend the client made is closed."""
        conversation, worker = self._conversation, self._worker
        self._conversation = self._worker = None
        if worker is not None:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        if conversation is not None:
            await conversation.close()

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.disconnect()


ClaudeSDKClient = QueryClient
"""The Claude Agent SDK's name for :class:`QueryClient`."""
