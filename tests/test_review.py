"""Human review by reviewers with roles, in process (httpx over ASGI), on SQLite and PostgreSQL.

The staffed shop sends refunds over $50 and cancellations to `support` (4 h, then `managers`);
deadlines are enforced by calling `worker.Deadlines.sweep` with a moment past them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TypeVar

import httpx
import pytest
from starlette.applications import Starlette

from agent.demo import staffed_shop_app
from cli.review import review_queue
from store import Database
from web import create_app
from web.review import queue_frames
from web.services import Services
from web.settings import Settings
from web.tokens import issue_token
from worker import Deadlines

from .conftest import MigratedDatabases
from .waiting import eventually

pytestmark = pytest.mark.anyio

T = TypeVar("T")
SECRET = "review-secret"
DEADLINE = 30.0
Json = dict[str, object]


class Api:
    def __init__(self, client: httpx.AsyncClient, services: Services) -> None:
        self.client = client
        self.s = services

    async def call(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        user: str = "alice",
        roles: tuple[str, ...] = (),
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {issue_token(SECRET, user, roles=roles)}"}
        return await self.client.request(method, path, json=body, headers=headers)

    async def thread_with(self, content: str) -> tuple[str, Json]:
        response = await self.call("POST", "/api/threads", {})
        assert response.status_code == 201, response.text
        thread_id: str = response.json()["thread_id"]
        sent = await self.call("POST", f"/api/threads/{thread_id}/messages", {"content": content})
        assert sent.status_code == 202, sent.text
        detail = await self.until_status(thread_id, "awaiting_approval")
        return thread_id, detail

    async def detail(self, thread_id: str) -> Json:
        response = await self.call("GET", f"/api/threads/{thread_id}")
        assert response.status_code == 200, response.text
        detail: Json = response.json()
        return detail

    async def until_status(self, thread_id: str, *statuses: str) -> Json:
        async def check() -> Json | None:
            detail = await self.detail(thread_id)
            return detail if detail["status"] in statuses else None

        return await eventually(check)


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, migrated_databases: MigratedDatabases) -> str:
    return await migrated_databases.empty(request.param)


@asynccontextmanager
async def staffed_api(database: str) -> AsyncIterator[Api]:
    """The staffed shop in process on `database`, its deadlines swept only when a test says so."""
    settings = Settings(database_url=database, model="demo", secret=SECRET, deadline_poll_seconds=3600)
    app: Starlette = create_app(settings, staffed_shop_app(delay=0))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
            services = app.state.services
            assert isinstance(services, Services)
            yield Api(client, services)


@pytest.fixture
async def api(database: str) -> AsyncIterator[Api]:
    async with staffed_api(database) as opened:
        yield opened


def _error(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert body["error"]["message"]
    return response.status_code, body["error"]["code"]


def _pending(detail: Json) -> Json:
    [pending] = detail["pending_approvals"]  # pyright: ignore[reportGeneralTypeIssues]
    return pending  # pyright: ignore[reportUnknownVariableType]


async def test_the_customer_cannot_decide_a_call_for_support(api: Api) -> None:
    thread_id, detail = await api.thread_with("Please refund ORD-9012")
    pending = _pending(detail)
    assert pending["reviewers"] == "support"
    assert datetime.fromisoformat(str(pending["expires_at"])) > datetime.fromisoformat(
        str(pending["created_at"])
    )
    call_id = pending["tool_call_id"]

    for path, body in (("approve", {}), ("reject", {"reason": "mine"})):
        response = await api.call("POST", f"/api/threads/{thread_id}/tool-calls/{call_id}/{path}", body)
        assert _error(response) == (403, "reviewer_required")

    after = await api.detail(thread_id)
    assert after["status"] == "awaiting_approval"
    assert _pending(after)["status"] == "pending"


async def test_a_small_refund_is_still_the_customers(api: Api) -> None:
    thread_id, detail = await api.thread_with("Please refund ORD-3456")
    pending = _pending(detail)
    assert (pending["reviewers"], pending["expires_at"]) == ("user", None)
    response = await api.call(
        "POST", f"/api/threads/{thread_id}/tool-calls/{pending['tool_call_id']}/approve", {}
    )
    assert response.status_code == 200, response.text
    await api.until_status(thread_id, "idle")


async def test_a_plain_user_finds_no_review_endpoints(api: Api) -> None:
    thread_id, detail = await api.thread_with("Please refund ORD-9012")
    call_id = _pending(detail)["tool_call_id"]
    for method, path in (
        ("GET", "/api/review/approvals"),
        ("GET", "/api/review/events"),
        ("GET", f"/api/review/threads/{thread_id}"),
        ("POST", f"/api/review/threads/{thread_id}/tool-calls/{call_id}/approve"),
        ("POST", f"/api/review/threads/{thread_id}/tool-calls/{call_id}/reject"),
        ("GET", "/api/review/nothing"),
    ):
        response = await api.call(method, path, {} if method == "POST" else None, user="alice")
        assert _error(response) == (404, "not_found"), path


async def test_a_reviewer_without_the_role_sees_nothing_and_cannot_decide(api: Api) -> None:
    thread_id, detail = await api.thread_with("Please refund ORD-9012")
    call_id = _pending(detail)["tool_call_id"]
    as_manager = {"user": "mia", "roles": ("managers",)}

    queue = await api.call("GET", "/api/review/approvals", **as_manager)  # pyright: ignore[reportArgumentType]
    assert queue.status_code == 200
    assert queue.json() == {"approvals": [], "next_cursor": None, "last_event_id": 0}
    thread = await api.call("GET", f"/api/review/threads/{thread_id}", **as_manager)  # pyright: ignore[reportArgumentType]
    assert _error(thread) == (404, "not_found")
    decided = await api.call(
        "POST",
        f"/api/review/threads/{thread_id}/tool-calls/{call_id}/approve",
        {},
        **as_manager,  # pyright: ignore[reportArgumentType]
    )
    assert _error(decided) == (404, "not_found")
    assert _pending(await api.detail(thread_id))["status"] == "pending"


async def test_a_support_reviewer_decides_from_the_queue(api: Api) -> None:
    thread_id, _ = await api.thread_with("Please refund ORD-9012")
    queue = await api.call("GET", "/api/review/approvals?status=pending", user="sam", roles=("support",))
    assert queue.status_code == 200, queue.text
    [item] = queue.json()["approvals"]
    assert item["user_id"] == "alice"
    assert item["thread_id"] == thread_id
    assert item["reviewers"] == "support"
    assert item["tool_name"] == "issue_refund"
    assert item["context"]["Refundable"] == "$149.99"
    assert item["thread_title"] == "Please refund ORD-9012"
    assert item["metadata"] is None
    assert item["expires_at"]

    seen = await api.call("GET", f"/api/review/threads/{thread_id}", user="sam", roles=("support",))
    assert seen.status_code == 200, seen.text
    assert seen.json()["user_id"] == "alice"
    assert seen.json()["messages"]

    decided = await api.call(
        "POST",
        f"/api/review/threads/{thread_id}/tool-calls/{item['tool_call_id']}/approve",
        {},
        user="sam",
        roles=("support",),
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["decision"] == "approved"
    assert decided.json()["run_id"]
    detail = await api.until_status(thread_id, "idle")
    [approval] = detail["approvals"]  # pyright: ignore[reportGeneralTypeIssues]
    assert approval["decided_by"] == "sam"  # pyright: ignore[reportIndexIssue]
    assert approval["decided_role"] == "support"  # pyright: ignore[reportIndexIssue]

    empty = await api.call("GET", "/api/review/approvals", user="sam", roles=("support",))
    assert empty.json()["approvals"] == []
    audit = await api.call("GET", "/api/review/approvals?status=decided", user="sam", roles=("support",))
    [done] = audit.json()["approvals"]
    assert (done["status"], done["decided_by"], done["decided_role"]) == ("approved", "sam", "support")


async def test_two_reviewers_racing_the_first_wins(api: Api) -> None:
    thread_id, detail = await api.thread_with("Please refund ORD-9012")
    call_id = _pending(detail)["tool_call_id"]
    base = f"/api/review/threads/{thread_id}/tool-calls/{call_id}"
    answers = await asyncio.gather(
        api.call("POST", f"{base}/approve", {}, user="sam", roles=("support",)),
        api.call("POST", f"{base}/reject", {"reason": "no"}, user="sue", roles=("support",)),
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 409]
    [lost] = [a for a in answers if a.status_code == 409]
    assert _error(lost) == (409, "already_decided")
    [won] = [a for a in answers if a.status_code == 200]
    again = await api.call(
        "POST",
        f"{base}/{'approve' if won.json()['decision'] == 'approved' else 'reject'}",
        {},
        user="sam",
        roles=("support",),
    )
    assert again.status_code == 200
    assert again.json()["run_id"] == won.json()["run_id"]


async def test_a_deadline_escalates_then_rejects(api: Api) -> None:
    thread_id, detail = await api.thread_with("Please refund ORD-9012")
    pending = _pending(detail)
    first = datetime.fromisoformat(str(pending["expires_at"]))
    deadlines = Deadlines(api.s.db, api.s.runner, publish=api.s.broker.publish)

    assert await deadlines.sweep(now=first - timedelta(seconds=1)) == 0
    assert await deadlines.sweep(now=first + timedelta(seconds=1)) == 1
    escalated = _pending(await api.detail(thread_id))
    assert escalated["reviewers"] == "managers"
    second = datetime.fromisoformat(str(escalated["expires_at"]))
    assert second == first + timedelta(seconds=1) + timedelta(hours=4)
    assert escalated["escalations"] == [
        {
            "from": "support",
            "to": "managers",
            "at": (first + timedelta(seconds=1)).isoformat(),
            "expires_at": second.isoformat(),
        }
    ]
    support = await api.call("GET", "/api/review/approvals", user="sam", roles=("support",))
    assert support.json()["approvals"] == []
    managers = await api.call("GET", "/api/review/approvals", user="mia", roles=("managers",))
    assert [a["tool_call_id"] for a in managers.json()["approvals"]] == [pending["tool_call_id"]]

    assert await deadlines.sweep(now=second + timedelta(seconds=1)) == 1
    done = await api.until_status(thread_id, "idle")
    [approval] = done["approvals"]  # pyright: ignore[reportGeneralTypeIssues]
    assert approval["status"] == "rejected"  # pyright: ignore[reportIndexIssue]
    assert approval["decided_by"] == "system"  # pyright: ignore[reportIndexIssue]
    assert "expired after 8 h" in approval["reason"]  # pyright: ignore[reportIndexIssue]
    assert "expired after 8 h" in str(done["messages"])
    assert await deadlines.sweep(now=second + timedelta(hours=1)) == 0

    events = await api.s.db.reviews.events_after({"support", "managers"}, 0)
    assert [e.type for e in events] == ["approval_requested", "approval_escalated", "approval_expired"]
    assert [e.reviewers for e in events] == ["support", "managers", "managers"]


async def test_roles_come_only_from_a_verified_token(api: Api) -> None:
    token = issue_token(SECRET, "eve", roles=("support",))
    forged = issue_token("another-secret", "eve", roles=("support",))
    for bad in (forged, token.replace("v2.", "v1.", 1), token[:-2] + "xx"):
        response = await api.client.get("/api/review/approvals", headers={"Authorization": f"Bearer {bad}"})
        assert _error(response) == (401, "invalid_token")
    expired = issue_token(SECRET, "eve", roles=("support",), ttl_seconds=-10)
    response = await api.client.get("/api/review/approvals", headers={"Authorization": f"Bearer {expired}"})
    assert _error(response) == (401, "token_expired")


def test_a_token_cannot_carry_the_role_user() -> None:
    with pytest.raises(ValueError, match="role"):
        issue_token(SECRET, "eve", roles=("user",))
    with pytest.raises(ValueError, match="role"):
        issue_token(SECRET, "eve", roles=("two words",))


@pytest.mark.postgres
async def test_three_workers_racing_one_deadline_decide_once(migrated_databases: MigratedDatabases) -> None:
    url = await migrated_databases.empty("postgresql")
    async with staffed_api(url) as api:
        thread_id, detail = await api.thread_with("Please refund ORD-9012")
        first = datetime.fromisoformat(str(_pending(detail)["expires_at"]))
        databases = [await Database.connect(url, migrate=False) for _ in range(3)]
        try:
            workers = [Deadlines(db, None) for db in databases]
            for moment in (first + timedelta(seconds=1), first + timedelta(hours=9)):
                done = await asyncio.gather(*(w.sweep(now=moment) for w in workers))
                assert sorted(done) == [0, 0, 1]
        finally:
            for db in databases:
                await db.aclose()
        events = await api.s.db.reviews.events_after({"support", "managers"}, 0)
        assert [e.type for e in events] == [
            "approval_requested",
            "approval_escalated",
            "approval_expired",
        ]
        [approval] = await api.s.db.approvals.list(thread_id=thread_id)
        assert (approval.status, approval.decided_by) == ("rejected", "system")


async def test_the_protocol_endpoints_refuse_the_customer_too(api: Api) -> None:
    thread_id, detail = await api.thread_with("Please refund ORD-9012")
    call_id = _pending(detail)["tool_call_id"]
    part = {
        "type": "tool-issue_refund",
        "toolCallId": call_id,
        "state": "approval-responded",
        "input": {},
        "approval": {"id": call_id, "approved": True, "isAutomatic": False, "signature": "sig"},
    }
    ai_sdk = {
        "id": thread_id,
        "trigger": "submit-message",
        "messages": [{"id": "a1", "role": "assistant", "parts": [part]}],
        "messageId": None,
    }
    assert _error(await api.call("POST", "/api/ai-sdk/chat", ai_sdk)) == (403, "reviewer_required")
    entry = {"interruptId": f"int-{call_id}", "status": "resolved", "payload": {"approved": True}}
    ag_ui = {"threadId": thread_id, "runId": "r2", "messages": [], "resume": [entry]}
    assert _error(await api.call("POST", "/api/ag-ui", ag_ui)) == (403, "reviewer_required")
    assert _pending(await api.detail(thread_id))["status"] == "pending"


async def test_the_queue_pages_oldest_first_and_the_events_resume(api: Api) -> None:
    first, _ = await api.thread_with("Please refund ORD-9012")
    second, _ = await api.thread_with("Please cancel ORD-5678")
    as_support = {"user": "sam", "roles": ("support",)}
    page = await api.call("GET", "/api/review/approvals?limit=1", **as_support)  # pyright: ignore[reportArgumentType]
    assert [a["thread_id"] for a in page.json()["approvals"]] == [first]
    cursor = page.json()["next_cursor"]
    assert cursor
    rest = await api.call("GET", f"/api/review/approvals?limit=1&cursor={cursor}", **as_support)  # pyright: ignore[reportArgumentType]
    assert [a["thread_id"] for a in rest.json()["approvals"]] == [second]
    assert rest.json()["next_cursor"] is None
    for query, code in (
        ("limit=0", "validation_error"),
        ("cursor=nope", "validation_error"),
        ("status=x", "validation_error"),
    ):
        bad = await api.call("GET", f"/api/review/approvals?{query}", **as_support)  # pyright: ignore[reportArgumentType]
        assert _error(bad) == (422, code)

    events = await api.s.db.reviews.events_after({"support"}, 0)
    assert [e.type for e in events] == ["approval_requested", "approval_requested"]
    assert await api.s.db.reviews.events_after({"managers"}, 0) == []
    # The stream replays after Last-Event-ID: the second event only (its frames, read as the endpoint sends them).
    frames = queue_frames(api.s, frozenset({"support"}), events[0].event_id)
    async with asyncio.timeout(DEADLINE):
        text = (await anext(frames)).decode()
    await frames.aclose()
    assert text.startswith(f"id: {events[1].event_id}\nevent: approval_requested\ndata: ")
    assert f'"thread_id":"{second}"' in text


async def test_the_terminal_queue_decides_as_the_reviewer(api: Api, database: str) -> None:
    thread_id, _ = await api.thread_with("Please refund ORD-9012")
    answers = iter(["n", "not this one"])
    said = await asyncio.to_thread(review_queue, database, "sam", ["support"], lambda _: next(answers))
    assert said == 0
    detail = await api.until_status(thread_id, "idle")
    [approval] = detail["approvals"]  # pyright: ignore[reportGeneralTypeIssues]
    assert (approval["status"], approval["decided_by"], approval["reason"]) == (
        "rejected",
        "sam",
        "not this one",
    )  # pyright: ignore[reportIndexIssue]
    assert await asyncio.to_thread(review_queue, database, "sam", ["managers"], lambda _: "y") == 0


async def test_a_reviewer_with_two_roles_pages_both_queues_in_one_order(api: Api) -> None:
    first, detail = await api.thread_with("Please refund ORD-9012")
    deadlines = Deadlines(api.s.db, api.s.runner, publish=api.s.broker.publish)
    second, _ = await api.thread_with("Please cancel ORD-5678")
    # The first call's deadline only: it moves to `managers`, the second stays with `support`.
    assert await deadlines.sweep(now=datetime.fromisoformat(str(_pending(detail)["expires_at"]))) == 1
    third, _ = await api.thread_with("Please refund ORD-9012")
    both = {"user": "kim", "roles": ("support", "managers")}

    async def pages(status: str) -> list[str]:
        seen: list[str] = []
        query = f"/api/review/approvals?status={status}&limit=1"
        while True:
            page = await api.call("GET", query, **both)  # pyright: ignore[reportArgumentType]
            assert page.status_code == 200, page.text
            seen += [a["thread_id"] for a in page.json()["approvals"]]
            cursor = page.json()["next_cursor"]
            if cursor is None:
                return seen
            assert len(seen) <= 3, seen
            query = f"/api/review/approvals?status={status}&limit=1&cursor={cursor}"

    assert await pages("pending") == [first, second, third]  # oldest first, whichever role
    for thread_id in (second, first, third):
        [call] = (await api.detail(thread_id))["pending_approvals"]  # pyright: ignore[reportGeneralTypeIssues]
        path = f"/api/review/threads/{thread_id}/tool-calls/{call['tool_call_id']}/reject"  # pyright: ignore[reportIndexIssue]
        decided = await api.call("POST", path, {"reason": "no"}, **both)  # pyright: ignore[reportArgumentType]
        assert decided.status_code == 200, decided.text
    assert await pages("pending") == []
    assert await pages("decided") == [third, first, second]  # newest decided first, whichever role
