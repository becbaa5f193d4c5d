"""A real `durable-chat serve` process for end-to-end tests, and an HTTP/SSE client for it."""

from __future__ import annotations

import itertools
import json
import os
import pty
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest

from web.tokens import issue_token

REPO_ROOT = Path(__file__).resolve().parent.parent
SECRET = "e2e-test-secret"
STARTUP_TIMEOUT = 60.0
EVENT_TIMEOUT = 20.0


@dataclass(frozen=True)
class SseEvent:
    event_id: int
    type: str
    data: dict[str, object]


class LiveServer:
    """One `python -m cli serve` subprocess on a free loopback port; restartable on its database."""

    def __init__(
        self,
        database_url: str,
        workdir: Path,
        env: Mapping[str, str] | None = None,
        *,
        app: str | None = None,
        model: str | None = "demo",
    ) -> None:
        """`app` and `model` are `serve`'s `--app` and `--model` (none: the demo shop on its demo model)."""
        self.database_url = database_url
        self.workdir = workdir
        self.extra_env = dict(env or {})
        self.app = app
        self.model = model
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._stderr = workdir / "stderr.txt"

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it: several servers then start side by side."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_CHAT_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env["DURABLE_CHAT_SECRET"] = SECRET
        env.update(self.extra_env)
        command = [sys.executable, "-m", "cli", "serve", "--port", str(self.port), "--db", self.database_url]
        if self.model is not None:
            command += ["--model", self.model]
        if self.app is not None:
            command += ["--app", self.app]
        self.starts += 1
        self._stderr = self.workdir / f"stderr-{self.port}-{self.starts}.txt"
        with (self.workdir / "stdout.txt").open("a") as out, self._stderr.open("w") as err:
            self.process = subprocess.Popen(command, cwd=self.workdir, env=env, stdout=out, stderr=err)

    def wait_ready(self) -> None:
        """Wait until the launched process answers `/healthz` (bounded)."""
        assert self.process is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self._answers():
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self._stderr.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail("the server did not answer in time")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """`kill -9`: the process dies at once, nothing of it runs."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def pause(self) -> None:
        """`kill -STOP`: the process stands still, holding its connections, until `resume`."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """`kill -CONT`: the paused process goes on where it stood."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def logged(self, text: str) -> bool:
        """Whether the current process wrote `text` to its standard error (its log) so far."""
        return text in self._stderr.read_text(errors="replace")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def token(self, user: str, *, roles: tuple[str, ...] = ()) -> str:
        return issue_token(SECRET, user, roles=roles)

    def _answers(self) -> bool:
        try:
            return httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


@contextmanager
def live_server(
    database_url: str, workdir: Path, env: Mapping[str, str] | None = None
) -> Generator[LiveServer]:
    server = LiveServer(database_url, workdir, env)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def live_servers(
    database_url: str, workdir: Path, envs: Sequence[Mapping[str, str] | None]
) -> Generator[list[LiveServer]]:
    """A server per environment of `envs` on one database, started side by side, as workers sharing it."""
    servers = [LiveServer(database_url, workdir, env) for env in envs]
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


def sqlite_url(directory: Path) -> str:
    return f"sqlite+aiosqlite:///{directory / 'chat.db'}"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def read_events(
    client: httpx.AsyncClient,
    thread_id: str,
    token: str,
    *,
    until: Callable[[list[SseEvent]], bool],
    last_event_id: int | None = None,
    after: int | None = None,
    within: float = EVENT_TIMEOUT,
) -> list[SseEvent]:
    """Follow the thread's SSE stream, parsing the raw bytes, until `until(events)` holds (within `within` seconds)."""
    headers = auth(token)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    params = {} if after is None else {"after": str(after)}
    events: list[SseEvent] = []
    with anyio.fail_after(within):
        async with client.stream(
            "GET", f"/api/threads/{thread_id}/events", headers=headers, params=params, timeout=None
        ) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            buffer = ""
            async for text in response.aiter_text():
                buffer += text
                while "\n\n" in buffer:
                    frame, buffer = buffer.split("\n\n", 1)
                    event = _parse(frame)
                    if event is not None:
                        events.append(event)
                        if until(events):
                            return events
    raise AssertionError(f"the stream ended before the condition held: {[e.type for e in events]}")


def _parse(frame: str) -> SseEvent | None:
    fields: dict[str, list[str]] = {}
    for line in frame.split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))
    if "data" not in fields:
        return None
    data: dict[str, object] = json.loads("\n".join(fields["data"]))
    return SseEvent(int(fields["id"][0]), fields["event"][0], data)


def has(event_type: str, count: int = 1) -> Callable[[list[SseEvent]], bool]:
    """Stop once `count` events of `event_type` arrived."""
    return lambda events: sum(e.type == event_type for e in events) >= count


def free_port() -> int:
    """A port nothing listens on now, from this test process's own share of ports.

    A port the kernel picks (`bind` to port 0) is free when it is picked, not when the server
    binds it a second later: a parallel test process (a pytest-xdist worker) could be handed the
    same one meanwhile, and a server of one worker answer another's requests. So each worker
    takes the ports of its own share in turn, from a random one (another test session on the
    machine starts elsewhere), below the range the kernel hands out to connections (32768 and up
    on Linux; 49152 and up on macOS and Windows).
    """
    for port in itertools.islice(_ports, len(_own_ports())):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # in use, by something else
                continue
            return port
    raise AssertionError(f"no free port in {_own_ports()}, this test process's share of ports")


_PORTS = range(20000, 32768)


def _own_ports() -> range:
    """This process's share of `_PORTS`: pytest-xdist worker `gwN` of M has the Nth of M."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = len(_PORTS) // workers
    start = _PORTS.start + int(worker.removeprefix("gw")) * share
    return range(start, start + share)


def _ports_in_turn() -> Iterator[int]:
    share = _own_ports()
    first = secrets.randbelow(len(share))
    return itertools.cycle([*share[first:], *share[:first]])


_ports = _ports_in_turn()


@contextmanager
def served_on_a_terminal(workdir: Path, secret: str, *args: str, until: bytes) -> Iterator[tuple[int, str]]:
    """`serve` (with `args`) writing to a pseudo-terminal, as a person runs it: its port, and what it
    printed up to `until` and the end of that line. The process ends with the block."""
    port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("DURABLE_CHAT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["DURABLE_CHAT_SECRET"] = secret
    command = [sys.executable, "-m", "cli", "serve", "--port", str(port), *args]
    command += ["--db", f"sqlite+aiosqlite:///{workdir / 'chat.db'}"]
    master, terminal = pty.openpty()
    with (workdir / "stderr.txt").open("w") as err:
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=terminal, stderr=err
        )
    os.close(terminal)
    try:
        seen = b""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while until not in seen or not seen.rstrip(b" ").endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or process.poll() is not None:
                pytest.fail(f"not printed on the terminal: {seen!r}\n{(workdir / 'stderr.txt').read_text()}")
            if select.select([master], [], [], remaining)[0]:
                seen += os.read(master, 4096)
        yield port, seen.decode()
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(master)
