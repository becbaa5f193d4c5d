"""The benchmarks' layout: a harness and benchmarks on it, through our packages' public names only.

Every module imports (a rename in `agent/`, `store/`, `web/` or `stream/` that breaks a benchmark
fails here, not at its next run); a benchmark imports the harness and its own parts (`bench/<name>_*.py`),
never another benchmark's command; nothing in `bench/` imports a private name or a module below a
package's public face (the demo shop, an app like any user's, aside).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
OURS = ("agent", "cli", "store", "stream", "web", "worker")
MODULES = sorted(
    ".".join(path.relative_to(BENCH.parent).with_suffix("").parts)
    for path in BENCH.rglob("*.py")
    if path.name != "__init__.py"
)


def _tree(module: str) -> ast.Module:
    return ast.parse((BENCH.parent / f"{module.replace('.', '/')}.py").read_text())


def _imports(module: str) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import of `module`."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _is_command(module: str) -> bool:
    """A benchmark's command (`python -m bench.x`): an entry script that is not a server the harness starts."""
    source = (BENCH.parent / f"{module.replace('.', '/')}.py").read_text()
    return (
        '__name__ == "__main__"' in source
        and not module.startswith("bench.harness.")
        and not module.endswith("_serve")
    )


@pytest.mark.parametrize("module", MODULES)
def test_every_benchmark_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_benchmarks_use_public_names_of_our_packages_only() -> None:
    reaching = [
        f"{module} imports {name} {names}"
        for module in MODULES
        for name, names in _imports(module)
        if name.split(".")[0] in OURS
        and (
            (name not in OURS and not name.startswith("agent.demo")) or any(n.startswith("_") for n in names)
        )
    ]
    assert reaching == []


def test_a_benchmark_imports_the_harness_and_its_own_parts_never_another_command() -> None:
    commands = {module for module in MODULES if _is_command(module)}
    assert commands >= {
        "bench.store",
        "bench.step",
        "bench.web",
        "bench.cpu",
    }
    wrong: list[str] = []
    for module in MODULES:
        own = module.removeprefix("bench.").split("_")[0]
        for name, _ in _imports(module):
            if not name.startswith("bench."):
                continue
            harness = name.startswith("bench.harness")
            if name in commands or (module.startswith("bench.harness") and not harness):
                wrong.append(f"{module} imports {name}")
            elif (
                not harness
                and not module.startswith("bench.harness")
                and name.removeprefix("bench.").split("_")[0] != own
            ):
                wrong.append(f"{module} imports {name}, a part of another benchmark")
    assert wrong == []
