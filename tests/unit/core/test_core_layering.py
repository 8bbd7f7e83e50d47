"""The core is pure (STYLE habits 1, 2, 12): standard library and kafkalite.core only, and
no I/O or wall clock by name."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import kafkalite.core

CORE_DIR = Path(kafkalite.core.__file__).parent
FORBIDDEN_MODULES = {"asyncio", "socket", "selectors", "subprocess", "threading", "os", "io", "time"}
FORBIDDEN_CALLS = {"open", "print", "input"}


def core_modules() -> list[Path]:
    modules = sorted(CORE_DIR.glob("*.py"))
    assert modules
    return modules


def imported_roots(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import at line {node.lineno}"
            found.append((node.module or "", node.lineno))
    return found


def test_core_imports_only_stdlib_and_core():
    problems = []
    for path in core_modules():
        tree = ast.parse(path.read_text(), str(path))
        for module, line in imported_roots(tree):
            root = module.split(".")[0]
            if module == "kafkalite.core" or module.startswith("kafkalite.core."):
                continue
            if root not in sys.stdlib_module_names:
                problems.append(f"{path.name}:{line} imports {module}")
            elif root in FORBIDDEN_MODULES:
                problems.append(f"{path.name}:{line} imports {module} (I/O or clock)")
    assert problems == []


def test_core_names_no_io_or_wall_clock():
    problems = []
    for path in core_modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in {"asyncio", "socket"}:
                problems.append(f"{path.name}:{node.lineno} names {node.id}")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if (node.value.id, node.attr) in {("time", "time"), ("time", "monotonic"), ("datetime", "now")}:
                    problems.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
            if isinstance(node, (ast.AsyncFunctionDef, ast.Await)):
                problems.append(f"{path.name}:{node.lineno} is async")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in FORBIDDEN_CALLS:
                    problems.append(f"{path.name}:{node.lineno} calls {node.func.id}(")
        source = path.read_text()
        for needle in ("time.time(", "open(", "asyncio", "socket"):
            for number, line in enumerate(source.splitlines(), 1):
                code = line.split("#", 1)[0]
                if needle in code and not _inside_docstring(tree, number):
                    problems.append(f"{path.name}:{number} mentions {needle}")
    assert problems == []


def _inside_docstring(tree: ast.AST, line: int) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return True
    return False


def test_layering_test_catches_a_violation():
    bad = "import asyncio\nfrom kafkalite.protocol import codec\nx = open('f')\n"
    tree = ast.parse(bad)
    roots = [module for module, _ in imported_roots(tree)]
    assert "asyncio" in roots
    assert "kafkalite.protocol" in roots
