"""Soak the fleet: workers on PostgreSQL killed with SIGKILL and restarted, the database restarted once.

    python tools/soak_fleet.py --sessions 300 [--workers 3] [--kills 10] [--seed N] [--keep DIR]

Starts a PostgreSQL cluster of its own (a temp dir, a free loopback port; as the
``postgres`` user when run as root), the embedded server over loopback, and ``--workers``
``queryloop worker`` processes on the cluster. Submits ``--sessions`` sessions, each in a
folder of its own; each makes three Bash calls, each call appending the line
``s-NNN effect-I`` to one ledger file outside every session's folder (the second call then
sleeps a little, so kills land mid-call), then answers. While they run, at random moments
(uniform in the part of the sessions done) it kills a random worker with SIGKILL and starts
a new one in its place (a new executor id: its peers must take the dead one's sessions
over), and restarts the database once (``pg_ctl stop -m immediate``, then start).

When every session has ended it checks: each session's workflow succeeded once, its
result says completed; each completed call's line is in the ledger file once, an
interrupted call's (its worker died while it ran) at most once, no other line; each call
recorded once; each transcript loads whole from the database (unique entries, an intact
chain, every tool_use answered, one result). Takeover time: from a SIGKILL until each of
the dead worker's unfinished sessions runs on another worker (median, max). Prints every
problem and the table (as docs/benchmarks.md shows it); exits 1 on any problem.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from queryloop.fleet.database import FleetDatabase  # noqa: E402
from queryloop.fleet.session import QUEUE, WORKFLOW, SessionSpec  # noqa: E402
from queryloop.handlers.messages import ledger_problem  # noqa: E402
from queryloop.handlers.session.services.transcript import load_history  # noqa: E402
from queryloop.mockapi.background import ServerThread  # noqa: E402
from queryloop.mockapi.scenario import parse_scenario  # noqa: E402
from tests.e2e.fleet_workers import Workers, worker_env  # noqa: E402

HEARTBEAT_S, DEAD_AFTER_S = 0.5, 3.0  # a dead worker is found within about 3.5 s (the defaults: 2 s, 15 s)
EFFECTS = 3


def _effect(i: int, ledger: Path, then: str = "") -> str:
    line = f'echo \\"$(basename \\"$PWD\\") effect-{i}\\" >> {ledger}'
    return (
        f'{{tool_use: {{name: Bash, input: {{command: "{line}{then} && echo after-{i}", description: effect {i}}}}}}}'
    )


def scenario(ledger: Path) -> str:
    """Every session plays the same script, told apart by its folder: three effects, then the answer.

    A call answered as interrupted carries no ``after-I``: the session then answers at once."""
    rules = [("soak go", _effect(1, ledger)), ("after-1", _effect(2, ledger, " && sleep 0.3"))]
    rules += [("after-2", _effect(3, ledger)), ("after-3", '{text: "all three effects are in place"}')]
    text = "".join(f"  - when: {{last_user_contains: {w}}}\n    reply: {{content: [{r}]}}\n" for w, r in rules)
    return (
        "schema_version: 1\nscenario: soak_fleet\nmodel: mock-primary\n"
        f"rules:\n{text}otherwise: {{reply: {{content: [{{text: stopped early}}]}}}}\n"
    )


# ---------------------------------------------------------------------- PostgreSQL


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class Postgres:
    """A fresh cluster on a free port in ``root``; start, an immediate stop, and restart."""

    def __init__(self, root: Path) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
        initdb = found[-1] if found else shutil.which("initdb")
        if initdb is None:
            raise SystemExit("PostgreSQL is not installed (no initdb): apt-get install postgresql")
        self.bin, self.root = Path(initdb).parent, root
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            _as_owner([str(self.bin / tool), *args]), capture_output=True, text=True, timeout=120, cwd=self.root
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            raise SystemExit(f"{tool} failed: {done.stdout}{done.stderr}{log.read_text() if log.exists() else ''}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
        data, log = str(self.root / "data"), str(self.root / "server.log")
        self._run("pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")


# ---------------------------------------------------------------------- workers


class Fleet:
    """The worker processes: one slot each, a SIGKILLed worker replaced by a new one under a new id."""

    def __init__(self, url: str, logs: Path, slots: int, concurrency: int) -> None:
        self.logs = logs
        env = worker_env("soak-key")
        self.workers = Workers(
            url, logs, env=env, heartbeat_s=HEARTBEAT_S, dead_after_s=DEAD_AFTER_S, concurrency=concurrency
        )
        self.slots = [f"w{n}-0" for n in range(slots)]
        for executor_id in self.slots:
            self.workers.start(executor_id)

    def kill(self, slot: int) -> str:
        """SIGKILL the slot's worker; start its successor; the victim's id."""
        victim = self.slots[slot]
        self.workers.procs[victim].send_signal(signal.SIGKILL)
        self.workers.procs[victim].wait(30)
        name, generation = victim.rsplit("-", 1)
        self.slots[slot] = f"{name}-{int(generation) + 1}"
        self.workers.start(self.slots[slot])
        return victim

    def exited(self) -> list[str]:
        """Live slots whose worker exited by itself (not killed by the soak)."""
        return [f"{w} (exit {self.workers.procs[w].returncode})" for w in self.workers.exited(self.slots)]

    def stop(self) -> None:
        self.workers.stop()


# ---------------------------------------------------------------------- the database's view


def _statuses(db: FleetDatabase, ids: list[str]) -> dict[str, tuple[str, str]]:
    """Each session's DBOS workflow: (status, executor id)."""
    query = sa.text("SELECT workflow_uuid, status, executor_id FROM dbos.workflow_status")
    try:
        with db.engine.connect() as conn:
            rows = {str(w): (str(s), str(e)) for w, s, e in conn.execute(query)}
    except sa.exc.SQLAlchemyError:
        return {}  # the database is restarting
    return {i: rows[i] for i in ids if i in rows}


