"""The package is `mypy --strict` clean, checked as it installs (configuration in pyproject.toml).

The repository keeps the engine, the handlers and the machines in their own folders and
installs them under one name, ``queryloop``; mypy cannot follow setuptools' package-dir
mapping, so the test lays out the installed tree with symlinks (as setuptools' strict
editable mode does) and checks that.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def installed_tree(where: Path) -> Path:
    """``where/queryloop`` laid out as the wheel installs it, made of symlinks into the repository."""
    package = where / "queryloop"
    package.mkdir(parents=True)
    for entry in (ROOT / "queryloop").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder in ("fsm", "handlers", "machines"):
        (package / folder).symlink_to(ROOT / folder)
    return where


def test_mypy_strict_reports_no_issues(tmp_path: Path) -> None:
    tree = installed_tree(tmp_path / "tree")
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
    ]
    proc = subprocess.run([*cmd, "-p", "queryloop"], capture_output=True, text=True, cwd=tree, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues found" in proc.stdout
