"""A thread's decision trail, renaming and cancelling, in process (httpx over ASGI), on SQLite and PostgreSQL.

The app runs its real lifespan (database, runner, broker) in the test's event loop; the demo model
thinks a little before each response, so a run is still going when the test cancels it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import httpx
import pytest
from dirty_equals import IsDatetime, IsStr
from inline_snapshot import snapshot
from starlette.applications import Starlette

from agent.demo import shop_app
from web import create_app
from web.settings import Settings
from web.tokens import issue_token

from .conftest import MigratedDatabases

pytestmark = pytest.mark.anyio

T = TypeVar("T")
SECRET = "in-process-secret"
DEADLINE = 30.0
Json = dict[str, object]


class Api:
    """The app in process, as `alice`."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {issue_token(SECRET, 'alice')}"}

    async def call(
        self, method: str, path: str, body: object | None = None, *, user: str = "alice"
    ) -> httpx.Response:
        headers = (
            self.headers if user == "alice" else {"Authorization": f"Bearer {issue_token(SECRET, user)}"}
        )
        return await self.client.request(method, path, json=body, headers=headers)

    async def thread(self) -> str:
        response = await self.call("POST", "/api/threads", {})
        assert response.status_code == 201, response.text
        thread_id: str = response.json()["thread_id"]
        return thread_id

    async def detail(self, thread_id: str) -> Json:
        response = await self.call("GET", f"/api/threads/{thread_id}")
        assert response.status_code == 200, response.text
        detail: Json = response.json()
        return detail

    async def send(self, thread_id: str, content: str) -> str:
        response = await self.call("POST", f"/api/threads/{thread_id}/messages", {"content": content})
        assert response.status_code == 202, response.text
        run_id: str = response.json()["run_id"]
        return run_id

    async def until_status(self, thread_id: str, *statuses: str) -> Json:
        return await _eventually(lambda: self._with_status(thread_id, statuses))

    async def _with_status(self, thread_id: str, statuses: tuple[str, ...]) -> Json | None:
        detail = await self.detail(thread_id)
        return detail if detail["status"] in statuses else None


async def _eventually(check: Callable[[], Awaitable[T | None]]) -> T:
    async with asyncio.timeout(DEADLINE):
        while True:
            value = await check()
            if value is not None:
                return value
            await asyncio.sleep(0.05)


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
async def api(request: pytest.FixtureRequest, migrated_databases: MigratedDatabases) -> AsyncIterator[Api]:
    url = await migrated_databases.empty(request.param)
    settings = Settings(database_url=url, model="demo", secret=SECRET)
    app: Starlette = create_app(settings, shop_app(delay=0.2))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
            yield Api(client)


