"""A second, independent checker: the machine's Promela model verified by SPIN.

Owns :func:`spin_settings` and :func:`spin_check` (``spin -a``, gcc and pan in a temporary folder) and reads pan's
verdict and trail. What it proves: docs/checker.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from ..model.spec import MachineSpec
from .promela import (
    FAILURE_MARK,
    LIVENESS,
    MONITORS,
    REASON_MARK,
    SpinError,
    derived_resets,
    property_monitors,
    resolve_params,
    to_promela,
    tracked_caps,
    wrapped,
)
from .report import CheckReport

__all__ = [
    "SpinError",
    "SpinNotFound",
    "SpinReport",
    "derived_resets",
    "format_spin_report",
    "spin_beside",
    "spin_check",
    "spin_settings",
    "to_promela",
]

MODEL = "model.pml"
_CYCLE = "<<<<<START OF CYCLE>>>>>"
# one process: no partial-order reduction; weak fairness (pan -f) only concerns the scheduling of
# processes, so with one it constrains nothing (the environment's choices are never assumed fair)
_SAFETY_CFLAGS = ("-DSAFETY", "-DNOREDUCE", "-DNOFAIR", "-DNOBOUNDCHECK")
_MONITOR_CFLAGS = ("-DNOREDUCE", "-DNOFAIR", "-DNOBOUNDCHECK")
_OPTIMISE_ABOVE = 100_000  # configurations (upper bound) above which gcc -O1 pays for its compile time (-O2: no faster)
_DEPTHS = (10_000, 1_000_000, 10_000_000)  # pan -m, tried in turn while pan says the depth is too small


class SpinNotFound(SpinError):
    """``spin`` or ``gcc`` is not on PATH."""


@attrs.frozen(kw_only=True)
class SpinReport:
    """What SPIN found for one machine at one setting of its params.

    ``configurations`` is pan's "states, stored" of the safety search: one stored state
    per reachable (state, counters) configuration (fewer when that search stopped at an
    error). ``setting`` names the nullable caps' values (all are in ``params``).
    ``checked`` names what the monitor search verified at this setting (each property,
    the liveness claim) and ``unchecked`` what it could not, and why.
    ``counterexample`` lists the reasons of the first error's trail in order; for a cycle
    (a turn that never ends), ``cycle_start`` is the index in it where the cycle begins.
    """

    machine: str
    path: str
    params: Mapping[str, object]
    setting: str
    configurations: int
    errors: int
    verdict: tuple[str, ...]
    checked: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()
    counterexample: tuple[str, ...] = ()
    cycle_start: int | None = None
    failure: str = ""
    seconds: float = 0.0
    promela: str = attrs.field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "path": self.path,
            "ok": self.ok,
            "configurations": self.configurations,
            "errors": self.errors,
            "failure": self.failure,
            "counterexample": list(self.counterexample),
            "cycle_start": self.cycle_start,
            "checked": list(self.checked),
            "unchecked": list(self.unchecked),
            "verdict": list(self.verdict),
            "setting": self.setting,
            "params": dict(self.params),
            "seconds": round(self.seconds, 3),
        }


def format_spin_report(r: SpinReport, ours: int | None = None) -> str:
    """Two-space indented lines printed under ``queryloop check``'s report; ``ours`` = our count."""
    agree = ""
    if ours is not None:
        agree = f" (ours: {ours}, {'equal' if ours == r.configurations else 'DIFFERENT'})"
    lines = [f"  spin ({r.setting}): {r.configurations} configurations{agree}, {r.errors} error(s) [{r.seconds:.1f} s]"]
    if r.ok:
        lines += wrapped("  spin ok: nothing stuck; ", list(r.checked), "", width=110)
    else:
        lines.append(f"  spin FINDING {r.failure}")
        if r.counterexample:
            steps = list(r.counterexample)
            if r.cycle_start is not None:
                steps.insert(r.cycle_start, "[cycle:]")
            lines.append("      via " + " -> ".join(steps))
    if r.unchecked:
        lines += wrapped("  spin did not check: ", list(r.unchecked), "", width=110)
    return "\n".join(lines)


def _setting(spec: MachineSpec, values: Mapping[str, object]) -> str:
    """A setting in a few words: the nullable caps with their values, then the other caps."""
    smallest = _smallest_caps(spec)
    named = [f"{n}={'unset' if values.get(n) is None else values[n]}" for n in smallest if spec.param_map[n].nullable]
    others = [n for n in smallest if not spec.param_map[n].nullable]
    at_smallest = others and all(values.get(n) == smallest[n] for n in others)
    rest = "caps at their smallest (a cap of 1)" if at_smallest else "params as explored"
    return f"{', '.join(named)}; other {rest}" if named else rest


def _smallest_caps(spec: MachineSpec) -> dict[str, int]:
    """Every int param that caps a counter, with the value that gives each counter it caps a cap of 1 or more."""
    out: dict[str, int] = {}
    for c in spec.counters:
        param = spec.param_map.get(c.cap) if isinstance(c.cap, str) else None
        if param is None or param.type != "int":
            continue
        value = max(1, 1 - c.cap_offset, out.get(param.name, 0))
        out[param.name] = value if param.most is None else min(value, int(param.most))
    return out


