"""The application over a real uvicorn server: `python -m cli serve` on a free loopback port."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest

from web.tokens import verify_token

from .live_server import free_port, served_on_a_terminal

REPO_ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 60.0
TOKEN = re.compile(r"v1\.[A-Za-z0-9_-]+\.[0-9]+\.[A-Za-z0-9_-]+")
"""A built-in bearer token, wherever it appears."""


@dataclass(frozen=True)
class Server:
    """A running `durable-chat serve` process."""

    base_url: str
    stdout: Path


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: object


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server on a fresh SQLite database, stopped when the module's tests are done."""
    workdir = tmp_path_factory.mktemp("server")
    port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("DURABLE_CHAT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "cli", "serve", "--port", str(port), "--db"]
    command.append(f"sqlite+aiosqlite:///{workdir / 'chat.db'}")
    stdout, stderr = workdir / "stdout.txt", workdir / "stderr.txt"
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(command, cwd=workdir, env=env, stdout=out, stderr=err)
    try:
        started = Server(base_url=f"http://127.0.0.1:{port}", stdout=stdout)
        _wait_until(lambda: process.poll() is not None or _answers(started), "the server to answer")
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}:\n{stderr.read_text()}")
        yield started
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_healthz(server: Server) -> None:
    reply = get(server, "/healthz")

    assert reply == Reply(200, "application/json", {"status": "ok"})


def test_unknown_path_is_a_json_404(server: Server) -> None:
    reply = get(server, "/no/such/page")

    assert reply == Reply(
        404, "application/json", {"error": {"code": "not_found", "message": "nothing at '/no/such/page'"}}
    )


def test_wrong_method_is_a_json_405(server: Server) -> None:
    reply = get(server, "/healthz", method="DELETE")

    assert reply == Reply(
        405,
        "application/json",
        {"error": {"code": "method_not_allowed", "message": "DELETE is not allowed on '/healthz'"}},
    )


def test_the_ready_line_in_a_log_holds_no_token(server: Server) -> None:
    # stdout is a file here, as under a service manager: the address and how to get a token, no token.
    expected = (
        f"durable-chat is ready on {server.base_url}/ (sign in with a token from `durable-chat token USER`)"
    )
    _wait_until(lambda: expected in server.stdout.read_text(), "the ready line")
    output = server.stdout.read_text()
    assert "#token=" not in output
    assert not TOKEN.search(output)


def test_on_a_terminal_the_ready_line_signs_the_demo_user_in(tmp_path: Path) -> None:
    with served_on_a_terminal(tmp_path, "pty-test-secret", until=b"#token=") as (port, printed):
        line = next(text for text in printed.splitlines() if "#token=" in text)
        assert line.startswith(f"durable-chat is ready: open http://127.0.0.1:{port}/#token=")
        assert "review#token=" not in printed  # the shop names no reviewer roles
        token = line.split("#token=", 1)[1].strip()
        assert verify_token("pty-test-secret", token).user_id == "demo"
        request = Request(
            f"http://127.0.0.1:{port}/api/threads", headers={"Authorization": f"Bearer {token}"}
        )
        with urlopen(request, timeout=10) as response:
            assert json.load(response) == {"threads": [], "next_cursor": None}


def get(server: Server, path: str, *, method: str = "GET") -> Reply:
    """Send a request and decode its JSON answer, whatever its status."""
    request = Request(server.base_url + path, method=method)
    try:
        with urlopen(request, timeout=10) as response:
            return Reply(response.status, response.headers.get_content_type(), json.load(response))
    except HTTPError as error:
        with error:
            return Reply(error.code, error.headers.get_content_type(), json.load(error))


def _answers(server: Server) -> bool:
    try:
        return get(server, "/healthz").status == 200
    except OSError:  # refused, reset or timed out: not up yet
        return False


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {STARTUP_TIMEOUT} s")
        time.sleep(0.1)
