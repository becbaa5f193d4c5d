"""What installing durable-chat brings: serving needs only, never the test tools."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_TOOLS = (
    "pytest",
    "pytest-xdist",
    "hypothesis",
    "playwright",
    "pyright",
    "ruff",
    "inline-snapshot",
    "dirty-equals",
    "httpx",
)


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_installing_the_package_brings_no_test_tool() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    installed = requirement_names(project["dependencies"])

    assert installed.isdisjoint(TEST_TOOLS), installed & set(TEST_TOOLS)
    assert set(TEST_TOOLS) <= requirement_names(project["optional-dependencies"]["dev"])
    # Every dependency has a lower bound.
    assert all(">=" in requirement for requirement in project["dependencies"])


def test_make_run_installs_what_serving_needs_and_make_test_the_test_tools(tmp_path: Path) -> None:
    env = {**os.environ, "VENV": str(tmp_path / "venv")}

    def planned(target: str) -> str:
        return subprocess.run(
            ["make", "-n", target], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
        ).stdout

    run, test = planned("run"), planned("test")

    assert "pip install --quiet -e .\n" in run
    assert "[dev]" not in run
    assert "durable-chat serve" in run
    assert "pip install --quiet -e '.[dev]'" in test
    # The suite in parallel, each test file in one process.
    assert "python -m pytest -n auto --dist loadfile\n" in test
