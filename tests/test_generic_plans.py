"""Every hot statement keeps an index plan when PostgreSQL plans it without its parameters' values.

A prepared statement may get a generic plan after its fifth run (asyncpg prepares every statement),
and `plan_cache_mode = force_generic_plan` gives one at once. A generic plan cannot match a partial
index whose predicate names a bound parameter, nor see that a bound status is rare: such a statement
flips to a sequential scan of a table of millions of rows. Here each statement the server runs for
a turn, a listing, the pending approvals, the lease sweep and heartbeat, `expire_dead_local`, the
release, the review queue, the deadline sweep, the webhook outbox, the event log's compaction and a dry purge is captured as sent, then
prepared and explained under `force_generic_plan` on tables holding enough rows (ANALYZEd, with
`enable_seqscan` on): no plan may scan a big table.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from pydantic_ai.conversation import Conversation
from sqlalchemy.engine import make_url

from store import Checkpoint, Claim, Database, NewEvent, NewRecord, NewRun, QueueCursor
from store.schema import now_utc

from .conftest import new_database
from .messages import realistic_turn
from .statements import sent_statements

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

THREADS = 20_000
"""Enough rows that a sequential scan costs more than any index path on every big table."""

BIG_TABLES = (
    "threads",
    "runs",
    "events",
    "approvals",
    "conversation_records",
    "conversation_entries",
    "review_events",
    "webhook_deliveries",
)

_SEED = f"""
INSERT INTO threads (thread_id, user_id, title, status, created_at, updated_at, last_event_id,
                     checkpoint_event_id)
SELECT 't' || i, 'user' || (i % 2000), 'a thread', 'idle', now(), now() - i * interval '1 s', 10, 10
FROM generate_series(1, {THREADS}) AS i;

INSERT INTO runs (run_id, thread_id, kind, status, attempt, checkpoints, created_at, finished_at,
                  events_compacted_at)
SELECT 'r' || i || '-' || k, 't' || i, 'message', 'completed', 1, 3, now() - (i * 5 + k) * interval '1 s',
       now() - (i * 5 + k) * interval '1 s', now()
FROM generate_series(1, {THREADS}) AS i, generate_series(1, 5) AS k;

INSERT INTO events (thread_id, event_id, run_id, type, data, created_at)
SELECT 't' || i, k, 'r' || i || '-1', 'text_delta', '\\x7b7d', now()
FROM generate_series(1, {THREADS}) AS i, generate_series(1, 10) AS k;

INSERT INTO approvals (thread_id, tool_call_id, run_id, tool_name, args, status, created_at, reviewers,
                       decided_at, expires_at)
SELECT 't' || i, 'call' || i, 'r' || i || '-1', 'refund', '\\x7b7d', 'approved', now(),
       CASE WHEN i % 2 = 0 THEN 'user' ELSE 'support' END, now(), now() - interval '1 day'
FROM generate_series(1, {THREADS}) AS i;

INSERT INTO conversation_entries (entry_id, parent_id, kind, message)
SELECT md5('e' || i)::uuid, NULL, 'message', '\\x7b7d' FROM generate_series(1, {THREADS}) AS i;

INSERT INTO conversation_records (conversation_id, scope, family_id, head_id, revision, updated_at, usage,
                                  branches, format_version)
SELECT 't' || i, 'user' || (i % 2000), 't' || i, md5('e' || i)::uuid, 'rev', now(), '\\x7b7d', '\\x5b5d', 1
FROM generate_series(1, {THREADS}) AS i;

INSERT INTO review_events (type, thread_id, reviewers, data, created_at)
SELECT 'approval_decided', 't' || i, 'support', '\\x7b7d', now() - interval '1 day'
FROM generate_series(1, {THREADS}) AS i;

