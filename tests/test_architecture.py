"""The dependency rules, read from the source: one-way packages, public names only, no core module
reaching into the demo shop."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stream", "store", "agent", "web", "cli")
ALLOWED: dict[str, set[str]] = {
    "stream": set(),
    "store": set(),
    "agent": {"store", "stream"},
    "web": {"agent", "store", "stream"},
    "cli": {"agent", "store", "stream", "web"},
}
"""Which of our packages each may import: one way, from the data layer up to the command line."""


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every absolute module name `path` imports, with its line."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            yield node.lineno, node.module


def modules(package: str) -> list[Path]:
    return sorted((REPO_ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_depend_one_way_and_through_public_names(package: str) -> None:
    broken: list[str] = []
    for path in modules(package):
        if package == "agent" and "demo" in path.relative_to(REPO_ROOT / "agent").parts:
            continue  # an app, checked below
        for line, name in imports(path):
            top = name.split(".")[0]
            if top not in PACKAGES or top == package:
                continue
            where = f"{path.relative_to(REPO_ROOT)}:{line} imports {name}"
            if top not in ALLOWED[package]:
                broken.append(f"{where}: {package} may not depend on {top}")
            elif name != top:
                broken.append(f"{where}: use the names {top}/__init__.py exports")
    assert broken == []


def test_no_core_module_imports_the_demo_shop() -> None:
    reaching = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for package in PACKAGES
        for path in modules(package)
        if "demo" not in path.relative_to(REPO_ROOT).parts
        for line, name in imports(path)
        if name == "agent.demo" or name.startswith("agent.demo.")
    ]
    assert reaching == []


def test_the_shop_and_the_examples_use_only_public_names() -> None:
    apps = [*(REPO_ROOT / "agent" / "demo").rglob("*.py"), *(REPO_ROOT / "examples").rglob("*.py")]
    reaching = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {name}"
        for path in apps
        for line, name in imports(path)
        if name.split(".")[0] in PACKAGES and name != name.split(".")[0] and not name.startswith("agent.demo")
    ]
    assert reaching == []


@pytest.mark.parametrize("package", ["agent", "store", "web"])
def test_names_imported_on_first_use_are_the_names_the_type_checker_sees(package: str) -> None:
    """A package whose `__init__.py` imports its names on first use (PEP 562) exports exactly what its
    `TYPE_CHECKING` block imports, each the very object of the module that block names."""
    source = ast.parse((REPO_ROOT / package / "__init__.py").read_text())
    checked = [
        (node.module, alias.name)
        for block in source.body
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is not None
        for alias in node.names
    ]
    exported = importlib.import_module(package)
    assert sorted(name for _, name in checked) == sorted(exported.__all__)
    for module, name in checked:
        assert getattr(exported, name) is getattr(importlib.import_module(f"{package}.{module}"), name), name


def _store_module(path: Path) -> str:
    """`path`'s module name within `store/` (`dialects.sqlite`; a package by its own name)."""
    parts = path.relative_to(REPO_ROOT / "store").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _store_imports(path: Path, names: set[str]) -> Iterator[str]:
    """The modules of `store/` (`names`) that `path` imports, type-only imports included."""
    package = (
        _store_module(path).split(".")[:-1] if path.stem != "__init__" else _store_module(path).split(".")
    )
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - (node.level - 1)] + (
                node.module.split(".") if node.module else []
            )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("store."):
            base = (node.module or "").split(".")[1:]
        else:
            continue
        for alias in node.names:
            # `from .dialects import sqlite` imports a module; `from .runs import Run` a name of one.
            found = ".".join([*base, alias.name])
            yield found if found in names else ".".join(base)


def test_the_store_has_no_import_cycle_and_no_context_variable() -> None:
    """A checkpoint is handed to the store by hand: no module of `store/` reads a ContextVar, and its
    modules import one another one way (type-only imports count)."""
    paths = {_store_module(path): path for path in (REPO_ROOT / "store").rglob("*.py")}
    del paths[""]  # the package's own `__init__`, which imports every public name on first use
    names = set(paths)
    graph = {
        name: {imported for imported in _store_imports(path, names) if imported in names and imported != name}
        for name, path in paths.items()
    }
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name) :], name])
            return
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []
    context_variables = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {name}"
        for path in sorted((REPO_ROOT / "store").rglob("*.py"))
        for line, name in imports(path)
        if name == "contextvars"
    ]
    assert context_variables == []
