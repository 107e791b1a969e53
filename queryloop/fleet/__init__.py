"""A fleet: sessions as DBOS workflows on a database every worker reaches (``queryloop worker`` / ``submit``).

``session``, ``steps``, ``store``, ``database``, ``worker``, ``submit`` and ``commands``; docs/fleet.md. Importing
it loads neither DBOS nor SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'queryloop.fleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
