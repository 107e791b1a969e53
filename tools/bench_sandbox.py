"""Benchmark: what one Bash tool call costs inside the bubblewrap sandbox, next to the same call unsandboxed.

Times whole Bash calls as the loop runs them, ``await BASH.run({"command": ...}, ctx)``,
from the call to its result, in three modes:

* **unsandboxed** — ``ToolContext(cwd=...)``: ``bash -c`` in a new session.
* **bwrap** — ``Sandbox(SandboxPolicy(enabled=True), cwd=..., capture=False)``: the
  ``bwrap`` line (read-only root, writable working directory, own namespaces, the masks
  of the Read deny rules, found by walking the working directory), the working directory
  bound directly, nothing captured.
* **bwrap+capture** — the same sandbox with the overlay capture on (the default): the
  working directory mounted as overlayfs under ``unshare``, then, after the command, the
  upper directory read, the originals of what changed stored in a session's checkpoint
  store (``SessionStore.checkpoints.save``: blobs written, index appended and fsync-ed,
  the oldest entries dropped past 100, as ``running._with_checkpoints`` wires it), the
  changes applied to the real directory and the upper directory removed.

Each figure is everything between the call and its result: the command's own work,
process start, the sandbox's mounts, the Read-deny walk, the network bridge's start,
the overlay apply and the checkpoint writes. Not in it: what happens once per run
(the bubblewrap probe, making the ``Sandbox`` with its overlay probe — printed apart),
and what the dispatcher does around every call in every mode (schema check, permission
gate, the ledger line). Every run counts: none is dropped as warm-up; the three modes
run interleaved, in rotating order, on the same project. Median and p95 (nearest rank)
in milliseconds. Usage: ``python3 tools/bench_sandbox.py [--runs N] [--quick] [--dir DIR]``
(``--quick``: 5 runs and smaller projects; ``--dir``: where projects and the session go).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import attrs
from bench.machine import describe_machine

from queryloop.handlers.session import SessionPaths, SessionStore
from queryloop.handlers.tools.services.base import ToolContext
from queryloop.handlers.tools.services.bash import BASH
from queryloop.handlers.tools.services.rules import PermissionRules, read_denied
from queryloop.handlers.tools.services.sandbox import Sandbox, SandboxPolicy, unavailable_reason

MODES = ("unsandboxed", "bwrap", "bwrap+capture")
DENY_RULE = "Read(./secrets/**)"


@attrs.frozen(kw_only=True)
class Sizes:
    """How big the projects are: full at the defaults, smaller with ``--quick``."""

    project_files: int
    changed_files: int
    big_file_mb: int


@attrs.frozen(kw_only=True)
class Case:
    """One row: a project to make, the command to time in it, and what the sandbox is told."""

    name: str
    project: str  # which project (made once, shared by the cases naming it)
    command: str
    deny: bool = False  # the sandbox hides what DENY_RULE covers (walks the project for it)
    domains: tuple[str, ...] = ()  # sandbox.network.allowedDomains: the bridge starts inside
    expect: str = ""  # text the with-capture result must carry (the capture really happened)


def rewrite_files(count: int) -> str:
    """Rewrite src/f0..f{count-1} with 10,240 fresh random bytes each, distinct per file, in one shell."""
    # base64 of 7,680 random bytes is 10,240 characters; each file starts with its own number, so no two
    # files (and no two runs) store the same checkpoint blob.
    last = count - 1
    loop = f'for i in {{0..{last}}}; do printf "%05d%s" "$i" "${{s:5}}" > src/f$i; done'
    return f"s=$(head -c 7680 /dev/urandom | base64 -w0); {loop}"


def cases(sizes: Sizes) -> list[Case]:
    many = f"{sizes.project_files:,} files"
    files = "1 file" if sizes.changed_files == 1 else f"{sizes.changed_files} files"
    big = sizes.big_file_mb * 1024 * 1024
    return [
        Case(name="true, empty project", project="empty", command="true"),
        Case(name=f"true, {many}", project="many", command="true"),
        Case(name="1 file of 10 KB rewritten", project="one", command=rewrite_files(1), expect="1 file changed"),
        Case(
            name=f"{files} of 10 KB rewritten",
            project="changed",
            command=rewrite_files(sizes.changed_files),
            expect=f"{files} changed",
        ),
        Case(
            name=f"{sizes.big_file_mb} MB file rewritten",
            project="big",
            command=f"head -c {big} /dev/urandom > big.bin",
            expect="1 file changed",
        ),
        Case(name=f"true, {many}, Read deny rule", project="many", command="true", deny=True),
        Case(name="true, network bridge (localhost)", project="empty", command="true", domains=("localhost",)),
    ]


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))


def make_projects(base: Path, sizes: Sizes) -> dict[str, Path]:
    """The projects the cases run in, made once; the many-file one has a secrets/ folder for the deny rule."""
    projects = {name: base / name for name in ("empty", "many", "one", "changed", "big")}
    for folder in projects.values():
        folder.mkdir(parents=True)
    for i in range(sizes.project_files):
        write_random(projects["many"] / f"pkg{i // 100:03d}" / f"mod{i % 100:02d}.py", 1024)
    for i in range(3):
        write_random(projects["many"] / "secrets" / f"key{i}", 64)
    write_random(projects["one"] / "src" / "f0", 10240)
    for i in range(sizes.changed_files):
        write_random(projects["changed"] / "src" / f"f{i}", 10240)
    write_random(projects["big"] / "big.bin", sizes.big_file_mb * 1024 * 1024)
    return projects


def filesystem(path: Path) -> str:
    """The type of the filesystem ``path`` is on (from /proc/mounts), for the table's header."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                point = fields[1]
                if str(path).startswith(point.rstrip("/") + "/") and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


