"""Benchmark: what the query loop costs per tool turn, beside the model.

Runs the shipped ``machines/query_loop.yaml`` through ``queryloop.agent.AgentRun`` for N
tool turns (default N = 50 and 500) followed by one final text answer, and prints the
median wall time per tool turn (total time of one run / N) and its growth from the
smallest to the largest N. Three configurations:

* **in-process, loop only** — ``ScriptedBackend`` (zero latency, never reads the
  transcript) answers every attempt with one ``tool_use`` for a tool that is not
  registered. The dispatcher answers it at once with an ``is_error`` result without
  validating or running anything, so this is the machine, its handlers, the transcript
  and the published items — nothing else. This is the figure held to the target
  (≤ 0.3 ms per turn at the largest N, growing ≤ 1.3×).
* **in-process, Glob** — the same with a real tool call, ``Glob`` for ``*.nothing`` in an
  empty temporary directory (the cheapest built-in tool: schema validation, a worker
  thread, a one-directory walk). Its cost alone (``run_tool_calls`` on one such call,
  measured separately) is printed so it can be subtracted.
* **HTTP** — the same Glob turns through the real ``anthropic`` SDK against the embedded
  fake server (``MockServer``, a generated scenario: N ``tool_use`` replies then a text
  reply for ``mock-primary``), streamed as queryloop streams by default. In the same run,
  alternating with it, a bare SDK loop does the same turns against a fresh server: the
  same ``messages.create(stream=True)`` request (same system prompt, tool definitions,
  ``max_tokens`` and request-id header), assembles the streamed blocks, runs the same
  Glob call through ``run_tool_calls`` and appends the ``tool_result`` message, until
  ``end_turn``. Target: queryloop ≤ 1.2× the bare loop. Server start-up and client
  construction are outside the timed region for both; the server runs on the same
  event loop, so its own work is in both figures (the ratio is what matters: both
  serialise the whole transcript on every request, as any Messages API client must).

Figures are medians over repeated runs; targets are printed with PASS/MISS and never
asserted. ``--profile`` also prints the top functions by own time (cProfile) of one
in-process loop-only run at the largest N.

Usage: ``python tools/bench_loop.py [--quick] [--n 50,500] [--profile]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import json
import os
import pstats
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    TextDelta,
)

from queryloop.agent import DEFAULT_SYSTEM_PROMPT, AgentOptions, AgentRun, query_loop_program
from queryloop.handlers.messages import ToolCall
from queryloop.handlers.request.backends import AnthropicBackend, ModelCall, ScriptedBackend, scripted_reply
from queryloop.handlers.request.client import ModelReply
from queryloop.handlers.tools import ToolContext, default_registry, run_tool_calls
from queryloop.mockapi.scenario import Scenario, parse_scenario
from queryloop.mockapi.server import MockServer

MODEL = "mock-primary"
PROMPT = "List the files that match *.nothing, again and again."
GLOB_INPUT = {"pattern": "*.nothing"}
NO_SUCH_TOOL = "NoSuchTool"  # answered by the dispatcher at once: the loop-only configuration
MAX_TOKENS = AgentOptions(prompt="", model="").max_tokens

TARGET_INPROC_MS = 0.3
TARGET_GROWTH = 1.3
TARGET_HTTP_RATIO = 1.2


# ---- in-process --------------------------------------------------------------------------


def tool_turn_script(turns: int, tool: str) -> Callable[[ModelCall], ModelReply]:
    """A zero-latency model: ``turns`` replies with one ``tool`` call each, then ``done``."""
    counter = itertools.count()

    def script(call: ModelCall) -> ModelReply:
        i = next(counter)
        if i < turns:
            block = {"type": "tool_use", "id": f"t{i}", "name": tool, "input": dict(GLOB_INPUT)}
            return scripted_reply([block], "tool_use", model=MODEL, call=call)
        return scripted_reply([{"type": "text", "text": "done"}], "end_turn", model=MODEL, call=call)

    return script


def check_result(run: AgentRun, turns: int, label: str) -> None:
    result = run.result()
    if result["subtype"] != "success" or result["num_turns"] != turns + 1:
        raise SystemExit(
            f"bench_loop: the {label} run with {turns} tool turns did not complete as scripted: "
            f"subtype={result['subtype']!r}, num_turns={result['num_turns']} (expected {turns + 1}), "
            f"terminal_reason={result['terminal_reason']!r}, result={result.get('result') or result.get('errors')!r}"
        )


async def inprocess_run(turns: int, tool: str, cwd: Path) -> float:
    """Seconds for one in-process run of ``turns`` tool turns (construction included)."""
    start = time.perf_counter()
    # bypassPermissions: the gate still decides every call, but the unknown tool of the loop-only
    # variant reaches the dispatcher (an instant error result) instead of the denial path
    options = AgentOptions(prompt=PROMPT, model=MODEL, cwd=cwd, permission_mode="bypassPermissions")
    run = AgentRun(options, ScriptedBackend(tool_turn_script(turns, tool)))
    async for _ in run.events():
        pass
    elapsed = time.perf_counter() - start
    check_result(run, turns, f"in-process {tool}")
    return elapsed


async def glob_call_cost(cwd: Path, calls: int) -> float:
    """Median seconds of ``run_tool_calls`` on one Glob call in ``cwd``."""
    registry = default_registry()
    ctx = ToolContext(cwd=cwd)
    batch = [ToolCall(id="t0", name="Glob", input=dict(GLOB_INPUT))]
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await run_tool_calls(batch, registry, ctx)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- over HTTP ---------------------------------------------------------------------------


def tool_turn_scenario(turns: int) -> Scenario:
    """N Glob tool_use replies (the server fills in unique ids), then a text answer."""
    text = f"""\
