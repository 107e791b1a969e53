"""Benchmark: what one ``PreToolUse`` command hook costs a ``queryloop -p`` tool turn, queryloop's CPU apart.

``queryloop -p`` plays runs of ``--turns`` tool turns (``Read`` of a small file, then an answer)
against the embedded server (in this process), with bench_vs_claude_code.py's setup less the
MCP server: ``hook`` has the ``cat >/dev/null`` hook on every tool, ``plain`` has none. When the
last request arrives, ``/proc/PID/stat`` gives the program's own CPU (user + system) and its
reaped children's (the hooks' ``sh`` and ``cat``). A turn's CPU is the difference between the
shorter and the longer run ÷ the turns between them; what the hook adds is ``hook`` − ``plain``.

``--code LABEL=DIR`` (repeatable) runs another copy of the code, put first on ``PYTHONPATH``
(a directory holding an importable ``queryloop`` package): every round runs each copy once per
setup and length, the copies' order rotating, so drift on a shared machine hits them alike.
Figures are medians over the rounds (a warm-up round first).

Usage: ``python tools/bench_hook_turn.py [--rounds 5] [--turns 20,220] [--code before=/tmp/x/.pyroot]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from bench.machine import describe_machine  # noqa: E402
from bench_vs_claude_code import MODEL, Place, command, environment, scenario  # noqa: E402

from queryloop.mockapi.background import ServerThread  # noqa: E402
from queryloop.mockapi.scenario import parse_scenario  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
SETUPS = ("plain", "hook")


def lay_out(base: Path, setup: str) -> Place:
    """A home and project with the 2 KB CLAUDE.md and five rules; ``hook`` adds the ``cat`` hook."""
    home, project = base / "home", base / "project"
    (home / ".claude").mkdir(parents=True)
    project.mkdir()
    (project / "notes.txt").write_text("a small file the model reads\n" * 4)
    (project / "CLAUDE.md").write_text("# This project\n\n" + "- names say what things are.\n" * 70)
    settings: dict[str, object] = {
        "permissions": {
            "allow": ["Read", "Bash(git status)", "mcp__bench__echo"],
            "deny": ["Bash(rm -rf:*)", "Read(./.env)"],
        }
    }
    if setup == "hook":
        hook = {"type": "command", "command": "cat >/dev/null"}
        settings["hooks"] = {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    return Place(home=home, project=project)


def own_and_children(pid: int) -> tuple[float, float]:
    """CPU seconds the process used itself, and those of its reaped children."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / _TICK, (cutime + cstime) / _TICK


def run_once(place: Place, turns: int, pythonpath: str) -> tuple[float, float]:
    """Play ``turns`` tool turns; the program's own and its children's CPU when the last request came."""
    scripted = parse_scenario(scenario(turns, place.note), "<bench>")
    env_extra = {"PYTHONPATH": pythonpath} if pythonpath else {}
    with ServerThread(scripted, max_recorded=100_000) as server:
        env = environment(place, server.url) | env_extra
        proc = subprocess.Popen(
            command("queryloop", place), cwd=place.project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
        seen = (0.0, 0.0)
        while proc.poll() is None:
            if sum(r.path == "/v1/messages" and r.model == MODEL for r in list(server.server.requests)) > turns:
                seen = own_and_children(proc.pid)
                break
            time.sleep(0.005)
        out, _ = proc.communicate(timeout=1800)
    if proc.returncode != 0 or seen == (0.0, 0.0):
        raise SystemExit(f"queryloop: exit {proc.returncode}: {out.decode(errors='replace')[-2000:]}")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="counted rounds (default 5; one warm-up first)")
    parser.add_argument("--turns", default="20,220", help="the two run lengths (default 20,220)")
    parser.add_argument("--code", action="append", default=[], help="LABEL=DIR: another copy of the code")
    args = parser.parse_args()
    lo, hi = (int(x) for x in args.turns.split(","))
    codes = [("this checkout", "")] + [tuple(c.split("=", 1)) for c in args.code]
    print(describe_machine())
    per: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        places = {(label, s): lay_out(Path(tmp) / f"{i}-{s}", s) for i, (label, _) in enumerate(codes) for s in SETUPS}
        for r in range(args.rounds + 1):
            order = codes[r % len(codes) :] + codes[: r % len(codes)]
            for label, path in order:
                for setup in SETUPS:
                    short, long = (run_once(places[(label, setup)], n, path) for n in (lo, hi))
                    turn = ((long[0] - short[0]) / (hi - lo), (long[1] - short[1]) / (hi - lo))
                    if r:
                        per.setdefault((label, setup), []).append(turn)
            print(f"round {r}{' (warm-up)' if r == 0 else ''} done, {describe_machine()}", file=sys.stderr)
    report(codes, per)


def report(codes: list[tuple[str, str]], per: dict[tuple[str, str], list[tuple[float, float]]]) -> None:
    """Per code: a turn's own and children's CPU in each setup, and what the hook adds (medians of rounds)."""
    print("| code | plain: own CPU a turn | hook: own CPU a turn | the hook adds, own | the hook's processes |")
    print("|---|---:|---:|---:|---:|")
    for label, _ in codes:
        plain, hook = per[(label, "plain")], per[(label, "hook")]
        added = [h[0] - p[0] for p, h in zip(plain, hook, strict=True)]
        kids = [h[1] - p[1] for p, h in zip(plain, hook, strict=True)]
        own_p, own_h = (statistics.median(x[0] for x in runs) for runs in (plain, hook))
        print(
            f"| {label} | {own_p * 1e3:.2f} ms | {own_h * 1e3:.2f} ms "
            f"| {statistics.median(added) * 1e3:.2f} ms ({', '.join(f'{a * 1e3:.2f}' for a in added)}) "
            f"| {statistics.median(kids) * 1e3:.2f} ms |"
        )


if __name__ == "__main__":
    main()
