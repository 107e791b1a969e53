"""The package is `mypy --strict` clean, checked as it installs (configuration in pyproject.toml).

The repository keeps the engine, the handlers and the machines in their own folders and
installs them under one name, ``queryloop``, by setuptools' ``package-dir`` mapping.
mypy has no such mapping (it names a module by its path; python/mypy#10564), so the
test lays out the installed tree as setuptools' strict editable mode does — a link per
mapped folder, read from the same ``[tool.setuptools.package-dir]`` table, so the
mapping is written once — and checks that.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def installed_tree(where: Path) -> Path:
    """``where/queryloop`` laid out as the wheel installs it, made of symlinks into the repository."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = where / "queryloop"
    package.mkdir(parents=True)
    mapped = {name.removeprefix("queryloop."): folder for name, folder in mapping.items() if name != "queryloop"}
    for entry in (ROOT / mapping["queryloop"]).iterdir():
        if entry.name != "__pycache__" and entry.name not in mapped:
            (package / entry.name).symlink_to(entry)
    for name, folder in mapped.items():
        (package / name).symlink_to(ROOT / folder)
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


def _any_density() -> ModuleType:
    """tools/any_density.py, imported by its path."""
    spec = importlib.util.spec_from_file_location("any_density", ROOT / "tools" / "any_density.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_any_density_counts_any_where_it_is_a_type_and_nowhere_else() -> None:
    source = (
        "from typing import Any, cast\n"
        "Row = dict[str, Any]\n"
        "def f(x: Any, *rest: Any, **more: 'list[Any]') -> Any:\n"
        '    """Any word here is prose."""\n'
        "    y: tuple[Any, ...] = cast(Any, x)\n"
        "    return list[Any]()\n"
    )
    assert _any_density().count_any(source) == 8


def test_the_package_names_any_fewer_than_12_times_per_1000_lines() -> None:
    counts = _any_density().module_counts(ROOT).values()
    density = 1000 * sum(n for n, _ in counts) / sum(lines for _, lines in counts)
    assert density < 12, f"{density:.1f} Any per 1000 lines: run python tools/any_density.py for the worst modules"
