"""A nested approval over a real server (`--app tests.agent_chains:live_app`): paused, the server killed
with SIGKILL, restarted, approved with edited arguments, completed; the inner charge made once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .live_server import LiveServer, auth, sqlite_url
from .waiting import eventually

pytestmark = pytest.mark.anyio

Json = dict[str, Any]


async def until(client: httpx.AsyncClient, token: str, thread_id: str, done: Callable[[Json], bool]) -> Json:

    async def done_yet() -> Json | None:
        detail: Json = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
        return detail if done(detail) else None

    return await eventually(done_yet)


async def test_a_nested_approval_survives_sigkill_and_resumes_with_edited_arguments(tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    server = LiveServer(
        sqlite_url(tmp_path),
        tmp_path,
        {"AGENT_CHAIN_EFFECTS": str(effects)},
        app="tests.agent_chains:live_app",
        model=None,
    )
    server.start()
    try:
        token = server.token("ada")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = (await client.post("/api/threads", json={}, headers=auth(token))).json()["thread_id"]
            sent = await client.post(
                f"/api/threads/{thread_id}/messages", json={"content": "Book Paris"}, headers=auth(token)
            )
            assert sent.status_code == 202, sent.text
            paused = await until(client, token, thread_id, lambda d: d["status"] == "awaiting_approval")
        server.kill()
        server.start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            [pending] = paused["pending_approvals"]
            approved = await client.post(
                f"/api/threads/{thread_id}/tool-calls/{pending['tool_call_id']}/approve",
                json={"override_args": {"cents": 42}},
                headers=auth(token),
            )
            done = await until(
                client, token, thread_id, lambda d: d["status"] == "idle" and len(d["messages"]) >= 4
            )
    finally:
        server.stop()

    assert (pending["tool_name"], pending["args"], pending["agent"], pending["path"]) == (
        "charge",
        {"cents": 300},
        "payments",
        ["travel", "booking", "payments"],
    )
    assert approved.status_code == 200, approved.text
    assert done["messages"][-1]["parts"][0]["content"] == "travel done"
    assert effects.read_text() == "charged 42\n"
