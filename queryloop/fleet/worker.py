"""``queryloop worker``: a DBOS executor that runs submitted sessions, beats a heartbeat and recovers dead peers.

Self-hosted DBOS recovers only its own executor's workflows, hence the heartbeat (docs/fleet.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Any

import attrs
import sqlalchemy as sa

from .database import FleetDatabase, safe_url
from .session import QUEUE, WORKFLOW, run_session

__all__ = ["APPLICATION_VERSION", "WorkerConfig", "serve"]

APPLICATION_VERSION = "queryloop-fleet-1"
"""The DBOS application version of every worker: DBOS recovers a workflow only on the version that started it.

Bump it when a change makes a session's steps differ (a recovered workflow replays its
recorded steps in order, so an old workflow cannot run on new code that sends other requests).
"""


@attrs.frozen(kw_only=True)
class WorkerConfig:
    """How one worker runs."""

    database_url: str
    executor_id: str = attrs.field(factory=lambda: f"worker-{uuid.uuid4().hex[:12]}")
    concurrency: int = 8  # sessions this worker runs at once
    heartbeat_s: float = 2.0
    dead_after_s: float = 15.0  # a peer silent this long is dead: its sessions are recovered
    start_wait_s: float = 60.0  # an unreachable database at the start is tried again this long before giving up


_worker: tuple[FleetDatabase, str] | None = None  # this process's database and executor id, for the workflow


async def _session_workflow(spec: dict[str, Any]) -> dict[str, object]:
    if _worker is None:
        raise RuntimeError("the session workflow runs only in a `queryloop worker` process")
    db, executor_id = _worker
    return await run_session(db, executor_id, spec)


def _launch(config: WorkerConfig, db: FleetDatabase) -> None:
    from dbos import DBOS, DBOSConfig

    DBOS.workflow(name=WORKFLOW)(_session_workflow)
    dbos_config: DBOSConfig = {
        "name": "queryloop",
        "system_database_url": config.database_url,
        "executor_id": config.executor_id,
        "application_version": APPLICATION_VERSION,
        "log_level": os.environ.get("QUERYLOOP_DBOS_LOG_LEVEL", "WARNING"),
    }
    DBOS(config=dbos_config)
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=config.concurrency, polling_interval_sec=0.5)


def _recover_dead_peers(config: WorkerConfig, db: FleetDatabase) -> None:
    from dbos import DBOS

    for peer in db.claim_dead(config.executor_id, dead_after_s=config.dead_after_s):
        handles = DBOS._recover_pending_workflows([peer])
        ids = ", ".join(h.get_workflow_id() for h in handles) or "none"
        _say(f"worker {peer} is gone (stopped, or silent for {config.dead_after_s:g} s): recovered its sessions: {ids}")


def _heartbeat(config: WorkerConfig, db: FleetDatabase, *, pid: int, host: str, was_down: bool) -> bool:
    """Beat and recover dead peers; False when the database could not be reached (said once per outage).

    A database restart or a network blip is no reason to stop: the sessions running here go on
    (DBOS retries its own writes), and the heartbeat resumes when the database answers again."""
    try:
        db.beat(config.executor_id, pid=pid, host=host)
        _recover_dead_peers(config, db)
    except sa.exc.DBAPIError as exc:
        if not was_down:
            _say_unreachable(exc, config)
        return False
    if was_down:
        _say("the database is reachable again")
    return True


def _start(config: WorkerConfig, db: FleetDatabase, *, pid: int, host: str, stop: threading.Event) -> bool:
    """Create the tables, beat, launch DBOS; True once it runs, False if stopped while waiting for the database.

    A database restarting as the worker starts (a replacement worker, a fleet brought up at once) is waited
    for, as a running worker waits out an outage: tried again every heartbeat for ``start_wait_s``, then the
    last error is raised."""
    deadline = time.monotonic() + config.start_wait_s
    said = False
    while True:
        try:
            db.create_tables()
            db.beat(config.executor_id, pid=pid, host=host)  # alive before DBOS takes anything from the queue
            _launch(config, db)
            return True
        except sa.exc.OperationalError as exc:
            _undo_launch()
            if time.monotonic() + config.heartbeat_s > deadline:
                raise
            if not said:
                _say_unreachable(exc, config, f" for up to {config.start_wait_s:g} s")
                said = True
            if stop.wait(config.heartbeat_s):
                return False


def _undo_launch() -> None:
    """Drop what a launch that met an unreachable database set up, so the next try starts afresh."""
    from dbos import DBOS

    with contextlib.suppress(Exception):  # a launch cut short may leave little to take down
        DBOS.destroy(workflow_completion_timeout_sec=0)


def _say_unreachable(exc: Exception, config: WorkerConfig, how_long: str = "") -> None:
    """The one line a worker says when the database cannot be reached: the error's first line, and the retries."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    _say(f"the database is unreachable ({first}); retrying every {config.heartbeat_s:g} s{how_long}")


def _say(text: str) -> None:
    print(f"queryloop worker: {text}", file=sys.stderr, flush=True)


def serve(config: WorkerConfig, *, stop: threading.Event | None = None) -> int:
    """Run the worker until SIGINT or SIGTERM (or ``stop``); 0 after a clean stop."""
    global _worker
    stop = stop or threading.Event()
    db = FleetDatabase(config.database_url)
    _worker = (db, config.executor_id)
    logging.getLogger("dbos").setLevel(os.environ.get("QUERYLOOP_DBOS_LOG_LEVEL", "WARNING"))

    def stopping(*_: object) -> None:
        db.closing.set()  # first: the sessions' abort edges are not written to their transcripts
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stopping)
    host, pid = socket.gethostname(), os.getpid()
    if not _start(config, db, pid=pid, host=host, stop=stop):
        db.close()
        return 0  # stopped while it waited for the database
    _say(f"{config.executor_id} (pid {pid}) runs sessions from {safe_url(config.database_url)}")
    from dbos import DBOS

    up = True
    try:
        while not stop.wait(config.heartbeat_s):
            up = _heartbeat(config, db, pid=pid, host=host, was_down=not up)
    finally:
        _say(f"{config.executor_id} stopping; its unfinished sessions go to the other workers")
        db.closing.set()
        db.stopped(config.executor_id)
        DBOS.destroy(workflow_completion_timeout_sec=0)
        db.close()
    return 0
