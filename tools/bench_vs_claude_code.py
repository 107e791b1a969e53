"""Benchmark: queryloop's CPU beside Claude Code 2.1.235's, on the same scripted sessions and the same setup.

Both CLIs (``queryloop`` and the pinned npm ``claude``, ``tests/conformance/npm``; ``$CLAUDE_BIN``
overrides) run ``-p`` against the embedded server (``queryloop.mockapi``, in this process: its
CPU is not counted). Each round runs every program once, in alternating order, so drift hits
both alike; figures are medians over the rounds, and each ratio is the median of the rounds'
ratios (pairs).

* **Start-up**: a one-reply run whose reply the server holds back 1 s. When the request
  arrives, the CPU of the program's whole process tree (every live process under it, with
  what its reaped children used) is read from ``/proc``: the start-up CPU to the first model
  request. Beside it, ``python -c "import anthropic"``, the floor any client on the SDK
  pays, and each run's wall time to that request.
* **Per tool turn**: a run of N tool turns (the model reads a small file with ``Read``, one
  call a turn), then an answer, N = 10, 50 and 200. A turn's CPU between two lengths is the
  difference of the two runs' whole-tree CPU (``RUSAGE_CHILDREN``) ÷ the turns between them
  (from 0: against the one-reply run, whose start-up is noisy on a loaded machine); the slope is how much a
  turn's CPU grows per 100 turns of transcript; the break-even is the number of turns past
  which queryloop's whole run uses less CPU than Claude Code's.
* ``bare``: an empty project and home. ``setup``: a 2 KB ``CLAUDE.md``, five allow and deny
  rules, one ``PreToolUse`` command hook on every tool (``cat``), and one stdio MCP server
  (``tests/fixtures/mcp/flaky_server.py``, through ``--mcp-config``); its process's CPU counts.

Each program keeps one home for the whole benchmark (a warm-up round runs first), as a user's
does. ``--cost`` also plays ``bench_cost.py``'s five sessions to each program and prints what
each costs (total and conversation only) and the ratios.

Usage: ``python tools/bench_vs_claude_code.py [--rounds R] [--turns 10,50,200] [--quick] [--cost]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from bench.machine import describe_machine  # noqa: E402

from queryloop.mockapi.background import ServerThread  # noqa: E402
from queryloop.mockapi.scenario import parse_scenario  # noqa: E402

CLAUDE = Path(os.environ.get("CLAUDE_BIN", ROOT / "tests" / "conformance" / "npm" / "node_modules" / ".bin" / "claude"))
MODEL = "claude-sonnet-4-5"
MCP_SERVER = ROOT / "tests" / "fixtures" / "mcp" / "flaky_server.py"
HOLD_MS = 1000  # the first reply of a start-up run is held back this long, so the tree is read while it waits
PROGRAMS = ("queryloop", "claude")
SETUPS = ("bare", "setup")
_TICK = os.sysconf("SC_CLK_TCK")

# ---- the sessions: scenarios for the embedded server ----------------------------------------


def scenario(turns: int, note: Path, *, hold_ms: int = 0) -> str:
    """``turns`` replies each reading ``note`` with Read, then an answer; other models get "ok"."""
    call = {"reply": {"content": [{"tool_use": {"name": "Read", "input": {"file_path": str(note)}}}]}}
    steps: list[dict[str, Any]] = [dict(call) for _ in range(turns)]
    steps.append({"reply": {"content": [{"text": "done"}]}})
    if hold_ms:
        steps[0] = {**steps[0], "delay_ms": hold_ms}
    data = {
        "schema_version": 1,
        "scenario": f"bench_vs_claude_code_{turns}",
        "model": MODEL,
        "models": {MODEL: steps},
        "otherwise": {"reply": {"content": [{"text": "ok"}]}},
    }
    return json.dumps(data)


# ---- the user's files -------------------------------------------------------------------------

_LINE = "- Convention {i}: names say what things are, comments say why, and tests are sentences.\n"


@attrs.frozen(kw_only=True)
class Place:
    """One program's folders for one setup: its home, its project, and the extra arguments the setup needs."""

    home: Path
    project: Path
    args: tuple[str, ...] = ()

    @property
    def note(self) -> Path:
        return self.project / "notes.txt"