def spin_beside(spec: MachineSpec, ours: CheckReport, json_report: dict[str, Any] | None = None) -> bool:
    """Check ``spec`` with SPIN at every setting of :func:`spin_settings` around the params ``ours``
    used and print each verdict under ours (or, given ``json_report``, store them there as a list
    ``"spin"``). True when SPIN finds no error anywhere and counts the same configurations as ours
    at ours' params."""
    agrees = True
    found: list[dict[str, Any]] = []
    for params in spin_settings(spec, ours.params):
        r = spin_check(spec, params)
        same = dict(r.params) == dict(ours.params)
        agrees_here = r.ok and (not same or r.configurations == ours.configurations)
        agrees &= agrees_here
        if json_report is None:
            print(format_spin_report(r, ours.configurations if same else None))
        else:
            found.append({**r.to_json(), "agrees": agrees_here})
    if json_report is not None:
        json_report["spin"] = found
    return agrees


def spin_settings(spec: MachineSpec, params: Mapping[str, object] | None = None) -> list[dict[str, object]]:
    """The settings SPIN checks ``spec`` at: ``params`` resolved (each param's check value unless
    given); then every cap at its smallest (a counter's cap of 1) with each nullable cap flipped —
    set there if unset in the first, unset if set.

    An unset cap is modelled as a free choice (below the cap or not, whichever an edge needs),
    which covers every value a caller may give it, so what holds unset holds for every value of
    that cap (at the other caps' values); a set cap is exact, and lets the properties it bounds
    be checked.
    """
    base = resolve_params(spec, params)
    smallest = _smallest_caps(spec)
    small = {**base, **smallest}
    for name in smallest:
        if spec.param_map[name].nullable and base.get(name) is not None:
            small[name] = None
    return [base] if small == base else [base, small]


# ---- running SPIN -----------------------------------------------------------------------------


def spin_check(
    spec: MachineSpec,
    params: Mapping[str, object] | None = None,
    *,
    workdir: str | Path | None = None,
    timeout: float = 600.0,
) -> SpinReport:
    """Export ``spec``, verify it with SPIN and read the verdict.

    Two runs of pan over the same Promela text: a depth-first safety search (stuck
    decisions; its stored states are the configurations) and the monitor search (the
    declared properties' assertions, and acceptance cycles of the liveness claim).
    ``workdir`` keeps the files there (``safety/`` and ``monitors/``); by default a
    temporary directory is removed afterwards. Raises :class:`SpinNotFound` when ``spin``
    or ``gcc`` is missing and :class:`SpinError` when a tool fails.
    """
    spin, cc = _program("spin", "apt-get install spin"), _program("gcc", "apt-get install gcc")
    values = resolve_params(spec, params)
    # the reset sets named here, so a test can stand in a faulty derivation for the one SPIN checks
    text = to_promela(spec, values)
    monitors = property_monitors(spec, values, tracked_caps(spec, values))
    started = time.monotonic()
    with _directory(workdir) as root:
        safety, monitored = root / "safety", root / "monitors"
        bound = _bound(spec, values)
        optimise = "-O1" if bound > _OPTIMISE_ABOVE else "-O0"
        _build(spin, cc, text, {safety: (), monitored: (f"-D{MONITORS}",)}, optimise, timeout)
        with ThreadPoolExecutor(max_workers=2) as pool:  # the two searches are independent
            safety_job = pool.submit(_search, safety, [f"-w{_hash_bits(bound)}"], timeout)
            monitor_job = pool.submit(_search, monitored, ["-a", f"-w{_hash_bits(4 * bound)}"], timeout)
            safety_out, monitor_out = safety_job.result(), monitor_job.result()
        configurations = _stored(safety_out)
        runs = [("safety", safety, (), safety_out), ("monitors", monitored, (f"-D{MONITORS}",), monitor_out)]
        errors = 0
        verdict: list[str] = []
        trail: tuple[tuple[str, ...], int | None, str] = ((), None, "")
        for name, where, defines, output in runs:
            n = _errors(output)
            errors += n
            verdict += [f"{name}: {line}" for line in _verdict_lines(output)]
            if n and not trail[2]:
                trail = _replay(spin, where, defines, output, timeout)
    return SpinReport(
        machine=spec.name,
        path=spec.path,
        params=values,
        setting=_setting(spec, values),
        configurations=configurations,
        errors=errors,
        verdict=tuple(verdict),
        checked=monitors.checked,
        unchecked=monitors.unchecked,
        counterexample=trail[0],
        cycle_start=trail[1],
        failure=trail[2],
        seconds=time.monotonic() - started,
        promela=text,
    )


def _program(name: str, install: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SpinNotFound(f"{name} not found on PATH; install it ({install})")
    return found


@contextmanager
def _directory(workdir: str | Path | None) -> Iterator[Path]:
    if workdir is not None:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="queryloop-spin-") as tmp:
        yield Path(tmp)


