"""Soak the query loop with random fault sequences, bounded in runs and time; print a table and any violation.

    python tools/soak_faults.py --runs 10000 [--seconds 7200] [--seed N] [--max-faults 12]

Each run plays a random sequence of faults from ``queryloop.mockapi.fuzz.FAULTS``
(statuses with and without retry-after, stream cuts before and after a tool_use block,
malformed tool_use, max_tokens, prompt-too-long, refusals, tool errors, an MCP server
that crashes or hangs mid-call) through the real ``anthropic`` SDK against the embedded
server over loopback, some with misbehaving hooks (a timeout, bad JSON), some
interrupted at a random step, then resumes the stored session. After each run it checks
what ``queryloop.mockapi.fuzz.violations`` checks: a typed terminal, no watched property
broken (internal_error), counters within caps, at most the checker's bound of model
requests per turn at the caps the run used, every tool_use answered once in every
request, the transcript loads and the resume completes. Prints every violating run (its
plan and seed) as it happens, then the table (``--markdown``: as docs/benchmarks.md
shows it); exits 1 if any run broke an invariant.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sys
import time
from collections import Counter
from datetime import UTC, datetime

from queryloop.mockapi.fuzz import FAULTS, HOOK_EVENTS, HOOK_FAULTS, FaultRun, check_report, play, violations
from queryloop.mockapi.fuzz import worst_requests_per_turn as worst_of

INTERRUPT_SHARE = 0.2  # runs interrupted at a random step (some land after the run ended: only landed ones count)
HOOK_SHARE = 0.3  # runs with one or two misbehaving hooks


class Plan:
    """One run's random plan: the server's faults, the hooks, the interrupt, the caps."""

    def __init__(self, rng: random.Random, max_faults: int) -> None:
        names = sorted(FAULTS)
        self.faults = [rng.choice(names) for _ in range(rng.randint(0, max_faults))]
        self.fallback = rng.random() < 0.5
        self.max_turns = rng.choice([None, 1, 2, 3])
        hooks = rng.randint(1, 2) if rng.random() < HOOK_SHARE else 0
        self.hooks = [(rng.choice(sorted(HOOK_FAULTS)), rng.choice(HOOK_EVENTS)) for _ in range(hooks)]
        self.interrupt_at = rng.randint(1, 25) if rng.random() < INTERRUPT_SHARE else None

    def __repr__(self) -> str:
        return (
            f"faults={self.faults} fallback={self.fallback} max_turns={self.max_turns} "
            f"hooks={self.hooks} interrupt_at={self.interrupt_at}"
        )


class Tally:
    """What the soak saw: faults by kind, terminals by reason, the worst requests per turn, violations."""

    def __init__(self) -> None:
        self.runs = self.bad = self.worst = self.drawn = 0
        self.faults: Counter[str] = Counter()
        self.terminals: Counter[str] = Counter()
        self.resumed: Counter[str] = Counter()

    def add(self, plan: Plan, run: FaultRun, found: list[str]) -> None:
        self.runs += 1
        self.bad += bool(found)
        served = plan.faults[: len(run.requests)]  # each request takes the next fault; a run may end before the last
        self.drawn += len(plan.faults)
        self.faults.update(f for f in served if f != "text")
        self.faults.update(kind for kind, _event in plan.hooks)
        self.faults["sigint"] += run.interrupted
        self.terminals[str(run.result.get("terminal_reason"))] += 1
        if run.resumed is not None:
            self.resumed[str(run.resumed.result.get("terminal_reason"))] += 1
        self.worst = max(self.worst, worst_of(run), *([worst_of(run.resumed)] if run.resumed else []))


def _table(tally: Tally, bound: int, head: str) -> str:
    rows = [head, "", "| what | figure |", "|---|---|"]
    rows.append(f"| runs (each then resumed) | {tally.runs} |")
    rows.append(
        f"| faults injected (of {tally.drawn} drawn: a run may end before its last) | {sum(tally.faults.values())} |"
    )
    rows += [f"| fault `{k}` | {v} |" for k, v in sorted(tally.faults.items())]
    rows += [f"| terminal `{k}` | {v} |" for k, v in sorted(tally.terminals.items())]
    rows += [f"| resume ended `{k}` | {v} |" for k, v in sorted(tally.resumed.items())]
    rows.append(f"| worst model requests in one turn (the checker's bound at these caps) | {tally.worst} ({bound}) |")
    rows.append(f"| runs with a violation | **{tally.bad}** |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="how many runs (default 10 000)")
    parser.add_argument("--seconds", type=float, default=7200.0, help="stop starting runs after this (default 2 h)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-faults", type=int, default=12, help="the longest fault sequence (default 12, as in CI)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    report = check_report()
    tally = Tally()
    load_before, start = os.getloadavg()[0], time.monotonic()
    started = datetime.now(UTC)
    while tally.runs < args.runs and time.monotonic() - start < args.seconds:
        plan = Plan(rng, args.max_faults)
        run = asyncio.run(
            play(
                plan.faults,
                fallback=plan.fallback,
                report=report,
                max_turns=plan.max_turns,
                hooks=plan.hooks,
                interrupt_at=plan.interrupt_at,
                resume=True,
            )
        )
        found = violations(run, report)
        tally.add(plan, run, found)
        if tally.runs % 500 == 0:
            print(f"{tally.runs} runs, {time.monotonic() - start:.0f} s, {tally.bad} with violations", flush=True)
        if found:
            print(f"VIOLATION (seed {seed}, run {tally.runs}): {plan!r}", flush=True)
            print("  reasons:", " ".join(s.reason for s in run.steps))
            for problem in found:
                print("  -", problem, flush=True)
    elapsed = time.monotonic() - start
    head = (
        f"{started:%Y-%m-%d %H:%M} UTC, {elapsed / 60:.1f} min ({tally.runs / elapsed:.1f} runs/s), seed {seed}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores, load average {load_before:.1f} before "
        f"and {os.getloadavg()[0]:.1f} after; caps: the params' check values {dict(report.at)}"
    )
    print(_table(tally, report.per_step["model_requests"], head))
    return 1 if tally.bad else 0


if __name__ == "__main__":
    sys.exit(main())
