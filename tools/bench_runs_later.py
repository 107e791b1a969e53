"""Benchmark: what the check for files that run later adds to one tool call's permission decision and sandbox start.

Each writer asks :mod:`queryloop.handlers.tools.services.runs_later` before it writes: the
gate for a Write, an Edit or a redirection (``permissions.decide``, which reads git's pointers
and configuration, the instruction files' imports and the ``PATH`` for the working directory, at
the path and where its symlinks lead), the sandbox once per command (``find_runs_later`` and the
shallow listing of what exists). Timed on real temporary projects:

- **plain**: a folder that is no repository;
- **repository**: a ``.git`` folder whose ``config`` includes another file (a ``core.hooksPath``);
- **deep**: the working directory 12 folders down in such a repository;

each case with the whole decision for a Write of an ordinary file in ``acceptEdits`` (what a
call pays in all) and the check alone (``planted_why``, what the decision pays for it), and
``find_runs_later`` + ``shallow_protected`` (what a sandboxed command pays besides its
``bwrap`` start, 5 ms in ``bench_sandbox.py``). Median and p95 of ``--n`` calls, interleaved.
Prints only. Usage: ``python tools/bench_runs_later.py [--n 2000]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.machine import describe_machine

from queryloop.handlers.tools.services import permissions, planted
from queryloop.handlers.tools.services.rules import PermissionRules
from queryloop.handlers.tools.services.runs_later import find_runs_later
from queryloop.handlers.tools.services.sandbox.protect import shallow_protected


def _projects(base: Path) -> dict[str, Path]:
    plain = base / "plain"
    plain.mkdir()
    repo = base / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n\tbare = false\n[include]\n\tpath = extra.conf\n")
    (repo / ".git" / "extra.conf").write_text("[core]\n\thooksPath = .githooks\n")
    deep = repo.joinpath(*(f"d{i}" for i in range(12)))
    deep.mkdir(parents=True)
    return {"plain": plain, "repository": repo, "deep": deep}


def _timings(calls: dict[str, Callable[[], object]], n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(n):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            out[name].append(time.perf_counter() - start)
    return out


def _cells(cwd: Path) -> dict[str, Callable[[], object]]:
    rules = PermissionRules()
    home = cwd / "nohome"
    write = {"file_path": "src/app.py", "content": "x"}

    def decision() -> object:
        return permissions.decide(
            "Write", write, mode="acceptEdits", rules=rules, cwd=cwd, interactive=False, home=home
        )

    def check() -> object:
        return planted.planted_why(cwd / "src" / "app.py", roots=(cwd,), home=home)

    def sandbox() -> object:
        later = find_runs_later(cwd, home=home, path_env="/usr/local/bin:/usr/bin:/bin")
        return list(shallow_protected(cwd, later=later))

    return {"decide (whole)": decision, "the check alone": check, "sandbox start": sandbox}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    print(describe_machine())
    with tempfile.TemporaryDirectory(prefix="bench-runs-later-") as folder:
        for case, cwd in _projects(Path(folder)).items():
            for name, times in _timings(_cells(cwd), args.n).items():
                times.sort()
                median = statistics.median(times) * 1e6
                p95 = times[int(len(times) * 0.95)] * 1e6
                print(f"{case:<11} {name:<16} median {median:7.1f} µs   p95 {p95:7.1f} µs")


if __name__ == "__main__":
    main()
