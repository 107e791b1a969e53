"""The tree tells the architecture: one import root, the engine alone, layers in order, no cycles.

Every ``import`` and ``from … import`` in the installed packages (module level and
inside functions alike) is read with ``ast`` and resolved to a module of the tree,
so a rule broken anywhere fails here with the file and the import that breaks it.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "queryloop": ROOT / "queryloop",
    "queryloop.fsm": ROOT / "fsm",
    "queryloop.handlers": ROOT / "handlers",
    "queryloop.machines": ROOT / "machines",
}
# each may import only the ones before it
LAYERS = ("request", "output", "hooks", "session", "tools", "mcp", "context", "agents")
# queryloop/ holds rooms, not modules: the run's assembly, the ways in, the fleet, the embedded server, the inspector
ROOMS = ("queryloop.run", "queryloop.frontends", "queryloop.fleet", "queryloop.mockapi", "queryloop.ui")
TOP_LEVEL = ("queryloop", "queryloop.__main__", "queryloop.testing")  # the package, `python -m`, the test doubles


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if package == "queryloop" and parts and parts[0] in ("fsm", "handlers", "machines"):
                continue  # not in this folder
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, int]]:
    """(module of the tree, line) for every import in module ``name``."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    base = name if _is_package(name) else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES] or [module]
        for target in targets:
            while (
                target
                and target not in MODULES
                and target.split(".")[0] in ("queryloop", "fsm", "handlers", "machines")
            ):
                target = target.rpartition(".")[0]
            if target in MODULES or target.split(".")[0] in ("fsm", "handlers", "machines"):
                found.append((target, node.lineno))
    return found


GRAPH: nx.DiGraph[str] = nx.DiGraph()
for _name in MODULES:
    GRAPH.add_node(_name)
    for _target, _line in _imports(_name):
        GRAPH.add_edge(_name, _target, line=_line)


def _where(source: str, target: str) -> str:
    return f"{MODULES[source].relative_to(ROOT)}:{GRAPH.edges[source, target]['line']} imports {target}"


def test_every_module_imports_through_the_one_root() -> None:
    bare = [_where(s, t) for s, t in GRAPH.edges if not t.startswith("queryloop")]
    assert not bare, "import the installed names (queryloop.…) or relative ones:\n" + "\n".join(bare)


def test_there_is_no_import_cycle() -> None:
    cycles = list(nx.simple_cycles(GRAPH))
    assert not cycles, "\n".join(" → ".join([*c, c[0]]) for c in cycles[:5])


ENGINE_ROOMS = ("model", "run", "verify", "draw")  # in the order import-linter's contract holds


def _engine_room(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) >= 3 and parts[:2] == ["queryloop", "fsm"] and parts[2] in ENGINE_ROOMS else None


def test_the_engine_rooms_are_the_ones_the_contracts_name() -> None:
    """The rooms' order is import-linter's contract (pyproject.toml); a room never imports the engine's package."""
    assert {p.name for p in (ROOT / "fsm").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(ENGINE_ROOMS)
    wrong = [
        _where(source, target) + " (a room imports the module that defines a name)"
        for source, target in GRAPH.edges
        if _engine_room(source) is not None and target in ("queryloop.fsm", "queryloop.fsm.cli")
    ]
    assert not wrong, "\n".join(wrong)


# the query loop's words: a machine declares them (scopes, figures, params); the engine's code never says them
AGENT_WORDS = re.compile(r"\b(requests?|turns?|sessions?|model_requests|tools?|agents?|prompts?)\b")


def test_the_engine_speaks_no_agent_vocabulary() -> None:
    """No string the engine's code uses (docstrings and comments aside) names what the query loop is made of."""
    found = []
    for name, path in MODULES.items():
        if not name.startswith("queryloop.fsm"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}  # docstrings, of names too
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if AGENT_WORDS.search(node.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:80]!r}")
    assert not found, "\n".join(found)


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    return []


