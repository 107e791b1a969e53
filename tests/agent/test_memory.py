"""Project instructions: which CLAUDE.md files are read, in which order, and how a request carries them.

The rules are Claude Code 2.1.235's, observed against the embedded server (the
end-to-end test in tests/e2e/test_cli_shape.py drives them through the program).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import attrs
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from queryloop.handlers.context.services import compaction
from queryloop.handlers.messages import MessageView
from queryloop.handlers.request import ModelCall, ModelFailure, ModelReply, TokenCount
from queryloop.handlers.request.services.backends import AnthropicBackend
from queryloop.handlers.request.services.body import encode_request, request_messages
from queryloop.run.agent import AgentRun
from queryloop.run.config import AgentOptions, ContextSettings, PermissionSettings, RequestSettings, SessionSettings
from queryloop.run.memory import (
    InstructionFile,
    instructions_block,
    instructions_tokens,
    load_instructions,
    memory_paths,
)
from queryloop.testing import scripted_reply


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def names(files: tuple[InstructionFile, ...], root: Path) -> list[str]:
    return [str(f.path.relative_to(root)) for f in files]


def test_imports_follow_their_file_depth_first_at_most_four_deep_and_each_file_is_read_once(tmp_path: Path) -> None:
    write(tmp_path / "CLAUDE.md", "top @d/a.md\n")
    write(tmp_path / "d/a.md", "a @b.md @../CLAUDE.md\n")  # the cycle back to the top is read once
    for this, following in zip("bcde", "cdef", strict=True):
        write(tmp_path / f"d/{this}.md", f"{this} @{following}.md")
    write(tmp_path / "d/f.md", "f")
    files = load_instructions(tmp_path, home=tmp_path / "home")
    assert names(files, tmp_path) == ["CLAUDE.md", "d/a.md", "d/b.md", "d/c.md", "d/d.md"]
    assert files[1].imported_by == tmp_path / "CLAUDE.md" and files[1].kind == "project"


def test_imports_in_code_are_not_followed_and_missing_ones_are_skipped(tmp_path: Path) -> None:
    write(
        tmp_path / "CLAUDE.md", "```\n@fenced.md\n```\nrun `@inline.md`, mail me@mail.md, @missing.md, @real\\ name.md"
    )
    for name in ("fenced.md", "inline.md", "mail.md", "real name.md"):
        write(tmp_path / name, name)
    assert names(load_instructions(tmp_path, home=tmp_path / "home"), tmp_path) == ["CLAUDE.md", "real name.md"]


def test_a_project_file_imports_only_inside_the_working_directory_a_user_file_anything(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "repo" / "work"
    write(home / ".claude/CLAUDE.md", "mine @../notes/style.md")
    write(home / "notes/style.md", "style")
    write(tmp_path / "repo/CLAUDE.md", "repo @work/inside.md @outside.md @~/notes/style.md")
    write(work / "inside.md", "inside")
    write(tmp_path / "repo/outside.md", "outside")
    files = load_instructions(work, home=home)
    assert [f.path for f in files] == [
        home / ".claude/CLAUDE.md",
        home / "notes/style.md",
        tmp_path / "repo/CLAUDE.md",
        work / "inside.md",
    ]
    assert [f.kind for f in files] == ["user", "user", "project", "project"]


def test_rules_are_read_in_path_order_without_front_matter_and_path_scoped_ones_wait(tmp_path: Path) -> None:
    rules = tmp_path / ".claude/rules"
    write(rules / "b.md", "---\ndescription: second\n---\nrule b\n")
    write(rules / "a.md", "rule a")
    write(rules / "nested/c.md", "rule c")
    write(rules / "scoped.md", "---\npaths: ['src/**/*.py']\n---\nonly for python files\n")
    write(rules / "notes.txt", "not a rule")
    files = load_instructions(tmp_path, home=tmp_path / "home")
    assert names(files, tmp_path) == [".claude/rules/a.md", ".claude/rules/b.md", ".claude/rules/nested/c.md"]
    assert files[1].content == "rule b"


def test_empty_and_binary_files_are_skipped_and_the_home_directory_is_not_read_twice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / ".claude/CLAUDE.md", "user")
    write(home / "CLAUDE.md", "home as a parent directory")
    write(home / "p/CLAUDE.md", "  \n\n")
    (home / "p/CLAUDE.local.md").write_bytes(b"\x00\x01binary")
    files = load_instructions(home / "p", home=home)
    assert [(f.kind, f.path) for f in files] == [("user", home / ".claude/CLAUDE.md"), ("project", home / "CLAUDE.md")]


def test_our_files_follow_claude_codes_in_each_place_and_local_ones_come_last(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for path in (
        ".claude/CLAUDE.md",
        ".queryloop/QUERYLOOP.md",
        ".queryloop/rules/r.md",
    ):
        write(home / path, path)
    for path in ("QUERYLOOP.local.md", "CLAUDE.local.md", ".queryloop/QUERYLOOP.md", "QUERYLOOP.md", "CLAUDE.md"):
        write(tmp_path / "p" / path, path)
    files = load_instructions(tmp_path / "p", home=home)
    assert [f.content for f in files] == [
        ".claude/CLAUDE.md",
        ".queryloop/QUERYLOOP.md",
        ".queryloop/rules/r.md",
        "CLAUDE.md",
        "QUERYLOOP.md",
        ".queryloop/QUERYLOOP.md",
        "CLAUDE.local.md",
        "QUERYLOOP.local.md",
    ]
    assert memory_paths(files)["local"] == [str(tmp_path / "p/CLAUDE.local.md"), str(tmp_path / "p/QUERYLOOP.local.md")]
    only = load_instructions(tmp_path / "p", home=home, sources=("user",))
    assert [f.kind for f in only] == ["user"] * 3


# ---- every request carries them --------------------------------------------------------------


class Recording:
    """A model answering one Glob turn then text, keeping every call it is given (count_tokens too)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ModelCall]] = []

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        self.calls.append(("send", call))
        if len(self.calls) == 2:  # after the first count_tokens: one tool turn
            tool = {"type": "tool_use", "id": "t1", "name": "Glob", "input": {"pattern": "*.none"}}
            return scripted_reply([tool], "tool_use", call=call)
        return scripted_reply([{"type": "text", "text": "done"}], call=call)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        self.calls.append(("count_tokens", call))
        return TokenCount(tokens=None)


