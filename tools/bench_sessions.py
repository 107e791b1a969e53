"""Benchmark: K concurrent queryloop sessions in one process against the fake server in another.

Each session is one ``AgentRun`` of the benchmark agent (``tools/bench/agent.py``: a
registered no-op tool allowed by a rule through the normal permission gate,
persistence off) doing T tool turns and a final answer — T + 1 model turns — through
the real ``anthropic`` SDK (one shared ``AsyncAnthropic`` client, at most 100
connections, streamed) against the embedded server running as a process of its own
(``python -m queryloop mock-api``).
Every session has its own script on the server (its own model name) and its own tag,
which its prompt and every tool call it is given carry. For K = 1, 100 and 1000, all K
start together on one event loop (``asyncio.gather``), and the script prints:

* **turns per second** — K × (T + 1) model turns over the wall time from the first
  session's start to the last one's end (summed over rounds: a small K runs several
  rounds of K sessions, one after another, until it has yielded at least 400 turns);
* **turn latency** — client-side, per turn: from sending one request to sending the
  next (the last turn: to the run's end), so it holds the HTTP exchange, the server's
  answer, the wait for a connection and everything the runtime does with the reply;
  p50 and p99 over all turns. **Added by the runtime** is measured against a bare SDK
  baseline: the same K sessions as plain ``anthropic`` SDK loops
  (``tools/bench/bare_sdk.py``, same requests, same server, same client and
  concurrency), each round of them right after queryloop's; the script prints
  queryloop's p50 and p99 minus the baseline's. Nothing else is subtracted;
* **memory per idle session** — a separate, untimed pass under ``tracemalloc``:
  min(K, 200) sessions (tracemalloc slows everything down; what one session holds does
  not depend on K) are created concurrently, run to their end and kept (idle, as a
  server keeps a conversation between prompts, its transcript in memory); the Python
  heap they still hold after a garbage collection, divided by their number. Beside it
  the change in this process's resident set size over the first timed round of K
  sessions, divided by K, for K ≥ 100 (coarser: it includes freed memory the allocator
  keeps, and the connection pool);
* **cross-session leakage** — checked on every queryloop session of the timed pass:
  its transcript has exactly 2T + 2 messages, the prompt and every tool call carry its
  own tag and no other session's, and every ``tool_result`` answers a ``tool_use`` of its
  own transcript. Printed PASS/FAIL with the first offender.

The machine is shared and all of this runs on it, server included: the figures say
what this machine did under its load at the time, printed with them.

Usage: ``python tools/bench_sessions.py [--quick] [--k 1,100,1000] [--turns 3]``
(``--quick``: K = 1 and 100).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import re
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import attrs
from bench.agent import bench_options, check_run
from bench.bare_sdk import bare_sdk_loop
from bench.machine import describe_machine
from bench.script import PROMPT
from bench.server import MockApiProcess, tool_turn_scenario

from queryloop.handlers.request.services.attempt import ModelFailure, ModelReply
from queryloop.handlers.request.services.backends import AnthropicBackend, ModelCall, TokenCount
from queryloop.run.agent import AgentRun, query_loop_program

TAG = re.compile(r"sess-[a-z]+-\d+-\d+")
MEMORY_SAMPLE = 200  # sessions the tracemalloc pass creates at most
RSS_MIN_K = 100  # below it one allocator arena more or less is the whole RSS figure
MIN_TURNS = 400  # turn latencies each K yields at least (small K runs several rounds), for a p99
POOL = 100  # connections the shared client keeps to the server (the SDK's default keep-alive pool)


def shared_client(url: str) -> anthropic.AsyncAnthropic:
    """The one client every session of a pass shares, with at most POOL connections.

    The SDK's default allows 1000 connections: 1000 sessions opening theirs at once
    overflow the server's listen backlog and time out connecting, which measures the
    kernel, not the runtime. More sessions than connections wait for one in the pool.
    """
    limits = type(anthropic.DEFAULT_CONNECTION_LIMITS)(max_connections=POOL, max_keepalive_connections=POOL)
    http = anthropic.DefaultAsyncHttpxClient(limits=limits)
    return anthropic.AsyncAnthropic(api_key="bench", base_url=url, max_retries=0, http_client=http)


def tag(phase: str, k: int, i: int) -> str:
    return f"sess-{phase}-{k}-{i}"


def prompt_for(session_tag: str) -> str:
    return f"{PROMPT} (session {session_tag})"


class StampingBackend:
    """``AnthropicBackend`` that notes when each request is sent (``perf_counter``)."""

    def __init__(self, inner: AnthropicBackend, stamps: list[float]) -> None:
        self.inner = inner
        self.stamps = stamps

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        self.stamps.append(time.perf_counter())
        return await self.inner.send(call, on_text)

    async def count_tokens(self, call: ModelCall) -> TokenCount:
        return await self.inner.count_tokens(call)


@attrs.frozen(kw_only=True)
class Phase:
    """One concurrent pass: its wall time and every turn's latency (seconds)."""

    wall_s: float
    latencies: tuple[float, ...]
    rss_delta_mib: float


