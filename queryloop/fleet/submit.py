"""``queryloop submit``: put a session on the fleet's queue, and optionally wait for its result.

Owns enqueueing through ``DBOSClient`` (the session id is the workflow id, so a session is submitted once), waiting
for its end, and the submitter's errors.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from .database import FleetDatabase, safe_url
from .session import QUEUE, WORKFLOW, SessionSpec

__all__ = ["FleetError", "SessionFailed", "enqueue", "result_line", "wait_for_result"]

_FINAL = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


class FleetError(Exception):
    """A submission that cannot be done as asked (the message says why and what to do)."""


class SessionFailed(FleetError):
    """The session's workflow ended without a result object (an error DBOS recorded, or a cancellation)."""


def _client(url: str) -> Any:
    from dbos import DBOS, DBOSClient

    logging.getLogger("dbos").setLevel(logging.WARNING)
    try:
        DBOS.migrate(url)  # the system tables, when no worker has created them yet
        return DBOSClient(system_database_url=url, application_name="queryloop")
    except Exception as exc:
        raise FleetError(f"cannot reach the database {safe_url(url)}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def enqueue(url: str, spec: SessionSpec, *, live_within_s: float = 30.0, require_worker: bool = False) -> int:
    """Put ``spec`` on the sessions queue; how many workers beat in the last ``live_within_s``.

    ``require_worker``: refuse (before enqueueing) when none did.
    """
    client = _client(url)
    db = FleetDatabase(url)
    try:
        db.create_tables()
        live = len(db.live_workers(dead_after_s=live_within_s))
        if require_worker and not live:
            raise FleetError(
                f"no worker is running on {safe_url(url)} (none beat in the last {live_within_s:g} s): "
                "start one with `queryloop worker` on the same --database-url, or submit without --wait"
            )
        from dbos import EnqueueOptions
        from dbos._error import DBOSWorkflowIDInUseError

        options: EnqueueOptions = {
            "workflow_name": WORKFLOW,
            "queue_name": QUEUE,
            "workflow_id": spec.session_id,
            "workflow_id_reuse_policy": "reject",
            "application_name": "queryloop",
        }
        try:
            client.enqueue(options, spec.to_json())
        except DBOSWorkflowIDInUseError:
            raise FleetError(f"session {spec.session_id} was submitted already; give another --session-id") from None
        return live
    finally:
        db.close()
        client.destroy()


def wait_for_result(url: str, session_id: str, *, timeout_s: float | None = None) -> dict[str, Any]:
    """The session's result object once its workflow has ended (polled; a recovery in between is waited out)."""
    from dbos._error import DBOSNonExistentWorkflowError

    client = _client(url)
    try:
        try:
            handle = client.retrieve_workflow(session_id)
        except DBOSNonExistentWorkflowError:
            raise FleetError(
                f"no session {session_id} in {safe_url(url)}: check the id `queryloop submit` printed"
            ) from None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = handle.get_status()
            if status.status in _FINAL:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise FleetError(f"session {session_id} has not ended after {timeout_s:g} s (status {status.status})")
            time.sleep(0.2)
        if status.status != "SUCCESS":
            why = _first_line(status.error) if status.error is not None else "no error recorded"
            raise SessionFailed(f"session {session_id} ended {status.status}: {why}")
        result = handle.get_result()
        if not isinstance(result, dict):
            raise SessionFailed(f"session {session_id} has no result object (got {type(result).__name__})")
        return result
    finally:
        client.destroy()


def result_line(result: dict[str, Any]) -> str:
    """The result object as one JSON line (``--output-format json``)."""
    return json.dumps(result, ensure_ascii=False)
