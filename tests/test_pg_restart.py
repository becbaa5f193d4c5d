"""PostgreSQL restarted under traffic: no acknowledged message is lost, no request fails with a 500.

The shared PostgreSQL server must never be restarted, so this test runs a private cluster of its
own (`initdb` into a temporary directory, on a free port), with two real server processes
(workers) on it. Clients chat on several threads throughout, each posting its messages to one
worker and watching its thread on the other; the cluster is restarted once (`pg_ctl restart -m
fast`) and stopped then started once, with requests made while it is down.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import asyncpg
import httpx
import pytest

from .conftest import _unavailable
from .live_server import LiveServer, auth, free_port, read_events

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

DEADLINE = 120.0
"""For the whole test: runs interrupted by the outage retry with backoff (up to 10 s apart)."""


class PrivateCluster:
    """A PostgreSQL cluster in a temporary directory, run as the `postgres` OS user when we are root."""

    def __init__(self, bindir: Path, port: int) -> None:
        self.bindir = bindir
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="dc-pg-"))
        self.data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")

    @property
    def server_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        # The log file again: otherwise the new server writes to (and holds open) our pipes.
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-m", "fast", "-w", "restart")

    def remove(self) -> None:
        subprocess.run(
            self._command("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(self._command(program, *args), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{program} failed:\n{done.stdout}\n{done.stderr}"

    def _command(self, program: str, *args: str) -> list[str]:
        command = [str(self.bindir / program), *args]
        # initdb and postgres refuse to run as root.
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        _unavailable("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin to run a private cluster")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        _unavailable("running PostgreSQL as root needs `runuser` to switch to the postgres user")
    private = PrivateCluster(Path(found[-1]).parent, free_port())
    try:
        private.init()
        private.start()
        yield private
    finally:
        private.remove()


@dataclass
class Traffic:
    """What the clients saw: acknowledged messages per thread, and every answer that was not a 2xx."""

    acked: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    refusals: list[tuple[int, object]] = field(default_factory=list)

    def total(self) -> int:
        return sum(len(messages) for messages in self.acked.values())

    def note(self, response: httpx.Response) -> None:
        if response.status_code >= 300:
            self.refusals.append((response.status_code, response.json()))


async def chat(
    poster: httpx.AsyncClient,
    reader: httpx.AsyncClient,
    token: str,
    thread_id: str,
    traffic: Traffic,
    stop: anyio.Event,
) -> None:
    """Send messages to one worker and watch the thread on another, each message retried (same
    idempotency key) until acknowledged."""
    acked = traffic.acked.setdefault(thread_id, [])
    number = 0
    while not stop.is_set():
        content = "Where is ORD-9012?" if number % 2 else f"Hello, message {number}"
        body = {"content": content, "idempotency_key": f"{thread_id}-{number}"}
        while True:
            response = await poster.post(f"/api/threads/{thread_id}/messages", json=body, headers=auth(token))
            traffic.note(response)
            if response.status_code == 202:
                acked.append((response.json()["run_id"], content))
                break
            await anyio.sleep(0.1)
        while True:
            response = await reader.get(f"/api/threads/{thread_id}", headers=auth(token))
            traffic.note(response)
            if response.status_code == 200 and response.json()["status"] != "running":
                break
            await anyio.sleep(0.05)
        number += 1


async def eventually(condition: Callable[[], bool]) -> None:
    while True:
        if condition():
            return
        await anyio.sleep(0.05)


def user_prompts(thread: dict[str, object]) -> list[str]:
    messages = thread["messages"]
    assert isinstance(messages, list)
    return [
        part["content"]
        for message in messages
        for part in message["parts"]
        if part["part_kind"] == "user-prompt"
    ]


@pytest.mark.parametrize("pre_ping", ["1", "0"], ids=["pre-ping", "no-pre-ping"])
async def test_postgresql_restarted_mid_traffic_loses_no_acknowledged_message(
    cluster: PrivateCluster, tmp_path: Path, pre_ping: str
) -> None:
    """With pre-ping, pools replace dead connections before use; without, the first operation on
    each pool after the restart fails (a 503, or a run that waits and retries) and the pool
    starts afresh. Either way nothing acknowledged is lost and nothing answers 500."""
    admin = await asyncpg.connect(cluster.server_url)
    await admin.execute('CREATE DATABASE "chat"')
    await admin.close()
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{cluster.port}/chat"
    workers: list[LiveServer] = []
    traffic, stop = Traffic(), anyio.Event()
    outage: list[httpx.Response] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            workers.append(LiveServer(url, tmp_path / name, env={"DURABLE_CHAT_POOL_PRE_PING": pre_ping}))
            workers[-1].start()
        async with (
            httpx.AsyncClient(base_url=workers[0].base_url, timeout=60) as on_a,
            httpx.AsyncClient(base_url=workers[1].base_url, timeout=60) as on_b,
        ):
            clients = [on_a, on_b]
            users = [f"user{number}" for number in range(4)]
            threads: dict[str, str] = {}
            for user in users:
                response = await on_a.post("/api/threads", json={}, headers=auth(workers[0].token(user)))
                threads[user] = response.json()["thread_id"]
            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as chats:
                    for number, user in enumerate(users):
                        poster, reader = clients[number % 2], clients[(number + 1) % 2]
                        token = workers[0].token(user)
                        chats.start_soon(chat, poster, reader, token, threads[user], traffic, stop)
                    await eventually(lambda: traffic.total() >= 4)
                    await anyio.to_thread.run_sync(cluster.restart)
                    before = traffic.total()
                    await eventually(lambda: traffic.total() >= before + 4)

                    await anyio.to_thread.run_sync(cluster.stop)
                    # While it is down: a read and a write on each worker, each answered 503 at once.
                    probe = auth(workers[0].token(users[0]))
                    for client in clients:
                        outage.append(await client.get(f"/api/threads/{threads[users[0]]}", headers=probe))
                        outage.append(await client.post("/api/threads", json={}, headers=probe))
                    await anyio.to_thread.run_sync(cluster.start)
                    before = traffic.total()
                    await eventually(lambda: traffic.total() >= before + 4)
                    stop.set()

                for number, user in enumerate(users):
                    client, token, thread_id = clients[number % 2], workers[0].token(user), threads[user]
                    acked = traffic.acked[thread_id]
                    detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
                    assert detail["status"] == "idle"
                    # Every acknowledged message is in the thread, once, in order...
                    assert user_prompts(detail) == [content for _, content in acked]
                    # ...and its run completed.
                    run_ids = {run_id for run_id, _ in acked}
                    events = await read_events(
                        client,
                        thread_id,
                        token,
                        until=lambda events, run_ids=run_ids: (
                            run_ids <= {e.data["run_id"] for e in events if e.type == "run_finished"}
                        ),
                    )
                    finished = [e.data for e in events if e.type == "run_finished"]
                    assert sorted(str(data["run_id"]) for data in finished) == sorted(run_ids)
                    assert {data["status"] for data in finished} == {"completed"}
        assert all(worker.process is not None and worker.process.poll() is None for worker in workers)
    finally:
        for worker in workers:
            worker.stop()

    unavailable = {
        "error": {"code": "database_unavailable", "message": "the database cannot be reached; try again"}
    }
    assert [(response.status_code, response.json()) for response in outage] == [(503, unavailable)] * 4
    assert {response.headers["retry-after"] for response in outage} == {"5"}
    # Every other refusal the clients met was the outage's 503 or a run still going (409).
    for status, body in traffic.refusals:
        assert (status, body) == (503, unavailable) or (
            status == 409 and body["error"]["code"] == "run_active"
        )
