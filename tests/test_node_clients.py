"""The published AI SDK (6 and 7) and AG-UI clients, in Node, against a real server.

The Node project is `tests/node` (`npm ci` there installs it; `.ci/run` does). Each script runs
under Node's test runner against a server of its own, on a fresh database, whose demo model
thinks a little before each response, so a run is still going when a test reloads in its middle.
Without Node or the installed packages these tests skip, or fail when `CI=true`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from .live_server import REPO_ROOT, LiveServer, sqlite_url

NODE_PROJECT = REPO_ROOT / "tests" / "node"
NODE_TIMEOUT = 300


@contextmanager
def started(server: LiveServer) -> Iterator[LiveServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _unavailable(reason: str) -> NoReturn:
    # As in conftest: CI must run these, so a missing Node there is a broken pipeline, not a skip.
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        _unavailable("Node is not installed: the AI SDK and AG-UI client tests need Node 20 or newer")
    if not (NODE_PROJECT / "node_modules").is_dir():
        _unavailable(f"the Node test project is not installed: run `npm ci` in {NODE_PROJECT}")
    return node


OUTPUTS_APP = "tests.outputs_app:app"
"""A flight desk with a union output and a tool that holds calls with metadata (`tests/outputs_app.py`)."""
AGENTS_APP = "tests.agent_chains:desk_app"
"""A router handing over to billing, whose deposit goes billing → booking → payments, needing approval."""


@pytest.mark.parametrize(
    ("script", "sdk", "app"),
    [
        pytest.param("ai-sdk.test.mjs", "ai6", None, id="ai-sdk-6"),
        pytest.param("ai-sdk.test.mjs", "ai7", None, id="ai-sdk-7"),
        pytest.param("ag-ui.test.mjs", "", None, id="ag-ui"),
        pytest.param("outputs.test.mjs", "ai6", OUTPUTS_APP, id="outputs-ai-sdk-6"),
        pytest.param("outputs.test.mjs", "ai7", OUTPUTS_APP, id="outputs-ai-sdk-7"),
        pytest.param("outputs.test.mjs", "", OUTPUTS_APP, id="outputs-ag-ui"),
        pytest.param("agents.test.mjs", "ai6", AGENTS_APP, id="agents-ai-sdk-6"),
        pytest.param("agents.test.mjs", "ai7", AGENTS_APP, id="agents-ai-sdk-7"),
        pytest.param("agents.test.mjs", "", AGENTS_APP, id="agents-ag-ui"),
    ],
)
def test_node_client(script: str, sdk: str, app: str | None, tmp_path: Path) -> None:
    node = _node()
    effects = tmp_path / "effects.txt"
    settings = {"DURABLE_CHAT_DEMO_DELAY_SECONDS": "0.3", "AGENT_CHAIN_EFFECTS": str(effects)}
    server = LiveServer(
        sqlite_url(tmp_path), tmp_path, settings, app=app, model="demo" if app is None else None
    )
    with started(server):
        env = {
            **os.environ,
            "DURABLE_CHAT_URL": server.base_url,
            "DURABLE_CHAT_TOKEN": server.token("alice"),
            "DURABLE_CHAT_OTHER_TOKEN": server.token("bob"),
            "AI_SDK": sdk,
            "NO_COLOR": "1",
        }
        result = subprocess.run(
            [node, "--test", "--test-reporter=spec", script],
            cwd=NODE_PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT,
            check=False,
        )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "# fail 0" in result.stdout or "fail 0" in result.stdout, result.stdout
    if app == AGENTS_APP:  # the approved charge, made once
        assert effects.read_text() == "charged 300\n"
