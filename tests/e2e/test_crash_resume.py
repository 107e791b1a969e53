"""End-to-end: kill -9 at seeded, deterministic points of one scripted run, then ``--resume`` it.

The run (``tests/fixtures/sessions/crash_run.yaml``) Edits a file, runs a Bash side
effect, runs two Bash calls in one turn (a quick side effect, then a slow one), Writes a
new file and answers. Every place a kill lands is one where the process is provably
waiting, with no hook in production code, and the run moves on only when the test lets
it (lockstep): each model step is held (``hold:``) until the test creates its file, and
each Bash call between its marker files and the PreToolUse / PostToolUse / Stop hooks
given with ``--settings`` wait in ``hold.sh`` until the test removes ``gate/held``. At
each such place the test reads the transcript's line count, the ledger and the marker
files, and sends SIGKILL if the point's state is there, else lets the run on; the state
found after the kill must then be exactly the expected one (so the point really is
deterministic, however busy the machine).

After each kill: the transcript loads; ``--resume ID -p continue`` against a server
that answers plainly exits 0; its first request holds the stored history, every
tool_use paired; a dangling call the ledger shows completed is answered with its real
recorded result, any other with the interrupted error; no side effect ran twice and
the resume ran nothing. ``tools/soak_sessions.py`` runs the same run with kills at
random times and checks the same invariants (:func:`invariant_problems`).

The points run two at a time (the machine has two cores and most of a run is spent
sleeping), each in its own ``$QUERYLOOP_HOME`` and working directory.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from queryloop.handlers.messages import ledger_problem
from queryloop.handlers.session.services.store import SessionPaths, read_jsonl
from queryloop.handlers.session.services.transcript import INTERRUPTED_BEFORE_RECORDED, History, load_history
from queryloop.mockapi.scenario import parse_scenario

from .harness import HANG_GUARD_S, ROOT, CliRun, MockApi, cli_command, cli_env, live_members, run_cli

# ~90 s in all: tools/test.sh --fast leaves the module out. One xdist worker runs the whole module (its group), so
# the module's crashes (every point's run, killed and resumed) are made once per run, not once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("crash_resume")]

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
SCRIPT = (FIXTURES / "crash_run.yaml").read_text(encoding="utf-8")
PLAIN = (FIXTURES / "plain_answer.yaml").read_text(encoding="utf-8")
SESSION_ID = "0c5a5e55-1de0-4c0d-9e55-c4a5bad5e551"
RESUME_PROMPT = "continue"

EDIT, B1, QUICK, SLOW, WRITE = (
    "toolu_crash_edit",
    "toolu_crash_b1",
    "toolu_crash_quick",
    "toolu_crash_slow",
    "toolu_crash_write",
)
MARKERS = ("b1.start", "b1.effect", "slow.start", "slow.effect")
ORIGINAL_TARGET = b"alpha\nbeta\n"
EDITED_TARGET = b"alpha\nBETA\n"
FULL_RUN_LINES = 11  # prompt, 4 × (tool_use, results), the answer, the run's system/result entry

_WAIT = "cat > /dev/null; sh hold.sh 0.12"  # a hook that holds the run at a known place (hold.sh: the fixture's)
HOOKS = json.dumps(
    {
        "hooks": {
            "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": _WAIT}]}],
            "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": _WAIT}]}],
            "Stop": [{"hooks": [{"type": "command", "command": _WAIT}]}],
        }
    }
)


# ---- one crashed run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """What a kill can be timed on: transcript lines, ledger ids, marker files."""

    lines: int
    ledger: frozenset[str]
    markers: frozenset[str]


def session_paths(work: Path, home: Path) -> SessionPaths:
    return SessionPaths(home=home, cwd=work.resolve(), session_id=SESSION_ID)


def observe(work: Path, paths: SessionPaths) -> Observed:
    try:
        lines = paths.transcript.read_bytes().count(b"\n")
    except FileNotFoundError:
        lines = 0
    entries, _ = read_jsonl(paths.ledger)
    return Observed(
        lines=lines,
        ledger=frozenset(str(e.get("tool_use_id")) for e in entries),
        markers=frozenset(m for m in MARKERS if (work / m).exists()),
    )


def _groups_working_in(work: Path) -> set[int]:
    """The process groups of live processes whose working directory is ``work`` (the run's Bash calls)."""
    groups = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) != work:
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            groups.add(int(fields[2]))
    return groups