INSERT INTO webhook_deliveries (event_id, url, attempts, next_attempt_at, delivered_at)
SELECT event_id, 'https://hooks.example/review', 1, NULL, now() FROM review_events;
"""


def _asyncpg_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(False)


@pytest.fixture
async def big(tmp_path: Path) -> AsyncIterator[str]:
    """A migrated PostgreSQL database holding {THREADS} threads and their runs, events, approvals and reviews."""
    async with new_database("postgresql", tmp_path) as url:
        await (await Database.connect(url)).aclose()
        connection = await asyncpg.connect(_asyncpg_url(url))
        try:
            await connection.execute(_SEED)
            await connection.execute("ANALYZE")
        finally:
            await connection.close()
        yield url


def _parameters(sql: str) -> int:
    return max((int(n) for n in re.findall(r"\$(\d+)", sql)), default=0)


async def _generic_plan(connection: asyncpg.Connection, sql: str) -> str:
    """`sql`'s plan as PostgreSQL caches it for every execution, its parameters' values unknown."""
    await connection.execute(f"PREPARE probe AS {sql}")
    try:
        arguments = ", ".join(["NULL"] * _parameters(sql))
        rows = await connection.fetch(f"EXPLAIN EXECUTE probe{f'({arguments})' if arguments else ''}")
    finally:
        await connection.execute("DEALLOCATE probe")
    return "\n".join(row[0] for row in rows)


def _scanned(plan: str) -> list[str]:
    return [table for table in re.findall(r"Seq Scan on (\w+)", plan) if table in BIG_TABLES]


async def _hot_statements(db: Database) -> list[str]:
    """What the server sends for the operations it runs all the time, on `db` holding the seeded rows."""
    with sent_statements(db.engine) as sent:
        # A turn: queued and claimed, a checkpoint with events and a record, its end; a load, a replay.
        thread = await db.threads.create(user_id="user7", title="")
        new = NewRun(thread_id=thread.thread_id, kind="message", content="hi")
        claimed = (await db.runs.queue(new, Claim(events=8))).claimed
        assert claimed is not None
        run, first = claimed.run, claimed.first_event_id
        events = [(first + n, NewEvent(run.run_id, "text_delta", b'{"delta": "x"}')) for n in range(2)]
        records = [NewRecord("call-1", "order", {"id": "ORD-1"})]
        conversation = Conversation(conversation_id=thread.thread_id, messages=realistic_turn(0))
        step = Checkpoint(run=run, event_id=first + 1, events=events, records=records)
        await db.conversations.save_with(conversation, checkpoint=step)
        conversation.messages = [*conversation.messages, *realistic_turn(1)]
        await db.conversations.save_with(
            conversation, checkpoint=Checkpoint(run=run, event_id=first + 1, finish="completed")
        )
        await db.conversations.load(thread.thread_id)
        await db.events.read(thread.thread_id, after=0)
        # Listing and pending approvals.
        await db.threads.list(user_id="user7", limit=20)
        await db.approvals.list(thread_id=thread.thread_id, status="pending")
        await db.approvals.list(user_id="user7", status="pending")
        # Leases: a sweep, heartbeats (every lease, a runner's runs), a dead local worker's leases, a release.
        await db.leases.sweep(limit=10, queued_for=timedelta(seconds=5))
        await db.leases.heartbeat()
        await db.leases.heartbeat(["r1-1", "r1-2"])
        await db.leases.expire_dead_local()
        await db.leases.taken_over(["r1-1"])
        await db.leases.release()
        # Review: the queue both ways, the deadline sweep, the webhook outbox.
        await db.reviews.queue(["support"], status="pending", limit=20)
        await db.reviews.queue(["support"], status="decided", limit=20)
        await db.reviews.queue(["managers", "support"], status="pending", limit=20)
        await db.reviews.queue(["managers", "support"], status="decided", limit=20)
        page_end = QueueCursor(now_utc(), "t5", "call5")
        await db.reviews.queue(["managers", "support"], status="pending", limit=20, after=page_end)
        await db.reviews.queue(["managers", "support"], status="decided", limit=20, after=page_end)
        await db.reviews.due(now_utc())
        await db.reviews.next_deadline()
        await db.webhooks.claim(now_utc(), hold=timedelta(seconds=30))
        await db.webhooks.undelivered()
        # The event log's compaction.
        await db.events.compact(now_utc())
        # The purge, dry: the threads idle for 5 hours of the seeded 5.5.
        purge = await db.threads.purge(timedelta(hours=5), dry_run=True)
        assert purge.removed > 1000
    return [sql for sql in sent if re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", sql, re.IGNORECASE)]


async def test_no_hot_statement_scans_a_big_table_under_a_generic_plan(big: str) -> None:
    db = await Database.connect(big)
    try:
        statements = await _hot_statements(db)
    finally:
        await db.aclose()
    assert len(statements) > 20
    assert any(sql.lstrip().startswith("WITH") for sql in statements)  # the checkpoints, compiled
    connection = await asyncpg.connect(_asyncpg_url(big))
    try:
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        assert await connection.fetchval("SHOW enable_seqscan") == "on"
        scans = {}
        queue_plans: dict[str, str] = {}
        for sql in dict.fromkeys(statements):
            plan = await _generic_plan(connection, sql)
            if _scanned(plan):
                scans[sql] = plan
            if "AS calls JOIN threads" in sql:
                queue_plans[sql] = plan
    finally:
        await connection.close()
    assert scans == {}, "\n\n".join(f"{sql}\n{plan}" for sql, plan in scans.items())
    # The review queue, pending and decided, one role or several, first page or further: each
    # role's calls read in order from a range of its index and merged; nothing sorts them all.
    assert len(queue_plans) == 6
    for sql, plan in queue_plans.items():
        index = (
            "ix_approvals_review_queue"
            if "created_at" in sql.split("ORDER BY")[-1]
            else "ix_approvals_decided"
        )
        assert index in plan, f"{sql}\n{plan}"
        assert "Sort  (cost" not in plan, f"{sql}\n{plan}"
