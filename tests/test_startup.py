"""Start-up: each command imports what it uses and nothing else (times are measured by tools/bench_startup.py).

``queryloop --help``, ``--version``, ``check``, ``diagram`` and ``docs`` never load the
Anthropic SDK, the embedded server, the MCP SDK, pydantic, rich, prompt_toolkit or
DBOS; a package root loads none of its modules until one of its names is asked for;
the fast YAML reader every command uses reads exactly what the pure-Python one reads;
and a run's start-up, which pauses the garbage collector, always gives it back.
No test here times anything: the figures depend on the machine.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queryloop.fsm.errors import SpecError
from queryloop.fsm.model import source
from queryloop.mockapi.background import ServerThread
from queryloop.mockapi.scenario import parse_scenario
from queryloop.run.startup import Startup

ROOT = Path(__file__).resolve().parent.parent

NEVER_FOR_ENGINE_COMMANDS = (
    "anthropic",
    "queryloop.mockapi",
    "queryloop.run.agent",
    "aiohttp",
    "httpx",
    "httpx2",
    "rich",
    "prompt_toolkit",
    "mcp",
    "pydantic",
    "dbos",
    "sqlalchemy",
)
NEVER_FOR_HELP = (*NEVER_FOR_ENGINE_COMMANDS, "networkx", "graphviz", "jsonschema", "yaml", "transitions", "bashlex")
# What a bare `-p` run (no --scenario, no MCP server, telemetry off) must not load. The SDK's own import brings
# aiohttp's client and OpenTelemetry's API: the server side of aiohttp and the OpenTelemetry SDK are not it.
NEVER_FOR_A_BARE_RUN = (
    "queryloop.mockapi",
    "aiohttp.web",
    "mcp",
    "queryloop.run.otel",
    "opentelemetry.sdk",
    "opentelemetry.exporter",
    "prompt_toolkit",
    "dbos",
    "networkx",
    "graphviz",
)


ONE_REPLY = """
schema_version: 1
scenario: one_reply
model: mock-primary
default:
  - reply: {content: [{text: done}]}
