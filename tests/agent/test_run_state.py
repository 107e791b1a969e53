"""What a later step depends on lives in the run state, not in services.

Whether count_tokens is worth asking, usage and API time, the approvals given "always".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import attrs
import pytest
from aiohttp import web

from queryloop.fsm import Event
from queryloop.handlers.messages import ToolCall
from queryloop.handlers.outcome import evolve
from queryloop.handlers.request import AnthropicBackend, ModelCall, ModelFailure, ModelReply, TokenCount
from queryloop.handlers.tools import GateOutcome, record_gate
from queryloop.run.agent import AgentRun
from queryloop.run.config import AgentOptions, ContextSettings, PermissionSettings, RequestSettings
from queryloop.testing import scripted_reply


class CountingBackend:
    """An in-process model answering one Glob turn then text, with scripted count_tokens answers."""

    def __init__(self, counts: list[TokenCount]) -> None:
        self.counts = counts
        self.asked = 0
        self.sent = 0

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        self.sent += 1
        if self.sent == 1:
            tool = {"type": "tool_use", "id": "t1", "name": "Glob", "input": {"pattern": "*.none"}}
            return scripted_reply([tool], "tool_use", call=call)
        return scripted_reply([{"type": "text", "text": "done"}], call=call)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        self.asked += 1
        return self.counts.pop(0) if self.counts else TokenCount(tokens=None)


def _run(backend: CountingBackend, cwd: Path) -> AgentRun:
    # a threshold of ~0: every request is "over" it, so count_tokens is asked before each one
    options = AgentOptions(
        prompt="go",
        cwd=cwd,
        request=RequestSettings(model="m"),
        context=ContextSettings(auto_compact_threshold=1e-9),
        permissions=PermissionSettings(mode="bypassPermissions"),
    )
    run = AgentRun(options, backend)

    async def drive() -> None:
        async for _ in run.events():
            pass

    asyncio.run(drive())
    return run


def test_a_transient_count_tokens_failure_does_not_switch_it_off(tmp_path: Path) -> None:
    backend = CountingBackend([TokenCount(tokens=None, offered=True), TokenCount(tokens=12)])
    run = _run(backend, tmp_path)
    assert run.result()["terminal_reason"] == "completed"
    assert backend.asked == 2, "asked again on the next request"
    assert run.data.context.count_tokens_offered is True


def test_a_server_that_refuses_count_tokens_is_not_asked_again_in_the_run(tmp_path: Path) -> None:
    backend = CountingBackend([TokenCount(tokens=None, offered=False)])
    run = _run(backend, tmp_path)
    assert backend.asked == 1
    assert run.data.context.count_tokens_offered is False, "kept in the run state, not in the backend"


def test_usage_of_answers_and_summaries_is_summed_in_the_run_state(tmp_path: Path) -> None:
    backend = CountingBackend([])
    run = _run(backend, tmp_path)
    assert "auto_compact_succeeded" in [s.reason for s in run.steps], "the second request is over the threshold"
    usage = run.data.request.usage.usage()
    assert backend.sent == 3 and usage["input_tokens"] == 30 and usage["output_tokens"] == 15, "10 + 5 per reply"
    assert run.result()["usage"] == usage
    assert run.data.request.real_input_tokens == 10


def test_an_always_approval_is_kept_in_the_run_state() -> None:
    from queryloop.handlers.messages import MessageView
    from queryloop.handlers.request import RequestData
    from queryloop.handlers.tools import ToolsData
    from queryloop.run.agent import query_loop_program
    from queryloop.run.data import AgentData

    call = ToolCall(id="t1", name="Bash", input={"command": "ls"})
    data = AgentData(
        messages=MessageView(), request=RequestData(model="m", max_tokens=64), tools=ToolsData(pending=(call,))
    )
    run = query_loop_program().initial_state(data)
    outcome = GateOutcome(allowed=(call,), denied=(), denials=(), always_allowed=frozenset({"Bash"}))
    after = record_gate(run, Event(name="tools_permitted", data=outcome))
    assert after.tools.always_allowed == frozenset({"Bash"}), "an edge handler returns the new run data"


@pytest.mark.parametrize(("status", "offered"), [(503, True), (429, True), (404, False), (400, False)])
def test_the_http_backend_tells_a_lasting_count_tokens_refusal_from_a_transient_one(status: int, offered: bool) -> None:
    async def main() -> TokenCount:
        async def refuse(request: web.Request) -> web.Response:
            body = {"type": "error", "error": {"type": "api_error", "message": "no"}}
            return web.json_response(body, status=status)

        app = web.Application()
        app.router.add_post("/v1/messages/count_tokens", refuse)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client = anthropic.AsyncAnthropic(api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=0)
        try:
            from queryloop.handlers.messages import MessageView

            call = ModelCall(
                model="m",
                messages=MessageView.of([{"role": "user", "content": "hi"}]),
                system=None,
                tools=(),
                max_tokens=10,
                stream=False,
                attempt=1,
                idle_timeout_s=5,
            )
            return await AnthropicBackend(client).count_tokens(call)
        finally:
            await client.close()
            await runner.cleanup()

    assert asyncio.run(main()) == TokenCount(tokens=None, offered=offered)


@attrs.frozen(kw_only=True)
class _Slice:
    """A record with a private field (given by its alias) and a validator, as the run data's slices have."""

    count: int = attrs.field(validator=attrs.validators.ge(0))
    _note: str = "kept"
    names: tuple[str, ...] = ()


