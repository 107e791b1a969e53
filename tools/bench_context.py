"""Benchmark: the context layer's cost of building one request, at 10, 100 and 1000 messages.

Measures, on realistic transcripts (a prompt, then tool rounds: an assistant message
with text and a tool call, a user message with its result; every 7th result from the
2nd on is large, 6–12 k characters, the others 200–1200), the pure work
``queryloop.handlers.context`` adds before each request:

- accounting, running: ``message_tokens`` of the newest message added to a running
  total (what the loop keeps; O(1) per request);
- accounting, from scratch: ``message_tokens`` over every message (O(n));
- ``stage_collapses`` over the whole transcript and ``commit_collapses`` of what it
  staged (O(n), the large old results are all staged on the fresh transcript).

Prints the median of repeated runs in microseconds for each part, the total per
request (running accounting + stage + commit) and per message, and the growth ratio
against the previous size (10× more messages: linear growth is ≤ 10×). Prints only.
Usage: ``python tools/bench_context.py [--repeat R]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from queryloop.handlers.context.services.compaction import commit_collapses, stage_collapses
from queryloop.handlers.messages import message_tokens

SIZES = (10, 100, 1000)


def build_transcript(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing tests in the parser module"}]
    turn = 0
    while len(messages) < n:
        tool_id = f"toolu_{turn:05d}"
        name = rng.choice(["Read", "Bash", "Grep", "Edit"])
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {turn}: checking the next part of the parser. " * 2},
                    {
                        "type": "tool_use",
                        "id": tool_id,
                        "name": name,
                        "input": {"file_path": f"src/parser/m{turn % 40}.py"},
                    },
                ],
            }
        )
        size = rng.randint(6000, 12000) if turn % 7 == 1 else rng.randint(200, 1200)
        body = "".join(rng.choice("abcdefghij klmnop\n") for _ in range(64))
        output = (body * (size // len(body) + 1))[:size]
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": output, "is_error": False}],
            }
        )
        turn += 1
    return messages[:n]


def median_us(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    rows = []
    for n in SIZES:
        messages = build_transcript(n)
        running_total = sum(message_tokens(m) for m in messages[:-1])

        def running() -> int:
            return running_total + message_tokens(messages[-1])

        def scratch() -> int:
            return sum(message_tokens(m) for m in messages)

        staged = stage_collapses(messages)

        def stage() -> object:
            return stage_collapses(messages)

        def commit() -> object:
            return commit_collapses(messages, staged)

        t_running = median_us(running, args.repeat)
        t_scratch = median_us(scratch, args.repeat)
        t_stage = median_us(stage, args.repeat)
        t_commit = median_us(commit, args.repeat)
        rows.append((n, len(staged), t_running, t_scratch, t_stage, t_commit, t_running + t_stage + t_commit))

    print(f"context layer cost per request (median of {args.repeat}, µs)")
    header = (
        f"{'messages':>8} {'staged':>6} {'acct run':>9} {'acct full':>10} {'stage':>9} {'commit':>9} "
        f"{'total':>9} {'µs/msg':>7} {'growth':>7}"
    )
    print(header)
    previous: float | None = None
    for n, count, t_running, t_scratch, t_stage, t_commit, total in rows:
        growth = f"{total / previous:.1f}x" if previous else "-"
        print(
            f"{n:>8} {count:>6} {t_running:>9.1f} {t_scratch:>10.1f} {t_stage:>9.1f} {t_commit:>9.1f} "
            f"{total:>9.1f} {total / n:>7.2f} {growth:>7}"
        )
        previous = total
    print("growth: total at this size / total at the previous size (10x the messages; linear is <= 10x)")
    full = [r[3] for r in rows]
    print(f"from-scratch accounting growth: {full[1] / full[0]:.1f}x, {full[2] / full[1]:.1f}x")


if __name__ == "__main__":
    main()