def _build(spin: str, cc: str, text: str, runs: Mapping[Path, tuple[str, ...]], optimise: str, timeout: float) -> None:
    """``spin -a`` then gcc, for every run directory at once (the compiles run in parallel)."""
    for where, defines in runs.items():
        where.mkdir(parents=True, exist_ok=True)
        (where / MODEL).write_text(text, encoding="utf-8")
        _run([spin, *defines, "-a", MODEL], where, timeout, "spin -a")
    jobs = []
    for where, defines in runs.items():
        flags = _MONITOR_CFLAGS if defines else _SAFETY_CFLAGS
        cmd = [cc, optimise, *flags, "-w", "-o", "pan", "pan.c"]
        jobs.append((where, subprocess.Popen(cmd, cwd=where, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    try:
        for where, job in jobs:
            _compiled(where, job, timeout)
    finally:  # one compile failed: the others are ended and their pipes closed too
        for _, job in jobs:
            if job.poll() is None:
                job.kill()
            job.wait()
            if job.stdout is not None:
                job.stdout.close()


def _compiled(where: Path, job: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        output, _ = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SpinError(f"gcc: compiling {where / 'pan.c'} took over {timeout:.0f} s") from None
    if job.returncode != 0:
        raise SpinError(f"gcc failed on {where / 'pan.c'}:\n{output.decode(errors='replace')[-2000:]}")


def _run(cmd: Sequence[str], cwd: Path, timeout: float, what: str) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SpinError(f"{what} took over {timeout:.0f} s in {cwd}") from None
    if proc.returncode != 0:
        raise SpinError(f"{what} failed (exit {proc.returncode}) in {cwd}:\n{(proc.stdout + proc.stderr)[-2000:]}")
    return proc.stdout


def _search(where: Path, args: Sequence[str], timeout: float) -> str:
    """Run pan with the smallest depth limit (``-m``) of :data:`_DEPTHS` its search fits in."""
    for depth in _DEPTHS:
        out = _run([str(where / "pan"), f"-m{depth}", *args], where, timeout, "pan")
        if "errors:" not in out:
            raise SpinError(f"pan printed no verdict in {where}:\n{out[-2000:]}")
        if "max search depth too small" not in out:
            return out
    raise SpinError(f"pan: max search depth too small even at -m{_DEPTHS[-1]} in {where}")


def _bound(spec: MachineSpec, values: Mapping[str, object]) -> int:
    """An upper bound on the configurations: states times every tracked counter's range."""
    n = len(spec.states)
    for cap in tracked_caps(spec, values).values():
        n *= cap + 1
    return n


def _hash_bits(n: int) -> int:
    return min(24, max(10, n.bit_length() + 1))


_STORED = re.compile(r"^\s*(\d+) states, stored", re.MULTILINE)
_ERRORS = re.compile(r"errors: (\d+)")


def _stored(out: str) -> int:
    m = _STORED.search(out)
    if m is None:
        raise SpinError(f"pan printed no 'states, stored' line:\n{out[-2000:]}")
    return int(m.group(1))


def _errors(out: str) -> int:
    m = _ERRORS.search(out)
    assert m is not None  # _pan checked it
    return int(m.group(1))


def _verdict_lines(out: str) -> list[str]:
    """pan's findings, its error count and stored states, and any code it never reached but the loop's end."""
    lines: list[str] = []
    unreached: list[str] = []
    in_unreached = False
    for raw in out.splitlines():
        line = raw.strip()
        if line.startswith("unreached in"):
            in_unreached = True
            unreached = [line]
            continue
        if in_unreached:
            if not raw.startswith("\t"):
                in_unreached = False
                if any('"-end-"' not in u and not u.startswith("(") for u in unreached[1:]):
                    lines += unreached
            else:
                unreached.append(line)
                continue
        if line.startswith("pan:") and not line.startswith(("pan: elapsed", "pan: rate", "pan: wrote")):
            lines.append(line)
        elif "errors:" in line or "states, stored" in line or line.startswith(("Warning", "error")):
            lines.append(line)
    return lines


def _replay(
    spin: str, where: Path, defines: tuple[str, ...], output: str, timeout: float
) -> tuple[tuple[str, ...], int | None, str]:
    """The reasons along the trail pan wrote, where its cycle starts, and what went wrong."""
    failure = next((line.strip() for line in output.splitlines() if re.match(r"\s*pan:\d+:", line)), "error")
    failure = re.sub(r"^pan:\d+:\s*", "", failure)
    if not (where / f"{MODEL}.trail").exists():
        return (), None, failure
    replay = _run([spin, *defines, "-t", MODEL], where, timeout, "spin -t")
    reasons: list[str] = []
    cycle: int | None = None
    for raw in replay.splitlines():
        line = raw.strip()
        if line.startswith(FAILURE_MARK):
            failure = line[len(FAILURE_MARK) :]
        elif line.startswith(REASON_MARK):
            reasons.append(line[len(REASON_MARK) :])
        elif line == _CYCLE:
            cycle = len(reasons)
    if "acceptance cycle" in failure:
        failure = f"non-progress cycle: a step that never reaches the next progress step or an end (ltl {LIVENESS})"
    return tuple(reasons), cycle, failure