def end_orphans(work: Path) -> None:
    """Kill the Bash calls a kill -9 of the CLI left running (each runs in its own group).

    Each call records its group in ``pgids`` first thing, but one the CLI spawned just before
    it was killed may not have got that far: every live process working in ``work`` is found
    too, for a while after the kill (a call still between its fork and its exec lands there).
    """
    work = work.resolve()
    groups: set[int] = set()
    quiet_since = None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            groups |= {int(x) for x in (work / "pgids").read_text().split()}
        except FileNotFoundError:
            pass
        groups |= _groups_working_in(work)
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if any(live_members(g) for g in groups) or _groups_working_in(work):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 0.3:
            return  # nothing left, and nothing new started for a while
        time.sleep(0.02)


@dataclass
class Crash:
    """A run killed at one point, then resumed: everything the invariants are checked on."""

    name: str
    work: Path
    paths: SessionPaths
    at_kill: Observed
    killed_at_s: float  # seconds after the start
    effects: list[str]  # effects.log after the kill (and the orphans ended)
    target: bytes | None
    created: bytes | None
    transcript_results: frozenset[str]  # tool_use ids whose result the transcript held at the kill
    ledger: dict[str, dict[str, Any]]  # tool_use_id → recorded tool_result block
    history: History | None = None
    load_error: str | None = None
    resumed: CliRun | None = None
    first_request: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    effects_after: list[str] = field(default_factory=list)
    target_after: bytes | None = None
    created_after: bytes | None = None
    history_after: History | None = None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _effects(work: Path) -> list[str]:
    data = _read(work / "effects.log")
    return [] if data is None else data.decode().splitlines()


