"""Soak the query loop with random HTTP fault sequences for as long as asked; print the rate and any violation.

    python tools/soak_faults.py --seconds 600 [--seed N] [--max-faults 20]

Each example plays a random sequence of faults from ``queryloop.mockapi.fuzz.FAULTS``
through the real ``anthropic`` SDK against the embedded server and checks the same
invariants as the property test in CI. Prints examples per second at the end and
every violating example (its faults, seed and the reasons taken) as it happens;
exits 1 if any was found.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

from queryloop.mockapi.fuzz import FAULTS, check_report, play, violations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-faults", type=int, default=20)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    report = check_report()
    names = sorted(FAULTS)
    start, examples, bad = time.monotonic(), 0, 0
    while time.monotonic() - start < args.seconds:
        faults = [rng.choice(names) for _ in range(rng.randint(0, args.max_faults))]
        fallback, max_turns = rng.random() < 0.5, rng.choice([None, 1, 2, 3])
        run = asyncio.run(play(faults, fallback=fallback, report=report, max_turns=max_turns))
        found = violations(run, report)
        examples += 1
        if found:
            bad += 1
            print(f"VIOLATION (seed {seed}, example {examples}): {faults=} {fallback=} {max_turns=}")
            print("  reasons:", " ".join(s.reason for s in run.steps))
            for problem in found:
                print("  -", problem)
    elapsed = time.monotonic() - start
    print(f"{examples} examples in {elapsed:.1f} s ({examples / elapsed:.1f}/s), seed {seed}, {bad} with violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
