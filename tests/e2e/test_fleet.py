"""The fleet end to end: `queryloop worker` and `queryloop submit` on a real database, one worker killed mid-session.

A real PostgreSQL cluster is created and started by the test (on a free port, in a temp
dir, as the `postgres` user when the test runs as root: PostgreSQL refuses root); two
real worker processes run against it; the model is the embedded fault-injecting server
over loopback HTTP, reached through the real `anthropic` SDK; the tools work on a real
temp directory. The worker running the session is killed with SIGKILL while a Bash call
waits for a file the test creates only at the end (in a second run, stopped with
SIGTERM), and the other worker finishes the
session: no completed step ran again (every side effect is in the file once, the server
answered each request once), and the transcript in the database is whole. PostgreSQL
that cannot be started fails the test with the reason; nothing is skipped. A SQLite run
checks the single-machine default.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queryloop.fleet.database import FleetDatabase
from queryloop.handlers.messages import ledger_problem
from queryloop.handlers.session.services.transcript import load_history

from .browser import UiServer
from .fleet_workers import Workers, worker_env
from .harness import HANG_GUARD_S, ROOT, MockApi

WAIT_S = float(HANG_GUARD_S)  # bounds a wait for an event (a hang); every wait returns as soon as it holds
RESULT_WAIT = str(HANG_GUARD_S)  # `submit --timeout`: bounds the wait for a session's result the same way
HOLD_SH = "i=0; while [ ! -e $1 ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i+1)); done\n"
"""``sh hold.sh FILE`` (a test writes it in the working directory): a Bash call's wait until the test creates
FILE; its cap, about 300 s, ends one the test never lets on."""

FLEET_SCENARIO = """
schema_version: 1
scenario: fleet_failover
model: mock-primary
models:
  mock-primary:
    - reply:
        content:
          - text: "First the checkpoint."
          - tool_use: {name: Edit, input: {file_path: checkpoint.txt, old_string: ORIGINAL, new_string: MODIFIED}}
    - reply:
        content:
          - tool_use: {name: Bash, input: {command: "echo effect-1 >> effects.log", description: one}}
    - reply:
        content:
          - tool_use: {name: Bash, input: {command: "echo effect-2 >> effects.log && HOLD", description: two}}
    - reply:
        content:
          - tool_use: {name: Bash, input: {command: "echo effect-3 >> effects.log", description: three}}
    - reply:
        content:
          - tool_use: {name: Read, input: {file_path: effects.log}}
    - reply:
        content:
          - text: "All three effects are in place."
""".replace("HOLD", "sh hold.sh released")  # the test creates `released` once the call's worker is gone

SQLITE_SCENARIO = """
schema_version: 1
scenario: fleet_sqlite
model: mock-primary
models:
  mock-primary:
    - reply:
        content:
          - tool_use: {name: Bash, input: {command: "echo local-1 >> effects.log", description: one}}
    - reply:
        content:
          - tool_use: {name: Read, input: {file_path: effects.log}}
          - tool_use: {name: Glob, input: {pattern: "*.log"}}
    - reply:
        content:
          - text: "Done on one machine."
