"""What each `durable-chat` command imports: only `serve` and `chat` load the agent and the HTTP stack.

Each command runs in a fresh interpreter, which then lists the modules it holds (`sys.modules`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .test_cli import cli_environment

APP_STACK = (
    "agent.app",
    "agent.runtime",
    "agent.step",
    "agent.tracing",
    "web.app",
    "worker.runner",
    "starlette.applications",
    "uvicorn",
    "ag_ui",
    "opentelemetry.sdk",
)
"""What serving or chatting needs and no other command does: our agent, the app, the server."""

DATA_STACK = ("pydantic_ai", "sqlalchemy", "alembic", "store.database")
"""What opening the store needs, and signing a token does not."""

RUN_THEN_LIST = """
import json, sys
from cli import main
try:
    status = main(sys.argv[2:])
except SystemExit as exit:  # --help
    status = exit.code
with open(sys.argv[1], "w") as listing:
    json.dump({"status": status, "modules": sorted(sys.modules)}, listing)
"""


def imported(*args: str, cwd: Path) -> set[str]:
    """The modules `durable-chat ARGS` imported, run in `cwd`; it must succeed."""
    listing = cwd / "modules.json"
    environment = cli_environment({"DURABLE_CHAT_SECRET": "s3cret"})
    result = subprocess.run(
        [sys.executable, "-c", RUN_THEN_LIST, str(listing), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    ran = json.loads(listing.read_text())
    assert ran["status"] == 0, result.stderr
    return set(ran["modules"])


def within(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.mark.parametrize("args", [("token", "alice"), ("--help",)], ids=["token", "help"])
def test_token_and_help_import_neither_the_store_nor_the_agent(tmp_path: Path, args: tuple[str, ...]) -> None:
    modules = imported(*args, cwd=tmp_path)
    assert "cli.main" in modules  # the listing is of the command
    assert within(modules, APP_STACK + DATA_STACK) == []


@pytest.mark.parametrize(
    "args",
    [("migrate",), ("threads",), ("purge", "--older-than", "90d", "--dry-run")],
    ids=["migrate", "threads", "purge"],
)
def test_store_commands_import_the_store_but_not_the_agent(tmp_path: Path, args: tuple[str, ...]) -> None:
    modules = imported(*args, cwd=tmp_path)
    assert "store.conversations" in modules
    assert within(modules, APP_STACK) == []
