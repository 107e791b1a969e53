"""Benchmark: what the query loop costs per tool turn, client-side, as N grows.

The agent (``tools/bench/agent.py``): N turns of a registered no-op tool, then one
final text answer. The tool is a ``@queryloop.tool`` offered alone (``tools=()``,
``custom_tools=(noop,)``), declared read-only (it reads and writes nothing; a tool that
is not read-only would also be recorded in the side-effect ledger on every call), and
every call of it goes through the normal permission gate in ``default`` mode, allowed
by the rule ``noop`` — no ``bypassPermissions``. Its input is validated against its
schema and the function runs, as any tool's would.

Configurations, interleaved within each repeat so that drift on the (shared) machine
hits them alike:

* **in-process, persistence off** (the headline) — ``MaterialisingBackend``: a
  zero-latency model that, for every attempt, first builds the request body as the
  HTTP backend must (``encode_request(call, stream=call.stream)`` from
  ``handlers/request/services/body.py``, the exact bytes the HTTP backend sends with prompt
  caching on, its default) and then answers with a scripted reply.
  ``persist=False``: no transcript, ledger or checkpoints on disk.
* **in-process, persistence on** — the same with the session kept as a user's is, in
  a temporary ``QUERYLOOP_HOME``: its transcript written as the run goes (a read-only
  tool adds no ledger records and no file checkpoints).
* **HTTP, queryloop** — ``AnthropicBackend`` (the real ``anthropic`` SDK, streamed as
  queryloop streams by default) against the embedded fake server running as a
  process of its own (``python -m queryloop mock-api``); persistence off, as the
  baseline keeps nothing either.
* **HTTP, bare SDK** — ``tools/bench/bare_sdk.py``: the same requests (system prompt,
  tool definition, the same two prompt-cache breakpoints, ``max_tokens``, request-id
  header, ``stream=True``) from a plain SDK loop over a list of dicts that calls the
  no-op function itself, against the same server process.

Each figure is the client-side wall time of one whole run (building the run, every
turn, the final answer; for HTTP the client is built before the clock starts) divided
by N, shown as the median with min–max over the repeats. Nothing is subtracted: the
server's own work (it parses every request, which holds the whole transcript) is in
the HTTP figures of both loops, as the model's would be. Beside them, not as the
headline, the CPU time per turn over HTTP of this process (``time.process_time``: the
client's own work) and of the server's process (from ``/proc``, clock-tick
resolution): what the wall time is made of, the rest being waiting. Growth is the median at the
largest N over the median at the smallest. Targets are printed PASS/MISS, never
asserted: in-process (persistence off) ≤ 60 µs per turn at N=500 and N=1000, growing
≤ 1.1× from N=50 to N=1000; HTTP queryloop growing ≤ 1.5× from N=50 to N=1000, judged
on the client's CPU per turn (the issue's "client time": what the client does) and
printed on the wall time too (which also holds the server's work, growing with N).

``--profile`` also prints the top functions by own time (cProfile) of one headline run
at the largest N. ``--quick``: N = 50 and 1000, 3 in-process repeats, 1 HTTP.

``--breakdown`` also times one headline run at the largest N state by state (the time
from each step the run yields to the next, by the state it left).

Usage: ``python tools/bench_loop.py [--quick] [--n 50,200,500,1000] [--profile] [--breakdown]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path

import anthropic
from bench.agent import MaterialisingBackend, bench_options, check_run, run_agent
from bench.bare_sdk import bare_sdk_loop
from bench.machine import Spread, describe_machine
from bench.server import MockApiProcess, tool_turn_scenario

from queryloop.fsm import Step
from queryloop.handlers.request.services.backends import AnthropicBackend
from queryloop.run.agent import AgentRun, query_loop_program

TARGET_INPROC_US = 60.0  # at N=500 and N=1000, persistence off
TARGET_INPROC_GROWTH = 1.1
TARGET_HTTP_GROWTH = 1.5
WARM_UP_TURNS = 5

INPROC = ("in-process, persistence off", "in-process, persistence on")
HTTP = ("HTTP queryloop", "HTTP bare SDK")


# ---- one run of each configuration --------------------------------------------------------


async def inprocess_run(turns: int, cwd: Path, *, persist: bool) -> tuple[float, int]:
    """Seconds of one in-process run (construction included) and the request bytes it materialised."""
    backend = MaterialisingBackend(turns)
    start = time.perf_counter()
    await run_agent(bench_options(cwd=cwd, persist=persist), backend, turns, "in-process")
    return time.perf_counter() - start, backend.bytes_sent


async def queryloop_http_run(server: MockApiProcess, model: str, turns: int, cwd: Path) -> tuple[float, ...]:
    """Seconds of one HTTP run: wall, this process's CPU, the server process's CPU."""
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=server.url, max_retries=0)
    try:
        options = bench_options(cwd=cwd, model=model, persist=False)
        start, cpu, server_cpu = time.perf_counter(), time.process_time(), server.cpu_s()
        await run_agent(options, AnthropicBackend(client), turns, "HTTP queryloop")
        return time.perf_counter() - start, time.process_time() - cpu, server.cpu_s() - server_cpu
    finally:
        await client.close()


async def bare_http_run(server: MockApiProcess, model: str, turns: int) -> tuple[float, ...]:
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=server.url, max_retries=0)
    try:
        start, cpu, server_cpu = time.perf_counter(), time.process_time(), server.cpu_s()
        await bare_sdk_loop(client, model, turns)
        return time.perf_counter() - start, time.process_time() - cpu, server.cpu_s() - server_cpu
    finally:
        await client.close()


# ---- the measurement ----------------------------------------------------------------------


def http_models(ns: list[int], repeat: int) -> dict[str, tuple[int, str]]:
    """One scripted agent per HTTP run (each run names its own model), warm-ups first."""
    runs = {"ql-warm": (WARM_UP_TURNS, "again"), "bare-warm": (WARM_UP_TURNS, "again")}
    for r in range(repeat):
        for n in ns:
            runs[f"ql-{n}-{r}"] = (n, "again")
            runs[f"bare-{n}-{r}"] = (n, "again")
    return runs


async def measure_inprocess(
    ns: list[int], repeat: int, cwd: Path
) -> tuple[dict[str, dict[int, Spread]], dict[int, int]]:
    for persist in (False, True):  # warm up imports, validators, the machine
        await inprocess_run(WARM_UP_TURNS, cwd, persist=persist)
    times: dict[str, dict[int, list[float]]] = {label: {n: [] for n in ns} for label in INPROC}
    body_bytes: dict[int, int] = {}
    for r in range(repeat):
        for n in ns:
            order = INPROC if r % 2 == 0 else INPROC[::-1]
            for label in order:
                seconds, sent = await inprocess_run(n, cwd, persist=label == INPROC[1])
                times[label][n].append(seconds / n * 1e6)
                body_bytes[n] = sent
    return {label: {n: Spread.of(v) for n, v in per_n.items()} for label, per_n in times.items()}, body_bytes


async def measure_http(server: MockApiProcess, ns: list[int], repeat: int, cwd: Path) -> dict[str, dict[int, Spread]]:
    """Per label (HTTP, ``<label> CPU``, ``<label> server CPU``): per N, ms per turn of wall and CPU time."""
    await queryloop_http_run(server, "ql-warm", WARM_UP_TURNS, cwd)
    await bare_http_run(server, "bare-warm", WARM_UP_TURNS)
    labels = [*HTTP, *(f"{label}{kind}" for kind in (" CPU", " server CPU") for label in HTTP)]
    times: dict[str, dict[int, list[float]]] = {label: {n: [] for n in ns} for label in labels}
    for r in range(repeat):
        for n in ns:
            first_ql = r % 2 == 0  # alternate which loop goes first
            for label in HTTP if first_ql else HTTP[::-1]:
                if label == HTTP[0]:
                    seconds, cpu, server_cpu = await queryloop_http_run(server, f"ql-{n}-{r}", n, cwd)
                else:
                    seconds, cpu, server_cpu = await bare_http_run(server, f"bare-{n}-{r}", n)
                times[label][n].append(seconds / n * 1e3)
                times[f"{label} CPU"][n].append(cpu / n * 1e3)
                times[f"{label} server CPU"][n].append(server_cpu / n * 1e3)
    return {label: {n: Spread.of(v) for n, v in per_n.items()} for label, per_n in times.items()}


# ---- reporting ----------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def growth(spreads: dict[int, Spread], lo: int, hi: int) -> float:
    return spreads[hi].median / spreads[lo].median


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))


def report(
    ns: list[int],
    inproc: dict[str, dict[int, Spread]],
    http: dict[str, dict[int, Spread]],
    body_bytes: dict[int, int],
    repeats: tuple[int, int],
) -> None:
    lo, hi = ns[0], ns[-1]
    print(f"machine: {describe_machine()}")
    print(
        f"client-side wall time per tool turn (one run's time / N): median (min–max) over {repeats[0]} "
        f"in-process and {repeats[1]} HTTP repeats; no-op tool allowed by a rule in default mode"
    )
    print()
    head = ["N", "in-proc, persist off", "in-proc, persist on", "HTTP queryloop", "HTTP bare SDK", "ratio"]
    rows = [head]
    for n in ns:
        ql, bare = http[HTTP[0]][n], http[HTTP[1]][n]
        rows.append(
            [
                str(n),
                inproc[INPROC[0]][n].show("µs"),
                inproc[INPROC[1]][n].show("µs"),
                ql.show("ms", 2),
                bare.show("ms", 2),
                f"{ql.median / bare.median:.2f}×",
            ]
        )
    if hi != lo:
        rows.append(
            [
                f"{lo}→{hi}",
                f"{growth(inproc[INPROC[0]], lo, hi):.2f}×",
                f"{growth(inproc[INPROC[1]], lo, hi):.2f}×",
                f"{growth(http[HTTP[0]], lo, hi):.2f}×",
                f"{growth(http[HTTP[1]], lo, hi):.2f}×",
                "",
            ]
        )
    print_table(rows)
    print()
    print("HTTP, CPU time per turn of this process and of the server's (not the headline; the rest is waiting):")
    cpu = [f"{label}{kind}" for label in HTTP for kind in (" CPU", " server CPU")]
    rows = [["N", *cpu]]
    rows += [[str(n), *(http[label][n].show("ms", 2) for label in cpu)] for n in ns]
    if hi != lo:
        rows.append([f"{lo}→{hi}", *(f"{growth(http[label], lo, hi):.2f}×" for label in cpu)])
    print_table(rows)
    print()
    print(
        "request body materialised per in-process run: "
        + ", ".join(f"N={n}: {body_bytes[n] / (n + 1) / 1024:.1f} KiB per request on average" for n in ns)
    )
    print()
    print("targets (printed, not asserted):")
    headline = inproc[INPROC[0]]
    for n in (500, 1000):
        if n in headline:
            us = headline[n].median
            print(
                f"  in-process, persistence off, N={n}: {us:.1f} µs/turn  ≤ {TARGET_INPROC_US:.0f} µs  "
                f"{verdict(us <= TARGET_INPROC_US)}"
            )
    if hi != lo:
        g = growth(headline, lo, hi)
        print(
            f"  in-process, persistence off, growth N={lo} → N={hi}: {g:.2f}×  ≤ {TARGET_INPROC_GROWTH}×  "
            f"{verdict(g <= TARGET_INPROC_GROWTH)}"
        )
        g = growth(http[f"{HTTP[0]} CPU"], lo, hi)
        print(
            f"  HTTP queryloop, client CPU per turn, growth N={lo} → N={hi}: {g:.2f}×  ≤ {TARGET_HTTP_GROWTH}×  "
            f"{verdict(g <= TARGET_HTTP_GROWTH)}"
        )
        g = growth(http[HTTP[0]], lo, hi)
        print(
            f"  HTTP queryloop, wall time per turn (the server's own work included), growth N={lo} → N={hi}: "
            f"{g:.2f}×  ≤ {TARGET_HTTP_GROWTH}×  {verdict(g <= TARGET_HTTP_GROWTH)}"
        )


def profile(turns: int, cwd: Path, top: int) -> None:
    """Print the ``top`` functions by own time of one headline run (in-process, persistence off)."""

    async def go() -> None:
        await inprocess_run(WARM_UP_TURNS, cwd, persist=False)  # warm-up, not profiled
        profiler = cProfile.Profile()
        profiler.enable()
        await inprocess_run(turns, cwd, persist=False)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime")
        stats.print_stats(top)
        lines = out.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "ncalls" in line)
        total_ms = stats.total_tt * 1000  # type: ignore[attr-defined]
        print()
        print(
            f"profile: in-process, persistence off, N={turns}, top {top} by tottime "
            f"(total {total_ms:.0f} ms under cProfile)"
        )
        print("\n".join(line for line in lines[start:] if line.strip()))

    asyncio.run(go())


def breakdown(turns: int, cwd: Path) -> None:
    """Where a headline turn's time goes: the time from one step to the next, by the state it left.

    Each state's share is its effect (the work it does) plus its step (the exit and edge
    handlers, the engine's bookkeeping) plus handing the step to the caller; read from
    the steps the run yields, so nothing is patched and nothing is left out.
    """

    async def go() -> dict[str, float]:
        await inprocess_run(WARM_UP_TURNS, cwd, persist=False)  # warm-up, not counted
        spent: dict[str, float] = {}
        run = AgentRun(bench_options(cwd=cwd, persist=False), MaterialisingBackend(turns))
        last = time.perf_counter()
        async for item in run.events():
            if isinstance(item, Step):
                now = time.perf_counter()
                spent[item.source] = spent.get(item.source, 0.0) + now - last
                last = now
        check_run(run, turns, "breakdown")
        return spent

    spent = asyncio.run(go())
    total = sum(spent.values())
    print()
    print(f"breakdown: in-process, persistence off, N={turns}: µs per tool turn by the state each step left")
    rows = [["state", "µs/turn", "share"]]
    for state, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        if seconds / turns * 1e6 >= 0.05:
            rows.append([state, f"{seconds / turns * 1e6:.1f}", f"{seconds / total:.0%}"])
    rows.append(["all", f"{total / turns * 1e6:.1f}", "100%"])
    print_table(rows)


def parse_ns(text: str) -> list[int]:
    try:
        ns = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SystemExit(f"bench_loop: --n takes comma-separated positive integers, got {text!r}") from None
    if not ns or ns[0] < 1:
        raise SystemExit(f"bench_loop: --n takes comma-separated positive integers, got {text!r}")
    return ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", help="tool turns per run, comma-separated (default 50,200,500,1000; --quick: 50,1000)")
    parser.add_argument("--quick", action="store_true", help="3 in-process repeats, 1 HTTP, N = 50 and 1000")
    parser.add_argument("--profile", action="store_true", help="also cProfile one headline run at the largest N")
    parser.add_argument(
        "--breakdown", action="store_true", help="also time one headline run at the largest N state by state"
    )
    args = parser.parse_args()
    ns = parse_ns(args.n or ("50,1000" if args.quick else "50,200,500,1000"))
    repeat, http_repeat = (3, 1) if args.quick else (7, 3)
    query_loop_program()  # load and check the machine once, outside every timing
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        # persisted sessions are kept as a user's are, in a home of our own
        os.environ["QUERYLOOP_HOME"] = str(Path(tmp) / "home")
        cwd = Path(tmp) / "work"
        cwd.mkdir()
        inproc, body_bytes = asyncio.run(measure_inprocess(ns, repeat, cwd))
        with MockApiProcess(tool_turn_scenario(http_models(ns, http_repeat))) as server:
            http = asyncio.run(measure_http(server, ns, http_repeat, cwd))
        report(ns, inproc, http, body_bytes, (repeat, http_repeat))
        if args.profile:
            profile(ns[-1], cwd, 12)
        if args.breakdown:
            breakdown(ns[-1], cwd)


if __name__ == "__main__":
    main()
