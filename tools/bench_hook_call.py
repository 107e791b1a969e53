"""Benchmark: queryloop's own CPU to run one ``PreToolUse`` command hook, in process.

A child process calls ``run_hooks`` ``--calls`` times (after 20 warm-up calls) for one
``PreToolUse`` event whose one hook is ``cat >/dev/null`` (bench_vs_claude_code.py's), and
reads its own CPU (``RUSAGE_SELF``: spawning the hook, the pipes, the event loop, the JSON)
and its reaped children's (``RUSAGE_CHILDREN``: the hook's ``sh`` and ``cat``) per call.

``--code LABEL=DIR`` (repeatable) also runs another copy of the code, put first on
``PYTHONPATH`` (a directory holding an importable ``queryloop`` package); the copies run one
after another in every round, their order rotating. Figures are medians over the rounds.

Usage: ``python tools/bench_hook_call.py [--rounds 5] [--calls 300] [--code before=/tmp/x/.pyroot]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from bench.machine import describe_machine  # noqa: E402

_HOOKS = {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "cat >/dev/null"}]}]}
_PAYLOAD = {"tool_name": "Read", "tool_input": {"file_path": "/tmp/project/notes.txt"}, "tool_use_id": "toolu_01A"}


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def child(calls: int) -> None:
    """Run the hook ``calls`` times; print this process's and its children's CPU per call, in µs."""
    from queryloop.handlers.hooks import parse_hook_config, run_hooks

    config = parse_hook_config(_HOOKS)

    async def once() -> None:
        outcome = await run_hooks(
            "PreToolUse",
            _PAYLOAD,
            config,
            cwd=Path.cwd(),
            session_id="bench",
            transcript_path="/tmp/bench.jsonl",
            permission_mode="default",
        )
        if outcome.errors or len(outcome.results) != 1:
            raise SystemExit(f"the hook went wrong: {outcome.errors}")

    async def main() -> tuple[float, float]:
        for _ in range(20):
            await once()
        own0, kids0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        for _ in range(calls):
            await once()
        own1, kids1 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        return (own1 - own0) / calls * 1e6, (kids1 - kids0) / calls * 1e6

    own, kids = asyncio.run(main())
    print(f"{own:.1f} {kids:.1f}")


def measure(calls: int, pythonpath: str) -> tuple[float, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(calls)], env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--calls", type=int, default=300, help="hook calls a run (default 300)")
    parser.add_argument("--code", action="append", default=[], help="LABEL=DIR: another copy of the code")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    codes = [("this checkout", "")] + [tuple(c.split("=", 1)) for c in args.code]
    print(describe_machine())
    got: dict[str, list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for label, path in codes[r % len(codes) :] + codes[: r % len(codes)]:
            got.setdefault(label, []).append(measure(args.calls, path))
    print(f"after the rounds: {describe_machine()}")
    print("| code | queryloop's CPU a call | each round | the hook's processes a call |")
    print("|---|---:|---|---:|")
    for label, _ in codes:
        own = [x[0] for x in got[label]]
        kids = statistics.median(x[1] for x in got[label])
        print(f"| {label} | {statistics.median(own):.0f} µs | {', '.join(f'{x:.0f}' for x in own)} | {kids:.0f} µs |")


if __name__ == "__main__":
    main()
