"""What ``queryloop ui`` shows of a fleet's sessions, read from the fleet's database (``--database-url``).

Owns :class:`FleetView`: the fleet's sessions and one session's files, read only and shaped as :mod:`.reading`
shapes them. A database that cannot be read is a warning on the list page.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import attrs

from queryloop.run.sessions import summarize

from .reading import ledger_row, prompt_rows, session_row, transcript_rows

__all__ = ["FLEET_PROJECT", "FleetSession", "FleetView"]

FLEET_PROJECT = "fleet database"
"""The project column of a fleet session: its workers' folders are theirs, the database is where it is kept."""


class FleetView:
    """The fleet's database behind ``url``, opened lazily (the ``fleet`` extra brings SQLAlchemy)."""

    def __init__(self, url: str) -> None:
        from queryloop.fleet.database import FleetDatabase, safe_url

        self.url = url
        self.shown = safe_url(url)  # a URL database_url() accepted
        self.db = FleetDatabase(url)

    def close(self) -> None:
        self.db.close()

    def sessions(self) -> tuple[list[dict[str, object]], list[str]]:
        """Rows of the list page, newest first, and what could not be read."""
        import sqlalchemy as sa

        try:
            ids = self.db.session_ids()
            found = [(sid, self.db.transcript(sid)) for sid in ids]
        except sa.exc.SQLAlchemyError as exc:
            return [], [f"the fleet database {self.shown} cannot be read: {_first_line(exc)}"]
        rows = []
        for sid, entries in found:
            summary = summarize(sid, entries, modified=_stamp(entries))
            rows.append((summary.modified, {**session_row(summary, FLEET_PROJECT), "source": "fleet"}))
        return [row for _, row in sorted(rows, key=lambda r: r[0], reverse=True)], []

    def workers(self) -> list[dict[str, Any]]:
        import sqlalchemy as sa

        try:
            rows = self.db.workers()
        except sa.exc.SQLAlchemyError:
            return []  # the list page already says the database cannot be read
        now = time.time()
        return [
            {
                "executor_id": str(w["executor_id"]),
                "state": str(w["state"]),
                "host": str(w.get("host") or ""),
                "pid": w.get("pid"),
                "beat_age_s": round(now - float(w["beat"]), 1) if w["beat"] else None,
                "recovered_by": str(w.get("recovered_by") or ""),
            }
            for w in rows
        ]

    def session(self, session_id: str) -> FleetSession | None:
        import sqlalchemy as sa

        try:
            entries = self.db.transcript(session_id)
            if not entries:
                return None
            return FleetSession(
                session_id=session_id,
                entries=tuple(entries),
                ledger=tuple(self.db.ledger(session_id)),
                checkpoints=tuple(self.db.checkpoints(session_id)),
                calls=tuple(self.db.calls(session_id)),
                database=self.shown,
            )
        except sa.exc.SQLAlchemyError:
            return None


@attrs.frozen(kw_only=True)
class FleetSession:
    """One fleet session as the database holds it."""

    session_id: str
    entries: tuple[dict[str, Any], ...]
    ledger: tuple[dict[str, Any], ...]
    checkpoints: tuple[dict[str, Any], ...]
    calls: tuple[dict[str, Any], ...]
    database: str

    steps_folder = None  # a worker's steps/ folder is on that worker; paths come from --traces

    def to_json(self) -> dict[str, Any]:
        cwd = next((e["cwd"] for e in self.entries if isinstance(e.get("cwd"), str)), "")
        return {
            "session_id": self.session_id,
            "source": "fleet",
            "project": f"{FLEET_PROJECT} {self.database}",
            "cwd": cwd,
            "transcript": transcript_rows(self.entries),
            "ledger": [ledger_row(e) for e in self.ledger],
            "checkpoints": [
                {
                    "seq": c["seq"],
                    "prompt_id": c["prompt_id"],
                    "path": c["path"],
                    "created": c["blob"] is None,
                    "tool": c["tool_use_id"],
                }
                for c in self.checkpoints
            ],
            "dropped_checkpoints": 0,
            "prompts": prompt_rows(self.entries),
            "agents": [],  # the fleet offers no Agent tool (docs/agents.md)
            "calls": [
                {
                    "tool_use_id": str(c["key"]).rsplit("/", 1)[-1],
                    **{k: str(c[k]) for k in ("tool", "state", "executor_id")},
                }
                for c in self.calls
            ],
            "warnings": [],
        }

    def rewind_dry_run(self, to: str | None) -> dict[str, object]:
        return {
            "error": "no rewind here: a fleet session's files are in its working directory on the workers, "
            "and its checkpoints in the database; this page shows them but restores nothing"
        }


def _stamp(entries: list[dict[str, Any]]) -> float:
    """When the session last wrote (its newest entry's timestamp), for the list's order."""
    for e in reversed(entries):
        try:
            return datetime.fromisoformat(str(e.get("timestamp")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return datetime.min.replace(tzinfo=UTC).timestamp()


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
