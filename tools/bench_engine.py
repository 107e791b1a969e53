"""Benchmark: the engine's own cost per step on a pure in-process machine.

Drives ``machines/examples/circuit_breaker.yaml`` with a zero-latency scripted
world (no I/O, no sleeps) and prints the median cost per step in microseconds
over repeated runs, with the machine's declared properties watched at every step (the
default) and without (the watch switched off), so the watch's own cost is the difference.
``--clock cpu`` times by this process's CPU instead, which a loaded machine inflates less.
Usage: ``python tools/bench_engine.py [--steps N] [--repeat R] [--clock wall|cpu]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from queryloop.fsm import Program, Runner, load_machine
from queryloop.machines.examples.effects import Feed

ROOT = Path(__file__).resolve().parent.parent


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # cpu: this process's user + system time


def one_run(program: Program, calls: int, clock: str = "wall") -> tuple[float, int]:
    outcomes = ["ok"] * calls
    runner = Runner(program, services=Feed(outcomes), params={"calls": calls})

    async def drive() -> None:
        async for _ in runner.run():
            pass

    now = CLOCKS[clock]
    start = now()
    asyncio.run(drive())
    elapsed = now() - start
    return elapsed, len(runner.trace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall", help="wall time, or CPU (a loaded machine)")
    args = parser.parse_args()
    watched = Program(load_machine(ROOT / "machines/examples/circuit_breaker.yaml"))
    unwatched = Program(load_machine(ROOT / "machines/examples/circuit_breaker.yaml"))
    unwatched.watcher = None  # the declared properties not watched: what the watch costs is the difference
    for program, label in ((watched, "properties watched (the default)"), (unwatched, "properties not watched")):
        one_run(program, 50)  # warm up imports and caches
        per_step = []
        for _ in range(args.repeat):
            elapsed, steps = one_run(program, args.steps, args.clock)
            per_step.append(elapsed / steps * 1e6)
        print(
            f"engine cost per step, {label}: median {statistics.median(per_step):.1f} µs "
            f"(min {min(per_step):.1f}, max {max(per_step):.1f}; {args.repeat} runs × {args.steps} steps, "
            f"circuit_breaker machine, scripted effects, {args.clock} clock)"
        )


if __name__ == "__main__":
    main()
