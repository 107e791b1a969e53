"""The wheel installs one import name, ``queryloop``, and the documented commands work from a normal install.

The wheel is built from a copy of the tree without network (``--no-build-isolation``),
installed with ``--target`` into a fresh directory, and run from a directory where
the repository's own folders are not importable, so nothing of the source tree helps.
The offline recipes (a shipped scenario by name, the no-key hints of the program and of
the Python API) are followed as printed in a fresh virtual environment holding the wheel
alone; its dependencies come from this interpreter's site directories through a ``.pth``
file, so no package index is needed (and the editable install there is not picked up:
a ``.pth`` line adds a directory, not the ``.pth`` files inside it).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import site as site_module
import socket
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import queryloop

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("fsm", "handlers", "machines", "queryloop", "pyproject.toml", "README.md")
# One xdist worker runs the whole module (its group), so the wheel (and the installs of it) is built once per run,
# not once per worker.
pytestmark = pytest.mark.xdist_group("packaging")


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
        *(f"queryloop/ui/static/{page}" for page in ("sessions.html", "session.html", "ui.js", "ui.css")),
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


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment (no system site) with the wheel installed, not editable; deps by ``.pth``."""
    env = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = [*site_module.getsitepackages(), sysconfig.get_path("purelib")]
    (Path(purelib) / "_queryloop_test_deps.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n", encoding="utf-8")
    return env


def _in_venv(venv: Path, cwd: Path, **extra: str) -> dict[str, str]:
    """The environment of a user of ``venv``: its bin first on PATH, no key, no PYTHON* variables, HOME in ``cwd``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HOME=str(cwd), VIRTUAL_ENV=str(venv))
    env.update(QUERYLOOP_RETRY_BASE_DELAY_MS="1", **extra)
    return env


def _shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, shell=True, capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL, timeout=120
    )


def _documented_program() -> str:
    """The program the docs' Python API page shows (as tests/e2e/test_python_api.py reads it)."""
    section = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "docs/python-api.md has no python block"
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_fresh_install_runs_offline_as_its_hints_say(venv: Path, tmp_path: Path) -> None:
    env = _in_venv(venv, tmp_path)
    where = _shell("command -v queryloop; python -c 'import queryloop; print(queryloop.__file__)'", tmp_path, env)
    assert where.stdout.splitlines()[0] == str(venv / "bin" / "queryloop"), where.stdout + where.stderr
    assert where.stdout.splitlines()[1].startswith(str(venv)), "the wheel's package, not the checkout's"

    hello = _shell('queryloop -p --scenario hello "hi"', tmp_path, env)
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout.strip() == "Hello! I am the scripted mock model."

    # the program's no-key hint: its command, verbatim
    hint = _shell("queryloop -p hi", tmp_path, env)
    assert hint.returncode == 1
    command = re.search(r"try: (.+?) \(", hint.stderr)
    assert command is not None, hint.stderr
    offline = _shell(command.group(1), tmp_path, env)
    assert offline.returncode == 0, offline.stderr
    assert "model_fallback" in offline.stderr and "side_effect.log records the run" in offline.stdout

    # the docs' Python program and its no-key error: the mock-api command and variables, verbatim but the port
    (tmp_path / "app.py").write_text(_documented_program(), encoding="utf-8")
    refused = _shell("python app.py", tmp_path, env)
    assert refused.returncode == 1 and "OptionsError: no model to talk to" in refused.stderr, refused.stderr
    port = str(_free_port())
    serve = re.search(r"`(queryloop mock-api [^`]+)`", refused.stderr)
    variables = re.findall(r"(ANTHROPIC_[A-Z_]+)=(\S+)", refused.stderr)
    assert serve is not None and {name for name, _ in variables} == {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"}
    server = subprocess.Popen(
        shlex.split(serve.group(1).replace("8123", port)), stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    try:
        assert server.stderr is not None
        assert server.stderr.readline().startswith(f"mock-api listening on http://127.0.0.1:{port}")
        given = {name: value.replace("8123", port) for name, value in variables}
        answered = _shell("python app.py", tmp_path, {**env, **given})
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.strip() == "Hello! I am the scripted mock model."
    finally:
        server.terminate()
        server.wait(10)
        if server.stderr is not None:
            server.stderr.close()
