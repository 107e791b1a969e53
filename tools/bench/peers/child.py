"""One framework in a process of its own: warm up, play the agent at each N once, print one JSON line.

Usage: ``python tools/bench/peers/child.py FRAMEWORK --ns 50,500 [--url URL --tag TAG]
[--budget-s S --budget-from M]``. A run of at least M turns projected (from the previous
one, growing as N²) to take longer than ``S`` seconds is not made, nor any larger one.
The line holds the version, the wall time of each run divided by N (µs per turn) and
the process's peak RSS (``VmHWM``, see ``bench.machine.peak_rss_mib``; after every run); or ``error`` when
the framework cannot be imported or its run did not go as scripted. Over HTTP, run
``TAG-N`` names the server's script (``TAG-warm`` for the warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

from bench.machine import peak_rss_mib  # noqa: E402  (found through the path set just above)

__all__ = ["CLOCKS", "FRAMEWORKS", "HTTP_FRAMEWORKS", "WARM_UP_TURNS"]

# key → (module, loader); the order is the table's
FRAMEWORKS = {
    "floor": ("floor", "load"),
    "floor-body": ("floor", "load_with_body"),
    "queryloop": ("queryloop_agent", "load_inprocess"),
    "langgraph": ("langgraph_agent", "load"),
    "pydantic-ai": ("pydantic_ai_agent", "load"),
    "openai-agents": ("openai_agents_agent", "load"),
    "anthropic-http": ("anthropic_agent", "load"),
    "queryloop-http": ("queryloop_agent", "load_http"),
}
HTTP_FRAMEWORKS = frozenset({"anthropic-http", "queryloop-http"})
WARM_UP_TURNS = 5


def projected_s(seconds: dict[str, float], n: int) -> float:
    """What a run of ``n`` turns should take, from the last one, assuming the worst growth seen here: N²."""
    if not seconds:
        return 0.0
    last = max(seconds, key=int)
    return seconds[last] * (n / int(last)) ** 2


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # cpu: this process's user + system time


async def _play(
    key: str, ns: list[int], url: str, tag: str, budget: tuple[int, float], clock: str = "wall"
) -> dict[str, object]:
    module, loader = FRAMEWORKS[key]
    try:
        agent = getattr(importlib.import_module(module), loader)(url)
    except ImportError as exc:
        return {"error": f"cannot import: {exc}"}
    await agent.run(WARM_UP_TURNS, f"{tag}-warm")
    per_step: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for n in ns:
        if n >= budget[0] and projected_s(seconds, n) > budget[1]:
            break  # the larger N would not finish in reasonable time: reported as not run
        now = CLOCKS[clock]
        start = now()
        await agent.run(n, f"{tag}-{n}")
        elapsed = now() - start
        per_step[str(n)] = elapsed / n * 1e6
        seconds[str(n)] = elapsed
    return {
        "framework": agent.framework,
        "version": agent.version,
        "note": agent.note,
        "per_turn_us": per_step,
        "run_s": seconds,
        "peak_rss_mib": peak_rss_mib(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=list(FRAMEWORKS))
    parser.add_argument("--ns", required=True)
    parser.add_argument("--url", default="")
    parser.add_argument("--tag", default="run")
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="skip an N projected to take longer")
    parser.add_argument("--budget-from", type=int, default=0, help="the smallest N the budget applies to")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall", help="time a run by wall clock or CPU")
    args = parser.parse_args()
    ns = [int(part) for part in args.ns.split(",")]
    try:
        line = asyncio.run(_play(args.framework, ns, args.url, args.tag, (args.budget_from, args.budget_s), args.clock))
    except SystemExit as exc:
        line = {"error": str(exc.code)}
    except Exception as exc:
        line = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
