"""The travel desk example served by a real process beside a stand-in airline, for the tests that need it.

The folder is a user's project: the example's modules and nothing of durable-chat's; the server runs
`durable-chat serve --app travel:app` in it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from .live_server import REPO_ROOT, LiveServer, free_port, sqlite_url

__all__ = ("TENANT", "Airline", "airline", "travel_project", "travel_server")

EXAMPLE = REPO_ROOT / "examples" / "travel"
TENANT = "globex-travel"


@dataclass(frozen=True)
class Airline:
    url: str
    process: subprocess.Popen[bytes]

    def bookings(self) -> list[dict[str, object]]:
        return httpx.get(f"{self.url}/bookings", timeout=10).json()["bookings"]

    def hold(self, seconds: float) -> None:
        httpx.put(f"{self.url}/hold", json={"seconds": seconds}, timeout=10).raise_for_status()


@pytest.fixture(scope="module")
def travel_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project folder: the example's modules, and nothing of durable-chat's."""
    folder = tmp_path_factory.mktemp("travel-project")
    for module in ("travel.py", "travel_model.py", "airline.py"):
        shutil.copy(EXAMPLE / module, folder / module)
    return folder


@pytest.fixture(scope="module")
def airline(travel_project: Path) -> Iterator[Airline]:
    port = free_port()
    command = [
        sys.executable,
        "airline.py",
        "--port",
        str(port),
        "--data",
        str(travel_project / "airline.json"),
    ]
    process = subprocess.Popen(command, cwd=travel_project)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{url}/bookings", timeout=2)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("the airline stand-in did not start")
            time.sleep(0.05)
    yield Airline(url, process)
    process.kill()  # it may still hold the killed server's booking open for a minute
    process.wait()


@pytest.fixture(scope="module")
def travel_server(travel_project: Path, airline: Airline) -> Iterator[LiveServer]:
    env = {"TRAVEL_AIRLINE_URL": airline.url, "TRAVEL_TENANT": TENANT}
    started = LiveServer(sqlite_url(travel_project), travel_project, env, app="travel:app", model=None)
    started.start()
    yield started
    started.stop()
