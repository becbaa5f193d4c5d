"""SIGTERM over a real server, 20 times, with clients leaving at random points: the process exits,
gracefully (uvicorn's own end: it dies of the SIGTERM it re-raises), within its bound.

Each round starts a server with runs in flight, opens a random mix of clients (event-stream
followers idle or reading, one that read a run to its `run_finished` and left, ones that hang up
mid-frame or with a reset, an AI SDK stream, a half-sent body, an idle kept-alive connection), lets
some leave at random points, then sends SIGTERM. The server's watchdog ends a shutdown that passes
`DURABLE_CHAT_SHUTDOWN_SECONDS` with `FORCED_EXIT` instead: the exit status says which happened,
so the bound is asserted without timing anything here. The wait on the process only has a generous
deadline that fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import socket
import struct
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
import pytest

from cli.server import FORCED_EXIT

from .live_server import LiveServer, auth, sqlite_url

pytestmark = pytest.mark.anyio

ROUNDS = 20
SHUTDOWN_SECONDS = 4
EXIT_DEADLINE = 60
"""How long to wait for the process to exit before failing: generous, not a speed assertion."""

Client = Callable[["Round"], Awaitable[None]]


class Round:
    """One server and what its clients hold open; `rng` picks what each client does."""

    def __init__(self, server: LiveServer, rng: random.Random, token: str, threads: list[str]) -> None:
        self.server = server
        self.rng = rng
        self.token = token
        self.threads = threads
        self.open: list[asyncio.StreamWriter] = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        self.open.append(writer)
        return reader, writer

    def request(self, method: str, path: str, body: bytes = b"", *, sent: int | None = None) -> bytes:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        return head + body[: len(body) if sent is None else sent]

    async def leave(self, writer: asyncio.StreamWriter, *, reset: bool) -> None:
        if reset:  # a reset, not a FIN: as a client that crashed or lost its network
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()
        self.open.remove(writer)

    async def read_some(self, reader: asyncio.StreamReader, until: bytes | None = None) -> bytes:
        """Read what the server sends: up to `until`, or a random number of bytes (bounded waits)."""
        got = b""
        want = self.rng.randint(1, 600)
        with anyio.move_on_after(5):
            while (until is not None and until not in got) or (until is None and len(got) < want):
                chunk = await reader.read(256)
                if not chunk:
                    break
                got += chunk
        return got


async def idle_follower(r: Round) -> None:
    _, writer = await r.connect()
    writer.write(r.request("GET", f"/api/threads/{r.threads[0]}/events"))
    await writer.drain()


async def reading_follower(r: Round) -> None:
    reader, writer = await r.connect()
    writer.write(r.request("GET", f"/api/threads/{r.rng.choice(r.threads)}/events?after=0"))
    await writer.drain()
    await r.read_some(reader)
    if r.rng.random() < 0.5:
        await r.leave(writer, reset=r.rng.random() < 0.5)  # mid-frame, most likely


async def read_to_the_end_and_leave(r: Round) -> None:
    """The case once seen to hang: a follower read a run to its `run_finished`, then left."""
    reader, writer = await r.connect()
    writer.write(r.request("GET", f"/api/threads/{r.threads[1]}/events?after=0"))
    await writer.drain()
    await r.read_some(reader, until=b"event: run_finished")
    await r.leave(writer, reset=False)


async def ai_sdk_stream(r: Round) -> None:
    thread_id = f"ai-sdk-{r.rng.randrange(10**9)}"
    body = json.dumps(
        {
            "id": thread_id,
            "messages": [
                {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Where is ORD-5678?"}]}
            ],
            "trigger": "submit-message",
        }
    ).encode()
    reader, writer = await r.connect()
    writer.write(r.request("POST", "/api/ai-sdk/chat", body))
    await writer.drain()
    await r.read_some(reader)
    if r.rng.random() < 0.5:
        await r.leave(writer, reset=r.rng.random() < 0.5)


async def half_sent_body(r: Round) -> None:
    body = json.dumps({"content": "hello there"}).encode()
    _, writer = await r.connect()
    writer.write(
        r.request("POST", f"/api/threads/{r.threads[0]}/messages", body, sent=r.rng.randrange(len(body)))
    )
    await writer.drain()


async def idle_keep_alive(r: Round) -> None:
    reader, writer = await r.connect()
    writer.write(r.request("GET", "/api/threads?limit=5"))
    await writer.drain()
    await r.read_some(reader, until=b"}")


CLIENTS: list[Client] = [
    idle_follower,
    reading_follower,
    read_to_the_end_and_leave,
    ai_sdk_stream,
    half_sent_body,
    idle_keep_alive,
]


async def _start_runs(server: LiveServer, token: str) -> list[str]:
    """Two threads: one with a long run in flight at the signal, one with a short run (finished or not)."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        threads: list[str] = []
        for content in ("loop forever on ORD-5678", "Where is ORD-9012?"):
            thread_id = (await client.post("/api/threads", json={}, headers=auth(token))).json()["thread_id"]
            posted = await client.post(
                f"/api/threads/{thread_id}/messages", json={"content": content}, headers=auth(token)
            )
            assert posted.status_code == 202, posted.text
            threads.append(thread_id)
        return threads


async def _wait_for_exit(process: subprocess.Popen[bytes]) -> int:
    with anyio.fail_after(EXIT_DEADLINE):
        while process.poll() is None:  # waits on the condition; the deadline only fails the test
            await anyio.to_thread.run_sync(lambda: _wait_briefly(process))
    return process.returncode


def _wait_briefly(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=1)


@pytest.mark.parametrize("seed", range(ROUNDS))
async def test_sigterm_exits_within_its_bound_whatever_the_clients_did(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    env = {
        "DURABLE_CHAT_SHUTDOWN_SECONDS": str(SHUTDOWN_SECONDS),
        "DURABLE_CHAT_DEMO_DELAY_SECONDS": f"{rng.uniform(0.02, 0.4):.2f}",
        "DURABLE_CHAT_SSE_PING_SECONDS": "0.5",
    }
    server = LiveServer(sqlite_url(tmp_path), tmp_path, env)
    server.start()
    try:
        token = server.token("alice")
        r = Round(server, rng, token, await _start_runs(server, token))
        chosen = [rng.choice(CLIENTS) for _ in range(rng.randint(2, 6))]
        if seed % 2 == 0:
            chosen.append(read_to_the_end_and_leave)
        for client in chosen:
            await client(r)
        assert server.process is not None
        process = server.process
        process.send_signal(signal.SIGTERM)
        # Some clients leave while it shuts down; the rest stay until it has gone.
        for writer in list(r.open):
            if rng.random() < 0.3:
                await r.leave(writer, reset=rng.random() < 0.5)
        returncode = await _wait_for_exit(process)
        for writer in list(r.open):
            await r.leave(writer, reset=False)
    finally:
        server.stop()
    log = server._stderr.read_text(errors="replace")  # pyright: ignore[reportPrivateUsage]
    assert returncode != FORCED_EXIT, f"the shutdown passed its bound ({SHUTDOWN_SECONDS} s):\n{log[-3000:]}"
    assert returncode == -signal.SIGTERM, log[-3000:]  # uvicorn's own end after a graceful shutdown
    assert "Traceback" not in log, log[-3000:]