"""

# `-X importtime` misses what `importlib.import_module` loads (the lazy package roots, the handlers a machine
# names): the modules are read from `sys.modules` as the program exits.
_PROBE = (
    "import atexit, json, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
    "sys.argv[0] = 'queryloop'\n"
    "runpy.run_module('queryloop', run_name='__main__', alter_sys=True)\n"
)


def imported_by(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> set[str]:
    """Every module ``python -m queryloop ARGV`` has imported when it exits."""
    listing = cwd / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(listing), *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules: list[str] = json.loads(listing.read_text())
    return set(modules)


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_load_neither_the_engine_nor_any_sdk(flag: str, tmp_path: Path) -> None:
    assert loaded(imported_by(flag, cwd=tmp_path), NEVER_FOR_HELP) == []


def test_check_resolves_every_handler_without_loading_an_sdk(tmp_path: Path) -> None:
    modules = imported_by("check", cwd=tmp_path)
    assert "queryloop.handlers.request.attempts" in modules  # it did bind the query loop's handlers
    assert loaded(modules, (*NEVER_FOR_ENGINE_COMMANDS, "graphviz", "bashlex")) == []


def test_diagram_and_docs_load_no_sdk_and_not_the_checker(tmp_path: Path) -> None:
    diagram = imported_by("diagram", "--format", "dot", "--format", "mermaid", "--out", str(tmp_path), cwd=tmp_path)
    docs = imported_by("docs", "--out", str(tmp_path / "recovery.md"), cwd=tmp_path)
    for modules in (diagram, docs):
        assert loaded(modules, (*NEVER_FOR_ENGINE_COMMANDS, "networkx", "queryloop.fsm.verify.check")) == []


def _bare_run(tmp_path: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OTEL_", "CLAUDE_CODE_"))}
    with ServerThread(parse_scenario(ONE_REPLY, "<one reply>")) as api:
        env |= {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "k", "HOME": str(tmp_path / "home")}
        env["QUERYLOOP_HOME"] = str(tmp_path / "queryloop-home")
        modules = imported_by("-p", "hi", "--model", "mock-primary", cwd=tmp_path, env=env)
        assert [r.path for r in api.server.requests] == ["/v1/messages"]  # it did reach the model
    assert "queryloop.run.agent" in modules
    return modules


def test_a_bare_print_run_loads_neither_the_embedded_server_nor_mcp_nor_telemetry(tmp_path: Path) -> None:
    assert loaded(_bare_run(tmp_path), NEVER_FOR_A_BARE_RUN) == []


def test_the_next_bare_run_takes_its_machine_from_the_cache_and_loads_no_schema_checker(tmp_path: Path) -> None:
    first = _bare_run(tmp_path)
    assert "queryloop.fsm.model.source" in first  # it read the YAML (and wrote the cache)
    again = _bare_run(tmp_path)
    assert loaded(again, ("queryloop.fsm.model.source", "queryloop.fsm.model.templates", "jsonschema")) == []


PACKAGE_ROOTS = (
    "queryloop",
    "queryloop.mockapi",
    "queryloop.fsm",
    "queryloop.handlers.request",
    "queryloop.handlers.output",
    "queryloop.handlers.hooks",
    "queryloop.handlers.session",
    "queryloop.handlers.tools",
    "queryloop.handlers.mcp",
    "queryloop.handlers.context",
)


@pytest.mark.parametrize("package", PACKAGE_ROOTS)
def test_a_package_root_loads_its_modules_only_when_a_name_is_asked_for(package: str) -> None:
    code = (
        f"import json, sys, {package} as p; before = [m for m in sys.modules if m.startswith('{package}.')]; "
        "name = sorted(p.__all__)[0]; listed = set(p.__all__) <= set(dir(p)); getattr(p, name); "
        "print(json.dumps([sorted(before), listed, name in vars(p)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    before, listed, kept = json.loads(out.stdout)
    assert set(before) <= {"queryloop.fsm", "queryloop.fsm.lazy"}  # the helper that makes the roots lazy
    assert listed and kept  # dir() lists every export; a name, once loaded, is a plain attribute


def _shipped_yaml() -> list[Path]:
    return [*sorted((ROOT / "machines").rglob("*.yaml")), ROOT / "handlers" / "request" / "services" / "models.yaml"]


@pytest.mark.skipif(not source._HAS_LIBYAML, reason="PyYAML is built without libyaml here")
@pytest.mark.parametrize("path", _shipped_yaml(), ids=lambda p: p.name)
def test_the_libyaml_reader_reads_what_the_python_reader_reads(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    fast = source.read_yaml(text, path.name)
    python = source._Loader(text)
    node = python.get_single_node()
    assert node is not None
    assert fast.data == python.construct_document(node)
    lines: dict[source.Where, int] = {}
    source._walk(node, (), path.name, lines, [])
    assert dict(fast.lines) == lines


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [1, 2\nb: 3\n", "m.yaml:2:2: invalid YAML: expected ',' or ']', but got ':'"),
        ("a: b: c\n", "m.yaml:1:5: invalid YAML: mapping values are not allowed here"),
        ("base: &b {cap: 3}\nn: *b\n", "m.yaml:2: alias *b is not allowed"),
    ],
)
def test_a_file_libyaml_refuses_gets_pyyamls_own_message(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        source.read_yaml(text, "m.yaml")
    assert str(info.value.first).startswith(message)


def test_a_runs_start_up_pauses_the_collector_and_gives_it_back_on_every_path() -> None:
    assert gc.isenabled()
    abandoned = Startup()  # a run refused after start-up began (a bad setting, no credentials)
    assert not gc.isenabled()
    abandoned.close()
    assert gc.isenabled()
    started = Startup()
    try:
        client = started.http_client()  # the SDK's own default HTTP client, built in the background
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert type(client).__name__ == "_DefaultAioHttpClient"  # the SDK's own aiohttp transport
        asyncio.run(client.aclose())
    finally:
        started.close()
        gc.unfreeze()  # the test process's objects go back to the collector


def test_what_a_run_adds_to_start_up_is_imported_in_the_pause_and_frozen_with_the_sdk() -> None:
    seen: list[bool] = []
    built: list[list[int]] = []

    def load() -> None:  # as the MCP SDK's import, when servers are configured
        seen.append(gc.isenabled())
        built.append([1])  # an object the collector tracks

    started = Startup()
    try:
        client = started.http_client(also=(load,))
        assert seen == [False]  # made in the pause
        assert gc.isenabled() and not any(o is built[0] for o in gc.get_objects())  # frozen: never scanned
        asyncio.run(client.aclose())
    finally:
        started.close()
        gc.unfreeze()


def test_a_run_refused_during_start_up_leaves_no_sdk_import_running_as_the_process_exits() -> None:
    # A daemon thread still importing the SDK when the interpreter exits can abort the process (SIGABRT,
    # "exception not rethrown"): a refused run (a bad --resume id) exited 134 about one time in four.
    code = (
        "import threading; from queryloop.run.startup import Startup; s = Startup(); s.close(); "
        "print(sorted(t.name for t in threading.enumerate() if t.name == 'queryloop-sdk-startup'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"