def test_model_summary_and_count_tokens_requests_carry_the_instructions_and_the_transcript_does_not(
    tmp_path: Path,
) -> None:
    files = (InstructionFile(path=Path("/p/CLAUDE.md"), kind="project", content="Use tabs."),)
    block = instructions_block(files)
    assert block is not None and "/p/CLAUDE.md" in block and "Use tabs." in block
    backend = Recording()
    options = AgentOptions(
        prompt="go",
        cwd=tmp_path,
        request=RequestSettings(model="m"),
        context=ContextSettings(auto_compact_threshold=1e-9, instructions=files),
        permissions=PermissionSettings(mode="bypassPermissions"),
    )
    run = AgentRun(options, backend)

    async def drive() -> None:
        async for _ in run.events():
            pass

    asyncio.run(drive())
    assert run.result()["terminal_reason"] == "completed"
    summaries = [
        c
        for kind, c in backend.calls
        if kind == "send" and compaction.SUMMARY_MARKER in json.dumps(c.messages.to_list()[-1:])
    ]
    kinds = {kind for kind, _ in backend.calls}
    assert summaries and kinds == {"send", "count_tokens"}, backend.calls
    assert all(call.instructions == block for _, call in backend.calls), "model, summary and count_tokens requests"
    assert block not in json.dumps(run.data.messages.to_list()), "never stored in the transcript"
    assert run.data.context.overhead >= instructions_tokens(files) > 0, "counted in every request's estimate"


def test_without_instruction_files_no_request_carries_any() -> None:
    assert instructions_block(()) is None and instructions_tokens(()) == 0
    assert memory_paths(()) == {"user": [], "project": [], "local": []}
    options = AgentOptions(prompt="go", request=RequestSettings(model="m"), session=SessionSettings(persist=False))
    assert AgentRun(options, Recording()).services.instructions is None