def lay_out(base: Path, setup: str) -> Place:
    home, project = base / "home", base / "project"
    (home / ".claude").mkdir(parents=True)
    project.mkdir()
    (project / "notes.txt").write_text("a small file the model reads\n" * 4)
    trust = {"projects": {str(project.resolve()): {"hasTrustDialogAccepted": True}}}
    (home / ".claude.json").write_text(json.dumps(trust))
    if setup == "bare":
        return Place(home=home, project=project)
    (project / "CLAUDE.md").write_text("# This project\n\n" + "".join(_LINE.format(i=i) for i in range(24)))
    hook = {"type": "command", "command": "cat >/dev/null"}
    settings = {
        "permissions": {
            "allow": ["Read", "Bash(git status)", "mcp__bench__echo"],
            "deny": ["Bash(rm -rf:*)", "Read(./.env)"],
        },
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]},
    }
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    server_dir = base / "mcp"
    server_dir.mkdir()
    (server_dir / "plan.json").write_text(json.dumps({"tools": ["echo", "note"]}))
    mcp = {"mcpServers": {"bench": {"command": sys.executable, "args": [str(MCP_SERVER), str(server_dir)]}}}
    (base / "mcp.json").write_text(json.dumps(mcp))
    return Place(home=home, project=project, args=("--mcp-config", str(base / "mcp.json")))


# ---- running one program ----------------------------------------------------------------------


def command(program: str, place: Place) -> list[str]:
    args = ["-p", "go", "--output-format", "json", "--model", MODEL, *place.args]
    if program == "claude":
        return [str(CLAUDE), *args]
    script = Path(sys.executable).parent / "queryloop"  # not a pyenv shim, whose own start-up would count
    head = [sys.executable, str(script)] if script.is_file() else [sys.executable, "-m", "queryloop"]
    return [*head, *args]


