"""Benchmark: does a real user's setup cost queryloop more CPU per tool turn than a bare one?

Both configurations run the benchmark agent (``tools/bench/agent.py``: N tool turns, then
a final text answer) in-process through the Python API, ``queryloop.query(prompt=…,
options=QueryOptions(…))``, every message consumed. The model is bench_loop.py's
in-process one, ``MaterialisingBackend`` (given as ``QueryOptions.backend``): a
zero-latency model that builds every request's body as the HTTP backend must
(``encode_request``, the exact bytes it would send) before it answers from a script.

* **bare** — the no-op tool offered alone (``tools=[]``), allowed by the rule ``noop``
  in ``default`` mode, persistence off, no settings, no CLAUDE.md, no hooks, no MCP
  server: bench_loop.py's headline configuration.
* **real** — what a user's project looks like, in a temporary ``HOME`` (also
  ``QUERYLOOP_HOME``) and project directory, read as a user's are
  (``setting_sources=["user", "project", "local"]``):

  - a user ``~/.claude/CLAUDE.md`` and a project ``CLAUDE.md`` (about 2 KB each);
  - user and project ``settings.json`` with permission ``allow``, ``deny`` and ``ask``
    rules, which every call is checked against in ``default`` mode;
  - a ``PreToolUse`` hook on every tool (matcher ``*``), a real command (``/bin/sh -c``: it
    reads its input with ``cat`` and appends a line to a log, which the script counts);
  - a real stdio MCP server (``tests/fixtures/mcp/flaky_server.py``, the ``mcp`` SDK), from
    the project's ``.mcp.json``, approved in the settings; every 10th turn calls its
    read-only ``echo``, and every 10th (5 turns later) its ``note``, which is not
    read-only, so its call goes to the side-effect ledger, fsync-ed;
  - every built-in tool offered beside the no-op tool (no ``tools`` option), as a user's
    run does;
  - persistence on: the transcript and the ledger written as the run goes.

Per configuration and N, over the repeats (median and min–max), each a whole run
(options resolved, MCP server started and stopped, the final answer) divided by N:

* **queryloop CPU** — this process's user + system CPU time (``getrusage(RUSAGE_SELF)``,
  every thread): the headline. Nothing is subtracted from it: starting the hook's and the
  server's processes and talking to them is queryloop's work and is in it;
* **children CPU** — the processes it started and reaped (``RUSAGE_CHILDREN``): the hooks'
  ``sh`` and ``cat``, the MCP server (its Python start-up included);
* **fsync** — how many ``os.fsync`` calls and their wall time (``os.fsync`` wrapped by
  this script only);
* **wall** — the run's wall time, which also holds the waits for the children.

Targets, printed PASS/MISS, never asserted (issue 30, item 3): bare ≤ 150 µs of CPU per
turn at both N; real ≤ 1.3× bare at both N; each flat in N (per-turn CPU at the largest
N ≤ 1.1× that at the smallest).

Usage: ``python tools/bench_setup.py [--n 50,1000] [--repeat 5] [--profile bare|real] [--drop PARTS]``
(``--profile`` prints one run's top functions by own time, cProfile, at the largest N;
``--drop hook,mcp,persist,builtins`` leaves those parts out of the real setup, to see what each costs).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
from bench.agent import FINAL_TEXT, NOOP, NOOP_NAME, MaterialisingBackend
from bench.machine import Spread, describe_machine
from bench.script import PROMPT

from queryloop import QueryOptions, ResultMessage, query
from queryloop.handlers.request.services.attempt import ModelFailure, ModelReply
from queryloop.handlers.request.services.backends import ModelCall
from queryloop.run.agent import query_loop_program
from queryloop.testing import scripted_reply

ROOT = Path(__file__).resolve().parent.parent
MCP_SERVER = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"
CONFIGS = ("bare", "real")
TARGET_BARE_US = 150.0
TARGET_RATIO = 1.3
TARGET_FLAT = 1.1
WARM_UP_TURNS = 5
MCP_EVERY = 10  # turn i calls the MCP server's echo when i % 10 == 4, its note when i % 10 == 9
PARTS = ("hook", "mcp", "persist", "builtins")  # what --drop can take out of the real setup
dropped: set[str] = set()  # --drop: the parts of the real setup left out (to see what each costs)

INSTRUCTIONS = """# {title}

