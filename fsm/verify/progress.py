"""A long exploration's progress: told every few seconds from a thread, printed as one line on stderr.

Owns the :data:`Progress` callback type and its timer; the search only updates a :class:`Status`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sized
from contextlib import contextmanager

import attrs

__all__ = ["PROGRESS_EVERY_S", "Progress", "Status", "print_progress", "progress_line", "told_every_few_seconds"]

Progress = Callable[[str, str, int, float], None]
"""Told, during a long exploration: the machine's name, the phase (``exploring``, ``analysing``), the
configurations found so far and the seconds spent."""

PROGRESS_EVERY_S = 10.0


def progress_line(machine: str, phase: str, configurations: int, elapsed_s: float) -> str:
    """What the command prints each time it is told the exploration's progress."""
    return f"queryloop check: {phase} {machine}: {configurations:,} configurations, {elapsed_s:.0f} s"


def print_progress(machine: str, phase: str, configurations: int, elapsed_s: float) -> None:
    """The command's :data:`Progress`: one line on stderr, so a long exploration shows it is alive."""
    print(progress_line(machine, phase, configurations, elapsed_s), file=sys.stderr, flush=True)


@attrs.define
class Status:
    """Where an exploration is, read by the progress thread (the search itself never waits for it)."""

    phase: str = "exploring"
    configs: Sized = ()


@contextmanager
def told_every_few_seconds(progress: Progress | None, machine: str) -> Iterator[Status]:
    status = Status()
    if progress is None:
        yield status
        return
    stop = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            progress(machine, status.phase, len(status.configs), time.monotonic() - started)

    thread = threading.Thread(target=beat, name=f"check-progress-{machine}", daemon=True)
    thread.start()
    try:
        yield status
    finally:
        stop.set()
        thread.join()