def test_a_record_copy_keeps_the_fields_it_is_not_given_and_its_private_ones() -> None:
    record = _Slice(count=1, note="mine", names=("a",))

    copy = evolve(record, count=2)

    assert copy == _Slice(count=2, note="mine", names=("a",))
    assert evolve(copy, note="other") == _Slice(count=2, note="other", names=("a",))


def test_a_record_copy_runs_the_validators_and_refuses_a_field_the_record_lacks() -> None:
    record = _Slice(count=1)

    with pytest.raises(ValueError, match="count"):
        evolve(record, count=-1)
    with pytest.raises(TypeError, match="countt"):
        evolve(record, countt=2)


@attrs.frozen(kw_only=True, slots=True)
class _Plain:
    """A record whose constructor only stores its fields, as most of the run data's slices are."""

    count: int = 0
    _note: str = "kept"
    names: tuple[str, ...] = ()


def test_a_record_whose_constructor_only_stores_its_fields_is_copied_as_it_would_build_it() -> None:
    record = _Plain(count=1, note="mine", names=("a",))

    copy = evolve(record, count=2)

    assert copy == _Plain(count=2, note="mine", names=("a",)) and type(copy) is _Plain
    assert record == _Plain(count=1, note="mine", names=("a",))
    assert evolve(copy, note="other") == _Plain(count=2, note="other", names=("a",))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copy.count = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="countt"):
        evolve(record, countt=2)


_BUILT: list[int] = []


@attrs.frozen(kw_only=True, slots=True)
class _Converted:
    count: int = attrs.field(converter=int)


@attrs.frozen(kw_only=True, slots=True)
class _Hooked:
    count: int

    def __attrs_post_init__(self) -> None:
        _BUILT.append(self.count)


@attrs.frozen(kw_only=True, slots=True, cache_hash=True)
class _Hashed:
    count: int


@attrs.frozen(kw_only=True, slots=False)
class _Dicted:
    count: int


class _OwnInit(_Plain):
    __slots__ = ()

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        _BUILT.append(-1)


@attrs.frozen(kw_only=True, slots=True, init=False)
class _AttrsInit:
    count: int

    def __init__(self, count: int) -> None:
        self.__attrs_init__(count=count)
        _BUILT.append(count * 10)


def test_a_record_whose_constructor_does_more_than_store_its_fields_is_copied_through_it() -> None:
    assert evolve(_Converted(count=1), count="2") == _Converted(count=2)  # type: ignore[arg-type]
    evolve(_Hooked(count=1), count=2)
    assert _BUILT == [1, 2]
    assert hash(evolve(_Hashed(count=1), count=2)) == hash(_Hashed(count=2))
    assert evolve(_Dicted(count=1), count=2) == _Dicted(count=2)
    _BUILT.clear()
    evolve(_OwnInit(count=1), count=2)
    evolve(_AttrsInit(count=3), count=4)
    assert _BUILT == [-1, -1, 30, 40]
