"""A second, independent checker: the machine exported as Promela and verified by SPIN.

Owns the export (:func:`to_promela`) and the run (:func:`spin_check`): ``spin -a``, gcc
and pan in a temporary directory, for two searches over the same Promela text — a safety
search whose stored states are exactly the reachable (state, counters) configurations
(``counter <= cap`` asserted on every increment, a stuck decision asserted false), and
SPIN's non-progress cycle search (``-DNP``, ``pan -l``, a ``progress`` label after every
progress step). It reads pan's verdict (pan exits 0 even when it finds errors) and
replays an error trail as the list of reasons taken; :func:`spin_beside` prints it under
``queryloop check``'s report.

The model is derived from the spec here, sharing no code with ``fsm.check``: the two
checkers agree only if both follow the machine's semantics. Does not install SPIN or a C
compiler (a missing one is :class:`SpinNotFound`) and does not decide the exit code.
"""

from __future__ import annotations

import itertools
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

from .check import CheckReport
from .errors import FsmError
from .spec import MachineSpec, TransitionSpec

__all__ = [
    "SpinError",
    "SpinNotFound",
    "SpinReport",
    "format_spin_report",
    "spin_beside",
    "spin_check",
    "to_promela",
]

MODEL = "model.pml"
NONPROGRESS = "NONPROGRESS"  # the preprocessor symbol that puts the progress labels in
_MARK = "@@ "  # printf prefix of a reason in a replayed trail
_FAIL = "@@! "  # printf prefix of what went wrong (a stuck decision)
_CYCLE = "<<<<<START OF CYCLE>>>>>"
# one process: no partial-order reduction, no fairness; optimise pan only when its search is long
_SAFETY_CFLAGS = ("-DSAFETY", "-DNOREDUCE", "-DNOFAIR", "-DNOBOUNDCHECK")
_PROGRESS_CFLAGS = ("-DNP", "-DNOREDUCE", "-DNOFAIR", "-DNOBOUNDCHECK")
_OPTIMISE_ABOVE = 100_000  # configurations (upper bound) above which gcc -O2 pays for its compile time
_DEPTHS = (10_000, 1_000_000, 10_000_000)  # pan -m, tried in turn while pan says the depth is too small

# an atom of an option's condition: ("lt", counter) is `counter < cap`, ("ge", counter) `counter >= cap`
_Atom = tuple[str, str]
_Conj = frozenset[_Atom]


class SpinError(FsmError):
    """SPIN, the C compiler or pan failed on a model (a tool failure, not a finding about the machine)."""


class SpinNotFound(SpinError):
    """``spin`` or ``gcc`` is not on PATH."""


@attrs.frozen(kw_only=True)
class SpinReport:
    """What SPIN found for one machine at one setting of its params.

    ``configurations`` is pan's "states, stored" of the safety search: one stored state
    per reachable (state, counters) configuration (fewer when that search stopped at an
    error). ``counterexample`` lists the reasons of the first error's trail in order; for
    a non-progress cycle, ``cycle_start`` is the index in it where the cycle begins.
    """

    machine: str
    path: str
    params: Mapping[str, Any]
    configurations: int
    errors: int
    verdict: tuple[str, ...]
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
            "verdict": list(self.verdict),
            "params": dict(self.params),
            "seconds": round(self.seconds, 3),
        }


def format_spin_report(r: SpinReport, ours: int | None = None) -> str:
    """Two-space indented lines printed under ``queryloop check``'s report; ``ours`` = our count."""
    agree = ""
    if ours is not None:
        agree = f" (ours: {ours}, {'equal' if ours == r.configurations else 'DIFFERENT'})"
    lines = [f"  spin: {r.configurations} configurations{agree}, {r.errors} error(s) [{r.seconds:.1f} s]"]
    if r.ok:
        lines.append("  spin ok: counters within caps, nothing stuck, no cycle without a progress step")
    else:
        lines.append(f"  spin FINDING {r.failure}")
        if r.counterexample:
            steps = list(r.counterexample)
            if r.cycle_start is not None:
                steps.insert(r.cycle_start, "[cycle:]")
            lines.append("      via " + " -> ".join(steps))
    return "\n".join(lines)