class Series:
    """The three modes of one case: their contexts, sandboxes and the times measured."""

    def __init__(self, case: Case, project: Path, home: Path) -> None:
        self.case = case
        self.store = SessionStore(SessionPaths(home=home, cwd=project, session_id=str(uuid.uuid4())))
        self.sandboxes: list[Sandbox] = []
        self.made_ms: list[float] = []
        self.contexts = {mode: self._context(mode, project) for mode in MODES}
        self.times: dict[str, list[float]] = {mode: [] for mode in MODES}

    def _context(self, mode: str, project: Path) -> ToolContext:
        if mode == "unsandboxed":
            return ToolContext(cwd=project)
        rules = PermissionRules(deny=[DENY_RULE] if self.case.deny else [])
        start = time.perf_counter()
        sandbox = Sandbox.for_rules(  # as a run makes it (queryloop.run.services.open_sandbox)
            SandboxPolicy(enabled=True, allowed_domains=self.case.domains),
            cwd=project,
            rules=rules,
            capture=mode == "bwrap+capture",
        )
        if mode == "bwrap+capture":
            self.made_ms.append((time.perf_counter() - start) * 1000)
            if not sandbox.captures:
                sys.exit(f"the overlay capture does not work here: {sandbox.capture_problem}")
        self.sandboxes.append(sandbox)
        checkpoints = self.store.checkpoints

        def save(call_id: str, files: Sequence[Path]) -> object:
            return checkpoints.save(prompt_id="bench-prompt", tool_use_id=call_id, files=files)

        return ToolContext(cwd=project, sandbox=sandbox, checkpoint=save, hidden=read_denied(rules, cwd=project))

    async def run_once(self, mode: str, index: int) -> None:
        ctx = attrs.evolve(self.contexts[mode], call_id=f"toolu_bench_{index:04d}")
        start = time.perf_counter()
        out = await BASH.run({"command": self.case.command}, ctx)
        self.times[mode].append((time.perf_counter() - start) * 1000)
        check(out.is_error, out.content, self.case, mode)

    def close(self) -> None:
        for sandbox in self.sandboxes:
            sandbox.close()
        self.store.close()


