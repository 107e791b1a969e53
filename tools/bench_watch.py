"""Benchmark: what watching the declared properties costs the engine per step, in instructions.

Counts the instructions (``valgrind --tool=callgrind``, repeatable whatever else the machine
is doing) of driving ``machines/examples/circuit_breaker.yaml`` for N and for N + 1000
successful calls, with the properties watched (the default) and with the watch switched off;
the difference of the two differences over 1000 steps is the watch's cost per step. The
driver hands the event loop a turn by the clock, so the counts vary a little between runs: the
script repeats and prints the median and the range. Every
step of this run touches both of the machine's properties, so it is the watch's worst case
there. Usage: ``python tools/bench_watch.py`` (needs valgrind); ``--run on|off N`` is the
measured program itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTRA_STEPS = 1000


def run(mode: str, calls: int) -> None:
    from queryloop.fsm import Program, Runner, load_machine
    from queryloop.machines.examples.effects import Feed

    program = Program(load_machine(ROOT / "machines/examples/circuit_breaker.yaml"))
    if mode == "off":
        program.watcher = None
    runner = Runner(program, services=Feed(["ok"] * calls), params={"calls": calls})

    async def drive() -> None:
        async for _ in runner.run():
            pass

    asyncio.run(drive())


def instructions(mode: str, calls: int) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={scratch}/out",
                sys.executable,
                __file__,
                "--run",
                mode,
                str(calls),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts in every run: repeatable counts
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", nargs=2, metavar=("MODE", "CALLS"), help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=100, help="the shorter run's successful calls")
    parser.add_argument("--repeat", type=int, default=5, help="measurements (the driver's time-based yields vary)")
    args = parser.parse_args()
    if args.run:
        run(args.run[0], int(args.run[1]))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    extras = []
    for _ in range(args.repeat):
        per_step = {}
        for mode in ("on", "off"):
            short, long = instructions(mode, args.calls), instructions(mode, args.calls + EXTRA_STEPS)
            per_step[mode] = (long - short) / EXTRA_STEPS
        extras.append((per_step["on"] - per_step["off"], per_step["off"]))
        print(f"watched {per_step['on']:,.0f}, not watched {per_step['off']:,.0f} instructions per step")
    extra, base = statistics.median(extras)
    print(
        f"the watch: median {extra:,.0f} instructions per step ({extra / base:.1%} of an unwatched step; "
        f"{min(e for e, _ in extras):,.0f}–{max(e for e, _ in extras):,.0f} over {args.repeat} repeats)"
    )


if __name__ == "__main__":
    main()