def _enqueue(url: str, specs: list[SessionSpec]) -> None:
    from dbos import DBOS, DBOSClient, EnqueueOptions

    DBOS.migrate(url)
    client = DBOSClient(system_database_url=url, application_name="queryloop")
    try:
        for spec in specs:
            options: EnqueueOptions = {
                "workflow_name": WORKFLOW,
                "queue_name": QUEUE,
                "workflow_id": spec.session_id,
                "application_name": "queryloop",
            }
            client.enqueue(options, spec.to_json())
    finally:
        client.destroy()


class Takeovers:
    """For each SIGKILL, the victim's unfinished sessions and when each was next seen on another worker."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, float]] = {}  # session -> (victim, kill time)
        self.seconds: list[float] = []

    def killed(self, victim: str, at: float, statuses: dict[str, tuple[str, str]]) -> int:
        mine = [s for s, (status, owner) in statuses.items() if owner == victim and status in ("PENDING", "ENQUEUED")]
        for session in mine:
            self.pending[session] = (victim, at)
        return len(mine)

    def look(self, statuses: dict[str, tuple[str, str]], now: float) -> None:
        for session, (victim, at) in list(self.pending.items()):
            status, owner = statuses.get(session, ("", victim))
            if owner != victim or status == "SUCCESS":
                self.seconds.append(now - at)
                del self.pending[session]


# ---------------------------------------------------------------------- checks


def _transcript_problem(db: FleetDatabase, session_id: str, out: Path) -> str | None:
    path = db.export_transcript(session_id, out / f"{session_id}.jsonl")
    history = load_history(path)
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    uuids = [e.get("uuid") for e in entries if "uuid" in e]
    chained = [e for e in entries if e.get("type") in ("user", "assistant")]
    results = [e for e in entries if e.get("subtype") == "result"]
    if history.warnings:
        return f"loads with warnings: {history.warnings}"
    if len(uuids) != len(set(uuids)):
        return "an entry was written twice"
    if len(history.messages) != len(chained):
        return "the parentUuid chain is broken"
    if len(results) != 1 or results[0].get("terminal_reason") != "completed":
        return f"{len(results)} result entries, the last {results[-1].get('terminal_reason') if results else None}"
    return ledger_problem(history.messages)


def check(db: FleetDatabase, names: dict[str, str], ledger: Path, out: Path, figures: Counter[str]) -> list[str]:
    """Every problem of the finished soak; ``figures`` counts what was seen."""
    problems: list[str] = []
    out.mkdir(exist_ok=True)
    lines = Counter(ledger.read_text().splitlines() if ledger.exists() else [])
    expected: set[str] = set()
    statuses = _statuses(db, list(names))
    for session_id, name in names.items():
        status = statuses.get(session_id, ("missing", ""))[0]
        if status != "SUCCESS":
            problems.append(f"{name} ({session_id}): workflow {status}")
            continue
        figures["sessions completed"] += 1
        calls = db.calls(session_id)
        for i, call in enumerate(calls, start=1):
            line = f"{name} effect-{i}"
            expected.add(line)
            figures[f"calls {call['state']}"] += 1
            if call["state"] == "completed" and lines[line] != 1:
                problems.append(f"{name}: completed effect {i} is in the ledger {lines[line]} times")
            elif lines[line] > 1:
                problems.append(f"{name}: interrupted effect {i} is in the ledger {lines[line]} times")
        problem = _transcript_problem(db, session_id, out)
        if problem:
            problems.append(f"{name}: transcript {problem}")
    for line, count in lines.items():
        if line not in expected:
            problems.append(f"the ledger holds {line!r} ({count}) with no recorded call")
    figures["ledger lines"] = sum(lines.values())
    return problems


# ---------------------------------------------------------------------- the soak


def _moments(rng: random.Random, kills: int) -> list[tuple[float, str]]:
    """When to strike, as parts of the sessions done: each kill, and the database restart."""
    moments = [(rng.uniform(0.05, 0.9), "kill") for _ in range(kills)]
    return sorted([*moments, (rng.uniform(0.3, 0.7), "restart database")])


def soak(args: argparse.Namespace, base: Path, seed: int) -> tuple[list[str], Counter[str], Takeovers]:
    rng = random.Random(seed)
    pg = Postgres(base / "pg")
    pg.start()
    logs, ledger, work = base / "logs", base / "ledger.txt", base / "sessions"
    logs.mkdir()
    figures: Counter[str] = Counter()
    takeovers = Takeovers()
    problems: list[str] = []
    with ServerThread(parse_scenario(scenario(ledger), "<soak>"), max_recorded=1_000_000) as api:
        fleet = Fleet(pg.url, logs, args.workers, args.concurrency)
        db = FleetDatabase(pg.url)
        try:
            names: dict[str, str] = {}
            specs = []
            for n in range(args.sessions):
                folder = work / f"s-{n:03d}"
                folder.mkdir(parents=True)
                spec = SessionSpec(
                    session_id=str(uuid.uuid4()),
                    prompt=f"soak go s-{n:03d}",
                    model="mock-primary",
                    base_url=api.url,
                    cwd=str(folder),
                    permission_mode="bypassPermissions",
                )
                names[spec.session_id] = folder.name
                specs.append(spec)
            _enqueue(pg.url, specs)
            problems += _strike(args, rng, pg, fleet, db, list(names), takeovers, figures)
        finally:
            fleet.stop()
        bodies = Counter(
            json.dumps(r.messages, sort_keys=True) for r in api.server.requests if r.path == "/v1/messages"
        )
        figures["model requests"] = sum(bodies.values())
        figures["model requests sent again (in flight at a kill: allowed)"] = sum(bodies.values()) - len(bodies)
        if not problems:
            problems += check(db, names, ledger, base / "transcripts", figures)
        db.close()
    pg.stop()
    return problems, figures, takeovers


def _strike(
    args: argparse.Namespace,
    rng: random.Random,
    pg: Postgres,
    fleet: Fleet,
    db: FleetDatabase,
    ids: list[str],
    takeovers: Takeovers,
    figures: Counter[str],
) -> list[str]:
    """Wait for every session to end, killing workers and restarting the database on the way."""
    moments, deadline = _moments(rng, args.kills), time.monotonic() + args.seconds
    while True:
        statuses = _statuses(db, ids)
        now = time.monotonic()
        takeovers.look(statuses, now)
        done = sum(1 for s, _ in statuses.values() if s in ("SUCCESS", "ERROR", "CANCELLED"))
        gone = fleet.exited()
        if gone:
            return [f"a worker exited by itself: {', '.join(gone)} (see {fleet.logs})"]
        if done == len(ids) and not moments:
            return []
        if now > deadline:
            return [f"{len(ids) - done} sessions had not ended after {args.seconds:g} s"]
        if moments and done >= moments[0][0] * len(ids):  # one that comes due as the last sessions end still runs
            _, what = moments.pop(0)
            time.sleep(rng.uniform(0.0, 1.0))
            if what == "kill":
                victim = fleet.kill(rng.randrange(len(fleet.slots)))
                figures["SIGKILLs"] += 1
                figures["sessions taken over"] += takeovers.killed(victim, time.monotonic(), _statuses(db, ids))
            else:
                pg.stop()
                time.sleep(rng.uniform(0.5, 2.0))
                pg.start()
                figures["database restarts"] += 1
        time.sleep(0.1)


def _table(figures: Counter[str], takeovers: Takeovers, problems: list[str], head: str) -> str:
    rows = [head, "", "| what | figure |", "|---|---|"]
    rows += [f"| {k} | {v} |" for k, v in sorted(figures.items())]
    times = takeovers.seconds
    if times:
        rows.append(
            f"| takeover of a dead worker's session, median (max) | {statistics.median(times):.1f} s "
            f"({max(times):.1f} s) |"
        )
    rows.append(f"| problems | **{len(problems)}** |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="sessions each worker runs at once (default 8)")
    parser.add_argument("--kills", type=int, default=10, help="workers killed with SIGKILL (default 10)")
    parser.add_argument("--seconds", type=float, default=3600.0, help="give up after this (default 1 h)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep the files under DIR (default: only on failure)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    base = args.keep or Path(tempfile.mkdtemp(prefix="queryloop-soak-fleet-"))
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)  # the postgres user walks into its cluster's folder
    started, load, start = datetime.now(UTC), os.getloadavg()[0], time.monotonic()
    problems, figures, takeovers = soak(args, base, seed)
    for problem in problems:
        print("PROBLEM:", problem)
    head = (
        f"{started:%Y-%m-%d %H:%M} UTC, {(time.monotonic() - start) / 60:.1f} min, seed {seed}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores, load average {load:.1f} before "
        f"and {os.getloadavg()[0]:.1f} after; {args.workers} workers × {args.concurrency} sessions, "
        f"heartbeat {HEARTBEAT_S:g} s, dead after {DEAD_AFTER_S:g} s"
    )
    print(_table(figures, takeovers, problems, head))
    if problems:
        print(f"files kept in {base}")
    elif args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
