"""How often ``Any`` is written in type expressions, per 1000 lines of source.

``python tools/any_density.py`` counts the names ``Any`` (or ``typing.Any``) in
annotations, aliases and ``cast``/``TypeVar`` arguments of every module under
fsm/, handlers/ and queryloop/, and lists the modules that use it most.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("fsm", "handlers", "queryloop")


def _is_any(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "Any"
    return isinstance(node, ast.Attribute) and node.attr == "Any"


def _type_expressions(tree: ast.AST) -> Iterator[ast.AST]:
    """Every expression that mypy reads as a type: annotations, aliases, casts."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if arg is not None and arg.annotation is not None:
                    yield arg.annotation
            if node.returns is not None:
                yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Subscript, ast.BinOp)):
            yield node.value  # an alias such as ``Row = dict[str, Any]``
        elif isinstance(node, ast.Call):
            yield from _call_types(node)


def _call_types(call: ast.Call) -> Iterator[ast.AST]:
    """The types in a call: ``cast(T, x)``, ``TypeVar("T", bound=B)``, ``list[T]()``."""
    if isinstance(call.func, ast.Subscript):
        yield call.func
    elif isinstance(call.func, ast.Name) and call.func.id == "cast" and call.args:
        yield call.args[0]
    elif isinstance(call.func, ast.Name) and call.func.id == "TypeVar":
        yield from (keyword.value for keyword in call.keywords if keyword.arg == "bound")


def _names_any(expression: ast.AST) -> int:
    total = 0
    for sub in ast.walk(expression):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:  # a quoted annotation such as ``"dict[str, Any]"``
                total += _names_any(ast.parse(sub.value, mode="eval").body)
            except SyntaxError:
                continue
        total += _is_any(sub)
    return total


def count_any(source: str) -> int:
    """How many times ``Any`` is named in the type expressions of ``source``."""
    return sum(_names_any(expression) for expression in _type_expressions(ast.parse(source)))


def module_counts(root: Path = ROOT) -> dict[str, tuple[int, int]]:
    """``(Any count, lines)`` of each module, by its path from ``root``."""
    counts: dict[str, tuple[int, int]] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            counts[str(path.relative_to(root))] = (count_any(source), len(source.splitlines()))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="list this many of the modules using Any most")
    args = parser.parse_args()
    counts = module_counts()
    anys = sum(n for n, _ in counts.values())
    lines = sum(lines for _, lines in counts.values())
    print(f"{anys} Any in {lines} lines of {len(counts)} modules: {1000 * anys / lines:.1f} per 1000 lines")
    for path, (n, size) in sorted(counts.items(), key=lambda item: -item[1][0])[: args.top]:
        print(f"{n:5d}  {1000 * n / size:6.1f}/1000  {path}")


if __name__ == "__main__":
    main()
