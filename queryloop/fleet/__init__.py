"""A fleet: sessions as DBOS workflows on a database every worker reaches (``queryloop worker`` / ``submit``).

One workflow per session (``session``), one DBOS step per effect — each model request,
each tool call — keyed so a completed one is never run again after a crash (``steps``);
the transcript, the side-effect ledger and the file checkpoints in the database
(``store``, ``database``); workers that beat a heartbeat and recover a dead peer's
sessions (``worker``); enqueueing and waiting (``submit``); the two commands
(``commands``). SQLite is the single-machine default, PostgreSQL the fleet's database.

Importing this package imports neither DBOS nor SQLAlchemy: the names below load on
first use (PEP 562), so ``queryloop --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .commands import add_fleet_commands
    from .database import DATABASE_ENV, FleetDatabase, database_url
    from .session import SessionSpec
    from .submit import FleetError, enqueue, wait_for_result
    from .worker import WorkerConfig, serve

__all__ = [
    "DATABASE_ENV",
    "FleetDatabase",
    "FleetError",
    "SessionSpec",
    "WorkerConfig",
    "add_fleet_commands",
    "database_url",
    "enqueue",
    "serve",
    "wait_for_result",
]

_WHERE = {
    "DATABASE_ENV": "database",
    "FleetDatabase": "database",
    "FleetError": "submit",
    "SessionSpec": "session",
    "WorkerConfig": "worker",
    "add_fleet_commands": "commands",
    "database_url": "database",
    "enqueue": "submit",
    "serve": "worker",
    "wait_for_result": "submit",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'queryloop.fleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