def _result_ids(history: History) -> frozenset[str]:
    ids: set[str] = set()
    for message in history.messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            ids.update(
                str(b.get("tool_use_id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
            )
    return frozenset(ids)


def lockstep_script(gate: Path) -> str:
    """The scripted run with each model step held until the test creates ``gate/reply-K`` (K from 0), not delayed."""
    document = yaml.safe_load(SCRIPT)
    for k, step in enumerate(document["models"]["mock-primary"]):
        del step["delay_ms"]
        step["hold"] = {"file": str(gate / f"reply-{k}"), "max_s": HANG_GUARD_S}
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


class Lockstep:
    """The run held at each place it waits (its model steps, its hooks, its Bash calls between their markers) until
    the test lets it on: what the test observes there stays as it is until then."""

    def __init__(self, work: Path, api: MockApi) -> None:
        self.gate, self.api = work / "gate", api
        self.replies = 0  # the model steps let on so far
        self.gate.mkdir()

    def held(self) -> bool:
        """Whether the run waits at one of its places now (a hook or a Bash call, or a model step)."""
        return (self.gate / "held").exists() or len(self.api.requests) > self.replies

    def let_on(self) -> None:
        """Let the run on from the place it waits at."""
        if (self.gate / "held").exists():
            (self.gate / "held").unlink()  # hold.sh returns: the hook or the Bash call goes on
        else:
            (self.gate / f"reply-{self.replies}").touch()  # the server answers the held request
            self.replies += 1


def _kill_when_ready(
    proc: subprocess.Popen[bytes],
    name: str,
    observed: Callable[[], Observed],
    ready: Callable[[Observed, float], bool],
    lockstep: Lockstep | None,
) -> None:
    """Return once ``ready`` holds (the caller kills the run): at each place the run waits at in lockstep, else
    polling every few milliseconds. An error when the run ended first or nothing came for ``HANG_GUARD_S``."""
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if lockstep is not None and not (lockstep.held() or proc.poll() is not None):
            if elapsed > HANG_GUARD_S:
                raise AssertionError(f"{name}: the run was not held anywhere for {HANG_GUARD_S} s; at {observed()}")
            time.sleep(0.005)  # until the run waits somewhere, or ended
            continue
        seen = observed()
        if ready(seen, elapsed):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{name}: the run ended (exit {proc.returncode}) before the point, at {seen}")
        if elapsed > HANG_GUARD_S:
            raise AssertionError(f"{name}: the point never came; last seen {seen}")
        if lockstep is not None:
            lockstep.let_on()
            start = time.monotonic()  # a bound on each wait: the run's own pace is not what is tested
        else:
            time.sleep(0.005)


def crash_and_resume(
    base: Path,
    name: str,
    ready: Callable[[Observed, float], bool],
    *,
    lockstep: bool = False,
    resume_script: str = PLAIN,
) -> Crash:
    """Start the scripted run in ``base/work``, SIGKILL it once ``ready(observed, elapsed_s)``, resume it
    against ``resume_script`` (default: a server that answers plainly). ``lockstep``: ``ready`` is asked at each
    place the run waits at, which it leaves only when ``ready`` says no (else it is asked every few milliseconds
    of a free run, as tools/soak_sessions.py does)."""
    work, home = base / "work", base / "home"
    work.mkdir(parents=True)
    home.mkdir()
    for rel, content in parse_scenario(SCRIPT, "crash_run.yaml").files.items():
        (work / rel).write_text(content, encoding="utf-8")
    paths = session_paths(work, home)
    cmd = cli_command(work)
    cmd += ["--permission-mode", "bypassPermissions", "--model", "mock-primary", "--session-id", SESSION_ID]
    cmd += ["--settings", HOOKS, "-p", "go"]
    script = lockstep_script(work / "gate") if lockstep else SCRIPT
    with MockApi(script) as api, (base / "killed.out").open("w") as out, (base / "killed.err").open("w") as err:
        steps = Lockstep(work, api) if lockstep else None
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=cli_env(api, QUERYLOOP_HOME=str(home)),
            cwd=ROOT,
            start_new_session=True,
        )
        start = time.monotonic()
        try:
            _kill_when_ready(proc, name, lambda: observe(work, paths), ready, steps)
        finally:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            killed_at = time.monotonic() - start
            end_orphans(work)
            shutil.rmtree(work / "gate", ignore_errors=True)  # after the orphans ended: none goes on from its hold
    at_kill = observe(work, paths)
    ledger = {str(e["tool_use_id"]): dict(e["result"]) for e in read_jsonl(paths.ledger)[0]}
    crash = Crash(
        name=name,
        work=work,
        paths=paths,
        at_kill=at_kill,
        killed_at_s=killed_at,
        effects=_effects(work),
        target=_read(work / "target.txt"),
        created=_read(work / "new.txt"),
        transcript_results=frozenset(),
        ledger=ledger,
    )
    try:
        crash.history = load_history(paths.transcript)
        crash.transcript_results = _result_ids(crash.history)
    except Exception:
        crash.load_error = traceback.format_exc()
    with MockApi(resume_script) as plain:
        crash.resumed = run_cli(
            ["--resume", SESSION_ID, "-p", RESUME_PROMPT, "--model", "mock-primary"],
            api=plain,
            cwd=work,
            QUERYLOOP_HOME=str(home),
        )
        crash.requests = len(plain.requests)
        crash.first_request = [dict(m) for m in plain.requests[0].messages] if plain.requests else []
    crash.effects_after = _effects(work)
    crash.target_after = _read(work / "target.txt")
    crash.created_after = _read(work / "new.txt")
    crash.history_after = load_history(paths.transcript)
    return crash


# ---- the invariants ---------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


def dangling_ids(history: History) -> list[str]:
    """The tool_use ids of the history's last message when it is an assistant message (none has a result)."""
    if not history.messages or history.messages[-1].get("role") != "assistant":
        return []
    content = history.messages[-1].get("content")
    blocks = content if isinstance(content, list) else []
    return [str(b["id"]) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]


def invariant_problems(crash: Crash) -> list[str]:
    """Every way the crashed-and-resumed run breaks the issue's invariants (empty: none)."""
    if crash.load_error is not None or crash.history is None:
        return [f"the transcript does not load: {crash.load_error}"]
    history = crash.history
    problems: list[str] = []
    odd = [w for w in history.warnings if "torn last line" not in w]
    if odd:
        problems.append(f"loading the transcript warned of more than a torn last line: {odd}")
    run = crash.resumed
    assert run is not None
    if crash.at_kill.lines == 0:  # killed before the session's first line (starting up): there is nothing to resume
        return [*problems, *_unstarted_problems(crash, run)]
    if run.returncode != 0:
        return [*problems, f"--resume exited {run.returncode}: {run.stderr[-2000:]}"]
    if run.result.get("session_id") != SESSION_ID:
        problems.append(f"the resumed run has session_id {run.result.get('session_id')}, not {SESSION_ID}")
    if not crash.first_request:
        return [*problems, "the resumed run sent no request"]
    return [
        *problems,
        *_first_request_problems(crash, history, run),
        *_side_effect_problems(crash),
        *_history_after_problems(crash),
    ]


def _unstarted_problems(crash: Crash, run: CliRun) -> list[str]:
    """A run killed before its first transcript line: nothing to resume, and nothing done."""
    problems: list[str] = []
    said = run.stderr.strip().splitlines()
    if run.returncode != 1 or said != [f"No conversation found with session ID: {SESSION_ID}"]:
        problems.append(f"a run killed before its first line resumed with exit {run.returncode}: {said}")
    if crash.effects or crash.ledger or crash.requests:
        problems.append("a run killed before its first transcript line had already done something")
    return problems


def _first_request_problems(crash: Crash, history: History, run: CliRun) -> list[str]:
    """The resumed run's first request: the stored history whole, its dangling calls answered, the new prompt."""
    messages = crash.first_request
    problems: list[str] = []
    problem = ledger_problem(messages)
    if problem is not None:
        problems.append(f"the resumed run's first request breaks the ledger invariant: {problem}")
    stored = [{"role": m["role"], "content": m["content"]} for m in history.messages]
    if messages[: len(stored)] != stored:
        problems.append("the resumed run's first request does not start with the stored history")
    if _text(messages[-1].get("content")) != RESUME_PROMPT or messages[-1].get("role") != "user":
        problems.append(f"the first request does not end with the new prompt: {messages[-1]}")
    dangling = dangling_ids(history)
    expected_first = "dangling_calls_answered" if dangling else "session_resumed"
    if not run.all_reasons or run.all_reasons[0] != expected_first:
        problems.append(f"the resumed run's first transition is {run.all_reasons[:1]}, not {expected_first}")
    if dangling:
        answers = messages[len(stored)] if len(messages) > len(stored) else {}
        problems += _dangling_answer_problems(crash, dangling, answers)
    return problems


def _dangling_answer_problems(crash: Crash, dangling: list[str], answers: Any) -> list[str]:
    """Each call left without a result answered: by its recorded result if it completed, else as interrupted."""
    content = answers.get("content") if isinstance(answers, dict) else None
    blocks = {str(b.get("tool_use_id")): b for b in content or [] if isinstance(b, dict)}
    problems: list[str] = []
    for tool_use_id in dangling:
        block = blocks.get(tool_use_id)
        recorded = crash.ledger.get(tool_use_id)
        if block is None:
            problems.append(f"{tool_use_id}: no tool_result in the resumed request")
        elif recorded is not None:
            if _text(block.get("content")) != _text(recorded.get("content")) or bool(block.get("is_error")) != bool(
                recorded.get("is_error")
            ):
                problems.append(
                    f"{tool_use_id} completed (the ledger has it) but was answered {block!r}, "
                    f"not its recorded result {recorded!r}"
                )
        elif INTERRUPTED_BEFORE_RECORDED not in _text(block.get("content")) or block.get("is_error") is not True:
            problems.append(f"{tool_use_id} never completed but was answered {block!r}, not as interrupted")
    return problems


def _side_effect_problems(crash: Crash) -> list[str]:
    """Side effects ran once, and the resume ran none, nor changed the files."""
    problems: list[str] = []
    repeated = sorted({line for line in crash.effects_after if crash.effects_after.count(line) > 1})
    if repeated:
        problems.append(f"side effects ran more than once: {repeated} in {crash.effects_after}")
    if crash.effects_after != crash.effects:
        problems.append(f"the resume ran side effects: {crash.effects} became {crash.effects_after}")
    if (crash.target_after, crash.created_after) != (crash.target, crash.created):
        problems.append("the resume changed the files the killed run left")
    return problems


def _history_after_problems(crash: Crash) -> list[str]:
    """The session's history after the resume: the first prompt first, the resumed answer last."""
    after = crash.history_after
    if after is None or not after.messages or "Resumed" not in _text(after.messages[-1].get("content")):
        return ["the resumed run's answer is not the end of the session's history"]
    if after.messages[0].get("content") != "go":
        return [f"the session's history no longer starts with the first prompt: {after.messages[0]}"]
    return []


# ---- the points -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """A kill point: when to kill, and the state the run must be found in afterwards."""

    name: str
    ready: Callable[[Observed], bool]
    lines: int
    ledger: frozenset[str]
    effects: tuple[str, ...]
    markers: frozenset[str] = frozenset()


def _after_line(k: int) -> Callable[[Observed], bool]:
    return lambda seen: seen.lines >= k


def _recorded(tool_use_id: str) -> Callable[[Observed], bool]:
    return lambda seen: tool_use_id in seen.ledger


def _marker(name: str) -> Callable[[Observed], bool]:
    return lambda seen: name in seen.markers


_E, _EB, _EBQ, _EBQS = (
    frozenset({EDIT}),
    frozenset({EDIT, B1}),
    frozenset({EDIT, B1, QUICK}),
    frozenset({EDIT, B1, QUICK, SLOW}),
)
_ALL = frozenset({*_EBQS, WRITE})
_B1_MARKS = frozenset({"b1.start", "b1.effect"})
_ALL_MARKS = frozenset(MARKERS)
_FX1, _FX3 = ("b1",), ("b1", "quick", "slow")

POINTS = (
    Point(name="after_line_1_prompt", ready=_after_line(1), lines=1, ledger=frozenset(), effects=()),
    Point(name="after_line_2_edit_requested", ready=_after_line(2), lines=2, ledger=frozenset(), effects=()),
    Point(name="edit_done_result_unwritten", ready=_recorded(EDIT), lines=2, ledger=_E, effects=()),
    Point(name="after_line_3_edit_result", ready=_after_line(3), lines=3, ledger=_E, effects=()),
    Point(name="after_line_4_bash_requested", ready=_after_line(4), lines=4, ledger=_E, effects=()),
    Point(
        name="during_bash_before_its_effect",
        ready=_marker("b1.start"),
        lines=4,
        ledger=_E,
        effects=(),
        markers=frozenset({"b1.start"}),
    ),
    Point(
        name="during_bash_after_its_effect",
        ready=_marker("b1.effect"),
        lines=4,
        ledger=_E,
        effects=_FX1,
        markers=_B1_MARKS,
    ),
    Point(name="bash_done_result_unwritten", ready=_recorded(B1), lines=4, ledger=_EB, effects=_FX1, markers=_B1_MARKS),
    Point(name="after_line_5_bash_result", ready=_after_line(5), lines=5, ledger=_EB, effects=_FX1, markers=_B1_MARKS),
    Point(name="after_line_6_two_calls", ready=_after_line(6), lines=6, ledger=_EB, effects=_FX1, markers=_B1_MARKS),
    Point(
        name="quick_done_slow_waiting",
        ready=_recorded(QUICK),
        lines=6,
        ledger=_EBQ,
        effects=("b1", "quick"),
        markers=_B1_MARKS,
    ),
    Point(
        name="during_slow_before_its_effect",
        ready=_marker("slow.start"),
        lines=6,
        ledger=_EBQ,
        effects=("b1", "quick"),
        markers=_B1_MARKS | {"slow.start"},
    ),
    Point(
        name="during_slow_after_its_effect",
        ready=_marker("slow.effect"),
        lines=6,
        ledger=_EBQ,
        effects=_FX3,
        markers=_ALL_MARKS,
    ),
    Point(
        name="both_done_results_unwritten",
        ready=_recorded(SLOW),
        lines=6,
        ledger=_EBQS,
        effects=_FX3,
        markers=_ALL_MARKS,
    ),
    Point(
        name="after_line_7_two_results", ready=_after_line(7), lines=7, ledger=_EBQS, effects=_FX3, markers=_ALL_MARKS
    ),
    Point(
        name="after_line_8_write_requested",
        ready=_after_line(8),
        lines=8,
        ledger=_EBQS,
        effects=_FX3,
        markers=_ALL_MARKS,
    ),
    Point(
        name="write_done_result_unwritten",
        ready=_recorded(WRITE),
        lines=8,
        ledger=_ALL,
        effects=_FX3,
        markers=_ALL_MARKS,
    ),
    Point(
        name="after_line_9_write_result", ready=_after_line(9), lines=9, ledger=_ALL, effects=_FX3, markers=_ALL_MARKS
    ),
    Point(name="after_line_10_answer", ready=_after_line(10), lines=10, ledger=_ALL, effects=_FX3, markers=_ALL_MARKS),
    Point(
        name="after_line_11_run_ended",
        ready=_after_line(FULL_RUN_LINES),
        lines=FULL_RUN_LINES,
        ledger=_ALL,
        effects=_FX3,
        markers=_ALL_MARKS,
    ),
)
assert len(POINTS) >= 20 and len({p.name for p in POINTS}) == len(POINTS)


def _at_point(point: Point) -> Callable[[Observed, float], bool]:
    return lambda seen, _elapsed: point.ready(seen)


@pytest.fixture(scope="module")
def crashes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, concurrent.futures.Future[Crash]]]:
    """Every point's crash and resume, run two at a time as soon as the first test asks."""
    base = tmp_path_factory.mktemp("crashes")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            p.name: pool.submit(crash_and_resume, base / p.name, p.name, _at_point(p), lockstep=True) for p in POINTS
        }
        yield futures
        for future in futures.values():
            future.cancel()


