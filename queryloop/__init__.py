"""queryloop: an agent query loop whose every continuation and recovery is a transition of a YAML machine.

The packages: ``queryloop.fsm`` (the generic engine: load, run, check, draw),
``queryloop.handlers`` (the query loop's Python, one subpackage per layer of
``machines/query_loop.yaml``), ``queryloop.machines`` (the YAML), and here, above
them, the agent assembled from the layers (``agent``), its output (``console``), its
settings (``settings``), the ``queryloop`` program (``cli``) and the embedded
fault-injecting Anthropic-compatible server (``mockapi``, a testing and demo facility).

The names below are imported on first use, so ``import queryloop.fsm`` loads the
engine alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import AgentData, AgentOptions, AgentRun, AgentServices, restore_run, snapshot_run
    from .settings import Settings, SettingsError, load_settings

__all__ = [
    "AgentData",
    "AgentOptions",
    "AgentRun",
    "AgentServices",
    "Settings",
    "SettingsError",
    "load_settings",
    "restore_run",
    "snapshot_run",
]

__version__ = "0.1.0"

_HOME = {
    "AgentData": "agent",
    "AgentOptions": "agent",
    "AgentRun": "agent",
    "AgentServices": "agent",
    "restore_run": "agent",
    "snapshot_run": "agent",
    "Settings": "settings",
    "SettingsError": "settings",
    "load_settings": "settings",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'queryloop' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
