"""Benchmark: how long the model checker takes on the shipped machines, as a user runs it.

Times the real command in a fresh process each time (interpreter start and imports
included): ``queryloop check`` (graph, termination and the symbolic bounds of every
shipped machine), then ``queryloop check --explore`` (the exhaustive exploration at the
params' check values) and ``queryloop check --spin`` (the same model verified by SPIN
as well), and prints min / median / max wall seconds and the median CPU seconds. Usage:
``python tools/bench_check.py [--repeat R]`` (the slow commands run ``max(1, R // 5)`` times).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(args: list[str], repeat: int) -> tuple[list[float], list[float]]:
    """Each run's wall seconds and CPU seconds (user + system: what a busy machine does not inflate)."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), _children_cpu()
        proc = subprocess.run([sys.executable, "-m", "queryloop", *args], capture_output=True, text=True)
        wall.append(time.perf_counter() - start)
        cpu.append(_children_cpu() - start_cpu)
        if proc.returncode != 0:
            sys.exit(f"queryloop {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs of the fast command (default 10)")
    parser.add_argument("--fast", action="store_true", help="time `queryloop check` alone")
    args = parser.parse_args()
    slow = max(1, args.repeat // 5)
    runs = [("check", ["check"], args.repeat)]
    if not args.fast:
        runs.append(("check --explore", ["check", "--explore"], slow))
    if shutil.which("spin") and not args.fast:
        runs.append(("check --spin", ["check", "--spin"], slow))
    print(f"{'command':<18} {'runs':>4} {'min':>8} {'median':>8} {'max':>8} {'CPU med':>8}  (seconds, whole process)")
    for name, argv, n in runs:
        t, cpu = timed(argv, n)
        median, cpu_median = statistics.median(t), statistics.median(cpu)
        print(f"{name:<18} {n:>4} {min(t):>8.2f} {median:>8.2f} {max(t):>8.2f} {cpu_median:>8.2f}")


if __name__ == "__main__":
    main()