@pytest.mark.parametrize("point", POINTS, ids=[p.name for p in POINTS])
def test_a_kill_at_this_point_leaves_a_session_that_resumes_with_every_call_paired_and_no_effect_repeated(
    crashes: Mapping[str, concurrent.futures.Future[Crash]], point: Point
) -> None:
    crash = crashes[point.name].result()
    seen = crash.at_kill
    # the point is deterministic: the run is found exactly where the kill was aimed
    assert (seen.lines, seen.ledger, tuple(crash.effects), seen.markers) == (
        point.lines,
        point.ledger,
        point.effects,
        point.markers,
    ), f"killed after {crash.killed_at_s:.3f} s"
    assert crash.target == (EDITED_TARGET if EDIT in point.ledger else ORIGINAL_TARGET)
    assert (crash.created is not None) == (WRITE in point.ledger)
    problems = invariant_problems(crash)
    assert problems == [], "\n".join(problems)


def test_a_call_recorded_as_completed_whose_result_the_transcript_lacks_gets_its_real_result(
    crashes: Mapping[str, concurrent.futures.Future[Crash]],
) -> None:
    """Between the quick call's completion and the turn's result write: its real output, the slow one interrupted."""
    crash = crashes["quick_done_slow_waiting"].result()
    assert crash.history is not None and dangling_ids(crash.history) == [QUICK, SLOW]
    assert crash.first_request, "the resume sent a request"
    answers = crash.first_request[len(crash.history.messages)]
    blocks = {b["tool_use_id"]: b for b in answers["content"]}
    assert "quick-out" in _text(blocks[QUICK]["content"]) and not blocks[QUICK].get("is_error")
    assert INTERRUPTED_BEFORE_RECORDED in _text(blocks[SLOW]["content"]) and blocks[SLOW]["is_error"] is True
    assert crash.resumed is not None
    assert "dangling_calls_answered" in crash.resumed.all_reasons


