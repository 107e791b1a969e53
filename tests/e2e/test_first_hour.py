"""A newcomer's first hour: a plain install of the clone, an empty folder, the commands the docs show.

Each test runs the real program in a subprocess, in a fresh folder, the way the docs say to.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from .browser import UiServer
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


def _layer_without_dot(tmp_path: Path, session_id: str, home: Path) -> tuple[int, str, str]:
    """``queryloop ui`` with no ``dot`` on PATH asked for a layer's picture, as the page asks: the answer, stderr."""
    empty = tmp_path / "bin"
    empty.mkdir()
    with UiServer(home, None, env={"PATH": str(empty)}) as ui:
        url = f"{ui.base}/api/sessions/{session_id}/layers/context.svg"
        request = urllib.request.Request(url, headers={"X-Queryloop-Token": ui.token})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, body = response.status, response.read().decode()
        except urllib.error.HTTPError as answer:
            status, body = answer.code, answer.read().decode()
            answer.close()
        ui.stderr.seek(0)
        return status, body, ui.stderr.read()


def test_the_inspector_without_graphvizs_dot_says_what_to_install_and_a_picture_is_that_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = subprocess.run(
        [sys.executable, "-m", "queryloop", "--scenario", "hello", "-p", "hi"],
        capture_output=True,
        text=True,
        env=cli_env(None, QUERYLOOP_HOME=str(home)),
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    session_id = next(home.glob("projects/*/*.jsonl")).stem
    status, body, stderr = _layer_without_dot(tmp_path, session_id, home)
    assert status == 503 and len(body.splitlines()) == 1 and "apt-get install graphviz" in body, (status, body)
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines()[0].startswith("queryloop ui: warning: drawing the path needs Graphviz's `dot`"), stderr


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


def _help() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "queryloop", "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_help_is_shaped_as_claude_codes_arguments_then_options_by_name_then_commands() -> None:
    text = _help()
    sections = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert sections == ["Arguments:", "Options:", "Commands:"], sections
    options = text.split("\nOptions:\n", 1)[1].split("\nCommands:\n", 1)[0]
    lines = [line for line in options.splitlines() if line.startswith("  -")]
    names = [re.search(r"--([\w-]+)", line).group(1).lower() for line in lines]  # type: ignore[union-attr]
    assert names == sorted(names) and "scenario" in names, names


def test_the_help_shows_every_flag_of_the_parser_once() -> None:
    from queryloop.frontends.cli import build_agent_parser

    text = _help()
    parser = build_agent_parser()
    shown = [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]
    options = text.split("\nOptions:\n", 1)[1]
    missing = [
        f for a in shown for f in a.option_strings if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", options)
    ]
    assert not missing, missing
    assert len(shown) == len([line for line in options.splitlines() if line.startswith("  -")]), "one entry each"
