"""The fleet's own tables, beside DBOS's: transcripts, tool-call records, ledger, checkpoints, worker heartbeats.

Every write is keyed, so a replay writes nothing new. Never touches DBOS's schema, and does not import DBOS.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from queryloop.handlers.session import queryloop_home

__all__ = [
    "DATABASE_ENV",
    "DatabaseUrlError",
    "EffectRecord",
    "FleetDatabase",
    "database_url",
    "default_database_url",
    "safe_url",
]

DATABASE_ENV = "QUERYLOOP_DATABASE_URL"
"""The environment variable naming the fleet's database (``--database-url`` wins over it)."""


class DatabaseUrlError(ValueError):
    """The database URL cannot name a database queryloop can use (the message says which kinds can)."""


def default_database_url() -> str:
    """The embedded single-machine default: a SQLite file under ``$QUERYLOOP_HOME``."""
    return f"sqlite:///{queryloop_home() / 'fleet.sqlite'}"


def database_url(given: str | None) -> str:
    """``--database-url``, else ``$QUERYLOOP_DATABASE_URL``, else the SQLite default — checked.

    Accepted: ``sqlite:///PATH`` and ``postgresql://USER@HOST:PORT/DB`` (also ``postgres://``
    and ``postgresql+psycopg://``). Anything else is a :class:`DatabaseUrlError`.
    """
    raw = given or os.environ.get(DATABASE_ENV) or default_database_url()
    try:
        url = sa.make_url(raw)
    except sa.exc.ArgumentError:
        raise DatabaseUrlError(
            f"cannot read the database URL {raw!r}: expected sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE"
        ) from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise DatabaseUrlError(
                f"the database URL {raw!r} names no file: workers share the database, so give sqlite:///PATH"
            )
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return raw
    if backend in ("postgresql", "postgres"):
        if url.drivername in ("postgres", "postgresql+psycopg2"):
            raise DatabaseUrlError(f"use postgresql:// (psycopg 3), not {url.drivername}://, in {raw!r}")
        if not url.database:
            raise DatabaseUrlError(f"the database URL {raw!r} names no database: postgresql://USER@HOST:PORT/DATABASE")
        return raw
    raise DatabaseUrlError(
        f"unsupported database {backend!r} in {raw!r}: queryloop's fleet runs on sqlite:///PATH "
        "(one machine) or postgresql://USER@HOST:PORT/DATABASE (a fleet)"
    )


def safe_url(url: str) -> str:
    """The database URL without its password, for messages and pages."""
    return sa.make_url(url).render_as_string(hide_password=True)


def _engine_url(raw: str) -> sa.URL:
    url = sa.make_url(raw)
    if url.get_backend_name() in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    return url


_metadata = sa.MetaData()

_transcript = sa.Table(
    "queryloop_transcript",
    _metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("entry", sa.Text, nullable=False),
)