# ---- the bytes on the wire: as the wrapper that rebuilt every message sent them --------------

WIRE_FILES = (
    InstructionFile(path=Path("/home/u/.claude/CLAUDE.md"), kind="user", content="Be terse."),
    InstructionFile(path=Path("/work/repo/CLAUDE.md"), kind="project", content="Use tabs — « ünïcode ».\n\n- a\n- b"),
)
WIRE_SYSTEM = "You are a careful agent."
WIRE_TOOLS: tuple[dict[str, Any], ...] = (
    {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {}}},
    {"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}},
)
WIRE_BODIES = Path(__file__).resolve().parents[1] / "fixtures" / "request_bodies" / "instructions.json"
"""The bodies the SDK posted for :func:`wire_calls` with the instructions, captured from the
backend wrapper (``with_instructions``) that put them in front of the first user message by
rebuilding the message view, before the block was serialised into the prepared body."""


def tool_turns(view: MessageView, count: int) -> MessageView:
    for i in range(count):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": f"echo {i}"}}
        view = view.append({"role": "assistant", "content": [{"type": "text", "text": "running"}, use]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"{i}\n", "is_error": False}
        view = view.append({"role": "user", "content": [result]})
    return view


def wire_calls() -> dict[str, ModelCall]:
    """Requests of every shape the first message can take, without instructions (the test adds them)."""
    prompt = MessageView().append({"role": "user", "content": "go, and say « done »"})
    answered = prompt.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    blocks = MessageView().append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look at this"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        }
    )
    compacted = MessageView.of(
        [
            {"role": "assistant", "content": [{"type": "text", "text": "Summary so far."}]},
            {"role": "user", "content": [{"type": "text", "text": "carry on"}]},
        ]
    )

    def call(messages: MessageView, **fields: Any) -> ModelCall:
        values: dict[str, Any] = {
            "model": "mock-primary",
            "system": WIRE_SYSTEM,
            "tools": WIRE_TOOLS,
            "max_tokens": 1000,
            "stream": True,
            "attempt": 1,
            "idle_timeout_s": 30.0,
        }
        return ModelCall(messages=messages, **(values | fields))

    return {
        "the first request, a string prompt": call(prompt),
        "three tool turns": call(tool_turns(prompt, 3)),
        "a string prompt after an answer": call(answered.append({"role": "user", "content": "and now?"})),
        "a first message of blocks, then a turn": call(tool_turns(blocks, 1)),
        "not streamed, caching off": call(tool_turns(prompt, 2), stream=False, prompt_cache=False),
        "no system prompt: the last tool carries the prefix": call(tool_turns(prompt, 1), system=None),
        "the summary request": call(
            MessageView.of([{"role": "user", "content": "Summarise: …"}]),
            system="Summarise the conversation.",
            tools=(),
            stream=False,
            prompt_cache=False,
        ),
        "a history that starts with the model": call(compacted),
        "the model's message alone": call(MessageView.of([{"role": "assistant", "content": "a"}])),
    }


