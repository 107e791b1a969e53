"""Benchmark: what project instructions (a CLAUDE.md) add to preparing one model request.

A run's request goes through the real code path up to the socket: the query loop's
``call_model`` effect builds the :class:`~queryloop.handlers.request.services.backends.ModelCall`
from the run's services (made by :class:`~queryloop.run.agent.AgentRun`, so with every
backend wrapper a run has), hands it to the backend chain, and the HTTP backend
(:class:`~queryloop.handlers.request.services.backends.AnthropicBackend`) builds the body it
posts (``encode_request``). Only the HTTP exchange itself is replaced: the transport
keeps the body and answers at once, the same with or without instructions.

The transcripts are realistic (a prompt, then tool rounds: an assistant message with
text and a tool call, a user message with its result, 200–1200 characters, every 7th
result 6–12 k), of about 100 and 1,000 messages; the instructions are one CLAUDE.md of
about 2 KB and one of about 20 KB (none: the run has no instruction file). The three
configurations are interleaved, each request timed on its own (``perf_counter``);
medians and the ratio with instructions to without. Target: within 10 % (≤ 1.10×).
Prints only. Usage: ``python tools/bench_instructions.py [--repeat R] [--turns 50,500]``
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import attrs
from bench.machine import describe_machine

from queryloop.fsm import EffectContext
from queryloop.handlers.messages import MessageView
from queryloop.handlers.request import attempts
from queryloop.handlers.request.services import backends
from queryloop.handlers.request.services.attempt import ModelFailure, ModelReply, ModelRequest, RequestLog
from queryloop.handlers.request.services.backends import AnthropicBackend
from queryloop.run.agent import AgentRun
from queryloop.run.config import AgentOptions, ContextSettings, RequestSettings, SessionSettings
from queryloop.run.memory import InstructionFile

SIZES = {"none": 0, "2 KB": 2_000, "20 KB": 20_000}
MODEL = "mock-primary"


def transcript(turns: int, seed: int = 7) -> MessageView:
    """A prompt, then ``turns`` tool rounds (2 × turns + 1 messages), ending with a tool result."""
    rng = random.Random(seed)
    view = MessageView().append({"role": "user", "content": "fix the failing tests in the parser module"})
    for turn in range(turns):
        tool_id = f"toolu_{turn:05d}"
        use = {"type": "tool_use", "id": tool_id, "name": "Read", "input": {"file_path": f"src/parser/m{turn % 40}.py"}}
        text = {"type": "text", "text": f"Step {turn}: checking the next part of the parser. " * 2}
        view = view.append({"role": "assistant", "content": [text, use]})
        size = rng.randint(6000, 12000) if turn % 7 == 1 else rng.randint(200, 1200)
        line = "".join(rng.choice("abcdefghij klmnop\n") for _ in range(64))
        output = (line * (size // len(line) + 1))[:size]
        result = {"type": "tool_result", "tool_use_id": tool_id, "content": output, "is_error": False}
        view = view.append({"role": "user", "content": [result]})
    return view


def claude_md(size: int) -> tuple[InstructionFile, ...]:
    """One project CLAUDE.md of about ``size`` characters of Markdown (none for 0)."""
    if not size:
        return ()
    rule = "- Run `pytest -x -q` before committing; keep functions under 40 lines and name them as verbs.\n"
    content = "# Conventions\n\n" + rule * (size // len(rule) + 1)
    return (InstructionFile(path=Path("/work/repo/CLAUDE.md"), kind="project", content=content[:size]),)


class Transport:
    """What replaces the HTTP exchange: takes the body the backend built, keeps its length, answers at once.

    The body is let go when the request returns, as a sent one is (keeping it until the
    next request would time the allocator's handling of two large blocks, not the code).
    """

    def __init__(self) -> None:
        self.sent = 0
        log = RequestLog(
            client_request_id="c",
            request_id="req_1",
            attempt=1,
            model=MODEL,
            stream=True,
            status=200,
            stop_reason="end_turn",
            ttft_ms=1.0,
            duration_ms=1.0,
            usage={"input_tokens": 1, "output_tokens": 1},
        )
        self.reply = ModelReply(
            content=({"type": "text", "text": "ok"},),
            stop_reason="end_turn",
            usage=log.usage,
            model=MODEL,
            request_id="req_1",
            log=log,
        )

    async def __call__(self, client: Any, req: ModelRequest, *, on_text: Any = None) -> ModelReply | ModelFailure:
        self.sent = len(req.body or b"")
        return self.reply


def request_maker(client: anthropic.AsyncAnthropic, home: Path, view: MessageView, size: int) -> Callable[[], Any]:
    """One model request as the loop makes it: ``call_model`` on a run about to call the model with ``view``."""
    options = AgentOptions(
        prompt="fix the failing tests in the parser module",
        cwd=home,
        request=RequestSettings(model=MODEL),
        session=SessionSettings(home=home, persist=False),
        context=ContextSettings(instructions=claude_md(size)),
    )
    run = AgentRun(options, AnthropicBackend(client, prompt_caching=True))
    start = run.runner.final
    state = attrs.evolve(start, state="calling_model", data=attrs.evolve(start.data, messages=view))

    async def request() -> Any:
        return await attempts.call_model(EffectContext(run.program, state, run.services, []))

    return request


async def measure(turns: list[int], repeat: int, transport: Transport) -> dict[int, dict[str, tuple[float, int]]]:
    client = anthropic.AsyncAnthropic(api_key="bench", base_url="http://127.0.0.1:9", max_retries=0)
    out: dict[int, dict[str, tuple[float, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in turns:
            view = transcript(n)
            makers = {name: request_maker(client, Path(tmp), view, size) for name, size in SIZES.items()}
            samples: dict[str, list[float]] = {name: [] for name in SIZES}
            sizes: dict[str, int] = {}
            for name, request in makers.items():  # a warm-up request each (and its body's size)
                await request()
                sizes[name] = transport.sent
            for _ in range(repeat):
                for name, request in makers.items():  # interleaved: drift hits every configuration alike
                    begin = time.perf_counter()
                    await request()
                    samples[name].append(time.perf_counter() - begin)
            out[len(view)] = {name: (statistics.median(samples[name]), sizes[name]) for name in SIZES}
    await client.close()
    return out


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--turns", default="50,500", help="tool rounds per transcript (2 × turns + 1 messages)")
    args = parser.parse_args()
    turns = sorted({int(x) for x in args.turns.split(",") if x.strip()})
    transport = Transport()
    backends.send_request = transport  # type: ignore[assignment]  # the HTTP exchange, and nothing else
    results = asyncio.run(measure(turns, args.repeat, transport))
    print(describe_machine())
    print(f"one model request prepared (call_model → the body the HTTP backend posts), median of {args.repeat}")
    print()
    header = " | ".join("no instructions" if not size else f"{name} CLAUDE.md" for name, size in SIZES.items())
    ratios = " | ".join(f"{name} ÷ none" for name in SIZES if SIZES[name])
    print(f"| messages | {header} | {ratios} | body (none / {' / '.join(n for n in SIZES if SIZES[n])}) |")
    print("|---" * (1 + 2 * len(SIZES)) + "|")
    worst = 0.0
    for messages, row in results.items():
        base = row["none"][0]
        cells = " | ".join(_time(row[name][0]) for name in SIZES)
        shares = []
        for name in SIZES:
            if SIZES[name]:
                ratio = row[name][0] / base
                worst = max(worst, ratio)
                shares.append(f"{ratio:.2f}×")
        body = " / ".join(f"{row[name][1] / 1024:.0f} KB" for name in SIZES)
        print(f"| {messages:,} | {cells} | {' | '.join(shares)} | {body} |")
    print()
    verdict = "PASS" if worst <= 1.10 else "MISS"
    print(f"target: a request with instructions within 10 % of one without: {verdict} (worst {worst:.2f}×)")


if __name__ == "__main__":
    main()