- Keep changes small and explain each one in the commit message.
- Run the tests of the area you touched before you say a change is done.
- Prefer the standard library; ask before adding a dependency.
- Never print credentials, tokens or the contents of .env files.
{filler}
"""


# ---- the user's files ----------------------------------------------------------------------


def _instructions(title: str) -> str:
    filler = "\n".join(f"- Convention {i}: names say what things are; comments say why." for i in range(30))
    return INSTRUCTIONS.format(title=title, filler=filler)


def _hook_command(log: Path) -> str:
    return f"cat >/dev/null && echo call >> {log}"


def write_user_setup(home: Path, project: Path) -> Path:
    """A user's home and project as queryloop reads them; returns the hook's log."""
    hook_log = home / "hook-calls.log"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "CLAUDE.md").write_text(_instructions("My conventions"))
    (home / ".queryloop").mkdir()
    user_settings = {
        "permissions": {
            "allow": ["Read", "Grep", "Glob", "Bash(git status)", "Bash(git diff:*)"],
            "deny": ["Bash(rm -rf:*)", "Read(~/.ssh/**)", "Read(./.env)"],
        },
    }
    if "hook" not in dropped:
        hook = {"type": "command", "command": _hook_command(hook_log)}
        user_settings["hooks"] = {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}
    (home / ".queryloop" / "settings.json").write_text(json.dumps(user_settings, indent=2))
    project.mkdir()
    (project / "CLAUDE.md").write_text(_instructions("This project"))
    (project / ".queryloop").mkdir()
    project_settings = {
        "permissions": {
            "allow": [NOOP_NAME, "mcp__flaky__echo", "mcp__flaky__note", "Bash(pytest:*)"],
            "deny": ["mcp__flaky__die", "Edit(./secrets/**)", "Bash(curl:*)"],
            "ask": ["Bash(git push:*)", "Write", "Edit(./pyproject.toml)"],
        },
        "enabledMcpjsonServers": ["flaky"],
    }
    (project / ".queryloop" / "settings.json").write_text(json.dumps(project_settings, indent=2))
    server_dir = home / "flaky"
    server_dir.mkdir()
    (server_dir / "plan.json").write_text(json.dumps({"tools": ["echo", "note", "die"]}))
    mcp = {"mcpServers": {"flaky": {"command": sys.executable, "args": [str(MCP_SERVER), str(server_dir)]}}}
    if "mcp" not in dropped:
        (project / ".mcp.json").write_text(json.dumps(mcp, indent=2))
    return hook_log


# ---- the model -----------------------------------------------------------------------------


class UserModel(MaterialisingBackend):
    """bench_loop.py's in-process model; with ``mcp`` on, every 10th turn calls the MCP server's echo or note."""

    def __init__(self, turns: int, *, mcp: bool) -> None:
        super().__init__(turns)
        self.mcp = mcp
        self.mcp_calls = 0

    async def send(self, call: ModelCall, on_text: Callable[[str], None] | None) -> ModelReply | ModelFailure:
        reply = await super().send(call, on_text)
        if not self.mcp or not isinstance(reply, ModelReply) or reply.stop_reason != "tool_use":
            return reply
        i = int(reply.content[0]["id"][len("toolu_") :])
        if i % MCP_EVERY not in (4, 9):
            return reply
        self.mcp_calls += 1
        name = "mcp__flaky__echo" if i % MCP_EVERY == 4 else "mcp__flaky__note"
        block = {"type": "tool_use", "id": f"toolu_{i:06d}", "name": name, "input": {"text": f"turn {i}"}}
        return scripted_reply([block], "tool_use", model=call.model, call=call)


def options_for(config: str, turns: int, project: Path, home: Path, model: UserModel) -> QueryOptions:
    if config == "bare":
        return QueryOptions(
            tools=[],
            custom_tools=[NOOP],
            allowed_tools=[NOOP_NAME],
            permission_mode="default",
            cwd=project.parent / "bare",
            backend=model,
            persist_session=False,
            model="mock-primary",
        )
    return QueryOptions(
        tools=[] if "builtins" in dropped else None,
        persist_session="persist" not in dropped,
        custom_tools=[NOOP],
        cwd=project,
        backend=model,
        home=home / ".queryloop-home",
        setting_sources=["user", "project", "local"],
        model="mock-primary",
    )


# ---- one run -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Sample:
    """One run's costs, per tool turn (µs), and its fsync count."""

    cpu_us: float
    children_us: float
    wall_us: float
    fsyncs: int
    fsync_us: float


