"""The dependency rules, read from the source: one-way packages, public names only, no core module
reaching into the demo shop."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stream", "store", "agent", "worker", "web", "cli")
ALLOWED: dict[str, set[str]] = {
    "stream": set(),
    "store": set(),
    "agent": {"store", "stream"},
    "worker": {"agent", "store", "stream"},
    "web": {"agent", "store", "stream", "worker"},
    "cli": {"agent", "store", "stream", "worker", "web"},
}
"""Which of our packages each may import: one way, from the data layer up to the command line; the
worker (what drives runs, with no HTTP in it) below both of its shells."""


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


@pytest.mark.parametrize("package", ["agent", "store", "worker", "web"])
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


# -- the modules' import graph --------------------------------------------------------------------------

HTTP = ("starlette", "sse_starlette", "uvicorn", "httpx", "httpx2")
"""What serving HTTP takes: none of it in the worker."""

COMPOSITION_ROOT = "web.app"
"""The one module that assembles the routes (`create_app`)."""

KNOWN_CYCLES: set[frozenset[str]] = set()
"""Import cycles that exist today and are to go: none; no other is allowed."""


def module_files() -> dict[str, Path]:
    """Every module of our packages by its dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in modules(package):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolved(name: str, known: dict[str, Path]) -> str | None:
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in known else None


def import_graph() -> dict[str, set[str]]:
    """Which of our modules each of our modules imports, type-only and deferred imports included.

    `from package import name` counts as importing the submodule `name` when there is one, else
    the package itself (whose `__init__.py` names where each of its names comes from).
    """
    known = module_files()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            for target in targets:
                if target.split(".")[0] in PACKAGES and (found := _resolved(target, known)) is not None:
                    edges.add(found)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = {stack.pop()}
            while module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.add(frozenset(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) - KNOWN_CYCLES == set()


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == {frozenset({"a", "b", "c"})}


def route_modules() -> set[str]:
    """The modules that declare endpoints: they import Starlette's `Route`."""
    return {
        module
        for module, path in module_files().items()
        for _, name in imports(path)
        if name == "starlette.routing"
    } - {COMPOSITION_ROOT}


def test_route_modules_are_found() -> None:
    assert {"web.api", "web.sse", "web.ai_sdk.endpoints", "web.ag_ui.endpoints"} <= route_modules()


def test_no_module_imports_a_route_module_but_the_app() -> None:
    routes = route_modules()
    reaching = sorted(
        f"{module} imports {imported}"
        for module, imported_modules in import_graph().items()
        if module != COMPOSITION_ROOT
        for imported in imported_modules
        if imported in routes
    )
    assert reaching == []


def test_the_worker_knows_no_http() -> None:
    reaching = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {name}"
        for path in modules("worker")
        for line, name in imports(path)
        if name.split(".")[0] in HTTP
    ]
    assert reaching == []


def test_the_store_carries_no_checkpoint_on_a_context_variable() -> None:
    """A checkpoint is handed to the store by hand: no module of `store/` uses a ContextVar."""
    context_variables = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {name}"
        for path in sorted((REPO_ROOT / "store").rglob("*.py"))
        for line, name in imports(path)
        if name == "contextvars"
    ]
    assert context_variables == []