def _error(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert set(body["error"]) >= {"code", "message"}
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return response.status_code, body["error"]["code"]


async def _decide(api: Api, thread_id: str, path: str, body: Json) -> None:
    detail = await api.until_status(thread_id, "awaiting_approval")
    [pending] = detail["pending_approvals"]  # pyright: ignore[reportGeneralTypeIssues]
    call_id = pending["tool_call_id"]  # pyright: ignore[reportIndexIssue, reportUnknownVariableType]
    response = await api.call("POST", f"/api/threads/{thread_id}/tool-calls/{call_id}/{path}", body)
    assert response.status_code == 200, response.text
    await api.until_status(thread_id, "idle")


async def test_every_decision_stays_in_the_threads_approvals(api: Api) -> None:
    thread_id = await api.thread()
    await api.send(thread_id, "Please refund ORD-3456")
    pending = await api.until_status(thread_id, "awaiting_approval")
    assert pending["approvals"] == pending["pending_approvals"]
    assert pending["approvals"] == snapshot(
        [
            {
                "thread_id": IsStr(),
                "tool_call_id": IsStr(),
                "run_id": IsStr(),
                "tool_name": "issue_refund",
                "args": {"order_id": "ORD-3456", "amount": 24.95, "reason": "Please refund ORD-3456"},
                "metadata": None,
                "status": "pending",
                "override_args": None,
                "reason": None,
                "decided_by": None,
                "decided_at": None,
                "created_at": IsDatetime(iso_string=True),
                "reviewers": "user",
                "expires_at": None,
                "context": {
                    "Order": "ORD-3456: Cable Kit x5",
                    "Status": "delivered",
                    "Total": "$24.95",
                    "Already refunded": "$0.00",
                    "Refundable": "$24.95",
                },
            }
        ]
    )
    await _decide(
        api,
        thread_id,
        "approve",
        {"override_args": {"order_id": "ORD-3456", "amount": 4.99, "reason": "partial"}},
    )
    await api.send(thread_id, "Please refund ORD-9012")
    await _decide(api, thread_id, "reject", {"reason": "not eligible"})
    await api.send(thread_id, "Please refund ORD-5678")
    await _decide(api, thread_id, "approve", {})

    detail = await api.detail(thread_id)
    assert detail["pending_approvals"] == []
    assert detail["approvals"] == snapshot(
        [
            {
                "thread_id": IsStr(),
                "tool_call_id": IsStr(),
                "run_id": IsStr(),
                "tool_name": "issue_refund",
                "args": {"order_id": "ORD-3456", "amount": 24.95, "reason": "Please refund ORD-3456"},
                "metadata": None,
                "status": "approved",
                "override_args": {"order_id": "ORD-3456", "amount": 4.99, "reason": "partial"},
                "reason": None,
                "decided_by": "alice",
                "decided_at": IsDatetime(iso_string=True),
                "created_at": IsDatetime(iso_string=True),
                "reviewers": "user",
                "expires_at": None,
            },
            {
                "thread_id": IsStr(),
                "tool_call_id": IsStr(),
                "run_id": IsStr(),
                "tool_name": "issue_refund",
                "args": {"order_id": "ORD-9012", "amount": 149.99, "reason": "Please refund ORD-9012"},
                "metadata": None,
                "status": "rejected",
                "override_args": None,
                "reason": "not eligible",
                "decided_by": "alice",
                "decided_at": IsDatetime(iso_string=True),
                "created_at": IsDatetime(iso_string=True),
                "reviewers": "user",
                "expires_at": None,
            },
            {
                "thread_id": IsStr(),
                "tool_call_id": IsStr(),
                "run_id": IsStr(),
                "tool_name": "issue_refund",
                "args": {"order_id": "ORD-5678", "amount": 99.98, "reason": "Please refund ORD-5678"},
                "metadata": None,
                "status": "approved",
                "override_args": None,
                "reason": None,
                "decided_by": "alice",
                "decided_at": IsDatetime(iso_string=True),
                "created_at": IsDatetime(iso_string=True),
                "reviewers": "user",
                "expires_at": None,
            },
        ]
    )
    approvals: list[Json] = detail["approvals"]  # pyright: ignore[reportAssignmentType]
    assert all(a["thread_id"] == thread_id for a in approvals)
    assert [a["decided_at"] for a in approvals] == sorted(str(a["decided_at"]) for a in approvals)


async def test_parallel_calls_are_listed_in_the_order_the_model_made_them(api: Api) -> None:
    thread_id = await api.thread()
    await api.send(thread_id, "Please cancel ORD-9012, ORD-5678 and ORD-3456")
    detail = await api.until_status(thread_id, "awaiting_approval")
    approvals: list[Json] = detail["approvals"]  # pyright: ignore[reportAssignmentType]
    assert [a["args"]["order_id"] for a in approvals] == ["ORD-9012", "ORD-5678", "ORD-3456"]  # pyright: ignore[reportIndexIssue]


async def test_rename_a_thread_and_its_errors(api: Api) -> None:
    thread_id = await api.thread()
    before = await api.detail(thread_id)
    response = await api.call("PATCH", f"/api/threads/{thread_id}", {"title": "  Refund   for Bob "})
    assert response.status_code == 200, response.text
    assert response.json() == {
        **{k: before[k] for k in ("thread_id", "status", "created_at", "updated_at")},
        "title": "Refund for Bob",
    }
    assert (await api.detail(thread_id))["title"] == "Refund for Bob"

    path = f"/api/threads/{thread_id}"
    assert _error(await api.call("PATCH", path, {"title": "   "})) == (422, "validation_error")
    assert _error(await api.call("PATCH", path, {"title": ""})) == (422, "validation_error")
    assert _error(await api.call("PATCH", path, {"title": "x" * 201})) == (422, "validation_error")
    assert _error(await api.call("PATCH", path, {"title": 5})) == (422, "validation_error")
    assert _error(await api.call("PATCH", path, {})) == (422, "validation_error")
    assert _error(await api.call("PATCH", path, {"title": "a", "extra": 1})) == (422, "validation_error")
    bad_json = await api.client.patch(
        path, content=b"{", headers={**api.headers, "Content-Type": "application/json"}
    )
    assert _error(bad_json) == (400, "invalid_json")
    assert _error(await api.call("PATCH", "/api/threads/nope", {"title": "a"})) == (404, "not_found")
    assert _error(await api.call("PATCH", path, {"title": "mine"}, user="mallory")) == (404, "not_found")
    unauthenticated = await api.client.patch(path, json={"title": "a"})
    assert _error(unauthenticated) == (401, "missing_token")
    assert (await api.detail(thread_id))["title"] == "Refund for Bob"


async def test_cancel_a_running_run_then_the_thread_is_usable(api: Api) -> None:
    thread_id = await api.thread()
    path = f"/api/threads/{thread_id}/cancel"
    assert _error(await api.call("POST", path)) == (409, "no_active_run")
    assert _error(await api.call("POST", "/api/threads/nope/cancel")) == (404, "not_found")

    run_id = await api.send(thread_id, "loop forever ORD-5678")
    # Let it make a call or two, then stop it.
    await _eventually(lambda: _has_tool_call(api, thread_id))
    assert _error(await api.call("POST", path, user="mallory")) == (404, "not_found")
    response = await api.call("POST", path)
    assert response.status_code == 200, response.text
    assert response.json() == {"run_id": run_id, "status": "cancelled"}

    detail = await api.detail(thread_id)
    assert detail["status"] == "idle"
    kinds = [(m["kind"], m.get("state")) for m in detail["messages"]]  # pyright: ignore[reportGeneralTypeIssues, reportUnknownVariableType]
    assert kinds[0] == ("request", "complete")
    assert kinds[-1][1] == "interrupted"
    assert _error(await api.call("POST", path)) == (409, "no_active_run")

    # The thread takes the next message at once; the cancelled run stays cancelled.
    await api.send(thread_id, "Where is my order ORD-9012?")
    done = await api.until_status(thread_id, "idle")
    assert done["messages"][-1]["parts"][0]["content"].startswith("Order ORD-9012")  # pyright: ignore[reportIndexIssue]


async def _has_tool_call(api: Api, thread_id: str) -> bool | None:
    detail = await api.detail(thread_id)
    return True if detail["messages"] else None
