"""The package is `mypy --strict` clean (the configuration is in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_reports_no_issues() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "fsm", "handlers", "machines"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
