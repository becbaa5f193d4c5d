"""The application in process: opened on a test database, driven over httpx or raw ASGI messages."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
from starlette.applications import Starlette
from starlette.types import Message, Scope

from web import Settings, create_app
from web.auth import Authenticate
from web.tokens import issue_token

SECRET = "in-process-test-secret"


@dataclass
class Api:
    """An opened application and an httpx client for it; `token(user)` signs a user in."""

    app: Starlette
    client: httpx.AsyncClient

    def token(self, user: str) -> str:
        return issue_token(SECRET, user)

    def auth(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(user)}"}


@asynccontextmanager
async def open_api(
    database_url: str,
    data_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    authenticate: Authenticate | None = None,
) -> AsyncIterator[Api]:
    """The app on `database_url` with its lifespan running (runner included), and a client for it."""
    environ = {"DURABLE_CHAT_TRACE_FILE": "off", **(env or {})}
    settings = Settings.load(database_url=database_url, secret=SECRET, data_dir=data_dir, environ=environ)
    app = create_app(settings, authenticate=authenticate)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client,
    ):
        yield Api(app, client)


@dataclass(frozen=True)
class Answer:
    """What a raw ASGI call got: the status, the headers (lowercase names), and the body so far."""

    status: int
    headers: dict[str, str]
    body: bytes


async def call(
    app: Starlette,
    method: str,
    url: str,
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
    body: Sequence[bytes] = (b"",),
    hang_up: bool = False,
    started: anyio.Event | None = None,
    until: anyio.Event | None = None,
) -> Answer:
    """Send a request as a server would, in chunks; `hang_up` disconnects after them, mid-body.

    An event stream's answer is taken as soon as it starts (`started` is then set), and the client
    disconnects at once, or once `until` is set.
    """
    parts = urlsplit(url)
    disconnected = anyio.Event()
    if hang_up:
        disconnected.set()
    messages = [
        {"type": "http.request", "body": chunk, "more_body": hang_up or i < len(body) - 1}
        for i, chunk in enumerate(body)
    ]
    start: Message = {}
    content = bytearray()

    async def receive() -> Message:
        if messages:
            return messages.pop(0)
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            if b"text/event-stream" in dict(_headers(message)).get(b"content-type", b""):
                if started is not None:
                    started.set()
                if until is None:
                    disconnected.set()
        elif message["type"] == "http.response.body":
            content.extend(message.get("body", b""))

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": parts.path,
        "raw_path": parts.path.encode(),
        "query_string": parts.query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def hang_up_when_told() -> None:
        assert until is not None
        await until.wait()
        disconnected.set()

    async with anyio.create_task_group() as tasks:
        if until is not None:
            tasks.start_soon(hang_up_when_told)
        with anyio.fail_after(None if until is not None else 20):
            await app(scope, receive, send)
        tasks.cancel_scope.cancel()
    return Answer(
        int(start["status"]),
        {name.decode("latin-1"): value.decode("latin-1") for name, value in _headers(start)},
        bytes(content),
    )


def _headers(message: Message) -> list[tuple[bytes, bytes]]:
    return [(bytes(name), bytes(value)) for name, value in message.get("headers", [])]


def error_of(status: int, body: bytes | str | object) -> tuple[int, str]:
    """The status and code of an error answer, checking the body's shape `{"error": {"code", "message"}}`."""
    decoded = json.loads(body) if isinstance(body, (bytes, str)) else body
    assert isinstance(decoded, dict), decoded
    assert set(decoded) == {"error"}, decoded
    assert set(decoded["error"]) - {"details"} == {"code", "message"}, decoded
    assert isinstance(decoded["error"]["code"], str)
    assert isinstance(decoded["error"]["message"], str)
    return status, decoded["error"]["code"]
