"""Starting a queued run in one trip (`store/claiming.py`), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from store import Database, NewRun
from store.compiled import observing
from store.schema import ThreadRow, metadata

from .store_workers import OpenWorker

pytestmark = pytest.mark.anyio

_threads = metadata.tables[ThreadRow.__tablename__]


@pytest.fixture
async def db(open_worker: OpenWorker) -> Database:
    """A store-level worker on an empty database, SQLite or PostgreSQL; `open_worker` opens more on it."""
    return await open_worker("w1")


async def _counter(db: Database, thread_id: str) -> int:
    async with db.engine.connect() as connection:
        query = sa.select(_threads.c.last_event_id).where(_threads.c.thread_id == thread_id)
        return int((await connection.execute(query)).scalar_one())


async def test_starting_a_run_claims_it_and_reserves_its_ids_in_one_trip(db: Database) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    queued = await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hi"))
    assert queued.claimed is None
    statements: list[str] = []
    commits: list[int] = []
    with observing(
        lambda sql: statements.append(" ".join(sql.split()[:3])), on_commit=lambda: commits.append(1)
    ):
        started = await db.runs.start_reserving(queued.run.run_id, events=16, trace_id="ab" * 16)
    assert started is not None
    run, user_id, first = started
    assert (run.status, run.attempt, run.lease_owner) == ("running", 1, "w1")
    assert run.lease_expires_at is not None
    assert run.started_at is not None
    assert run.lease_expires_at > run.started_at
    assert (user_id, first) == ("alice", 1)
    assert await _counter(db, thread.thread_id) == 16
    assert await db.runs.get(run.run_id) == run
    async with db.engine.connect() as connection:
        kept = await connection.execute(
            sa.text("SELECT trace_id FROM runs WHERE run_id = :r"), {"r": run.run_id}
        )
        assert kept.scalar_one() == "ab" * 16
    if db.engine.dialect.name == "sqlite":
        assert statements == ["UPDATE runs SET", "UPDATE threads SET"]
    else:
        assert statements == ["WITH claimed AS"]
    assert commits == [1]


async def test_a_run_that_may_not_be_started_is_left_as_it_was(db: Database, open_worker: OpenWorker) -> None:
    thread = await db.threads.create(user_id="alice", title="")
    queued = await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hi"))
    assert await db.runs.start_reserving(queued.run.run_id, events=16) is not None
    held = await db.runs.get(queued.run.run_id)
    # Held by this worker's live lease: another worker gets nothing, and nothing changes.
    other = await open_worker("w2")
    assert await other.runs.start_reserving(queued.run.run_id, events=16) is None
    assert await db.runs.start_reserving("no-such-run", events=16) is None
    assert await db.runs.get(queued.run.run_id) == held
    assert await _counter(db, thread.thread_id) == 16


@pytest.mark.parametrize(
    "open_worker", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
async def test_a_run_row_held_by_a_key_share_lock_is_still_claimed(db: Database) -> None:
    # An insert of a row referencing the run by foreign key holds it `FOR KEY SHARE` until it
    # commits: the claim (a recovery's, a sweep's) takes it `FOR NO KEY UPDATE`, which does not
    # conflict, instead of skipping a run it may start.
    thread = await db.threads.create(user_id="alice", title="")
    queued = await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hi"))
    async with db.engine.connect() as referencing:
        await referencing.execute(
            sa.text("SELECT 1 FROM runs WHERE run_id = :r FOR KEY SHARE"), {"r": queued.run.run_id}
        )
        started = await db.runs.start_reserving(queued.run.run_id, events=16)
        await referencing.rollback()
    assert started is not None
    assert started[0].status == "running"
