"""Shared test helpers: paths to the repository's machines, fixtures (a local HTTP server among them) and a YAML writer.

Only end-to-end runs (the tests under ``tests/e2e``) count toward transition coverage:
every other test runs with ``QUERYLOOP_TRACE_DIR`` unset, so in-process runs against a
scripted model never record their paths (``tools/test.sh`` gates on the coverage).
"""

from __future__ import annotations

import contextlib
import http.server
import socketserver
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from queryloop.fsm import CheckReport, check_spec, load_machine
from queryloop.fsm.verify.check import progress_line
from queryloop.machines import shipped_machines

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
END_TO_END = ROOT / "tests" / "e2e"


@pytest.fixture(autouse=True)
def _sessions_kept_in_a_fresh_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every run a test makes (in process or in a subprocess) keeps its sessions in a fresh
    ``$QUERYLOOP_HOME``, never in the user's ``~/.queryloop``."""
    home = tmp_path_factory.mktemp("queryloop-home")
    monkeypatch.setenv("QUERYLOOP_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _only_end_to_end_runs_record_their_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if not request.path.is_relative_to(END_TO_END):
        monkeypatch.delenv("QUERYLOOP_TRACE_DIR", raising=False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``tools/test.sh`` runs ``--dist loadgroup``) every test that uses the session's
    exploration runs on one worker, so the exploration (a minute) is made once per run, not once per worker.

    ``tryfirst``: xdist's worker reads the ``xdist_group`` marks in its own hook of the same name (registered
    after this conftest, so by default called before it); a mark added after that places no test in a group."""
    for item in items:
        if "explored_machines" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("exploration"))


@pytest.fixture(scope="session")
def explored_machines(pytestconfig: pytest.Config) -> dict[Path, CheckReport]:
    """Every shipped machine checked with exploration at its params' check values, once per test
    session (the query loop's exploration costs a minute; several modules compare with it). Its
    progress reaches the terminal past pytest's capture, a line every ten seconds."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    terminal = pytestconfig.pluginmanager.getplugin("terminalreporter")

    def progress(machine: str, phase: str, configurations: int, elapsed_s: float) -> None:
        line = progress_line(machine, phase, configurations, elapsed_s)
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            if terminal is None:
                print(line, file=sys.stderr, flush=True)
            else:
                terminal.ensure_newline()  # off the line of dots; the next dot starts a line naming its file
                terminal.write_line(line)

    return {path: check_spec(load_machine(path, bind=False).spec, progress=progress) for path in shipped_machines()}


@pytest.fixture
def write_machine(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write YAML text to a file and return its path."""

    def write(text: str, name: str = "machine.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def schema_listener() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server recording each path asked of it (a schema's remote ``$ref`` would be one); it answers
    with a schema such a ``$ref`` could use. Its URL and the paths asked."""
    asked: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "integer"}')

        def log_message(self, *args: object) -> None:
            pass

    with socketserver.TCPServer(("127.0.0.1", 0), Recorder) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
        server.shutdown()
