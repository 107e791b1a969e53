"""A newcomer's first hour: a plain install of the clone, an empty folder, the commands the docs show.

Each test runs the real program in a subprocess, in a fresh folder, the way the docs say to.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .harness import ROOT, cli_env

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


def _first_bash_block(page: Path) -> list[str]:
    """The command lines of the first ```bash block of ``page`` (comments and blank lines left out)."""
    text = page.read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_inspector_pages_example_run_runs_as_written_in_an_empty_folder(tmp_path: Path) -> None:
    lines = _first_bash_block(ROOT / "docs" / "ui.md")
    serve = lines.index("queryloop ui")  # serves until interrupted: the lines before it make a session to look at
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "queryloop").write_text(f'#!/bin/sh\nexec {sys.executable} -m queryloop "$@"\n')
    (shim / "queryloop").chmod(0o755)
    folder = tmp_path / "empty"
    folder.mkdir()
    env = cli_env(None, PATH=f"{shim}:/usr/bin:/bin", QUERYLOOP_HOME=str(tmp_path / "home"))
    script = "set -e\n" + "\n".join(lines[:serve]) + "\n"
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, cwd=folder, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert any((tmp_path / "home").rglob("*.jsonl")), "the run left a session for the inspector to show"