def spin_beside(spec: MachineSpec, ours: CheckReport, json_report: dict[str, Any] | None = None) -> bool:
    """Check ``spec`` with SPIN at the params ``ours`` used and print the verdict under ours
    (or, given ``json_report``, store it there as ``"spin"``). True when SPIN finds no error
    and counts the same configurations."""
    r = spin_check(spec, ours.params)
    agrees = r.ok and r.configurations == ours.configurations
    if json_report is None:
        print(format_spin_report(r, ours.configurations))
    else:
        json_report["spin"] = {**r.to_json(), "agrees": agrees}
    return agrees


# ---- export -----------------------------------------------------------------------------------


def _resolve(spec: MachineSpec, params: Mapping[str, Any] | None) -> dict[str, Any]:
    values = spec.param_check_values
    values.update(params or {})
    return values


def to_promela(spec: MachineSpec, params: Mapping[str, Any] | None = None) -> str:
    """The machine as one Promela model; ``params`` resolve as for ``check_spec``.

    One global ``st`` (an ``mtype``, one value per state), one bounded global per counter
    whose cap is set (others are untracked, as in the explorer), and one active process
    looping over ``d_step`` options, one per (state, event, winning edge): the option's
    condition folds in every truth assignment of the decision's guard names under which
    that edge is the first candidate whose counter is below its cap, so one engine step is
    one atomic step and the process's control state never changes. A step into a terminal
    state zeroes the counters (a run that ended is its end, as the explorer counts).

    Compiled with ``-DNONPROGRESS`` (the cycle search), a ``progress_N`` label follows every
    progress step and the options marked ``SAFETY_ONLY`` are left out: steps into terminal
    states (on no cycle; most of the query loop's configurations are ends) and the stuck
    assertions (``pan -A`` would turn them into self-loops).
    """
    values = _resolve(spec, params)
    caps = _tracked_caps(spec, values)
    states = [s.name for s in spec.states]
    if len(states) > 255:
        raise SpinError(f"machine {spec.name!r}: {len(states)} states; a Promela mtype holds at most 255")
    groups = spec.candidates()
    ends = set(spec.terminals)
    out = [
        _comment(f"machine {spec.name} ({spec.path}), exported by queryloop.fsm.spin"),
        *_wrapped("/* params: ", [_comment(f"{k}={v!r}")[3:-3] for k, v in values.items()] or ["none"], " */"),
        "/* one stored state per (state, counters) configuration: st and the tracked counters */",
        f"#ifdef {NONPROGRESS}",
        "#define PROGRESS(n) ; progress_##n: skip",
        "#define SAFETY_ONLY(option)",
        "#else",
        "#define PROGRESS(n)",
        "#define SAFETY_ONLY(option) option",
        "#endif",
        "",
        *_wrapped("mtype = { ", [_st(s) for s in states], " };"),
        f"mtype st = {_st(spec.initial)};",
    ]
    for c in spec.counters:
        cap = caps.get(c.name)
        if cap is None:
            out.append(f"/* counter {c.name}: cap unset, untracked (its cap test is a free guard) */")
        else:
            out.append(f"{_int_type(cap)} {_ct(c.name)} = 0; /* cap {cap} */")
    out += ["", "active proctype machine() {", "end_loop:", "  do"]
    n_progress = 0
    for s in spec.states:
        if s.terminal:
            continue
        for event in dict.fromkeys((*s.emits, spec.abort_event)):
            cands = groups.get((s.name, event), ())
            out.append(f"  /* {s.name} on {event}: " + (", ".join(t.reason for t in cands) or "no candidate") + " */")
            outcomes = _outcomes(cands, caps)
            for winner, conjs in outcomes:
                cond = _condition(s.name, conjs, caps)
                if winner is None:
                    fail = f"stuck in {s.name} on {event}: no candidate can fire"
                    out.append(f'  SAFETY_ONLY(:: d_step {{ {cond} -> printf("{_FAIL}{fail}\\n"); assert(false) }})')
                    continue
                t = cands[winner]
                body = [*_updates(spec, t, caps), f'printf("{_MARK}{t.reason}\\n")']
                option = f":: d_step {{ {cond} -> {'; '.join(body)} }}"
                if t.dest in ends:
                    out.append(f"  SAFETY_ONLY({option})")
                elif t.progress:
                    n_progress += 1
                    out.append(f"  {option} PROGRESS({n_progress})")
                else:
                    out.append(f"  {option}")
            winners = {w for w, _ in outcomes}
            for i, t in enumerate(cands):
                if i not in winners:
                    why = f"the cap of {t.counter} is 0" if caps.get(t.counter or "") == 0 else "shadowed"
                    out.append(f"  /* {t.reason} never fires: {why} */")
    out += [f"#ifdef {NONPROGRESS}", "  :: false /* the loop keeps an option */", "#endif", "  od", "}", ""]
    return "\n".join(out)