def environment(place: Place, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE", "OTEL_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's runs read the bytecode the first one wrote
    env |= {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "bench", "HOME": str(place.home)}
    env |= {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    env["QUERYLOOP_HOME"] = str(place.home / ".queryloop")
    return env


def _stat(pid: str) -> tuple[int, float] | None:
    """A process's parent and the CPU seconds it and its reaped children used (``/proc/PID/stat``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / _TICK


def tree_cpu(root: int) -> float:
    """The CPU seconds the live process tree under ``root`` (``root`` included) has used."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


@attrs.frozen(kw_only=True)
class Run:
    """One process tree's run: its CPU (user + system, every descendant) and wall seconds, and at the first request."""

    cpu: float
    wall: float
    first_cpu: float = 0.0
    first_wall: float = 0.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(program: str, place: Place, turns: int, *, hold_ms: int = 0) -> Run:
    """Play ``turns`` tool turns to ``program``; with ``hold_ms``, read its tree's CPU when the first request comes."""
    scripted = parse_scenario(scenario(turns, place.note, hold_ms=hold_ms), "<bench>")
    with ServerThread(scripted, max_recorded=100_000) as server:
        before, start = _children_cpu(), time.perf_counter()
        proc = subprocess.Popen(
            command(program, place),
            cwd=place.project,
            env=environment(place, server.url),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        first = _first_request(server, proc.pid, start) if hold_ms else (0.0, 0.0)
        out, err = proc.communicate(timeout=1800)
        wall, cpu = time.perf_counter() - start, _children_cpu() - before
        messages = [r for r in server.server.requests if r.path == "/v1/messages" and r.model == MODEL]
    _check(program, proc.returncode, out, err, len(messages), turns)
    return Run(cpu=cpu, wall=wall, first_cpu=first[0], first_wall=first[1])


def _first_request(server: ServerThread, pid: int, start: float) -> tuple[float, float]:
    deadline = start + 300
    while time.perf_counter() < deadline:
        if any(r.path == "/v1/messages" for r in list(server.server.requests)):
            return tree_cpu(pid), time.perf_counter() - start
        time.sleep(0.002)
    raise SystemExit("no request reached the server in 300 s")


def _check(program: str, code: int | None, out: bytes, err: bytes, requests: int, turns: int) -> None:
    lines = [line for line in out.decode(errors="replace").splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    if code != 0 or result.get("is_error") or requests != turns + 1:
        tail = (out + err).decode(errors="replace")[-3000:]
        raise SystemExit(f"{program}: exit {code}, {requests} requests for {turns} turns:\n{tail}")


def sdk_import() -> Run:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before, start = _children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", "import anthropic"], check=True, env=env, stdin=subprocess.DEVNULL)
    return Run(cpu=_children_cpu() - before, wall=time.perf_counter() - start)


# ---- the rounds -------------------------------------------------------------------------------

Key = tuple[str, str, int]  # (program, setup, turns); turns 0 is the start-up run


def orders(rounds: int) -> Iterator[tuple[str, ...]]:
    for r in range(rounds):
        yield PROGRAMS if r % 2 == 0 else PROGRAMS[::-1]


def measure(places: dict[tuple[str, str], Place], turns: Sequence[int], rounds: int) -> list[dict[Key, Run]]:
    """Every round's runs; round 0 warms the caches (bytecode, the machine cache, Claude Code's) and is dropped."""
    out: list[dict[Key, Run]] = []
    for r, order in enumerate(orders(rounds + 1)):
        got: dict[Key, Run] = {("python", "", 0): sdk_import()}
        for setup in SETUPS:
            for n in (0, *turns):
                for program in order:
                    hold = HOLD_MS if n == 0 else 0
                    got[(program, setup, n)] = run_once(program, places[(program, setup)], n, hold_ms=hold)
        print(f"round {r}{' (warm-up)' if r == 0 else ''} done, {describe_machine()}", file=sys.stderr)
        if r:
            out.append(got)
    return out


# ---- the table --------------------------------------------------------------------------------


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def _ms(x: float) -> str:
    return f"{1000 * x:.1f} ms" if x < 10 else f"{x:.2f} s"


def startup_table(rounds: list[dict[Key, Run]]) -> list[str]:
    sdk = med([r[("python", "", 0)].cpu for r in rounds])
    sdk_wall = med([r[("python", "", 0)].wall for r in rounds])
    rows = [
        "| start-up, to the first request | queryloop CPU | Claude Code CPU | ratio (pairs) "
        "| queryloop ÷ `import anthropic` | queryloop wall | Claude Code wall |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f'| `python -c "import anthropic"` | {_ms(sdk)} | | | 1.00 | {_ms(sdk_wall)} | |',
    ]
    for setup in SETUPS:
        ql = [r[("queryloop", setup, 0)] for r in rounds]
        cc = [r[("claude", setup, 0)] for r in rounds]
        ratio = med([q.first_cpu / c.first_cpu for q, c in zip(ql, cc, strict=True)])
        over_sdk = med([r[("queryloop", setup, 0)].first_cpu / r[("python", "", 0)].cpu for r in rounds])
        rows.append(
            f"| {setup} | {_ms(med([q.first_cpu for q in ql]))} | {_ms(med([c.first_cpu for c in cc]))} | {ratio:.2f}× "
            f"| {over_sdk:.2f}× | {_ms(med([q.first_wall for q in ql]))} | {_ms(med([c.first_wall for c in cc]))} |"
        )
    for setup in SETUPS:
        ql = med([r[("queryloop", setup, 0)].cpu for r in rounds])
        cc = med([r[("claude", setup, 0)].cpu for r in rounds])
        rows.append(f"| {setup}, the whole one-reply run | {_ms(ql)} | {_ms(cc)} | {ql / cc:.2f}× | | | |")
    return rows


def marginal(rnd: dict[Key, Run], program: str, setup: str, lo: int, hi: int) -> float:
    """CPU per turn between a run of ``lo`` turns and one of ``hi``: what one more turn costs there."""
    return (rnd[(program, setup, hi)].cpu - rnd[(program, setup, lo)].cpu) / (hi - lo)


def turn_table(rounds: list[dict[Key, Run]], turns: Sequence[int]) -> list[str]:
    """Per setup, the CPU of a turn between consecutive run lengths (0 → first: against the one-reply run,
    whose start-up varies by more than a few turns cost on a loaded machine)."""
    rows = [
        "| CPU per tool turn | turns | queryloop | Claude Code | ratio (pairs) |",
        "|---|---:|---:|---:|---:|",
    ]
    for setup in SETUPS:
        for lo, hi in itertools.pairwise((0, *turns)):
            ql = [marginal(r, "queryloop", setup, lo, hi) for r in rounds]
            cc = [marginal(r, "claude", setup, lo, hi) for r in rounds]
            ratio = med([q / c for q, c in zip(ql, cc, strict=True)])
            rows.append(f"| {setup} | {lo} → {hi} | {_ms(med(ql))} | {_ms(med(cc))} | {ratio:.2f}× |")
    return rows


def slope_lines(rounds: list[dict[Key, Run]], turns: Sequence[int]) -> list[str]:
    """Per setup and program: the growth of a turn's CPU per 100 turns, and the break-even turn count."""
    if len(turns) < 3:
        return []
    (a, b), (c, d) = turns[:2], turns[-2:]
    out: list[str] = []
    for setup in SETUPS:
        parts, late, start = [], {}, {}
        for program in PROGRAMS:
            first = med([marginal(r, program, setup, a, b) for r in rounds])
            last = med([marginal(r, program, setup, c, d) for r in rounds])
            late[program] = med([marginal(r, program, setup, a, d) for r in rounds])
            start[program] = med([r[(program, setup, 0)].cpu for r in rounds])
            growth = (last - first) / ((c + d) / 2 - (a + b) / 2) * 100
            parts.append(f"{program} {_ms(first)} → {_ms(last)} a turn (slope {1000 * growth:+.2f} ms per 100 turns)")
        gap = late["claude"] - late["queryloop"]
        excess = start["queryloop"] - start["claude"]
        even = "never" if gap <= 0 else f"{max(0.0, excess / gap):.0f} turns"
        out.append(f"- {setup}: {'; '.join(parts)}; queryloop's whole run uses less CPU past {even}")
    return out


def cost_lines() -> list[str]:
    """bench_cost.py's five sessions, each played to both programs (alternated); totals and ratios."""
    import bench_cost  # tools/bench_cost.py

    os.environ.setdefault("CLAUDE_BIN", str(CLAUDE))
    bench_cost.CLAUDE = str(CLAUDE)
    rows = ["| session | queryloop total | Claude Code total | ratio | conversation ratio |"]
    rows.append("|---|---:|---:|---:|---:|")
    for i, session in enumerate(bench_cost.sessions(Path("/"))):
        got = {}
        for client in PROGRAMS if i % 2 == 0 else PROGRAMS[::-1]:
            requests, results = bench_cost.run_session(client, session)
            got[client] = bench_cost.report(client, session, requests, results)
        q, c = got["queryloop"], got["claude"]
        rows.append(
            f"| {session.name} | ${q.total.usd:.4f} | ${c.total.usd:.4f} | {q.total.usd / c.total.usd:.2f}× "
            f"| {q.conversation.usd / c.conversation.usd:.2f}× |"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="counted rounds (default 3; one warm-up round first)")
    parser.add_argument("--turns", default="10,50,200", help="tool turns per run (default 10,50,200)")
    parser.add_argument("--quick", action="store_true", help="one round, 10 and 50 turns")
    parser.add_argument("--cost", action="store_true", help="also the cost per task on bench_cost.py's sessions")
    args = parser.parse_args(argv)
    if not os.access(CLAUDE, os.X_OK):
        print(f"Claude Code not found at {CLAUDE}: tools/test.sh installs it, or set CLAUDE_BIN", file=sys.stderr)
        return 2
    turns = (10, 50) if args.quick else tuple(int(t) for t in args.turns.split(","))
    rounds = 1 if args.quick else args.rounds
    version = subprocess.run([str(CLAUDE), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"start: {describe_machine()}")
    with tempfile.TemporaryDirectory(prefix="bench-vs-cc-") as tmp:
        places = {(p, s): lay_out(Path(tmp) / p / s, s) for p in PROGRAMS for s in SETUPS}
        measured = measure(places, turns, rounds)
    print(f"end:   {describe_machine()}")
    print(f"Claude Code {version}; {rounds} counted rounds, programs alternated; whole process tree CPU\n")
    print("\n".join(startup_table(measured)), end="\n\n")
    print("\n".join(turn_table(measured, turns)), end="\n\n")
    print("\n".join(slope_lines(measured, turns)))
    if args.cost:
        print()
        print("\n".join(cost_lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
