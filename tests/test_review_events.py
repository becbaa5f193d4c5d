"""The review event log as a cursor: on PostgreSQL, an id that commits late is never skipped."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store import append_review_event

from .conftest import MigratedDatabases
from .test_review import staffed_api
from .waiting import eventually

pytestmark = pytest.mark.anyio


@pytest.mark.postgres
async def test_an_event_committing_after_a_higher_one_is_not_skipped(
    migrated_databases: MigratedDatabases,
) -> None:
    url = await migrated_databases.empty("postgresql")
    async with staffed_api(url) as api:
        first, _ = await api.thread_with("Please refund ORD-9012")
        second, _ = await api.thread_with("Please cancel ORD-5678")
        db = api.s.db
        [early] = await db.approvals.list(thread_id=first)
        [late] = await db.approvals.list(thread_id=second)
        roles = {"support"}
        start = await db.reviews.last_event_id()

        async with db.engine.connect() as slow:
            await slow.begin()
            # The slow transaction takes the lower id and has not committed yet...
            await append_review_event(slow, "approval_decided", early)

            async def fast() -> None:
                async with db.engine.begin() as connection:
                    await append_review_event(connection, "approval_decided", late)

            # ... while a second one logs an event too: it commits (the gap a poller could skip)
            # or waits for the first, whichever the store does.
            racing = asyncio.create_task(fast())
            await eventually(lambda: _done_or_waiting(racing, db.engine))
            seen = await db.reviews.events_after(roles, start)  # a follower polls now
            await slow.commit()
        await racing
        cursor = seen[-1].event_id if seen else start
        seen += await db.reviews.events_after(roles, cursor)  # and polls again after its cursor

    assert [e.data["thread_id"] for e in seen] == [first, second]
    assert [e.event_id for e in seen] == sorted({e.event_id for e in seen})


async def _done_or_waiting(task: asyncio.Task[None], engine: AsyncEngine) -> bool | None:
    if task.done():
        return True
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with engine.connect() as connection:
        waiting = (await connection.execute(query)).scalar_one()
    return True if waiting else None


@pytest.mark.postgres
async def test_only_events_for_reviewers_wait_for_the_log_lock(migrated_databases: MigratedDatabases) -> None:
    url = await migrated_databases.empty("postgresql")
    async with staffed_api(url) as api:
        held, _ = await api.thread_with("Please refund ORD-9012")
        db = api.s.db
        [early] = await db.approvals.list(thread_id=held)
        async with db.engine.connect() as slow:
            await slow.begin()
            # An uncommitted event for support holds the review log's lock...
            await append_review_event(slow, "approval_decided", early)
            # ... yet a customer's own small refund pauses, and they decide it, without waiting on it.
            mine, detail = await api.thread_with("Please refund ORD-3456")
            [own] = detail["pending_approvals"]  # pyright: ignore[reportGeneralTypeIssues]
            assert own["reviewers"] == "user"  # pyright: ignore[reportIndexIssue]
            path = f"/api/threads/{mine}/tool-calls/{own['tool_call_id']}/approve"  # pyright: ignore[reportIndexIssue]
            decided = await api.call("POST", path, {})
            assert decided.status_code == 200, decided.text
            # A call for support does wait for it: its event's id must not commit before the held one.
            staffed = asyncio.create_task(api.thread_with("Please refund ORD-9012"))
            assert await eventually(lambda: _done_or_waiting(staffed, db.engine)) is True
            assert not staffed.done()
            await slow.commit()
        second, _ = await staffed
        events = await db.reviews.events_after({"support"}, 0)
    assert [(e.type, e.data["thread_id"]) for e in events] == [
        ("approval_requested", held),
        ("approval_decided", held),
        ("approval_requested", second),
    ]