def test_the_engine_names_nothing_after_the_query_loop() -> None:
    """No name in the engine's code (a variable, attribute, argument, function or class) says request, turn,
    session, tool, agent or prompt: it says step, run and the scopes a machine declares."""
    found = []
    for name, path in MODULES.items():
        if not name.startswith("queryloop.fsm"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for word in _identifiers(node):
                parts = {p.lower() for p in re.split(r"_|(?<=[a-z])(?=[A-Z])", word) if p}
                if any(AGENT_WORDS.fullmatch(p) for p in parts):
                    found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {word}")
    assert not found, "\n".join(found)


def test_every_module_says_what_it_owns() -> None:
    missing = [str(p.relative_to(ROOT)) for n, p in MODULES.items() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, missing


@pytest.mark.parametrize("package", sorted(n for n in MODULES if _is_package(n)))
def test_each_package_exports_a_sorted_complete_all(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(getattr(module, "__all__", []))
    assert exported == sorted(exported), f"{package}.__all__ is not sorted"
    for name in exported:
        assert getattr(module, name, None) is not None, f"{package}.__all__ names {name!r}, which it does not have"


def test_importing_the_engine_loads_neither_the_handlers_nor_the_sdk() -> None:
    code = (
        "import sys, queryloop.fsm, queryloop.fsm.cli, queryloop.fsm.testing; "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('queryloop.handlers', 'queryloop.run.agent', 'anthropic'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_the_program_and_a_bound_query_loop_load_without_the_sdk() -> None:
    """`queryloop check` and the other engine commands start fast: the anthropic SDK (over a second to
    import) is imported only where a request is sent."""
    code = (
        "import sys, queryloop.frontends.cli, queryloop.run.agent; from queryloop.machines import shipped_machines; "
        "from queryloop.fsm import load_machine; [load_machine(p) for p in shipped_machines()]; "
        "print(sorted(m for m in sys.modules if m.startswith('anthropic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def _in(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


def test_queryloop_holds_rooms_by_role_not_modules() -> None:
    """The front-ends apart from the run's assembly, the fleet and the embedded server (a testing facility)."""
    loose = [
        str(MODULES[n].relative_to(ROOT))
        for n in MODULES
        if n.startswith("queryloop")
        and not n.startswith(("queryloop.fsm", "queryloop.handlers", "queryloop.machines"))
        and n not in TOP_LEVEL
        and not any(_in(n, room) for room in ROOMS)
    ]
    assert not loose, f"put each module in one of {', '.join(ROOMS)}: {loose}"


def test_test_doubles_live_in_the_testing_module_and_only_tests_and_tools_use_it() -> None:
    users = [_where(s, t) for s, t in GRAPH.edges if t == "queryloop.testing"]
    assert not users, "\n".join(users)
    doubles = [
        f"{MODULES[n].relative_to(ROOT)}: class {node.name}"
        for n in MODULES
        if n not in ("queryloop.testing", "queryloop.fsm.testing") and not _in(n, "queryloop.mockapi")
        for node in ast.walk(ast.parse(MODULES[n].read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name.startswith(("Scripted", "Fake", "Stub", "Mock"))
    ]
    assert not doubles, "test doubles belong in queryloop.testing:\n" + "\n".join(doubles)


def _layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) >= 3 and parts[:2] == ["queryloop", "handlers"] and parts[2] in LAYERS else None


def _yaml_named() -> dict[str, set[str]]:
    """Each handlers module that defines a function machines/query_loop.yaml names → those names."""
    from queryloop.fsm import load_machine
    from queryloop.machines import MACHINES_DIR

    spec = load_machine(MACHINES_DIR / "query_loop.yaml").spec
    refs = {
        *(r for s in spec.states for r in (s.effect, s.exit) if r),
        *(t.do for t in spec.transitions if t.do),
        *spec.guards.values(),
        *(inv.call for inv in spec.invariants),
    }
    named: dict[str, set[str]] = {}
    for ref in refs:
        module, _, name = (spec.package + ref if ref.startswith(".") else ref).rpartition(".")
        obj = getattr(importlib.import_module(module), name)
        named.setdefault(obj.__module__, set()).add(name)
    return named


def test_each_layer_keeps_the_code_the_yaml_names_apart_from_the_services_it_drives() -> None:
    """handlers/<layer>/: the slice (data), the edge modules the YAML names, and services/ for the rest."""
    named = _yaml_named()
    wrong = [
        f"{m}: the YAML names {sorted(names)}, which belong in an edge module"
        for m, names in named.items()
        if ".services" in m
    ]
    for name in MODULES:
        parts = name.split(".")
        if len(parts) != 4 or parts[:2] != ["queryloop", "handlers"] or parts[2] not in LAYERS:
            continue
        if parts[3] not in ("data", "services") and name not in named:
            wrong.append(f"{MODULES[name].relative_to(ROOT)}: the YAML names nothing here; move it to services/")
    upward = [_where(s, t) for s, t in GRAPH.edges if ".services" in s and t in named and _layer(s) == _layer(t)]
    wrong += [f"{w} (services do not call their layer's edges)" for w in upward]
    assert not wrong, "\n".join(wrong)


def test_no_service_reaches_a_run_through_a_context_variable() -> None:
    """Every service is a named slot given to the run; a context variable is only a tool thread's stop flag."""
    found = [
        f"{MODULES[n].relative_to(ROOT)}:{node.lineno}"
        for n in MODULES
        for node in ast.walk(ast.parse(MODULES[n].read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "ContextVar"
    ]
    assert found == [f"handlers/tools/services/base.py:{_STOP_FLAG_LINE}"], found


_STOP_FLAG_LINE = next(
    i
    for i, line in enumerate((ROOT / "handlers/tools/services/base.py").read_text().splitlines(), 1)
    if line.startswith("_STOP: contextvars.ContextVar")
)


# ---- the import rules: import-linter's contracts in pyproject.toml --------------------------------------


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as a wheel lays it out (fsm/, handlers/ and machines/ inside queryloop/), for import-linter:
    it reads the files under the package's folder, and the editable install keeps those folders apart."""
    stage = tmp_path_factory.mktemp("stage")
    for name, path in MODULES.items():
        target = stage.joinpath(*name.split(".")).with_suffix(".py")
        if path.name == "__init__.py":
            target = target.with_suffix("") / "__init__.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    return stage


def _lint_imports(stage: Path) -> subprocess.CompletedProcess[str]:
    cli = "from importlinter.cli import lint_imports_command; lint_imports_command()"  # `lint-imports`
    argv = [sys.executable, "-c", cli, "--no-cache", str(ROOT / "pyproject.toml")]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(stage), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(argv, capture_output=True, text=True, cwd=stage, env=env, timeout=120, check=False)


def test_every_import_contract_is_kept(staged: Path) -> None:
    done = _lint_imports(staged)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout + done.stderr
    assert f"Analyzed {len(MODULES)} files" in done.stdout, done.stdout  # the whole tree, not the queryloop/ folder


BREAKS = {  # a module, an import it must not have, and the contract that says so
    "The engine imports nothing of queryloop outside itself": ("queryloop.fsm.model.spec", "queryloop.handlers"),
    "The engine's rooms import in order": ("queryloop.fsm.model.spec", "queryloop.fsm.verify.bounds"),
    "The handlers' layers import only the layers below": (
        "queryloop.handlers.request.data",
        "queryloop.handlers.tools",
    ),
    "The layers know nothing of the rooms": ("queryloop.handlers.messages", "queryloop.run.agent"),
    "The run is assembled without its front-ends": ("queryloop.run.config", "queryloop.frontends.api"),
    "Only the program starts the embedded server": ("queryloop.run.agent", "queryloop.mockapi.server"),
    "The engine is entered through queryloop.fsm": ("queryloop.run.config", "queryloop.fsm.model.spec"),
    "The tools layer is entered through its package": ("queryloop.run.config", "queryloop.handlers.tools.gate"),
    "The request layer is entered through its package": (
        "queryloop.handlers.output.replies",
        "queryloop.handlers.request.data",
    ),
    "Sibling modules import one another without a cycle": (
        "queryloop.handlers.tools.services.shell",
        "queryloop.handlers.tools.gate",
    ),
}


@pytest.mark.parametrize("contract", sorted(BREAKS))
def test_each_import_contract_breaks_when_its_rule_is_broken(contract: str, staged: Path, tmp_path: Path) -> None:
    import shutil

    module, forbidden = BREAKS[contract]
    stage = tmp_path / "stage"
    shutil.copytree(staged, stage)
    path = MODULES[module]
    copy = stage.joinpath(*module.split(".")).with_suffix(".py")
    copy = copy.with_suffix("") / "__init__.py" if path.name == "__init__.py" else copy
    copy.write_text(copy.read_text(encoding="utf-8") + f"\nimport {forbidden}  # breaks the rule\n", encoding="utf-8")
    done = _lint_imports(stage)
    broken = [line for line in done.stdout.splitlines() if line.startswith(contract) and " BROKEN" in line]
    assert done.returncode != 0 and broken, done.stdout
