"""Limits: the cap on a user's open event streams (the write rate limit is tested over a real server), and on a worker's runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from web.errors import ApiError
from web.limits import StreamLimiter

from .asgi import Answer, Api, call, error_of, open_api
from .live_server import sqlite_url


def test_a_user_holds_at_most_the_limit_and_a_release_frees_one() -> None:
    streams = StreamLimiter(per_user=2)
    first, _second = streams.acquire("ann"), streams.acquire("ann")
    with pytest.raises(ApiError) as refused:
        streams.acquire("ann")
    assert (refused.value.status_code, refused.value.code) == (429, "too_many_streams")
    assert refused.value.headers == {"Retry-After": "5"}
    streams.acquire("bob")  # another user has their own count
    first()
    first()  # a second release of the same stream frees nothing more
    assert streams.open_streams("ann") == 1
    streams.acquire("ann")
    assert streams.open_streams("ann") == 2


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    env = {"DURABLE_CHAT_MAX_STREAMS_PER_USER": "3"}
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as opened:
        yield opened


@pytest.mark.anyio
async def test_the_runs_a_worker_drives_at_once_are_the_settings(tmp_path: Path) -> None:
    async with open_api(sqlite_url(tmp_path), tmp_path, env={"DURABLE_CHAT_MAX_RUNS": "3"}) as opened:
        assert opened.app.state.services.runner.max_concurrent == 3


@pytest.mark.anyio
async def test_one_stream_too_many_is_a_429_until_one_closes(api: Api) -> None:
    thread_id = (await api.client.post("/api/threads", json={}, headers=api.auth("ann"))).json()["thread_id"]
    other = (await api.client.post("/api/threads", json={}, headers=api.auth("bob"))).json()["thread_id"]
    path = f"/api/threads/{thread_id}/events"

    def as_user(user: str) -> list[tuple[bytes, bytes]]:
        return [(b"authorization", f"Bearer {api.token(user)}".encode())]

    close = anyio.Event()
    held: list[Answer] = []

    async def hold(started: anyio.Event) -> None:
        held.append(await call(api.app, "GET", path, headers=as_user("ann"), started=started, until=close))

    async with anyio.create_task_group() as tasks:
        for _ in range(3):
            started = anyio.Event()
            tasks.start_soon(hold, started)
            with anyio.fail_after(20):
                await started.wait()
        refused = await call(api.app, "GET", path, headers=as_user("ann"))
        assert error_of(refused.status, refused.body) == (429, "too_many_streams")
        assert refused.headers["retry-after"] == "5"
        # The AI SDK's streamed answer counts as a stream too.
        chat = {
            "id": "ann-chat",
            "trigger": "submit-message",
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}],
            "messageId": None,
        }
        ai_sdk = await call(
            api.app,
            "POST",
            "/api/ai-sdk/chat",
            headers=[*as_user("ann"), (b"content-type", b"application/json")],
            body=[json.dumps(chat).encode()],
        )
        assert error_of(ai_sdk.status, ai_sdk.body) == (429, "too_many_streams")
        # ...refused before it queued a run: the chat has no message.
        assert (await api.client.get("/api/ai-sdk/chat/ann-chat", headers=api.auth("ann"))).json()[
            "messages"
        ] == []
        # Another user is not limited by ann's streams.
        assert (
            await call(api.app, "GET", f"/api/threads/{other}/events", headers=as_user("bob"))
        ).status == 200
        close.set()
    assert [answer.status for answer in held] == [200, 200, 200]
    # Closed streams give their slots back.
    assert (await call(api.app, "GET", path, headers=as_user("ann"))).status == 200
    # A refused request (not the owner's thread) holds no slot either.
    for _ in range(4):
        assert (
            await call(api.app, "GET", f"/api/threads/{other}/events", headers=as_user("ann"))
        ).status == 404
    assert (await call(api.app, "GET", path, headers=as_user("ann"))).status == 200