def turn_latencies(stamps: list[float], end: float) -> list[float]:
    return [b - a for a, b in zip(stamps, [*stamps[1:], end], strict=True)]


def rss_mib() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def queryloop_sessions(
    client: anthropic.AsyncAnthropic, k: int, turns: int, phase: str, cwd: Path, sessions: range
) -> tuple[list[tuple[str, AgentRun]], list[float]]:
    """Run these sessions concurrently to their end: each one's tag and run (kept), and every turn's latency."""
    latencies: list[float] = []

    async def one(i: int) -> tuple[str, AgentRun]:
        t = tag(phase, k, i)
        stamps: list[float] = []
        options = bench_options(cwd=cwd, model=t, persist=False, prompt=prompt_for(t))
        run = AgentRun(options, StampingBackend(AnthropicBackend(client), stamps))
        async for _ in run.events():
            pass
        latencies.extend(turn_latencies(stamps, time.perf_counter()))
        check_run(run, turns, f"session {t}")
        return t, run

    runs = await asyncio.gather(*(one(i) for i in sessions))
    return list(runs), latencies


async def bare_sessions(client: anthropic.AsyncAnthropic, k: int, turns: int, sessions: range) -> list[float]:
    latencies: list[float] = []

    async def one(i: int) -> None:
        t = tag("bare", k, i)
        stamps: list[float] = []
        await bare_sdk_loop(client, t, turns, prompt=prompt_for(t), stamps=stamps)
        latencies.extend(turn_latencies(stamps, time.perf_counter()))

    await asyncio.gather(*(one(i) for i in sessions))
    return latencies


def leakage(runs: list[tuple[str, AgentRun]], turns: int) -> str | None:
    """The first session whose transcript holds anything but its own messages, described; None if none."""
    for own, run in runs:
        messages: list[dict[str, Any]] = run.data.messages.to_list()
        if len(messages) != 2 * turns + 2:
            return f"session {own}: {len(messages)} messages, expected {2 * turns + 2}"
        tags = set(TAG.findall(json.dumps(messages)))
        if tags != {own}:
            return f"session {own}: its transcript names sessions {sorted(tags)}"
        blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
        uses = {b["id"] for b in blocks if b["type"] == "tool_use"}
        if any(b["input"] != {"note": own} for b in blocks if b["type"] == "tool_use"):
            return f"session {own}: a tool call carries another session's input"
        answered = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
        if answered != uses or len(uses) != turns:
            return f"session {own}: tool results {sorted(answered)} do not answer its tool calls {sorted(uses)}"
    return None


def rounds_for(k: int, turns: int) -> int:
    """Rounds of K sessions, one after another, so that every K yields at least MIN_TURNS turn latencies."""
    return max(1, math.ceil(MIN_TURNS / (k * (turns + 1))))


async def timed(url: str, k: int, turns: int, cwd: Path) -> tuple[Phase, Phase, str | None]:
    """Rounds of K queryloop sessions then K bare SDK sessions, alternating; the leakage check of every round."""
    client = shared_client(url)
    ql_wall = bare_wall = rss_delta = 0.0
    ql: list[float] = []
    bare: list[float] = []
    problem = None
    try:
        for r in range(rounds_for(k, turns)):
            sessions = range(r * k, (r + 1) * k)
            gc.collect()
            before = rss_mib()
            start = time.perf_counter()
            runs, latencies = await queryloop_sessions(client, k, turns, "ql", cwd, sessions)
            ql_wall += time.perf_counter() - start
            if r == 0:
                rss_delta = rss_mib() - before
            ql += latencies
            problem = problem or leakage(runs, turns)
            del runs
            gc.collect()
            start = time.perf_counter()
            bare += await bare_sessions(client, k, turns, sessions)
            bare_wall += time.perf_counter() - start
    finally:
        await client.close()
    ql_phase = Phase(wall_s=ql_wall, latencies=tuple(ql), rss_delta_mib=rss_delta)
    return ql_phase, Phase(wall_s=bare_wall, latencies=tuple(bare), rss_delta_mib=0.0), problem