"""


def _wait_for(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    pytest.fail(
        "PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin nor on PATH): "
        "run tools/test.sh, which installs it with apt-get, or `apt-get install postgresql`"
    )


def _as_cluster_owner(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the `postgres` user."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


_restarts: dict[int, tuple[Callable[[], None], Callable[[], None]]] = {}  # port -> (crash stop, start)


@pytest.fixture
def postgres() -> Iterator[str]:
    """A fresh PostgreSQL cluster on a free port, stopped and removed afterwards; its URL."""
    bin_dir = _pg_bin()
    root = Path(tempfile.mkdtemp(prefix="queryloop-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data, log = root / "data", root / "server.log"
    port = _free_port()

    def run(argv: list[str]) -> None:
        done = subprocess.run(_as_cluster_owner(argv), capture_output=True, text=True, timeout=2 * WAIT_S, cwd=root)
        if done.returncode != 0:
            server_log = log.read_text(errors="replace") if log.exists() else ""
            pytest.fail(f"PostgreSQL could not be started: {' '.join(argv)}\n{done.stdout}{done.stderr}{server_log}")

    run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", RESULT_WAIT, "start"]
    run(start)
    _restarts[port] = (
        lambda: run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
        lambda: run(start),
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_cluster_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            timeout=HANG_GUARD_S,
            cwd=root,
        )
        shutil.rmtree(root, ignore_errors=True)


def _env(**extra: str) -> dict[str, str]:
    return worker_env("fleet-test-key", **extra)


def _queryloop(*args: str, timeout_s: float = 2 * WAIT_S) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "queryloop", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=timeout_s, check=False)


def _submit(url: str, api: MockApi, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _queryloop(
        "submit",
        "--database-url",
        url,
        "--base-url",
        api.url,
        "--model",
        "mock-primary",
        "--cwd",
        str(cwd),
        "--permission-mode",
        "bypassPermissions",
        *extra,
        "Make the three effects.",
    )


def _effects(cwd: Path) -> list[str]:
    path = cwd / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def _check_transcript(db: FleetDatabase, session_id: str, out: Path) -> list[dict[str, Any]]:
    """The database's transcript, exported and read back with the normal loader: whole, every tool_use answered."""
    path = db.export_transcript(session_id, out / f"{session_id}.jsonl")
    history = load_history(path)
    assert not history.warnings, history.warnings
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    uuids = [e["uuid"] for e in entries]
    assert len(uuids) == len(set(uuids)), "a transcript entry was written twice"
    chained = [e for e in entries if e["type"] in ("user", "assistant")]
    assert len(history.messages) == len(chained), "the parentUuid chain is broken"
    assert ledger_problem(history.messages) is None, ledger_problem(history.messages)
    assert entries[-1].get("subtype") == "result" and entries[-1]["terminal_reason"] == "completed"
    return list(history.messages)


def _sent_once(api: MockApi) -> None:
    """The server answered each request once: every request sent more than the one before it."""
    sent = [json.dumps(r.messages, sort_keys=True) for r in api.requests]
    assert len(sent) == len(set(sent)), "a completed model request was sent again"
    sizes = [len(r.messages) for r in api.requests]
    assert sizes == sorted(set(sizes)), sizes


