"""The program's commands: who adds each one, found through one registry list, so the program only dispatches.

Owns :data:`COMMANDS` and :func:`add_commands`, which imports only the modules of the commands asked for: ``--help``
and a plain run import none.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any

import attrs

__all__ = ["COMMANDS", "Registration", "add_commands", "command_names"]


def _load(path: str) -> Any:
    """What ``module:name`` names, its module imported now."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@attrs.frozen(kw_only=True)
class Registration:
    """The commands one module adds: their names, and the ``module:function`` that adds their parsers.

    The function is called with the program's subparsers action (``sub.add_parser(name, …)`` for
    each name, in this order, with ``set_defaults(func=…)``); ``arguments``, when given, is a
    ``module:function`` returning the keyword arguments it is called with besides.
    """

    names: tuple[str, ...]
    adds: str
    arguments: str | None = None

    def add_to(self, sub: object) -> None:
        """Add this registration's commands to ``sub`` (their module is imported here)."""
        keywords: dict[str, object] = _load(self.arguments)() if self.arguments is not None else {}
        _load(self.adds)(sub, **keywords)


COMMANDS: tuple[Registration, ...] = (
    Registration(
        names=("check", "diagram", "docs"),
        adds="queryloop.fsm.cli:add_engine_commands",
        arguments="queryloop.frontends.cli:engine_arguments",
    ),
    Registration(names=("run",), adds="queryloop.frontends.cli:add_run_command"),
    Registration(names=("mock-api", "mock-mcp-deploy"), adds="queryloop.frontends.cli:add_mock_commands"),
    Registration(names=("sessions", "rewind"), adds="queryloop.run.sessions:add_session_commands"),
    Registration(names=("trust",), adds="queryloop.run.trust:add_trust_command"),
    Registration(names=("worker", "submit"), adds="queryloop.fleet.commands:add_fleet_commands"),
    Registration(names=("ui",), adds="queryloop.ui.command:add_ui_command"),
)
"""Every command of the program, by the module that adds it (a test holds each to the names it declares)."""


def command_names() -> tuple[str, ...]:
    """Every command's name, in the order ``queryloop --help`` lists them."""
    return tuple(name for registration in COMMANDS for name in registration.names)


def add_commands(sub: object, names: Collection[str] | None = None) -> None:
    """Add to ``sub`` the commands of every registration naming one of ``names`` (None: every command)."""
    for registration in COMMANDS:
        if names is None or any(name in names for name in registration.names):
            registration.add_to(sub)
