"""Benchmark: how long queryloop takes to start, per command, each in a fresh process as a user runs it.

Times, over ``--repeat`` rounds (one warm-up round first, not counted): bare Python
(``python -c pass``), the Anthropic SDK's import alone (``python -c "import anthropic"``, and
the same with the cyclic garbage collector paused, as a run's start-up pauses it — so the
table shows how much of the run's figure that pause is),
``queryloop --help``, ``queryloop --version``, ``queryloop check`` (the shipped machines),
``queryloop diagram`` (DOT and Mermaid of the shipped machines into a temp dir: the
Python side; SVG and PNG would time Graphviz's ``dot``) and an offline run of
``machines/scenarios/hello.yaml`` against the embedded server (``queryloop --scenario``,
stdin from /dev/null, ``$QUERYLOOP_HOME`` in a temp dir). The commands run interleaved —
each round runs every command once — so a load that comes and goes on the machine
touches them alike, and the ratio of the offline run to the SDK's import, which is the
run's target, compares runs of the same rounds.

Prints median / min / max wall seconds per command, its target and PASS or MISS (no
assertion: the figures depend on the machine; ``tests/test_startup.py`` pins what can be
pinned, which modules each command imports). ``--imports`` also lists, per queryloop
command, the heavy modules it has imported when it exits (one more run each).

The program is the ``queryloop`` script installed beside this interpreter (not a pyenv
shim, whose own start-up would be timed too), else ``python -m queryloop``; it must
import this repository's tree. The warm-up round writes the bytecode, as the first start
after an install does (``PYTHONDONTWRITEBYTECODE`` is dropped for the timed processes:
with it, every start compiles again each module edited since its ``.pyc`` was written).
Usage: ``python tools/bench_startup.py [--repeat R] [--imports] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "machines" / "scenarios" / "hello.yaml"
SDK = 'python -c "import anthropic"'
SDK_NO_GC = "import anthropic, GC paused"  # what a run's start-up does (queryloop.run.startup): shown, not a target
RUN = "queryloop --scenario hello.yaml"
TARGETS_S = {"queryloop --help": 0.2, "queryloop check": 2.0}
RUN_TARGET_RATIO = 1.15  # the offline run against the SDK's import alone
HEAVY = ("anthropic", "queryloop.mockapi", "aiohttp", "rich", "prompt_toolkit", "mcp", "pydantic", "dbos", "networkx")
# Runs a script as `python SCRIPT ARGS` would and writes the modules it imported, as it exits, to a file.
_PROBE = (
    "import atexit, json, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
    "sys.argv.pop(0)\n"
    "if sys.argv[0] == '-m':\n"
    "    sys.argv.pop(0)\n"
    "    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    "else:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def program() -> list[str]:
    """The installed ``queryloop`` script run by this interpreter, else ``python -m queryloop``."""
    script = Path(sys.executable).parent / "queryloop"
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "queryloop"]


def commands(ql: Sequence[str], out: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        SDK: [py, "-c", "import anthropic"],
        SDK_NO_GC: [py, "-c", "import gc; gc.disable(); import anthropic"],
        "queryloop --help": [*ql, "--help"],
        "queryloop --version": [*ql, "--version"],
        "queryloop check": [*ql, "check"],
        "queryloop diagram": [*ql, "diagram", "--format", "dot", "--format", "mermaid", "--out", str(out)],
        RUN: [*ql, "--scenario", str(SCENARIO)],
    }


class Processes:
    """Runs the timed processes: one environment, a scratch working directory, stdin from /dev/null."""

    def __init__(self, scratch: Path) -> None:
        self.cwd = scratch
        self.env = {**os.environ, "QUERYLOOP_HOME": str(scratch / "home")}
        self.env.pop("ANTHROPIC_API_KEY", None)  # the offline run never needs one; no other command reads it
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=300
        )

    def check_tree(self) -> None:
        """Exit unless ``import queryloop`` in these processes finds this repository (not another install)."""
        proc = self.run([sys.executable, "-c", "import queryloop; print(queryloop.__file__)"])
        found = Path(proc.stdout.strip()).resolve().parent if proc.returncode == 0 else None
        if found != ROOT / "queryloop":
            where = found or proc.stderr.strip().splitlines()[-1:]
            sys.exit(f"`import queryloop` finds {where}, not {ROOT / 'queryloop'}: `pip install -e .` here")

    def seconds(self, argv: Sequence[str]) -> float:
        start = time.perf_counter()
        proc = self.run(argv)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return elapsed

    def heavy_imports(self, argv: Sequence[str]) -> list[str]:
        """The watched heavy packages a ``python SCRIPT …`` command has imported when it exits."""
        listing = self.cwd / "modules.json"
        proc = self.run([argv[0], "-c", _PROBE, str(listing), *argv[1:]])
        if proc.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed under the import probe:\n{proc.stderr[-2000:]}")
        names = json.loads(listing.read_text())
        return [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)]


def verdicts(med: dict[str, float]) -> dict[str, tuple[str, str]]:
    """Per command, its target and PASS/MISS (empty for a command without one)."""
    out = {name: ("", "") for name in med}
    for name, target in TARGETS_S.items():
        out[name] = (f"≤ {target:g} s", "PASS" if med[name] <= target else "MISS")
    ratio = med[RUN] / med[SDK]
    bound = RUN_TARGET_RATIO * med[SDK]
    out[RUN] = (f"≤ {RUN_TARGET_RATIO:g} × SDK import ({bound:.2f} s)", "PASS" if ratio <= RUN_TARGET_RATIO else "MISS")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="counted rounds (default 9)")
    parser.add_argument("--imports", action="store_true", help="also list the heavy modules each command imports")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args()
    ql = program()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        procs = Processes(Path(tmp))
        procs.check_tree()
        cmds = commands(ql, Path(tmp) / "diagrams")
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for round_ in range(args.repeat + 1):  # round 0 warms the caches and writes the bytecode
            for name, argv in cmds.items():
                elapsed = procs.seconds(argv)
                if round_:
                    times[name].append(elapsed)
        heavy = {n: procs.heavy_imports(a) for n, a in cmds.items() if args.imports and n.startswith("queryloop")}
    report(ql, times, heavy, as_json=args.json)


def report(ql: Sequence[str], times: dict[str, list[float]], heavy: dict[str, list[str]], *, as_json: bool) -> None:
    med = {name: statistics.median(t) for name, t in times.items()}
    marks = verdicts(med)
    ratio = med[RUN] / med[SDK]
    rounds = len(times[SDK])
    if as_json:
        rows = {
            name: {
                "median_s": med[name],
                "min_s": min(t),
                "max_s": max(t),
                "target": marks[name][0] or None,
                "verdict": marks[name][1] or None,
                **({"imports": heavy[name]} if name in heavy else {}),
            }
            for name, t in times.items()
        }
        over = {"run_over_sdk_import": ratio, "run_over_sdk_import_gc_paused": med[RUN] / med[SDK_NO_GC]}
        print(json.dumps({"program": list(ql), "rounds": rounds, "commands": rows, **over}))
        return
    print(f"program: {' '.join(ql)}; {rounds} rounds, interleaved; {os.cpu_count()} CPUs; wall seconds")
    print(f"{'command':<32} {'median':>7} {'min':>7} {'max':>7}  {'target':<36} verdict")
    for name, t in times.items():
        target, verdict = marks[name]
        print(f"{name:<32} {med[name]:>7.3f} {min(t):>7.3f} {max(t):>7.3f}  {target:<36} {verdict}".rstrip())
    print(
        f"offline run / SDK import: {ratio:.2f}× (target ≤ {RUN_TARGET_RATIO:g}×); "
        f"against the import with the GC paused too: {med[RUN] / med[SDK_NO_GC]:.2f}×"
    )
    for name, mods in heavy.items():
        print(f"{name} imports: {', '.join(mods) or 'none of ' + ', '.join(HEAVY)}")
    on_path = shutil.which("queryloop")
    if on_path and Path(on_path).parent != Path(sys.executable).parent:
        print(f"(`queryloop` on PATH is {on_path}, e.g. a pyenv shim: its own start-up is not in these figures)")


if __name__ == "__main__":
    main()