@pytest.mark.slow  # real workers on PostgreSQL / SQLite: left out by tools/test.sh --fast
@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_session_outlives_its_worker_and_no_completed_step_runs_again(
    postgres: str, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    """SIGKILL: the worker dies at once, its peer finds its heartbeat stale. SIGTERM: it stops and hands over."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "checkpoint.txt").write_text("ORIGINAL\n")
    (cwd / "hold.sh").write_text(HOLD_SH)
    workers = Workers(postgres, tmp_path)
    db = FleetDatabase(postgres)
    try:
        with MockApi(FLEET_SCENARIO) as api:
            for name in ("worker-a", "worker-b"):
                workers.start(name)
            _wait_for(
                "both workers' heartbeats",
                lambda: workers.running() and _tables_ready(db) and len(db.live_workers(dead_after_s=5)) == 2,
            )
            submitted = _submit(postgres, api, cwd)
            assert submitted.returncode == 0, submitted.stderr
            session_id = submitted.stdout.strip()

            _wait_for("the second effect (its Bash call then waits)", lambda: "effect-2" in _effects(cwd))
            running = _wait_for("the call's record", lambda: _started(db, session_id, count=3))
            victim = running[-1]["executor_id"]
            survivor = "worker-b" if victim == "worker-a" else "worker-a"
            workers.procs[victim].send_signal(stop_signal)
            workers.procs[victim].wait(HANG_GUARD_S)

            done = _queryloop("submit", "--database-url", postgres, "--result", session_id, "--timeout", RESULT_WAIT)
            assert done.returncode == 0, done.stderr + workers.log(survivor)
            result = json.loads(done.stdout)
            assert result["subtype"] == "success" and result["terminal_reason"] == "completed", result
            assert result["result"] == "All three effects are in place."
            assert _effects(cwd) == ["effect-1", "effect-2", "effect-3"], _debug(db, session_id, workers)
            assert len(api.requests) == 6, _debug(db, session_id, workers)
            _sent_once(api)
            kinds = [" ".join(name.split()[:2]) for name in _steps(db, session_id)]  # one step per effect, in order
            turns = ["tool Edit", "tool Bash", "tool Bash", "tool Bash", "tool Read"]
            assert kinds == [*(k for tool in turns for k in ("model request", tool)), "model request"]
            assert (cwd / "checkpoint.txt").read_text() == "MODIFIED\n"
            rows = db.checkpoints(session_id)
            (checkpoint,) = [r for r in rows if r["path"].endswith("checkpoint.txt")]  # taken once, not on replay
            assert db.blob(checkpoint["blob"]) == b"ORIGINAL\n"
            redirected = [r["tool_use_id"] for r in rows if r["path"].endswith("effects.log")]
            assert len(redirected) == len(set(redirected)) == 3, "each Bash call's redirection checkpointed once"
            messages = _check_transcript(db, session_id, tmp_path)
            interrupted = [
                b
                for m in messages
                if isinstance(m.get("content"), list)
                for b in m["content"]
                if b.get("type") == "tool_result" and b.get("is_error")
            ]
            assert len(interrupted) == 1 and "stopped before it finished" in str(interrupted[0]["content"])
            assert f"worker {victim} is gone" in workers.log(survivor)
            calls = db.calls(session_id)
            assert [(c["tool"], c["state"]) for c in calls] == [
                ("Edit", "completed"),
                ("Bash", "completed"),
                ("Bash", "interrupted"),
                ("Bash", "completed"),
            ]
            assert calls[-1]["executor_id"] == survivor
            ledger = db.ledger(session_id)
            assert [e["name"] for e in ledger] == ["Edit", "Bash", "Bash", "Bash"]  # once each: replays add nothing
    finally:
        (cwd / "released").touch()  # a held call its killed worker left running ends (it was never let on before)
        workers.stop()
        db.close()


HELD_SCENARIO = """
schema_version: 1
scenario: fleet_outage
model: mock-primary
models:
  mock-primary:
    - reply:
        content:
          - tool_use:
              name: Bash
              input: {command: "echo held >> effects.log; HOLD", description: held}
    - reply:
        content:
          - text: "Done through the outage."
""".replace("HOLD", "sh hold.sh go")


@pytest.mark.slow  # real workers on PostgreSQL / SQLite: left out by tools/test.sh --fast
def test_a_database_restart_neither_stops_a_worker_nor_fails_the_session_it_runs(postgres: str, tmp_path: Path) -> None:
    """Found by tools/soak_fleet.py: the heartbeat that met the restart stopped every worker, and a
    session whose call ended while the database was down ended in internal_error."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "hold.sh").write_text(HOLD_SH)
    workers = Workers(postgres, tmp_path)
    db = FleetDatabase(postgres)
    crash_stop, start = _restarts[int(postgres.rsplit(":", 1)[1].split("/")[0])]
    try:
        with MockApi(HELD_SCENARIO) as api:
            workers.start("steady")
            _wait_for("the worker's start", lambda: workers.running() and "runs sessions from" in workers.log("steady"))
            submitted = _submit(postgres, api, cwd)
            assert submitted.returncode == 0, submitted.stderr
            _wait_for("the held call", lambda: "held" in _effects(cwd))
            crash_stop()
            (cwd / "go").touch()  # the call ends while the database is down: its result waits to be recorded
            _wait_for(
                "the call's result to wait", lambda: workers.running() and "waits for it" in workers.log("steady")
            )
            # the heartbeat meets the outage too (the database stays down until it has): it must not stop the worker
            _wait_for("the heartbeat to miss", lambda: workers.running() and "retrying every" in workers.log("steady"))
            start()
            done = _queryloop("submit", "--database-url", postgres, "--result", submitted.stdout.strip())
            assert done.returncode == 0, done.stderr + workers.log("steady")
            result = json.loads(done.stdout)
            assert result["terminal_reason"] == "completed" and result["result"] == "Done through the outage.", result
            assert _effects(cwd) == ["held"]
            _check_transcript(db, result["session_id"], tmp_path)
            _wait_for("the heartbeat again", lambda: "reachable again" in workers.log("steady"))
            assert workers.running()
    finally:
        workers.stop()
        db.close()


@pytest.mark.slow  # real workers on PostgreSQL: left out by tools/test.sh --fast
def test_a_worker_started_while_the_database_is_down_waits_for_it_then_runs_sessions(
    postgres: str, tmp_path: Path
) -> None:
    """Found by tools/soak_fleet.py: a replacement worker that started during the database's restart exited
    (its DBOS launch met the restart), and the fleet lost a worker."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "hold.sh").write_text(HOLD_SH)
    workers = Workers(postgres, tmp_path)
    crash_stop, start = _restarts[int(postgres.rsplit(":", 1)[1].split("/")[0])]
    try:
        crash_stop()
        workers.start("late")
        _wait_for("the worker to wait", lambda: workers.running() and "retrying every" in workers.log("late"))
        start()
        _wait_for("the worker's start", lambda: workers.running() and "runs sessions from" in workers.log("late"))
        with MockApi(HELD_SCENARIO) as api:
            (cwd / "go").touch()
            done = _submit(postgres, api, cwd, "--wait", "--timeout", RESULT_WAIT)
        assert done.returncode == 0, done.stderr + workers.log("late")
        assert json.loads(done.stdout)["result"] == "Done through the outage."
        assert workers.running()
    finally:
        workers.stop()


@pytest.mark.slow  # real workers on PostgreSQL: left out by tools/test.sh --fast
def test_the_short_fleet_soak_loses_no_session_and_repeats_no_side_effect() -> None:
    """tools/soak_fleet.py at a small count: 9 sessions on three workers running one each, two of them
    killed with SIGKILL and replaced, the database restarted once; the tool checks every session."""
    argv = [sys.executable, str(ROOT / "tools" / "soak_fleet.py"), "--sessions", "9", "--concurrency", "1"]
    argv += ["--kills", "2", "--seed", "7", "--seconds", "300"]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=400, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for row in ("| problems | **0** |", "| SIGKILLs | 2 |", "| database restarts | 1 |", "| sessions completed | 9 |"):
        assert row in done.stdout, done.stdout


def _steps(db: FleetDatabase, session_id: str) -> list[str]:
    """The names of the DBOS steps recorded for a session's workflow, in order (DBOS's own table)."""
    import sqlalchemy as sa

    table = "operation_outputs" if db.is_sqlite else "dbos.operation_outputs"  # PostgreSQL: DBOS's own schema
    query = sa.text(f"SELECT function_name FROM {table} WHERE workflow_uuid = :w ORDER BY function_id")
    with db.engine.connect() as conn:
        return [str(name) for (name,) in conn.execute(query, {"w": session_id})]


def _debug(db: FleetDatabase, session_id: str, workers: Workers) -> str:
    logs = "\n".join(workers.log(n) for n in workers.procs)
    return f"calls: {db.calls(session_id)}\nsteps: {_steps(db, session_id)}\n{logs}"


def _tables_ready(db: FleetDatabase) -> bool:
    try:
        db.workers()
    except Exception:
        return False
    return True


def _started(db: FleetDatabase, session_id: str, *, count: int) -> list[dict[str, Any]] | None:
    calls = db.calls(session_id)
    return calls if len(calls) >= count else None


@pytest.mark.slow  # real workers on PostgreSQL / SQLite: left out by tools/test.sh --fast
def test_a_session_submitted_on_sqlite_runs_on_a_worker_and_prints_the_result(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    workers = Workers(url, tmp_path)
    db = FleetDatabase(url)
    try:
        with MockApi(SQLITE_SCENARIO) as api:
            workers.start("solo")
            _wait_for(
                "the worker's heartbeat",
                lambda: workers.running() and _tables_ready(db) and db.live_workers(dead_after_s=5),
            )
            done = _submit(url, api, cwd, "--wait", "--timeout", RESULT_WAIT)
            assert done.returncode == 0, done.stderr + workers.log("solo")
            result = json.loads(done.stdout)
            assert result["subtype"] == "success" and result["result"] == "Done on one machine.", result
            assert result["num_turns"] == 4
            assert _effects(cwd) == ["local-1"]
            assert len(api.requests) == 3
            _check_transcript(db, result["session_id"], tmp_path)
            steps = _steps(db, result["session_id"])  # the two parallel calls are steps of their own
            assert [" ".join(s.split()[:2]) for s in steps] == [
                "model request",
                "tool Bash",
                "model request",
                "tool Read",
                "tool Glob",
                "model request",
            ]
            _check_the_inspector_reads_it(url, result["session_id"], tmp_path)
    finally:
        workers.stop()
        db.close()


def _check_the_inspector_reads_it(url: str, session_id: str, tmp_path: Path) -> None:
    """``queryloop ui --database-url`` lists the fleet's session beside the (empty) home's and shows its
    transcript, ledger and tool calls with the worker that ran each (its JSON API; test_ui draws the page)."""
    home = tmp_path / "ui-home"
    home.mkdir()
    with UiServer(home, None, "--database-url", url) as ui:

        def get(path: str) -> Any:
            request = urllib.request.Request(ui.base + path, headers={"X-Queryloop-Token": ui.token})
            with urllib.request.urlopen(request, timeout=HANG_GUARD_S) as response:
                return json.loads(response.read())

        listed = get("/api/sessions")
        (row,) = listed["sessions"]
        assert row["session_id"] == session_id and row["project"] == "fleet database" and row["ended"] == "completed"
        assert [w["executor_id"] for w in listed["workers"]] == ["solo"] and listed["warnings"] == []
        shown = get(f"/api/sessions/{session_id}")
        assert shown["source"] == "fleet"
        texts = [b["text"] for e in shown["transcript"] for b in e["blocks"]]
        assert "Done on one machine." in texts
        calls = [(c["tool"], c["state"], c["executor_id"]) for c in shown["calls"]]
        assert calls == [("Bash", "completed", "solo")]  # the one call that must not run twice (Read, Glob may)
        assert [e["name"] for e in shown["ledger"]] == ["Bash"]
        assert "error" in get(f"/api/sessions/{session_id}/rewind")  # no rewind from the database


def test_submit_explains_a_bad_database_url_an_unknown_session_and_a_fleet_without_workers(tmp_path: Path) -> None:
    bad = _queryloop("submit", "--database-url", "mysql://somewhere/db", "hello")
    assert bad.returncode == 1 and "unsupported database 'mysql'" in bad.stderr and "Traceback" not in bad.stderr
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    unknown = _queryloop("submit", "--database-url", url, "--result", "00000000-0000-4000-8000-000000000000")
    assert unknown.returncode == 1 and "no session 00000000-0000-4000-8000-000000000000" in unknown.stderr
    lonely = _queryloop("submit", "--database-url", url, "--cwd", str(tmp_path), "--wait", "hello")
    assert lonely.returncode == 1 and "no worker is running" in lonely.stderr, lonely.stderr


def test_the_help_of_the_program_does_not_import_dbos() -> None:
    code = "import sys; from queryloop.frontends.cli import build_parser; build_parser(); print('dbos' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("command", [["worker"], ["submit", "hello"]])
def test_without_the_fleet_extra_the_commands_name_the_install_in_one_line(tmp_path: Path, command: list[str]) -> None:
    shim = tmp_path / "shim" / "dbos"  # found first on the path: `import dbos` fails as when it is not installed
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'dbos'\", name='dbos')\n")
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(shim.parent), str(ROOT)])}
    argv = [sys.executable, "-m", "queryloop", *command, "--database-url", f"sqlite:///{tmp_path / 'db.sqlite'}"]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG_GUARD_S, check=False
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "queryloop: the fleet needs the 'fleet' extra: pip install 'queryloop[fleet]'\n"