@attrs.define
class FsyncMeter:
    """Counts ``os.fsync`` calls and their wall time while installed (this script's own wrapper)."""

    count: int = 0
    seconds: float = 0.0

    @contextmanager
    def installed(self) -> Iterator[None]:
        real = os.fsync

        def counted(fd: Any) -> None:
            start = time.perf_counter()
            try:
                real(fd)
            finally:
                self.seconds += time.perf_counter() - start
                self.count += 1

        os.fsync = counted
        try:
            yield
        finally:
            os.fsync = real


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def play(config: str, turns: int, project: Path, home: Path) -> UserModel:
    """One whole run through ``queryloop.query``; exits unless it did what it was scripted to do."""
    model = UserModel(turns, mcp=config == "real" and "mcp" not in dropped)
    result: ResultMessage | None = None
    async for message in query(prompt=PROMPT, options=options_for(config, turns, project, home, model)):
        if isinstance(message, ResultMessage):
            result = message
    ok = (
        result is not None
        and result.subtype == "success"
        and result.num_turns == turns + 1
        and not result.permission_denials
        and result.result == FINAL_TEXT
    )
    if not ok:
        raise SystemExit(f"bench_setup: the {config} run of {turns} turns did not complete as scripted: {result!r}")
    return model


async def measure_one(config: str, turns: int, project: Path, home: Path, hook_log: Path) -> Sample:
    meter = FsyncMeter()
    hooks_before = len(hook_log.read_text().splitlines()) if hook_log.exists() else 0
    with meter.installed():
        wall, cpu, children = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        model = await play(config, turns, project, home)
        wall, cpu = time.perf_counter() - wall, _cpu(resource.RUSAGE_SELF) - cpu
        children = _cpu(resource.RUSAGE_CHILDREN) - children
    if config == "real":
        hooks = (len(hook_log.read_text().splitlines()) if hook_log.exists() else 0) - hooks_before
        if hooks != (0 if "hook" in dropped else turns) or (model.mcp_calls == 0) != ("mcp" in dropped):
            raise SystemExit(f"bench_setup: {hooks} hook runs for {turns} calls, {model.mcp_calls} MCP calls")
    return Sample(
        cpu_us=cpu / turns * 1e6,
        children_us=children / turns * 1e6,
        wall_us=wall / turns * 1e6,
        fsyncs=meter.count,
        fsync_us=meter.seconds / turns * 1e6,
    )


async def measure(
    ns: list[int], repeat: int, project: Path, home: Path, hook_log: Path
) -> dict[tuple[str, int], list[Sample]]:
    for config in CONFIGS:  # warm up imports, validators, the machine, the MCP SDK
        await measure_one(config, WARM_UP_TURNS, project, home, hook_log)
    samples: dict[tuple[str, int], list[Sample]] = {(c, n): [] for c in CONFIGS for n in ns}
    for r in range(repeat):
        for n in ns:
            for config in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
                samples[config, n].append(await measure_one(config, n, project, home, hook_log))
    return samples


# ---- reporting ----------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))