def _wrapped(head: str, items: Sequence[str], tail: str, width: int = 100) -> list[str]:
    """``head`` + the comma-separated items + ``tail``, continued on indented lines past ``width``."""
    lines = [head]
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + len(text) + 1 > width and lines[-1].strip():
            lines.append("    ")
        lines[-1] += ("" if lines[-1].endswith((" ", "{")) else " ") + text
    lines[-1] += tail
    return lines


def _comment(text: str) -> str:
    return "/* " + text.replace("*/", "* /") + " */"


def _st(state: str) -> str:
    return f"s_{state}"


def _ct(counter: str) -> str:
    return f"c_{counter}"


def _int_type(cap: int) -> str:
    return "byte" if cap <= 255 else "short" if cap <= 32767 else "int"


def _tracked_caps(spec: MachineSpec, values: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in spec.counters:
        cap = spec.cap_of(c, values)
        if cap is not None:
            out[c.name] = cap
    return out


def _free_names(t: TransitionSpec, caps: Mapping[str, int]) -> tuple[str, ...]:
    """The free booleans a candidate needs true: its guards, and an untracked counter's cap test."""
    if t.counter is not None and t.counter not in caps:
        return (*t.guards, f"{t.counter} < unset cap")
    return t.guards


def _outcomes(cands: Sequence[TransitionSpec], caps: Mapping[str, int]) -> list[tuple[int | None, tuple[_Conj, ...]]]:
    """Per winning candidate (``None``: stuck), the counter conditions under which it wins.

    Every truth assignment of the decision's guard names (one value per name) gives the
    candidates whose guards hold, in YAML order; along it, a candidate with a tracked
    counter wins when its counter is below its cap and every one before it is at its cap.
    The conditions of one winner are OR-ed, reduced by absorption.
    """
    names = list(dict.fromkeys(n for t in cands for n in _free_names(t, caps)))
    wins: dict[int | None, set[_Conj]] = {}

    def record(winner: int | None, conj: set[_Atom]) -> None:
        if any(("lt", c) in conj and ("ge", c) in conj for _, c in conj):
            return  # contradictory: a counter both below and at its cap
        if any(op == "lt" and caps[c] == 0 for op, c in conj):
            return  # a counter below a cap of 0
        wins.setdefault(winner, set()).add(frozenset(a for a in conj if not (a[0] == "ge" and caps[a[1]] == 0)))

    for bits in itertools.product((False, True), repeat=len(names)):
        true = {n for n, b in zip(names, bits, strict=True) if b}
        blocked: set[_Atom] = set()
        for i, t in enumerate(cands):
            if not all(n in true for n in _free_names(t, caps)):
                continue
            if t.counter in caps:
                assert t.counter is not None
                record(i, blocked | {("lt", t.counter)})
                blocked.add(("ge", t.counter))
                continue
            record(i, blocked)
            break
        else:
            record(None, blocked)
    order = [*range(len(cands)), None]
    return [
        (w, tuple(sorted((c for c in wins[w] if not any(o < c for o in wins[w])), key=_conj_key)))
        for w in order
        if w in wins
    ]


def _conj_key(conj: _Conj) -> tuple[int, list[_Atom]]:
    return (len(conj), sorted(conj, key=lambda a: (a[1], a[0])))


def _condition(state: str, conjs: Sequence[_Conj], caps: Mapping[str, int]) -> str:
    head = f"st == {_st(state)}"
    if any(not c for c in conjs):
        return head
    atoms = [
        " && ".join(f"{_ct(c)} {'<' if op == 'lt' else '>='} {caps[c]}" for op, c in sorted(conj, key=lambda a: a[1]))
        for conj in conjs
    ]
    if len(atoms) == 1:
        return f"{head} && {atoms[0]}"
    return f"{head} && (" + " || ".join(f"({a})" for a in atoms) + ")"


def _updates(spec: MachineSpec, t: TransitionSpec, caps: Mapping[str, int]) -> list[str]:
    """Resets, then the edge's own counter incremented (and asserted within its cap), then the state.

    A step into a terminal state then zeroes every counter: a run that ended is its terminal
    state, whatever its counters were (one configuration per end, as the explorer counts).
    """
    out = [f"{_ct(c.name)} = 0" for c in spec.counters if c.name in spec.resets_of(t) and c.name in caps]
    if t.counter in caps:
        assert t.counter is not None
        out.append(f"{_ct(t.counter)}++")
    out.append(f"st = {_st(t.dest)}")
    if t.counter in caps:
        assert t.counter is not None
        out.append(f"assert({_ct(t.counter)} <= {caps[t.counter]})")
    if spec.state_map[t.dest].terminal:
        out += [f"{_ct(c.name)} = 0" for c in spec.counters if c.name in caps]
    return out


# ---- running SPIN -----------------------------------------------------------------------------


def spin_check(
    spec: MachineSpec,
    params: Mapping[str, Any] | None = None,
    *,
    workdir: str | Path | None = None,
    timeout: float = 600.0,
) -> SpinReport:
    """Export ``spec``, verify it with SPIN and read the verdict.

    Two runs of pan over the same Promela text: a depth-first safety search (assertions,
    stuck decisions; its stored states are the configurations) and a non-progress cycle
    search. ``workdir`` keeps the files there (``safety/`` and ``progress/``); by default a
    temporary directory is removed afterwards. Raises :class:`SpinNotFound` when ``spin``
    or ``gcc`` is missing and :class:`SpinError` when a tool fails.
    """
    spin, cc = _tool("spin", "apt-get install spin"), _tool("gcc", "apt-get install gcc")
    values = _resolve(spec, params)
    text = to_promela(spec, values)
    started = time.monotonic()
    with _directory(workdir) as root:
        safety, progress = root / "safety", root / "progress"
        bound = _bound(spec, values)
        optimise = "-O2" if bound > _OPTIMISE_ABOVE else "-O0"
        _build(spin, cc, text, {safety: (), progress: (f"-D{NONPROGRESS}",)}, optimise, timeout)
        with ThreadPoolExecutor(max_workers=2) as pool:  # the two searches are independent
            safety_job = pool.submit(_search, safety, [f"-w{_hash_bits(bound)}"], timeout)
            progress_job = pool.submit(_search, progress, ["-l", "-A", f"-w{_hash_bits(2 * bound)}"], timeout)
            safety_out, progress_out = safety_job.result(), progress_job.result()
        configurations = _stored(safety_out)
        runs = [("safety", safety, (), safety_out), ("progress", progress, (f"-D{NONPROGRESS}",), progress_out)]
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
        configurations=configurations,
        errors=errors,
        verdict=tuple(verdict),
        counterexample=trail[0],
        cycle_start=trail[1],
        failure=trail[2],
        seconds=time.monotonic() - started,
        promela=text,
    )


def _tool(name: str, install: str) -> str:
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
        flags = _PROGRESS_CFLAGS if defines else _SAFETY_CFLAGS
        cmd = [cc, optimise, *flags, "-w", "-o", "pan", "pan.c"]
        jobs.append((where, subprocess.Popen(cmd, cwd=where, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    for where, job in jobs:
        try:
            output, _ = job.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            job.kill()
            job.communicate()
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


def _bound(spec: MachineSpec, values: Mapping[str, Any]) -> int:
    """An upper bound on the configurations: states times every tracked counter's range."""
    n = len(spec.states)
    for cap in _tracked_caps(spec, values).values():
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
        if line.startswith(_FAIL):
            failure = line[len(_FAIL) :]
        elif line.startswith(_MARK):
            reasons.append(line[len(_MARK) :])
        elif line == _CYCLE:
            cycle = len(reasons)
    return tuple(reasons), cycle, failure
