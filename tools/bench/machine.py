"""The machine and the moment a table was measured on, and how spreads are printed.

Owns :func:`describe_machine` (date, Python, cores, CPU model from ``/proc/cpuinfo``,
load average — the machine is shared, so its load belongs beside the figures),
:func:`peak_rss_mib` and :class:`Spread` (min/median/max of repeated measurements).
Does not own what is measured.
"""

from __future__ import annotations

import datetime
import os
import platform
import resource
import statistics
from collections.abc import Sequence

import attrs

__all__ = ["Spread", "describe_machine", "peak_rss_mib"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe_machine() -> str:
    """One line: UTC date and time, Python version, cores, CPU model and the load average now."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{now}; Python {platform.python_version()} ({platform.python_implementation()}); "
        f"{os.cpu_count()} cores, {_cpu_model()}; load average {load}"
    )


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB.

    ``VmHWM`` from ``/proc/self/status`` where there is one: Linux carries a process's
    ``ru_maxrss`` across ``exec``, so a child's ``resource.getrusage`` figure is never
    below its parent's peak at the fork; ``VmHWM`` belongs to the program the child
    runs. Elsewhere ``ru_maxrss`` (KiB on Linux).
    """
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@attrs.frozen(kw_only=True)
class Spread:
    """Repeated measurements of one figure: printed as ``median (min–max)``."""

    low: float
    median: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one measurement")
        return cls(low=min(values), median=statistics.median(values), high=max(values))

    def show(self, unit: str = "µs", digits: int = 0) -> str:
        return f"{self.median:.{digits}f} {unit} ({self.low:.{digits}f}–{self.high:.{digits}f})"