def check(is_error: bool, content: object, case: Case, mode: str) -> None:
    """Stop on a call that did not do what the row claims (failed, bridge down, nothing captured)."""
    text = str(content)
    if is_error or "queryloop sandbox:" in text:
        sys.exit(f"{case.name} [{mode}]: the call failed:\n{text}")
    if mode == "bwrap+capture" and case.expect and f"{case.expect} in the working directory (checkpointed" not in text:
        sys.exit(f"{case.name} [{mode}]: expected '{case.expect} ... (checkpointed for rewind)', got:\n{text}")


async def check_mask(series: Series) -> None:
    """The deny row hides what it says: the files in secrets/ read as empty inside the sandbox (not timed)."""
    for mode in ("bwrap", "bwrap+capture"):
        out = await BASH.run({"command": "cat secrets/* 2>/dev/null | wc -c"}, series.contexts[mode])
        if out.is_error or str(out.content).strip() != "0":
            sys.exit(f"{series.case.name} [{mode}]: secrets/ is not hidden inside the sandbox: {out.content}")


async def measure(case: Case, project: Path, home: Path, runs: int) -> Series:
    series = Series(case, project, home)
    try:
        if case.deny:
            await check_mask(series)
        for i in range(runs):
            for k in range(len(MODES)):
                await series.run_once(MODES[(i + k) % len(MODES)], i)
    finally:
        series.close()
    return series


def print_table(done: Sequence[Series], runs: int) -> None:
    width = max(len(s.case.name) for s in done)
    head = "".join(f"{mode:>22}" for mode in MODES)
    sub = "".join(f"{'median':>12}{'p95':>10}" for _ in MODES)
    print(f"{'case':<{width}}{head}")
    print(f"{'':<{width}}{sub}   (ms per call, {runs} runs each)")
    for s in done:
        cells = "".join(f"{statistics.median(s.times[m]):>12.1f}{nearest_rank(s.times[m], 0.95):>10.1f}" for m in MODES)
        print(f"{s.case.name:<{width}}{cells}")


NOTE = """\
Each figure: the whole `await BASH.run(...)`, the command's own work included (the unsandboxed column
is that work plus bash's start). bwrap adds bwrap's start, its namespaces and mounts, the Read-deny walk
(the deny row) and the network bridge (a python3 inside, plus the proxy outside on the series' first
call: the network row). bwrap+capture adds unshare, the overlayfs mount, reading the upper directory,
checkpointing the originals (blobs, the fsync-ed index), applying the changes and removing the upper
directory. Not included: the dispatcher (schema check, permission gate, ledger line), the same in
every mode, and the once-per-run costs printed above the table."""


def describe(base: Path) -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{describe_machine()}\nnproc {cpus}; kernel {platform.system()} {platform.release()}; "
        f"projects and session on {filesystem(base)} ({base})"
    )


async def run(args: argparse.Namespace, base: Path) -> None:
    sizes = (
        Sizes(project_files=500, changed_files=10, big_file_mb=5)
        if args.quick
        else Sizes(project_files=5000, changed_files=100, big_file_mb=50)
    )
    runs = args.runs if args.runs is not None else (5 if args.quick else 30)
    start = time.perf_counter()
    problem = unavailable_reason()
    probe_ms = (time.perf_counter() - start) * 1000
    if problem is not None:
        sys.exit(f"no sandbox here: {problem}")
    projects = make_projects(base / "projects", sizes)
    print(describe(base))
    done = []
    for case in cases(sizes):
        done.append(await measure(case, projects[case.project], base / "home", runs))
    made = [ms for s in done for ms in s.made_ms]
    print(
        f"once per run, not in the table: bubblewrap probe {probe_ms:.1f} ms; "
        f"Sandbox() with the overlay probe, median {statistics.median(made):.1f} ms\n"
    )
    print_table(done, runs)
    print()
    print(NOTE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="calls per case and mode (default 30; 5 with --quick)")
    parser.add_argument("--quick", action="store_true", help="5 runs, 500 files, 10 changed files, a 5 MB file")
    parser.add_argument("--dir", type=Path, default=None, help="where projects and the session go (default: temp)")
    args = parser.parse_args()
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    base = Path(tempfile.mkdtemp(prefix="bench-sandbox-", dir=args.dir)).resolve()
    try:
        asyncio.run(run(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
