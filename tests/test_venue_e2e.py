"""The venue example over a real server (`durable-chat serve --app venue:app` in a folder holding its
modules, as a user's project would): the rooms agent's delegated deposit paused for approval, the
server killed with SIGKILL, restarted, the deposit approved with an edited amount, the run completed;
the payment provider charged once."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .live_server import LiveServer, auth, sqlite_url
from .venue import EXAMPLE
from .waiting import eventually

pytestmark = pytest.mark.anyio

Json = dict[str, Any]
HOLD = "Hold the Garden Room on 2027-06-12"


async def until(client: httpx.AsyncClient, token: str, thread_id: str, done: Callable[[Json], bool]) -> Json:
    async def done_yet() -> Json | None:
        detail: Json = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
        return detail if done(detail) else None

    return await eventually(done_yet)


async def send(client: httpx.AsyncClient, token: str, thread_id: str, content: str) -> None:
    sent = await client.post(
        f"/api/threads/{thread_id}/messages", json={"content": content}, headers=auth(token)
    )
    assert sent.status_code == 202, sent.text


async def test_a_nested_deposit_approval_survives_sigkill_and_charges_once(tmp_path: Path) -> None:
    project = tmp_path / "venue-project"
    project.mkdir()
    for module in ("venue.py", "venue_model.py"):
        shutil.copy(EXAMPLE / module, project / module)
    deposits = tmp_path / "deposits.jsonl"
    server = LiveServer(
        sqlite_url(tmp_path), project, {"VENUE_DEPOSITS": str(deposits)}, app="venue:app", model=None
    )
    server.start()
    try:
        token = server.token("ada")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = (await client.post("/api/threads", json={}, headers=auth(token))).json()["thread_id"]
            await send(client, token, thread_id, HOLD)  # the desk hands the thread to the rooms agent
            await until(
                client, token, thread_id, lambda d: d["status"] == "idle" and d.get("agent") == "rooms"
            )
            await send(client, token, thread_id, HOLD)
            paused = await until(client, token, thread_id, lambda d: d["status"] == "awaiting_approval")
        server.kill()
        server.start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            [pending] = paused["pending_approvals"]
            edited = {**pending["args"], "amount": 250.0}
            approved = await client.post(
                f"/api/threads/{thread_id}/tool-calls/{pending['tool_call_id']}/approve",
                json={"override_args": edited},
                headers=auth(token),
            )
            done = await until(
                client,
                token,
                thread_id,
                lambda d: d["status"] == "idle" and "is held" in json.dumps(d["messages"][-1]),
            )
    finally:
        server.stop()

    assert (pending["tool_name"], pending["args"]["amount"], pending["agent"], pending["path"]) == (
        "charge_deposit",
        300.0,
        "payments",
        ["rooms", "payments"],
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["run_id"] is not None
    assert done["agent"] == "rooms"
    reply = done["messages"][-1]
    assert reply["provider_details"]["durable_chat_agent"] == "rooms"
    assert reply["parts"][0]["content"] == (
        "The Garden Room is held for 2027-06-12. Deposit DEP-0001 of $250.00 taken."
    )
    [charged] = [json.loads(line) for line in deposits.read_text().splitlines()]
    assert charged["receipt"] == {
        "receipt": "DEP-0001",
        "amount": 250.0,
        "reference": pending["args"]["reference"],
    }