_SSE = b"".join(
    f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
    for name, data in (
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "mock-primary",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        ),
        ("message_stop", {"type": "message_stop"}),
    )
)
_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "mock-primary",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def capture_wire(send: Callable[[anthropic.AsyncAnthropic], Awaitable[object]]) -> list[dict[str, str]]:
    """The path and body of every request ``send`` makes through the real SDK to a loopback server."""
    seen: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen.append({"path": request.path, "body": raw.decode("utf-8")})
        if request.path.endswith("/count_tokens"):
            return web.json_response({"input_tokens": 7})
        if json.loads(raw).get("stream"):
            return web.Response(body=_SSE, content_type="text/event-stream", headers={"request-id": "req_1"})
        return web.json_response(_REPLY, headers={"request-id": "req_1"})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", handle)
        app.router.add_post("/v1/messages/count_tokens", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        client = anthropic.AsyncAnthropic(
            api_key="k", base_url=f"http://127.0.0.1:{runner.addresses[0][1]}", max_retries=0
        )
        try:
            await send(client)
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(main())
    return seen


def test_the_sdk_sends_the_same_bytes_as_when_a_wrapper_rebuilt_every_message_for_the_instructions() -> None:
    """Every shape the first message takes, the model and count_tokens requests: byte for byte."""
    block = instructions_block(WIRE_FILES)
    calls = {name: attrs.evolve(call, instructions=block) for name, call in wire_calls().items()}

    async def send(client: anthropic.AsyncAnthropic) -> None:
        backend = AnthropicBackend(client, prompt_caching=True)
        for call in calls.values():
            assert isinstance(await backend.send(call, None), ModelReply)
        assert (await backend.count_tokens(calls["three tool turns"])).tokens == 7

    seen = capture_wire(send)
    expected = json.loads(WIRE_BODIES.read_text(encoding="utf-8"))
    assert [e["request"] for e in expected] == [*calls, "count_tokens: three tool turns"]
    for sent, stored in zip(seen[:-1], expected[:-1], strict=True):
        assert sent["path"] == stored["path"]
        assert sent["body"].encode() == stored["body"].encode(), stored["request"]
    # count_tokens goes through the prepared body: the model request's bytes up to the model, then no more
    counted, model_request = seen[-1], seen[list(calls).index("three tool turns")]
    assert counted["path"] == "/v1/messages/count_tokens"
    cut = model_request["body"].index(',"max_tokens":')
    assert counted["body"] == model_request["body"][:cut] + "}"


def rebuilt(messages: MessageView, block: str) -> MessageView:
    """What the wrapper sent: the view rebuilt, ``block`` first in the first user message (a new one if none leads)."""
    listed = messages.to_list()
    context = {"type": "text", "text": block}
    if listed and listed[0].get("role") == "user":
        content = listed[0].get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        return MessageView.of([{**listed[0], "content": [context, *blocks]}, *listed[1:]])
    return MessageView.of([{"role": "user", "content": [context]}, *listed])


_TEXT = st.text(max_size=6)
_BLOCK = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _TEXT),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, _TEXT),
    st.builds(lambda t: {"type": "tool_result", "tool_use_id": "x", "content": t}, _TEXT),
)
_CONTENT = st.one_of(_TEXT, st.lists(_BLOCK, max_size=3))
_MESSAGE = st.one_of(
    st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["user", "assistant"]), _CONTENT),
    st.builds(lambda c: {"content": c, "role": "user"}, _CONTENT),  # keys in another order
    st.builds(lambda c: {"role": "user", "content": c, "id": "m1"}, _CONTENT),  # a key after the content
)


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(_MESSAGE, max_size=7),
    block=st.text(min_size=1, max_size=8),
    system=st.one_of(st.none(), _TEXT),
    cache=st.booleans(),
    stream=st.booleans(),
)
def test_the_body_with_instructions_is_byte_for_byte_the_rebuilt_view_s(
    messages: list[dict[str, Any]], block: str, system: str | None, cache: bool, stream: bool
) -> None:
    view = MessageView.of(messages)
    call = wire_calls()["three tool turns"]
    call = attrs.evolve(call, messages=view, system=system, prompt_cache=cache, instructions=block)
    wrapped = attrs.evolve(call, messages=rebuilt(view, block), instructions=None)
    assert encode_request(call, stream=stream) == encode_request(wrapped, stream=stream)
    assert request_messages(call) == wrapped.messages.to_list()
    assert view.to_list() == messages, "the stored messages are untouched"


def test_an_import_of_a_symlink_loop_is_skipped_with_a_line_saying_so_and_the_rest_is_read(tmp_path: Path) -> None:
    write(tmp_path / "CLAUDE.md", "top @loop.md @b.md\n")
    (tmp_path / "loop.md").symlink_to("loop.md")
    write(tmp_path / "b.md", "b\n")
    skipped: list[str] = []
    files = load_instructions(tmp_path, home=tmp_path / "home", skipped=skipped)
    assert names(files, tmp_path) == ["CLAUDE.md", "b.md"]
    assert skipped == [f"instruction file skipped: {tmp_path / 'loop.md'}: is a symlink loop"]
