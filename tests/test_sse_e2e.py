"""The event stream over a real server: replay, reconnects, many followers, a killed server."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import anyio
import httpx
import pytest

from .conftest import new_database
from .live_server import LiveServer, auth, has, live_server, read_events, sqlite_url
from .test_api import approvals_of, finished, new_thread, pause, send

pytestmark = pytest.mark.anyio


async def test_a_reconnect_gets_exactly_the_missed_events(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    run_id = await send(client, token, thread_id, "Hello there, what can you do for me today?")
    first = await read_events(client, thread_id, token, until=lambda events: len(events) >= 3)
    rest = await read_events(
        client, thread_id, token, last_event_id=first[-1].event_id, until=finished(run_id)
    )
    whole = await read_events(client, thread_id, token, until=finished(run_id))
    assert first + rest == whole
    assert [e.event_id for e in whole] == list(range(1, len(whole) + 1))
    assert sum(e.type == "text_delta" for e in whole) > 3
    assert all(e.data["run_id"] == run_id for e in whole)
    # `?after=` is the same as the header, for clients that cannot set one.
    assert (
        await read_events(client, thread_id, token, after=first[-1].event_id, until=finished(run_id)) == rest
    )


async def test_many_followers_see_the_same_live_events(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    before = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()["last_event_id"]
    assert before == 0

    async def follow() -> list[str]:
        events = await read_events(
            client, thread_id, token, until=lambda events: any(e.type == "run_finished" for e in events)
        )
        return [f"{e.event_id} {e.type}" for e in events]

    followers = [asyncio.create_task(follow()) for _ in range(5)]
    await asyncio.sleep(0.2)  # not needed for correctness: a late follower gets the replay
    await send(client, token, thread_id, "What is your returns policy?")
    seen = await asyncio.gather(*followers)
    assert all(s == seen[0] for s in seen)
    assert seen[0][0] == "1 run_started"


async def test_a_run_goes_on_without_any_client(server: LiveServer, client: httpx.AsyncClient) -> None:
    token = server.token("alice")
    thread_id = await new_thread(client, token)
    run_id = await send(client, token, thread_id, "Where is ORD-9012?")
    # Nobody follows; later the whole run is in the log, finished.
    events = await read_events(client, thread_id, token, until=finished(run_id))
    assert events[-1].data["status"] == "completed"


async def test_a_server_killed_while_a_thread_awaits_approval(server: LiveServer) -> None:
    await _kill_while_paused_then_approve(server)


@pytest.mark.postgres
async def test_a_server_killed_while_a_thread_awaits_approval_on_postgresql(tmp_path: Path) -> None:
    async with new_database("postgresql", tmp_path) as database_url:
        server = LiveServer(database_url, tmp_path)
        server.start()
        try:
            await _kill_while_paused_then_approve(server)
        finally:
            server.stop()


async def _kill_while_paused_then_approve(server: LiveServer) -> None:
    """`kill -9` while a thread awaits approval; after a restart on the same database, approving completes it."""
    token = server.token("alice")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        thread_id = await new_thread(client, token)
        paused = await pause(client, token, thread_id, "Please refund ORD-5678")
        [call_id] = approvals_of(paused)
    server.kill()
    server.start()
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        replayed = await read_events(
            client, thread_id, token, until=lambda events: len(events) >= len(paused)
        )
        assert replayed == paused
        response = await client.post(
            f"/api/threads/{thread_id}/tool-calls/{call_id}/approve", headers=auth(token)
        )
        assert response.status_code == 200
        resume_id = response.json()["run_id"]
        resumed = await read_events(
            client, thread_id, token, last_event_id=paused[-1].event_id, until=finished(resume_id)
        )
        assert resumed[-1].data["status"] == "completed"
        [result] = [e for e in resumed if e.type == "tool_result"]
        assert "Refunded $99.98 for ORD-5678" in str(result.data["content"])
        detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
        assert detail["status"] == "idle"
        assert detail["last_event_id"] == resumed[-1].event_id


async def test_a_server_killed_mid_run_continues_it_as_soon_as_it_restarts(tmp_path: Path) -> None:
    # Leases of an hour: only the restarted server seeing that its predecessor's process is gone
    # can take the run over within the test. The demo model's thinking time holds the run between
    # its two model calls, where the kill lands.
    env = {
        "DURABLE_CHAT_LEASE_SECONDS": "3600",
        "DURABLE_CHAT_HEARTBEAT_SECONDS": "60",
        "DURABLE_CHAT_DEMO_DELAY_SECONDS": "1",
    }
    with live_server(sqlite_url(tmp_path), tmp_path, env) as server:
        token = server.token("alice")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = await new_thread(client, token)
            run_id = await send(client, token, thread_id, "Where is ORD-9012?")
            before = await read_events(client, thread_id, token, until=has("tool_result"))
        server.kill()
        server.start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            events = await read_events(client, thread_id, token, until=finished(run_id))
            detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
    # Every event the client saw was stored before it was sent, so it is all still there. The
    # lookup's result was stored with it: the continuation sends it to the model, which answers
    # from it, with no lookup again.
    [recovered] = [e for e in events if e.type == "run_started" and e.data["kind"] == "recover"]
    stored = [e for e in events if e.event_id < recovered.event_id]
    assert stored[: len(before)] == before
    assert [e.type for e in stored] == ["run_started", "user_message", "tool_call", "tool_result"]
    after = [e for e in events if e.event_id > recovered.event_id]
    assert {e.type for e in after[:-2]} == {"text_delta"}
    assert [e.type for e in after[-2:]] == ["text_done", "run_finished"]
    assert events[-1].data["status"] == "completed"
    assert "ORD-9012" in str(events[-1].data["output"])
    assert [m["kind"] for m in detail["messages"]] == ["request", "response", "request", "response"]


async def test_an_idle_stream_gets_keep_alive_comments(tmp_path: Path) -> None:
    with live_server(sqlite_url(tmp_path), tmp_path, {"DURABLE_CHAT_SSE_PING_SECONDS": "0.2"}) as server:
        token = server.token("alice")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = await new_thread(client, token)
            received = ""
            with anyio.fail_after(30):
                async with client.stream(
                    "GET", f"/api/threads/{thread_id}/events", headers=auth(token), timeout=None
                ) as response:
                    assert response.status_code == 200
                    async for text in response.aiter_text():
                        received += text
                        if received.count("\n\n") >= 3:
                            break
    # Nothing happens on the thread: the stream holds only comments, which clients ignore.
    assert received.startswith(": ping\n\n: ping\n\n: ping\n\n")
    assert set(received.split("\n\n")) <= {": ping", ""}


async def test_a_shutdown_ends_open_streams_at_once_and_cleanly(tmp_path: Path) -> None:
    # Uvicorn waits for open responses before it shuts down: an event stream, endless, must end
    # itself, and with the end of its body, so the client sees it end and comes back.
    with live_server(sqlite_url(tmp_path), tmp_path) as server:
        token = server.token("alice")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = await new_thread(client, token)
            async with client.stream(
                "GET", f"/api/threads/{thread_id}/events", headers=auth(token), timeout=None
            ) as response:
                assert response.status_code == 200
                assert server.process is not None
                process = server.process
                process.terminate()
                with anyio.fail_after(60):
                    received = [chunk async for chunk in response.aiter_bytes()]
            returncode = await anyio.to_thread.run_sync(process.wait)
        assert set(received) <= {b": ping\n\n"}
        assert returncode == -signal.SIGTERM  # uvicorn's own end after a graceful shutdown
        assert not server.logged("returned without completing response")