def report(ns: list[int], samples: dict[tuple[str, int], list[Sample]], repeat: int) -> None:
    def spread(config: str, n: int, field: str) -> Spread:
        return Spread.of([getattr(s, field) for s in samples[config, n]])

    print(f"machine: {describe_machine()}")
    print(
        f"per tool turn (one whole run / N), median (min–max) of {repeat}; in-process through queryloop.query, "
        "MaterialisingBackend"
    )
    if dropped:
        print(f"the real setup without: {', '.join(sorted(dropped))} (--drop)")
    print()
    rows = [["config", "N", "queryloop CPU", "children CPU", "fsyncs/run", "fsync wall", "wall"]]
    for config in CONFIGS:
        for n in ns:
            fsyncs = sorted(s.fsyncs for s in samples[config, n])
            rows.append(
                [
                    config,
                    str(n),
                    spread(config, n, "cpu_us").show("µs"),
                    spread(config, n, "children_us").show("µs"),
                    str(fsyncs[len(fsyncs) // 2]),
                    spread(config, n, "fsync_us").show("µs", 1),
                    spread(config, n, "wall_us").show("µs"),
                ]
            )
    print_table(rows)
    lo, hi = ns[0], ns[-1]
    print()
    print("targets (printed, not asserted), on queryloop's CPU per turn:")
    bare = {n: spread("bare", n, "cpu_us").median for n in ns}
    real = {n: spread("real", n, "cpu_us").median for n in ns}
    for n in ns:
        print(f"  bare, N={n}: {bare[n]:.0f} µs  ≤ {TARGET_BARE_US:.0f} µs  {verdict(bare[n] <= TARGET_BARE_US)}")
    for n in ns:
        ratio = real[n] / bare[n]
        print(f"  real ÷ bare, N={n}: {ratio:.2f}×  ≤ {TARGET_RATIO}×  {verdict(ratio <= TARGET_RATIO)}")
    if hi != lo:
        for config, per_n in (("bare", bare), ("real", real)):
            growth = per_n[hi] / per_n[lo]
            print(f"  {config}, N={hi} ÷ N={lo}: {growth:.2f}×  ≤ {TARGET_FLAT}×  {verdict(growth <= TARGET_FLAT)}")
        for config, per_n in (("bare", bare), ("real", real)):
            marginal = (per_n[hi] * hi - per_n[lo] * lo) / (hi - lo)
            print(f"  (not a target) {config}, CPU of one more turn, from N={lo} to N={hi}: {marginal:.0f} µs")


def profile(config: str, turns: int, project: Path, home: Path, hook_log: Path, top: int = 25) -> None:
    async def go() -> None:
        await measure_one(config, WARM_UP_TURNS, project, home, hook_log)
        profiler = cProfile.Profile()
        profiler.enable()
        await play(config, turns, project, home)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
        print()
        print(f"profile: {config}, N={turns}, top {top} by own time")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))

    asyncio.run(go())


def parse_ns(text: str) -> list[int]:
    try:
        ns = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SystemExit(f"bench_setup: --n takes comma-separated positive integers, got {text!r}") from None
    if not ns or ns[0] < 1:
        raise SystemExit(f"bench_setup: --n takes comma-separated positive integers, got {text!r}")
    return ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="50,1000", help="tool turns per run, comma-separated (default 50,1000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per configuration and N (default 5)")
    parser.add_argument("--profile", choices=CONFIGS, help="cProfile one run of this configuration at the largest N")
    parser.add_argument(
        "--drop", default="", help=f"leave these parts out of the real setup, comma-separated: {', '.join(PARTS)}"
    )
    args = parser.parse_args()
    dropped.update(part for part in args.drop.split(",") if part)
    if not dropped <= set(PARTS):
        raise SystemExit(f"bench_setup: --drop takes {', '.join(PARTS)}, got {args.drop!r}")
    ns = parse_ns(args.n)
    query_loop_program()  # load and check the machine once, outside every timing
    with tempfile.TemporaryDirectory(prefix="bench-setup-") as tmp:
        home, project = Path(tmp) / "home", Path(tmp) / "project"
        hook_log = write_user_setup(home, project)
        (Path(tmp) / "bare").mkdir()  # the bare run's project: an empty directory
        # the user's files are read from this HOME; sessions are kept under it
        os.environ["HOME"] = str(home)
        os.environ["QUERYLOOP_HOME"] = str(home / ".queryloop-home")
        if args.profile:
            profile(args.profile, ns[-1], project, home, hook_log)
            return
        samples = asyncio.run(measure(ns, args.repeat, project, home, hook_log))
        report(ns, samples, args.repeat)


if __name__ == "__main__":
    main()
