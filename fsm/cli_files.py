"""What the engine's commands share: the usage error, and how they find, load and show machine files.

Loads nothing until asked: each function imports the model room when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model.spec import MachineSpec
    from .verify.coverage import RunSteps

__all__ = ["DefaultMachines", "UsageError", "coverage_specs", "display", "unbound_spec"]


class UsageError(Exception):
    """A bad flag or value on the command line."""


DefaultMachines = Callable[[], Sequence[Path]]


def display(path: Path) -> str:
    """``path`` as the commands print it: relative to the working directory where it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def unbound_spec(path: Path) -> MachineSpec:
    """The machine at ``path`` with its handlers unresolved: what drawing needs."""
    from .model.load import load_machine

    return load_machine(display(path), bind=False).spec


def coverage_specs(args: argparse.Namespace, runs: Sequence[RunSteps]) -> list[MachineSpec]:
    """The machines named by --machine, else the shipped ones the runs name."""
    if args.machine:
        return [unbound_spec(Path(p)) for p in args.machine]
    named = {name for run in runs for name in run.steps if name is not None}
    return [spec for spec in (unbound_spec(p) for p in args.default_machines()) if spec.name in named]
