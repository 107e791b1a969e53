"""Benchmark: what OpenTelemetry export costs a run per tool turn — off (the default) and on.

The agent is every benchmark's (``tools/bench/agent.py``): N turns of a no-op tool,
then a final answer, in-process against ``MaterialisingBackend``, persistence off.
Configurations, interleaved within each repeat so that drift on the shared machine
hits them alike:

* **off** — the shipped run with no telemetry configured (``CLAUDE_CODE_ENABLE_TELEMETRY``
  unset): what every user who does not export pays, and the baseline (with nothing
  watching its steps, the run gives its runner no per-step callback at all);
* **an observer** — the same run with one observer that does nothing, given through the
  public ``observers=`` of :class:`~queryloop.run.agent.AgentRun`: what telling someone
  of every step and item costs before any exporter works (telemetry is told the same way);
* **on** — traces, metrics and events all exported (the console exporters, written to
  ``/dev/null``, so no network is timed): the spans, span events, counters and log
  records of every step, as ``queryloop.run.otel`` makes them.

Each figure is the wall time of one whole run divided by N: median (min–max) over the
repeats. It also says whether the runs without telemetry imported any OpenTelemetry
module (they must not: ``queryloop.run.otel`` is imported only when export is on).

Usage: ``python tools/bench_otel.py [--n 200] [--repeat 7]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
from bench.agent import MaterialisingBackend, bench_options, check_run
from bench.machine import Spread, describe_machine

from queryloop.run.agent import AgentRun
from queryloop.run.telemetry import TelemetrySettings

CONFIGS = ("off", "an observer", "on")


class _Ignores:
    """An observer that is told every step and item and does nothing with them."""

    def observe(self, item: Any) -> None:
        pass


ON = TelemetrySettings(traces=("console",), metrics=("console",), logs=("console",))


async def one_run(config: str, turns: int, cwd: Path) -> float:
    """Seconds of one run (construction included) in ``config``."""
    options = bench_options(cwd=cwd, persist=False)
    if config == "on":
        options = attrs.evolve(options, telemetry=ON)
    observers = (_Ignores(),) if config == "an observer" else ()
    start = time.perf_counter()
    run = AgentRun(options, MaterialisingBackend(turns), observers=observers)
    async for _ in run.events():
        pass
    elapsed = time.perf_counter() - start
    check_run(run, turns, config)
    return elapsed


async def measure(turns: int, repeat: int, cwd: Path) -> tuple[dict[str, Spread], bool]:
    for config in CONFIGS[:2]:  # warm up imports, validators, the machine
        await one_run(config, 5, cwd)
    imported = any(name.startswith("opentelemetry") for name in sys.modules)
    sink = open(os.devnull, "w")  # left open: the exporters flush into it at exit
    with contextlib.redirect_stderr(sink):  # the console exporters write here
        await one_run("on", 5, cwd)
        times: dict[str, list[float]] = {c: [] for c in CONFIGS}
        for _ in range(repeat):
            for config in CONFIGS:
                times[config].append(await one_run(config, turns, cwd) / turns * 1e6)
    return {c: Spread.of(v) for c, v in times.items()}, imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="tool turns per run (default 200)")
    parser.add_argument("--repeat", type=int, default=7, help="runs of each configuration (default 7)")
    args = parser.parse_args()
    if args.n < 1 or args.repeat < 1:
        parser.error("--n and --repeat must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        spreads, imported = asyncio.run(measure(args.n, args.repeat, Path(tmp)))
    print(describe_machine())
    print(f"\nN = {args.n} tool turns, {args.repeat} repeats, time per turn: median (min–max)\n")
    base = spreads["off"].median
    print("| configuration | per turn | ÷ off |")
    print("|---|---|---|")
    for config in CONFIGS:
        spread = spreads[config]
        print(f"| {config} | {spread.show()} | {spread.median / base:.2f}× |")
    print(f"\nOpenTelemetry modules imported by the runs without telemetry: {'some' if imported else 'none'}")


if __name__ == "__main__":
    main()