_effects = sa.Table(
    "queryloop_tool_calls",
    _metadata,
    sa.Column("key", sa.String(200), primary_key=True),  # session id / tool_use id
    sa.Column("session_id", sa.String(64), nullable=False, index=True),
    sa.Column("tool", sa.String(100), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # started, completed, interrupted
    sa.Column("result", sa.Text),  # the tool_result block, once completed
    sa.Column("executor_id", sa.String(200), nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
)

_ledger = sa.Table(
    "queryloop_ledger",
    _metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("tool_use_id", sa.String(200), primary_key=True),
    sa.Column("entry", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.Float, nullable=False),
)

_checkpoints = sa.Table(
    "queryloop_checkpoints",
    _metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("tool_use_id", sa.String(200), primary_key=True),
    sa.Column("path", sa.Text, primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("prompt_id", sa.String(64), nullable=False),
    sa.Column("blob", sa.String(64)),  # sha256 of the prior bytes; NULL: the file did not exist
)

_blobs = sa.Table(
    "queryloop_blobs",
    _metadata,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
)

_workers = sa.Table(
    "queryloop_workers",
    _metadata,
    sa.Column("executor_id", sa.String(200), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),  # alive, stopped, dead
    sa.Column("beat", sa.Float, nullable=False),  # time.time() of the last heartbeat
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("recovered_by", sa.String(200)),
    sa.Column("pid", sa.Integer),
    sa.Column("host", sa.String(200)),
)


class EffectRecord:
    """What the tool-call table says of one idempotency key: ``started`` (maybe partly run), ``completed``
    or ``interrupted`` (answered as such after its worker died)."""

    def __init__(self, state: str, result: dict[str, Any] | None, executor_id: str) -> None:
        self.state = state
        self.result = result
        self.executor_id = executor_id


OUTAGE_WAIT_S: Final = 60.0
"""How long a session's read or write waits for a database that went away (a restart, a dropped connection)."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _rides_out_outages(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """Try ``method`` again while the database cannot be reached, for up to :data:`OUTAGE_WAIT_S`.

    Found by ``tools/soak_fleet.py``: a session whose write met a database restart ended in
    internal_error. Every write here is keyed, so doing it again changes nothing; a call whose
    ``begin_call`` committed before its connection dropped finds its own record and is answered as
    interrupted (never run twice). Blocks the calling thread, as the write itself does."""

    @functools.wraps(method)
    def tried(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        deadline, delay, said = time.monotonic() + OUTAGE_WAIT_S, 0.1, False
        while True:
            try:
                return method(*args, **kwargs)
            except sa.exc.OperationalError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                if not said:
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    _log.warning("the database is unreachable (%s): %s waits for it", first, method.__name__)
                    said = True
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    return tried


_log = logging.getLogger("queryloop.fleet")


class FleetDatabase:
    """The ``queryloop_*`` tables on the fleet's database; every write idempotent (see the module docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        engine_url = _engine_url(url)
        self.is_sqlite = engine_url.get_backend_name() == "sqlite"
        kwargs: dict[str, object] = {"pool_pre_ping": True}
        if self.is_sqlite:  # the workers and DBOS write the same file: wait for its lock instead of failing
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        self.engine = sa.create_engine(engine_url, **kwargs)
        if self.is_sqlite:
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        # Set when this worker stops: the sessions it runs are cancelled and take their abort edges, which
        # must not reach the transcript — the worker that recovers them writes the real continuation there.
        self.closing = threading.Event()

    def create_tables(self) -> None:
        """Create the tables if missing (two workers may race to do it: the loser retries)."""
        for attempt in range(5):
            try:
                _metadata.create_all(self.engine, checkfirst=True)
                return
            except sa.exc.DBAPIError:
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _begin(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as conn:
            yield conn

    def _insert_new(self, conn: sa.Connection, table: sa.Table, row: Mapping[str, object]) -> bool:
        """Insert ``row`` unless its key is there already (another writer's, or a replay's); True when inserted."""
        insert = sqlite_insert(table) if self.is_sqlite else postgresql_insert(table)
        key = next(iter(table.primary_key.columns))
        # RETURNING, not rowcount: a skipped conflicting row is told apart from an inserted one on every driver
        return conn.execute(insert.values(**row).on_conflict_do_nothing().returning(key)).first() is not None

    # ---- transcripts ------------------------------------------------------------------------

    @_rides_out_outages
    def append_transcript(self, session_id: str, seq: int, entry: Mapping[str, object]) -> None:
        """Entry ``seq`` of a session's transcript; one already there (a replay writing it again) is kept."""
        if self.closing.is_set():
            return
        text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
        with self._begin() as conn:
            self._insert_new(conn, _transcript, {"session_id": session_id, "seq": seq, "entry": text})

    @_rides_out_outages
    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        """A session's transcript entries in order."""
        with self._begin() as conn:
            rows = conn.execute(
                sa.select(_transcript.c.entry).where(_transcript.c.session_id == session_id).order_by(_transcript.c.seq)
            )
            return [json.loads(row.entry) for row in rows]

    def session_ids(self) -> list[str]:
        """Every session that has a transcript here (``queryloop ui`` lists them)."""
        with self._begin() as conn:
            return [row[0] for row in conn.execute(sa.select(_transcript.c.session_id).distinct())]

    def export_transcript(self, session_id: str, path: Path) -> Path:
        """Write a session's transcript as the JSON Lines file a local session keeps (what ``load_history`` reads)."""
        lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in self.transcript(session_id)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines), encoding="utf-8")
        return path

    # ---- tool calls (idempotency keys) ------------------------------------------------------

    @_rides_out_outages
    def begin_call(self, key: str, *, session_id: str, tool: str, executor_id: str) -> EffectRecord | None:
        """Record that the call ``key`` starts now; None when it is new, else what an earlier attempt left."""
        row = {
            "key": key,
            "session_id": session_id,
            "tool": tool,
            "state": "started",
            "result": None,
            "executor_id": executor_id,
            "started_at": time.time(),
        }
        with self._begin() as conn:
            if self._insert_new(conn, _effects, row):
                return None
            found = conn.execute(
                sa.select(_effects.c.state, _effects.c.result, _effects.c.executor_id).where(_effects.c.key == key)
            ).one()
        result = json.loads(found.result) if found.result is not None else None
        return EffectRecord(found.state, result, found.executor_id)

    @_rides_out_outages
    def complete_call(self, key: str, result: Mapping[str, object], *, state: str = "completed") -> None:
        """The call ``key`` ended with the tool_result block ``result``: ``completed``, or ``interrupted``
        (its worker died while it ran; the result says so, and it is never run again)."""
        with self._begin() as conn:
            conn.execute(
                _effects.update()
                .where(_effects.c.key == key)
                .values(state=state, result=json.dumps(result, ensure_ascii=False))
            )

    @_rides_out_outages
    def calls(self, session_id: str) -> list[dict[str, object]]:
        """A session's recorded tool calls (key, tool, state, executor), in the order they started."""
        with self._begin() as conn:
            rows = conn.execute(
                sa.select(_effects.c.key, _effects.c.tool, _effects.c.state, _effects.c.executor_id)
                .where(_effects.c.session_id == session_id)
                .order_by(_effects.c.started_at)
            )
            return [dict(row._mapping) for row in rows]

    # ---- the side-effect ledger -------------------------------------------------------------

    @_rides_out_outages
    def record_ledger(self, session_id: str, tool_use_id: str, entry: Mapping[str, object]) -> None:
        row = {
            "session_id": session_id,
            "tool_use_id": tool_use_id,
            "entry": json.dumps(entry, ensure_ascii=False),
            "recorded_at": time.time(),
        }
        with self._begin() as conn:
            self._insert_new(conn, _ledger, row)

    @_rides_out_outages
    def ledger(self, session_id: str) -> list[dict[str, object]]:
        with self._begin() as conn:
            rows = conn.execute(
                sa.select(_ledger.c.entry).where(_ledger.c.session_id == session_id).order_by(_ledger.c.recorded_at)
            )
            return [json.loads(row.entry) for row in rows]

    # ---- file checkpoints -------------------------------------------------------------------

    @_rides_out_outages
    def checkpoints(self, session_id: str, tool_use_id: str | None = None) -> list[dict[str, Any]]:
        """A session's checkpoint entries in order (those of one call with ``tool_use_id``)."""
        query = sa.select(
            _checkpoints.c.seq,
            _checkpoints.c.prompt_id,
            _checkpoints.c.path,
            _checkpoints.c.blob,
            _checkpoints.c.tool_use_id,
        ).where(_checkpoints.c.session_id == session_id)
        if tool_use_id is not None:
            query = query.where(_checkpoints.c.tool_use_id == tool_use_id)
        with self._begin() as conn:
            return [dict(row._mapping) for row in conn.execute(query.order_by(_checkpoints.c.seq))]

    @_rides_out_outages
    def save_checkpoint(
        self, session_id: str, *, tool_use_id: str, prompt_id: str, path: str, data: bytes | None, digest: str | None
    ) -> None:
        with self._begin() as conn:
            if data is not None and digest is not None:
                self._insert_new(conn, _blobs, {"digest": digest, "data": data})
            last = conn.execute(
                sa.select(sa.func.max(_checkpoints.c.seq)).where(_checkpoints.c.session_id == session_id)
            ).scalar()
            row = {
                "session_id": session_id,
                "tool_use_id": tool_use_id,
                "path": path,
                "seq": (last or 0) + 1,
                "prompt_id": prompt_id,
                "blob": digest,
            }
            self._insert_new(conn, _checkpoints, row)

    @_rides_out_outages
    def blob(self, digest: str) -> bytes | None:
        with self._begin() as conn:
            data = conn.execute(sa.select(_blobs.c.data).where(_blobs.c.digest == digest)).scalar()
        return bytes(data) if data is not None else None

    # ---- worker heartbeats --------------------------------------------------------------------

    def beat(self, executor_id: str, *, pid: int, host: str) -> None:
        """This worker is alive now (a new row, or its own row revived after a restart)."""
        now = time.time()
        with self._begin() as conn:
            updated = conn.execute(
                _workers.update()
                .where(_workers.c.executor_id == executor_id)
                .values(state="alive", beat=now, pid=pid, host=host, recovered_by=None)
            ).rowcount
            if not updated:
                row = {"executor_id": executor_id, "state": "alive", "beat": now, "started_at": now, "pid": pid}
                self._insert_new(conn, _workers, {**row, "host": host, "recovered_by": None})

    def stopped(self, executor_id: str) -> None:
        """This worker stopped: the next peer to beat recovers its unfinished sessions at once (no wait)."""
        with self._begin() as conn:
            conn.execute(
                _workers.update().where(_workers.c.executor_id == executor_id).values(state="stopped", beat=0.0)
            )

    def claim_dead(self, executor_id: str, *, dead_after_s: float) -> list[str]:
        """Peers whose heartbeat is older than ``dead_after_s``, each claimed by this worker alone (atomically)."""
        cutoff = time.time() - dead_after_s
        claimed: list[str] = []
        with self._begin() as conn:
            stale = conn.execute(
                sa.select(_workers.c.executor_id).where(
                    _workers.c.state.in_(("alive", "stopped")),
                    _workers.c.beat < cutoff,
                    _workers.c.executor_id != executor_id,
                )
            ).all()
        for (peer,) in stale:
            with self._begin() as conn:
                won = conn.execute(
                    _workers.update()
                    .where(
                        _workers.c.executor_id == peer,
                        _workers.c.state.in_(("alive", "stopped")),
                        _workers.c.beat < cutoff,
                    )
                    .values(state="dead", recovered_by=executor_id)
                ).rowcount
            if won:
                claimed.append(peer)
        return claimed

    def workers(self) -> list[dict[str, Any]]:
        with self._begin() as conn:
            rows = conn.execute(sa.select(_workers).order_by(_workers.c.started_at))
            return [dict(row._mapping) for row in rows]

    def live_workers(self, *, dead_after_s: float) -> list[str]:
        cutoff = time.time() - dead_after_s
        return [w["executor_id"] for w in self.workers() if w["state"] == "alive" and w["beat"] >= cutoff]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
