"""Soak stored sessions: kill -9 the same scripted run at random times, resume it, check the invariants.

    python tools/soak_sessions.py --runs 50 [--seed N] [--keep DIR]

Each run plays ``tests/fixtures/sessions/crash_run.yaml`` (Edit, a Bash side effect, two
Bash calls in one turn, Write, the answer) through the real CLI against the embedded
server, sends SIGKILL at a random moment of it (seeded; uniform over the run's length,
so some kills land after it ended), ends the Bash calls the kill orphaned, then runs
``--resume ID -p continue`` against a server that answers plainly and checks what
``tests/e2e/test_crash_resume.py`` checks at its fixed points: the transcript loads, the
resume exits 0 with the same session id, its first request holds the stored history
with every tool_use paired, a dangling call the ledger shows completed gets its real
recorded result (any other the interrupted error), and no side effect ran twice.

Prints one line per failing run (its seed, kill time and the problems) and a summary;
exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.test_crash_resume import FULL_RUN_LINES, Observed, crash_and_resume, invariant_problems  # noqa: E402

STARTUP_SECONDS = 0.6  # before this the CLI is still importing: a kill finds no session (checked, but rarely useful)
RUN_SECONDS = 5.5  # start-up and the scripted run with its hooks on an idle 2-core machine (an upper bound)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="how many kill-and-resume runs (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="the seed of the kill times (default: a random one)")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep every run's files under DIR (default: only failures, in a temp dir)",
    )
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    base = args.keep or Path(tempfile.mkdtemp(prefix="queryloop-soak-sessions-"))
    base.mkdir(parents=True, exist_ok=True)
    kills = failures = ended = 0
    lines_seen: dict[int, int] = {}
    start = time.monotonic()
    for index in range(args.runs):
        at = rng.uniform(STARTUP_SECONDS, RUN_SECONDS)
        where = base / f"run-{index:04d}"

        def ready(seen: Observed, elapsed: float, at: float = at) -> bool:
            return elapsed >= at or seen.lines >= FULL_RUN_LINES

        try:
            crash = crash_and_resume(where, f"run {index}", ready)
            problems = invariant_problems(crash)
        except Exception as exc:  # a run that could not even be set up counts as a failure
            problems = [f"{type(exc).__name__}: {exc}"]
            crash = None
        if crash is not None:
            lines_seen[crash.at_kill.lines] = lines_seen.get(crash.at_kill.lines, 0) + 1
            if crash.at_kill.lines >= FULL_RUN_LINES:
                ended += 1
            else:
                kills += 1
        if problems:
            failures += 1
            print(f"FAIL run {index} (seed {seed}, kill at {at:.3f} s, files in {where}):")
            for problem in problems:
                print(f"  - {problem}")
        elif args.keep is None:
            shutil.rmtree(where, ignore_errors=True)
    elapsed = time.monotonic() - start
    spread = " ".join(f"{k}:{v}" for k, v in sorted(lines_seen.items()))
    print(
        f"{args.runs} runs in {elapsed:.1f} s, seed {seed}: {kills} killed mid-run, "
        f"{ended} killed after the run ended, {failures} failures; "
        f"transcript lines at the kill (lines:runs) {spread or '-'}"
    )
    if failures == 0 and args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