def test_a_completed_run_resumed_sends_its_whole_history(
    crashes: Mapping[str, concurrent.futures.Future[Crash]],
) -> None:
    crash = crashes["after_line_11_run_ended"].result()
    assert crash.history is not None
    assert [m["role"] for m in crash.first_request] == [*("user", "assistant") * 5, "user"]
    assert crash.first_request[0]["content"] == "go" and crash.first_request[-1]["content"] == RESUME_PROMPT
    assert crash.resumed is not None and crash.resumed.all_reasons[0] == "session_resumed"


B1_COMMAND = next(
    str(block["input"]["command"])
    for step in parse_scenario(SCRIPT, "crash_run.yaml").models["mock-primary"].steps
    for block in step.content
    if block.get("type") == "tool_use" and block.get("id") == B1
)
REPROPOSE = f"""schema_version: 1
scenario: repropose
model: mock-primary
models:
  mock-primary:
    - reply: {{content: [{{tool_use: {{id: toolu_again, name: Bash, input: {{command: {json.dumps(B1_COMMAND)}}}}}}}]}}
    - reply: {{content: [{{text: "Resumed and done."}}]}}
"""


def test_a_side_effect_the_kill_left_without_its_result_is_not_run_again_when_the_resumed_model_re_proposes_it(
    tmp_path: Path,
) -> None:
    """The seed's chain with a kill -9 right after the side-effecting call and a resume: the model re-proposes
    the identical call; the ledger has it completed, so it is answered from the ledger (a ledger hit), not run."""
    point = next(p for p in POINTS if p.name == "bash_done_result_unwritten")
    crash = crash_and_resume(tmp_path / "x", "repropose", _at_point(point), lockstep=True, resume_script=REPROPOSE)
    assert crash.effects == ["b1"] and B1 in crash.ledger
    assert crash.resumed is not None and crash.resumed.returncode == 0, crash.resumed.stderr if crash.resumed else ""
    assert crash.effects_after == ["b1"], "the completed side effect ran a second time"
    assert "ledger_hit_replayed" in crash.resumed.all_reasons


def test_the_soak_script_runs_and_finds_nothing_in_a_random_kill() -> None:
    soak = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "soak_sessions.py"), "--runs", "1", "--seed", "13"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert soak.returncode == 0, soak.stdout + soak.stderr
    assert "1 runs in" in soak.stdout and "0 failures" in soak.stdout
