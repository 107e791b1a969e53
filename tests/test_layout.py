"""The tree tells the architecture: one import root, the engine alone, layers in order, no cycles.

Every ``import`` and ``from … import`` in the installed packages (module level and
inside functions alike) is read with ``ast`` and resolved to a module of the tree,
so a rule broken anywhere fails here with the file and the import that breaks it.
"""

from __future__ import annotations

import ast
import importlib
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
LAYERS = ("request", "output", "hooks", "session", "tools", "mcp", "context")  # each may import only the ones before it
SHARED = ("queryloop.handlers.messages", "queryloop.handlers.outcome", "queryloop.handlers.records")
ABOVE_THE_LAYERS = (
    "queryloop.agent",
    "queryloop.api",
    "queryloop.messages",
    "queryloop.options",
    "queryloop.sdk_channel",
    "queryloop.sdk_flags",
    "queryloop.sdk_protocol",
    "queryloop.interactive",
    "queryloop.cli",
    "queryloop.console",
    "queryloop.memory",
    "queryloop.settings",
    "queryloop.defaults",
    "queryloop.startup",
    "queryloop.argtypes",
    "queryloop.fleet",
    "queryloop.mockapi",
)


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


def test_the_engine_imports_nothing_of_queryloop_outside_itself() -> None:
    out = [_where(s, t) for s, t in GRAPH.edges if s.startswith("queryloop.fsm") and not t.startswith("queryloop.fsm")]
    assert not out, "\n".join(out)


def _layer(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) >= 3 and parts[:2] == ["queryloop", "handlers"] and parts[2] in LAYERS:
        return LAYERS.index(parts[2])
    return None


def test_layers_import_only_the_shared_modules_and_the_layers_below() -> None:
    wrong = []
    for source, target in GRAPH.edges:
        if not source.startswith("queryloop.handlers"):
            continue
        if target.startswith(ABOVE_THE_LAYERS) or target == "queryloop":
            wrong.append(_where(source, target) + " (the assembly is above the layers)")
        elif source in SHARED and target.startswith("queryloop.handlers") and target not in SHARED:
            wrong.append(_where(source, target) + " (the shared modules use no layer)")
        elif (mine := _layer(source)) is not None and (theirs := _layer(target)) is not None and theirs > mine:
            wrong.append(_where(source, target) + f" (layer order: {' < '.join(LAYERS)})")
    assert not wrong, "\n".join(wrong)


def test_only_the_program_starts_the_embedded_server() -> None:
    users = {s for s, t in GRAPH.edges if t.startswith("queryloop.mockapi") and not s.startswith("queryloop.mockapi")}
    assert users <= {"queryloop.cli"}, sorted(users)


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
        "print(sorted(m for m in sys.modules if m.startswith(('queryloop.handlers', 'queryloop.agent', 'anthropic'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_the_program_and_a_bound_query_loop_load_without_the_sdk() -> None:
    """`queryloop check` and the other engine commands start fast: the anthropic SDK (over a second to
    import) is imported only where a request is sent."""
    code = (
        "import sys, queryloop.cli, queryloop.agent; from queryloop.machines import shipped_machines; "
        "from queryloop.fsm import load_machine; [load_machine(p) for p in shipped_machines()]; "
        "print(sorted(m for m in sys.modules if m.startswith('anthropic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"
