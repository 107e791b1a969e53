"""Held steps of the embedded server: an answer that waits for an event (a request to a named step, a file).

Driven over loopback HTTP through the real ``anthropic`` SDK (``max_retries=0``). Each wait for the server to
have received a request polls its log, bounded by ``HANG_GUARD_S``; no test decides by how fast anything is.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anthropic
import pytest

from queryloop.mockapi.scenario import ScenarioError, parse_scenario
from queryloop.mockapi.server import MockServer

USER = [{"role": "user", "content": "hi"}]
T = TypeVar("T")
HANG_GUARD_S = 300  # bounds a wait for an event that never comes (a hang), never a slow pass


def scenario(held: str, other: str = "{name: other-asked, reply: {content: [{text: other}]}}") -> str:
    return f"""
schema_version: 1
scenario: holds
model: held
models:
  held:
    - {held}
  other:
    - {other}
"""


async def ask(server: MockServer, model: str) -> anthropic.types.Message:
    client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
    async with client:
        return await client.messages.create(model=model, max_tokens=5, messages=USER)  # type: ignore[arg-type]


async def received(server: MockServer, count: int) -> None:
    """Until the server has logged ``count`` requests (it logs one before holding its answer)."""
    async with asyncio.timeout(HANG_GUARD_S):
        while len(server.requests) < count:
            await asyncio.sleep(0.01)


def play(text: str, main: Callable[[MockServer], Awaitable[T]]) -> T:
    async def run() -> T:
        async with MockServer(parse_scenario(text)) as server:
            return await main(server)

    return asyncio.run(run())


def test_a_held_answer_waits_for_a_request_to_the_step_it_names_then_is_answered() -> None:
    async def main(server: MockServer) -> list[str]:
        held = asyncio.ensure_future(ask(server, "held"))
        await received(server, 1)
        other = await ask(server, "other")
        answer = await held
        return [other.content[0].text, answer.content[0].text]  # type: ignore[union-attr]

    text = scenario("{reply: {content: [{text: released}]}, hold: {step: other-asked, max_s: 300}}")
    assert play(text, main) == ["other", "released"]


def test_a_hold_on_a_step_already_reached_does_not_wait() -> None:
    async def main(server: MockServer) -> str:
        await ask(server, "other")
        answer = await ask(server, "held")
        return str(answer.content[0].text)  # type: ignore[union-attr]

    text = scenario("{reply: {content: [{text: at once}]}, hold: {step: other-asked, max_s: 300}}")
    assert play(text, main) == "at once"


def test_a_hold_nothing_releases_is_answered_past_its_cap_with_an_error_naming_it() -> None:
    async def main(server: MockServer) -> str:
        with pytest.raises(anthropic.BadRequestError) as info:
            await ask(server, "held")
        return str(info.value)

    text = scenario("{reply: {content: [{text: never}]}, hold: {step: other-asked, max_s: 0.2}}")
    message = play(text, main)
    assert "scenario hold not released: models.held[0] waited 0.2 s for a request to the step named" in message


def test_a_held_answer_waits_for_its_file_then_is_answered(tmp_path: pathlib.Path) -> None:
    go = tmp_path / "go"

    async def main(server: MockServer) -> str:
        held = asyncio.ensure_future(ask(server, "held"))
        await received(server, 1)
        assert not held.done(), "answered before its file existed"
        go.touch()
        answer = await held
        return str(answer.content[0].text)  # type: ignore[union-attr]

    assert play(scenario(f"{{reply: {{content: [{{text: went}}]}}, hold: {{file: {go}}}}}"), main) == "went"


def test_a_hold_on_a_file_never_made_is_an_error_naming_the_file(tmp_path: pathlib.Path) -> None:
    async def main(server: MockServer) -> str:
        with pytest.raises(anthropic.BadRequestError) as info:
            await ask(server, "held")
        return str(info.value)

    text = scenario(f"{{reply: {{content: [{{text: never}}]}}, hold: {{file: {tmp_path / 'none'}, max_s: 0.2}}}}")
    assert f"waited 0.2 s for the file {tmp_path / 'none'}" in play(text, main)


def test_stop_ends_a_held_answer() -> None:
    async def main() -> bool:
        server = MockServer(parse_scenario(scenario("{reply: {content: [{text: x}]}, hold: {file: /nonexistent/x}}")))
        await server.start()
        held = asyncio.ensure_future(ask(server, "held"))
        await received(server, 1)
        try:  # only a stop that ends the hold returns: the guard ends a wait of the hold's 120 s, and fails
            await asyncio.wait_for(server.stop(), HANG_GUARD_S)
        except TimeoutError:
            return False
        with contextlib.suppress(anthropic.APIError):
            await held
        return True

    assert asyncio.run(main()), "the server's stop waited for the held answer"


@pytest.mark.parametrize(
    ("held", "other", "fragment"),
    [
        ("{reply: {content: []}, hold: {}}", None, "exactly one of 'step' or 'file', found neither"),
        ("{reply: {content: []}, hold: {step: a, file: b}}", None, "found step and file"),
        (
            "{reply: {content: []}, hold: {step: other-askd}}",
            None,
            "no step is called (did you mean 'other-asked'",
        ),
        ("{name: me, reply: {content: []}, hold: {step: me}}", None, "holds until a request to itself"),
        ("{name: twice, reply: {content: []}}", "{name: twice, reply: {content: []}}", "'twice' is also used at"),
        ("{reply: {content: []}, hold: {step: other-asked, max_s: 0}}", None, "max_s"),
        ("{reply: {content: []}, hold: {step: other-asked, until: x}}", None, "unknown key 'until'"),
    ],
)
def test_a_malformed_hold_is_reported_with_its_line_and_a_fix(held: str, other: str | None, fragment: str) -> None:
    text = scenario(held) if other is None else scenario(held, other)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml:"), message
    assert fragment in message and message.endswith(")"), message
