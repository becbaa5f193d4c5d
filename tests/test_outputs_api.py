"""Approval metadata and structured outputs through the JSON API, in process, on SQLite and PostgreSQL.

Every approval object (the pending list, a thread's `pending_approvals` and `approvals`) carries the
call's `metadata`; a thread's `outputs` hold what its runs' `run_finished` said of a structured
output, so a client reloading the thread shows it as one that followed the run did.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from dirty_equals import IsStr
from inline_snapshot import snapshot
from pydantic import BaseModel
from pydantic_ai import ApprovalRequired, RunContext, Tool

from web import Settings, create_app, issue_token

from .core_app import CoreDeps, core_app
from .scripted import Calls, Script

pytestmark = pytest.mark.anyio

SECRET = "outputs-api-secret"
HEADERS = {"Authorization": f"Bearer {issue_token(SECRET, 'alice')}"}
Json = dict[str, Any]
OpenApi = Callable[..., Awaitable[httpx.AsyncClient]]


class NoFlightFound(BaseModel):
    """No flight matches."""


class Failed(BaseModel):
    """The search failed."""


async def wire(ctx: RunContext[CoreDeps], amount: float) -> str:
    """Wire `amount` abroad; a person approves every wire."""
    if not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"why": "abroad", "country": "PT", "limit": 100})
    return f"wired {amount}"


@pytest.fixture
async def open_api(database_url: str, tmp_path: Path) -> AsyncIterator[OpenApi]:
    async with AsyncExitStack() as stack:

        async def open_one(script: Script, **app_options: Any) -> httpx.AsyncClient:
            settings = Settings(database_url=database_url, secret=SECRET, data_dir=tmp_path)
            app = create_app(settings, app=core_app(script, **app_options))
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=30
            )
            return await stack.enter_async_context(client)

        yield open_one


async def new_thread(api: httpx.AsyncClient) -> str:
    response = await api.post("/api/threads", json={}, headers=HEADERS)
    assert response.status_code == 201, response.text
    return str(response.json()["thread_id"])


async def send(api: httpx.AsyncClient, thread_id: str, content: str) -> None:
    response = await api.post(
        f"/api/threads/{thread_id}/messages", json={"content": content}, headers=HEADERS
    )
    assert response.status_code == 202, response.text


async def until_status(api: httpx.AsyncClient, thread_id: str, status: str, runs: int) -> Json:
    """The thread once `runs` runs of it ended and it stands at `status`."""
    async with asyncio.timeout(30):
        while True:
            detail: Json = (await api.get(f"/api/threads/{thread_id}", headers=HEADERS)).json()
            ended = sum(1 for m in detail["messages"] if m["kind"] == "response")
            if detail["status"] == status and ended >= runs:
                return detail
            await asyncio.sleep(0.02)


async def test_every_approval_object_carries_the_calls_metadata(open_api: OpenApi) -> None:
    script = Script([Calls([("wire", {"amount": 250}), ("transfer", {"to": "bob", "amount": 5})]), "Done."])
    api = await open_api(script, tools=[Tool(wire)])
    thread_id = await new_thread(api)

    await send(api, thread_id, "Wire 250 and send bob 5")
    detail = await until_status(api, thread_id, "awaiting_approval", runs=1)
    listed = (await api.get("/api/approvals?status=pending", headers=HEADERS)).json()["approvals"]

    metadata = {a["tool_name"]: a["metadata"] for a in detail["pending_approvals"]}
    assert metadata == snapshot({"wire": {"why": "abroad", "country": "PT", "limit": 100}, "transfer": None})
    assert [a["metadata"] for a in detail["approvals"]] == list(metadata.values())
    assert [a["metadata"] for a in listed] == list(metadata.values())

    for call in detail["pending_approvals"]:
        path = f"/api/threads/{thread_id}/tool-calls/{call['tool_call_id']}/approve"
        assert (await api.post(path, json={}, headers=HEADERS)).status_code == 200
    done = await until_status(api, thread_id, "idle", runs=2)
    assert [a["metadata"] for a in done["approvals"]] == list(metadata.values())  # kept once decided
    decided = (await api.get("/api/approvals", headers=HEADERS)).json()["approvals"]
    assert [a["metadata"] for a in decided] == list(metadata.values())


async def test_a_threads_outputs_name_each_member_of_a_union(open_api: OpenApi) -> None:
    script = Script(
        [
            Calls([("final_result_NoFlightFound", {})]),
            "No structured answer here.",
            Calls([("final_result_Failed", {})]),
        ]
    )
    api = await open_api(script, output_type=[NoFlightFound, Failed, str])
    thread_id = await new_thread(api)

    for turn, text in enumerate(["Flights to Lisbon?", "Hello", "And to Porto?"], start=1):
        await send(api, thread_id, text)
        detail = await until_status(api, thread_id, "idle", runs=turn)

    assert detail["outputs"] == snapshot(
        [
            {
                "run_id": IsStr(),
                "tool_call_id": "call_1_0_final_result_NoFlightFound",
                "output": {},
                "output_type": "NoFlightFound",
            },
            {
                "run_id": IsStr(),
                "tool_call_id": "call_3_0_final_result_Failed",
                "output": {},
                "output_type": "Failed",
            },
        ]
    )
