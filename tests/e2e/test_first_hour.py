"""A newcomer's first hour: a plain install of the clone, an empty folder, the commands the docs show.

Each test runs the real program in a subprocess, in a fresh folder, the way the docs say to.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .harness import cli_env

HIDES_GRAPHVIZ = "raise ModuleNotFoundError(\"No module named 'graphviz'\", name='graphviz')\n"


def _diagram(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "queryloop", "diagram", "--out", str(folder / "diagrams")],
        capture_output=True,
        text=True,
        env=cli_env(None, **env),
        cwd=folder,
        timeout=120,
    )


def test_diagram_without_graphvizs_dot_on_the_path_says_what_to_install_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = _diagram(tmp_path, PATH=str(empty))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Graphviz" in lines[0] and "install" in lines[0] and "`dot`" in lines[0], proc.stderr


def test_diagram_without_the_graphviz_python_package_says_what_to_install_in_one_line(tmp_path: Path) -> None:
    hidden = tmp_path / "site"
    hidden.mkdir()
    (hidden / "graphviz.py").write_text(HIDES_GRAPHVIZ)
    proc = _diagram(tmp_path, PYTHONPATH=str(hidden))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "pip install graphviz" in lines[0], proc.stderr
