"""Benchmark: the permission gate's time for one Bash call, against the line's length and for typical commands.

Each figure is the wall time of one :func:`decide` call (the line parsed afresh: the
parser's cache is cleared before each), the median over the repeats, for the line
shapes a hostile model can stretch — many words, many commands, substitutions, quoted
words — at growing lengths, up to :data:`shell.MAX_LINE` and past it (a longer line is
not parsed: it cannot be checked, and asks). Beside it, the time per kilobyte: a flat
column is a linear cost. Then the "always" rules an ask offers (``suggest_rules``) for a
line of many commands, a rule with two wildcards matched against a long line, and
typical commands under a deny rule. Figures come from here, never from timed tests.

    python tools/bench_gate.py [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from queryloop.handlers.tools.services import shell  # noqa: E402
from queryloop.handlers.tools.services.permissions import decide, suggest_rules  # noqa: E402
from queryloop.handlers.tools.services.rules import PermissionRules  # noqa: E402

DENY = PermissionRules(deny=("Bash(rm:*)", "Bash(git push --force:*)"))
SHAPES: dict[str, Callable[[int], str]] = {
    "words (ls a.txt …)": lambda n: "ls " + "a.txt " * (n // 6),
    "commands (ls; …)": lambda n: "ls; " * (n // 4),
    "pipelines (cat a | …)": lambda n: "cat a | " * (n // 8) + "cat",
    "substitutions (echo $(ls) …)": lambda n: "echo " + "$(ls) " * (n // 6),
    "quoted words ('a b' …)": lambda n: "echo " + "'a b' " * (n // 6),
    "one word (xxx…)": lambda n: "echo " + "x" * n,
}
LENGTHS = (4_000, 16_000, 64_000, 320_000)
TYPICAL = (
    "ls -la",
    "git status",
    "grep -rn TODO src | head -n 20",
    "timeout 60 python3 -m pytest -q tests/test_x.py",
    "bash -c 'cd build && make -j4'",
    "find . -name '*.py' -exec grep -l import {} +",
)


def _timed(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        shell.analyse.cache_clear()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _gate(line: str) -> object:
    return decide("Bash", {"command": line}, mode="default", rules=DENY, cwd=ROOT, interactive=True)


def _lengths(repeats: int, lengths: tuple[int, ...]) -> None:
    print(f"gate time per call against line length (deny rules on; MAX_LINE = {shell.MAX_LINE} characters)")
    print(f"  {'shape':32} {'length':>9} {'ms':>10} {'µs/KB':>8}  answer")
    for name, make in SHAPES.items():
        for length in lengths:
            line = make(length)
            seconds = _timed(lambda line=line: _gate(line), repeats)
            answer = "not parsed (over MAX_LINE)" if len(line) > shell.MAX_LINE else "parsed"
            per_kb = seconds * 1e6 / (len(line) / 1000)
            print(f"  {name:32} {len(line):9} {seconds * 1e3:10.1f} {per_kb:8.0f}  {answer}")


def _others(repeats: int) -> None:
    print("other steps on a long line")
    for count in (1_000, 5_000):
        line = "".join(f"cat f{i}; " for i in range(count))
        seconds = _timed(lambda line=line: suggest_rules("Bash", {"command": line}, cwd=ROOT), repeats)
        print(f"  suggest_rules, {count} distinct commands ({len(line)} chars): {seconds * 1e3:.1f} ms")
    for count in (8_000, 32_000):
        line = "git " + "b " * count
        seconds = _timed(lambda line=line: shell.bash_command_matches("git * b * --force *", line), repeats)
        print(f"  rule 'git * b * --force *' against {len(line)} chars: {seconds * 1e3:.2f} ms")
    print("typical commands (deny rules on)")
    for line in TYPICAL:
        print(f"  {line:52} {_timed(lambda line=line: _gate(line), repeats) * 1e3:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="lengths up to 64 000 only, 3 repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    machine = f"Python {platform.python_version()}, {os.cpu_count()} cores, load average {load:.1f}"
    print(f"{now}, {machine}; median of {repeats} calls")
    _lengths(repeats, LENGTHS[:3] if args.quick else LENGTHS)
    _others(repeats)


if __name__ == "__main__":
    main()