schema_version: 1
scenario: bench_tool_turns
doc: generated by tools/bench_loop.py
model: {MODEL}
models:
  {MODEL}:
    - reply: {{content: [{{tool_use: {{name: Glob, input: {json.dumps(GLOB_INPUT)}}}}}]}}
      repeat: {turns}
    - reply: {{content: [{{text: done}}]}}
"""
    return parse_scenario(text, "<bench_loop>")


async def timed_against_server(turns: int, body: Callable[[anthropic.AsyncAnthropic], Awaitable[None]]) -> float:
    """Seconds ``body(client)`` takes against a fresh server playing ``turns`` tool turns."""
    async with MockServer(tool_turn_scenario(turns)) as server:
        client = anthropic.AsyncAnthropic(api_key="x", base_url=server.url, max_retries=0)
        try:
            start = time.perf_counter()
            await body(client)
            return time.perf_counter() - start
        finally:
            await client.close()


async def queryloop_http_run(turns: int, cwd: Path) -> float:
    async def body(client: anthropic.AsyncAnthropic) -> None:
        run = AgentRun(AgentOptions(prompt=PROMPT, model=MODEL, cwd=cwd), AnthropicBackend(client))
        async for _ in run.events():
            pass
        check_result(run, turns, "HTTP queryloop")

    return await timed_against_server(turns, body)


async def bare_sdk_turn(
    client: anthropic.AsyncAnthropic, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str | None]:
    """One streamed request, as a plain SDK user would write it: the blocks and the stop reason."""
    params: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "system": DEFAULT_SYSTEM_PROMPT,
        "tools": tools,
        "extra_headers": {"x-client-request-id": str(uuid.uuid4())},
    }
    stream = await client.messages.create(**params, stream=True)
    blocks: dict[int, dict[str, Any]] = {}
    json_parts: dict[int, list[str]] = {}
    stop_reason = None
    async for event in stream:
        if isinstance(event, RawContentBlockStartEvent):
            blocks[event.index] = event.content_block.model_dump(mode="json", exclude_none=True)
            json_parts[event.index] = []
        elif isinstance(event, RawContentBlockDeltaEvent):
            if isinstance(event.delta, TextDelta):
                blocks[event.index]["text"] = blocks[event.index].get("text", "") + event.delta.text
            elif isinstance(event.delta, InputJSONDelta):
                json_parts[event.index].append(event.delta.partial_json)
        elif isinstance(event, RawContentBlockStopEvent):
            block = blocks[event.index]
            if block["type"] == "tool_use":
                raw = "".join(json_parts[event.index])
                block["input"] = json.loads(raw) if raw else {}
        elif isinstance(event, RawMessageDeltaEvent):
            stop_reason = event.delta.stop_reason
    return [blocks[i] for i in sorted(blocks)], stop_reason


async def bare_http_run(turns: int, cwd: Path) -> float:
    registry = default_registry()
    ctx = ToolContext(cwd=cwd)
    tools = registry.api_definitions()

    async def body(client: anthropic.AsyncAnthropic) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        requests = 0
        while True:
            content, stop_reason = await bare_sdk_turn(client, messages, tools)
            requests += 1
            messages.append({"role": "assistant", "content": content})
            if stop_reason != "tool_use":
                break
            calls = [ToolCall.from_block(b) for b in content if b["type"] == "tool_use"]
            results = await run_tool_calls(calls, registry, ctx)
            messages.append({"role": "user", "content": list(results)})
        if requests != turns + 1 or stop_reason != "end_turn":
            raise SystemExit(
                f"bench_loop: the bare SDK loop made {requests} requests ending in {stop_reason!r} (expected "
                f"{turns + 1}, 'end_turn')"
            )

    return await timed_against_server(turns, body)


# ---- reporting ---------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def ms_per_turn(seconds: list[float], turns: int) -> float:
    return statistics.median(seconds) / turns * 1000


async def measure(ns: list[int], repeat: int, http_repeat: int, cwd: Path) -> None:
    query_loop_program()  # load and check the machine once, outside every timing
    for tool in (NO_SUCH_TOOL, "Glob"):  # warm up imports, validators, the thread pool
        await inprocess_run(5, tool, cwd)
    await queryloop_http_run(3, cwd)
    await bare_http_run(3, cwd)

    glob_ms = await glob_call_cost(cwd, 2000) * 1000
    loop_only: dict[int, float] = {}
    with_glob: dict[int, float] = {}
    for n in ns:
        loop_only[n] = ms_per_turn([await inprocess_run(n, NO_SUCH_TOOL, cwd) for _ in range(repeat)], n)
        with_glob[n] = ms_per_turn([await inprocess_run(n, "Glob", cwd) for _ in range(repeat)], n)

    http_ql: dict[int, float] = {}
    http_bare: dict[int, float] = {}
    for n in ns:
        ql, bare = [], []
        for _ in range(http_repeat):  # alternate, so drift hits both alike
            ql.append(await queryloop_http_run(n, cwd))
            bare.append(await bare_http_run(n, cwd))
        http_ql[n], http_bare[n] = ms_per_turn(ql, n), ms_per_turn(bare, n)

    lo, hi = ns[0], ns[-1]
    print(
        f"query loop cost per tool turn (median wall time / N; {repeat} in-process runs, {http_repeat} HTTP "
        "runs of each loop per N)"
    )
    print(f"Glob alone (run_tool_calls, one call, empty dir): {glob_ms:.3f} ms")
    print()
    print(
        f"{'N':>5}  {'in-proc loop-only':>17}  {'in-proc Glob':>12}  {'HTTP queryloop':>14}  "
        f"{'HTTP bare SDK':>13}  {'ratio':>6}"
    )
    for n in ns:
        ratio = http_ql[n] / http_bare[n]
        print(
            f"{n:>5}  {loop_only[n]:>14.3f} ms  {with_glob[n]:>9.3f} ms  {http_ql[n]:>11.3f} ms  "
            f"{http_bare[n]:>10.3f} ms  {ratio:>5.2f}×"
        )
    if hi != lo:

        def growth(d: dict[int, float]) -> float:
            return d[hi] / d[lo]

        print(
            f"{'×':>5}  {growth(loop_only):>16.2f}×  {growth(with_glob):>11.2f}×  {growth(http_ql):>13.2f}×  "
            f"{growth(http_bare):>12.2f}×   (growth N={lo} → N={hi})"
        )
    print()
    print("targets (printed, not asserted):")
    print(
        f"  in-process loop-only at N={hi}: {loop_only[hi]:.3f} ms/turn  ≤ {TARGET_INPROC_MS} ms  "
        f"{verdict(loop_only[hi] <= TARGET_INPROC_MS)}"
    )
    print(
        f"  in-process Glob at N={hi} minus Glob alone: {with_glob[hi] - glob_ms:.3f} ms/turn  ≤ "
        f"{TARGET_INPROC_MS} ms  {verdict(with_glob[hi] - glob_ms <= TARGET_INPROC_MS)}"
    )
    if hi != lo:
        g = loop_only[hi] / loop_only[lo]
        print(
            f"  in-process loop-only growth N={lo} → N={hi}: {g:.2f}×  ≤ {TARGET_GROWTH}×  "
            f"{verdict(g <= TARGET_GROWTH)}"
        )
    for n in ns:
        ratio = http_ql[n] / http_bare[n]
        print(
            f"  HTTP queryloop / bare SDK at N={n}: {ratio:.2f}×  ≤ {TARGET_HTTP_RATIO}×  "
            f"{verdict(ratio <= TARGET_HTTP_RATIO)}"
        )


def profile(turns: int, cwd: Path, top: int) -> None:
    """Print the ``top`` functions by own time of one in-process loop-only run."""

    async def go() -> None:
        await inprocess_run(5, NO_SUCH_TOOL, cwd)  # warm-up, not profiled
        profiler = cProfile.Profile()
        profiler.enable()
        await inprocess_run(turns, NO_SUCH_TOOL, cwd)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime")
        stats.print_stats(top)
        lines = out.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "ncalls" in line)
        print()
        print(
            f"profile: in-process loop-only run, N={turns}, top {top} by tottime "
            f"(total {stats.total_tt * 1000:.0f} ms under cProfile)"
        )  # type: ignore[attr-defined]
        print("\n".join(line for line in lines[start:] if line.strip()))

    asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="50,500", help="tool turns per run, comma-separated (default 50,500)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (5 in-process, 1 HTTP)")
    parser.add_argument("--profile", action="store_true", help="also cProfile one in-process run at the largest N")
    args = parser.parse_args()
    # Sessions are kept as a user's are (transcript, ledger, checkpoints), in a folder of our own.
    os.environ["QUERYLOOP_HOME"] = tempfile.mkdtemp(prefix="bench-loop-home-")
    try:
        ns = sorted({int(part) for part in args.n.split(",") if part.strip()})
    except ValueError:
        raise SystemExit(f"bench_loop: --n takes comma-separated positive integers, got {args.n!r}") from None
    if not ns or ns[0] < 1:
        raise SystemExit(f"bench_loop: --n takes comma-separated positive integers, got {args.n!r}")
    repeat, http_repeat = (5, 1) if args.quick else (9, 3)
    with tempfile.TemporaryDirectory(prefix="bench_loop_") as tmp:
        cwd = Path(tmp)
        asyncio.run(measure(ns, repeat, http_repeat, cwd))
        if args.profile:
            profile(ns[-1], cwd, 10)


if __name__ == "__main__":
    main()