async def idle_memory(url: str, k: int, turns: int, cwd: Path) -> float:
    """KiB of Python heap per finished, kept session (tracemalloc, after a collection), over min(K, 200) of them."""
    count = min(k, MEMORY_SAMPLE)
    client = shared_client(url)
    try:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        runs, _ = await queryloop_sessions(client, k, turns, "mem", cwd, range(count))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert len(runs) == count
        return held / count / 1024
    finally:
        await client.close()


def quantile(values: tuple[float, ...], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] if len(values) > 1 else values[0]


def scenario_runs(ks: list[int], turns: int) -> dict[str, tuple[int, str]]:
    """A script per session of every pass (its tag is its model name and its tool calls' note), and the warm-up's."""
    sessions = [tag(p, k, i) for k in ks for p in ("ql", "bare") for i in range(k * rounds_for(k, turns))]
    sessions += [tag("mem", k, i) for k in ks for i in range(min(k, MEMORY_SAMPLE))]
    sessions += [tag("warm", 0, 0), tag("bare", 0, 0)]
    return {name: (turns, name) for name in sessions}


async def warm_up(url: str, turns: int, cwd: Path) -> None:
    """Imports, the SDK's first requests, the machine's first run: outside every measurement."""
    client = shared_client(url)
    try:
        await queryloop_sessions(client, 0, turns, "warm", cwd, range(1))
        await bare_sdk_loop(client, tag("bare", 0, 0), turns, prompt=prompt_for(tag("bare", 0, 0)))
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", help="concurrent sessions, comma-separated (default 1,100,1000; --quick: 1,100)")
    parser.add_argument("--turns", type=int, default=3, help="tool turns per session (default 3)")
    parser.add_argument("--quick", action="store_true", help="K = 1 and 100")
    args = parser.parse_args()
    ks = sorted({int(p) for p in (args.k or ("1,100" if args.quick else "1,100,1000")).split(",")})
    if ks[0] < 1 or args.turns < 1:
        raise SystemExit("bench_sessions: --k and --turns take positive integers")
    query_loop_program()  # load and check the machine once, outside every timing
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp,
        MockApiProcess(tool_turn_scenario(scenario_runs(ks, args.turns))) as server,
    ):
        cwd = Path(tmp)
        asyncio.run(warm_up(server.url, args.turns, cwd))
        for k in ks:
            ql, bare, problem = asyncio.run(timed(server.url, k, args.turns, cwd))
            kib = asyncio.run(idle_memory(server.url, k, args.turns, cwd))
            rows.append((k, ql, bare, problem, kib))
    report(rows, args.turns)


def report(rows: list[tuple[int, Phase, Phase, str | None, float]], turns: int) -> None:
    print(f"machine: {describe_machine()}")
    print(
        f"K concurrent sessions in one process, {turns} tool turns + a final answer each ({turns + 1} model turns), "
        "fake server in its own process; latency per turn, client side; 'added' = queryloop − bare SDK loop at the "
        "same K"
    )
    print()
    head = [
        "K",
        "turns/s",
        "bare SDK turns/s",
        "p50 turn",
        "p99 turn",
        "bare p50",
        "bare p99",
        "added p50",
        "added p99",
        "idle session",
        "RSS Δ/session",
        "leakage",
    ]
    table = [head]
    for k, ql, bare, problem, kib in rows:
        ms = [quantile(ql.latencies, q) * 1000 for q in (0.5, 0.99)]
        bare_ms = [quantile(bare.latencies, q) * 1000 for q in (0.5, 0.99)]
        table.append(
            [
                str(k),
                f"{len(ql.latencies) / ql.wall_s:.0f}",
                f"{len(bare.latencies) / bare.wall_s:.0f}",
                f"{ms[0]:.2f} ms",
                f"{ms[1]:.2f} ms",
                f"{bare_ms[0]:.2f} ms",
                f"{bare_ms[1]:.2f} ms",
                f"{ms[0] - bare_ms[0]:+.2f} ms",
                f"{ms[1] - bare_ms[1]:+.2f} ms",
                f"{kib:.0f} KiB",
                f"{ql.rss_delta_mib * 1024 / k:.0f} KiB" if k >= RSS_MIN_K else "—",
                "PASS" if problem is None else "FAIL",
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    for k, *_, problem, _kib in rows:
        if problem is not None:
            print(f"leakage at K={k}: {problem}")
    print()
    print(
        "leakage check: every session's transcript holds exactly its own 2T+2 messages, its own tag only, and "
        "tool results answering its own tool calls — "
        + ("PASS for every K" if all(r[3] is None for r in rows) else "FAIL (above)")
    )


if __name__ == "__main__":
    main()
