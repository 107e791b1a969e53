"""The wheel installs one import name, ``queryloop``, and the README's commands work from a normal install.

The wheel is built from a copy of the tree without network (``--no-build-isolation``),
installed with ``--target`` into a fresh directory, and run from a directory where
the repository's own folders are not importable, so nothing of the source tree helps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import queryloop

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("fsm", "handlers", "machines", "queryloop", "pyproject.toml", "README.md")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    (built,) = dist.glob("queryloop-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return target


def _run(site: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PYTHON"))}
    env.update(PYTHONPATH=str(site), HOME=str(cwd), QUERYLOOP_RETRY_BASE_DELAY_MS="1")
    return subprocess.run([*args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_the_wheel_holds_exactly_one_top_level_import_name(wheel: Path) -> None:
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert names == {"queryloop", f"queryloop-{queryloop.__version__}.dist-info"}
    listed = set(zipfile.ZipFile(wheel).namelist())
    for data in (
        "queryloop/py.typed",
        "queryloop/machines/query_loop.yaml",
        "queryloop/handlers/request/services/models.yaml",
    ):
        assert data in listed
    assert "queryloop/machines/scenarios/fallback_chain.yaml" in listed


def test_a_normal_install_runs_the_readme_command(site: Path, tmp_path: Path) -> None:
    scenario = site / "queryloop" / "machines" / "scenarios" / "fallback_chain.yaml"
    script = site / "bin" / "queryloop"
    proc = _run(
        site, [sys.executable, str(script), "run", "--scenario", str(scenario), "-p", "bump the checkpoint"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "model_fallback" in proc.stderr and "stop_hooks_passed" in proc.stderr
    assert "side_effect.log records the run" in proc.stdout


def test_a_normal_install_checks_and_draws_from_its_own_files(site: Path, tmp_path: Path) -> None:
    example = site / "queryloop" / "machines" / "examples" / "retry_fetch.yaml"
    check = _run(site, [sys.executable, "-m", "queryloop", "check", "--machine", str(example)], tmp_path)
    assert check.returncode == 0 and "ok: every state reachable" in check.stdout, check.stdout + check.stderr
    found = _run(
        site,
        [sys.executable, "-c", "import queryloop.fsm, queryloop.handlers; print(queryloop.fsm.__file__)"],
        tmp_path,
    )
    assert found.stdout.startswith(str(site)), "the installed package, not the source tree, was imported"


def test_the_editable_install_maps_the_repository_folders() -> None:
    import queryloop.fsm
    import queryloop.handlers
    import queryloop.machines

    assert Path(queryloop.__file__).parent == ROOT / "queryloop"
    assert Path(queryloop.fsm.__file__).parent == ROOT / "fsm"
    assert Path(queryloop.handlers.__file__).parent == ROOT / "handlers"
    assert Path(queryloop.machines.__file__).parent == ROOT / "machines"
