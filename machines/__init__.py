"""The shipped machine declarations (YAML), installed as package data.

Owns only the location of the YAML files; loading and validation live in ``queryloop.fsm.model.load``.
Installed as ``queryloop.machines``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MACHINES_DIR", "SCENARIOS_DIR", "shipped_machines", "shipped_scenarios"]

MACHINES_DIR = Path(__file__).resolve().parent
SCENARIOS_DIR = MACHINES_DIR / "scenarios"


def shipped_machines() -> list[Path]:
    """Every machine declaration shipped with the package, in a stable order."""
    top = sorted(p for p in MACHINES_DIR.glob("*.yaml"))
    examples = sorted((MACHINES_DIR / "examples").glob("*.yaml"))
    return top + examples


def shipped_scenarios() -> dict[str, Path]:
    """The embedded server's scenarios shipped with the package, by name (the file's stem), sorted."""
    return {p.stem: p for p in sorted(SCENARIOS_DIR.glob("*.yaml"))}
