"""Run leases at the store level, on SQLite and PostgreSQL: claims, takeovers, fencing, heartbeats.

Each `Database` opened here stands for one worker process (its own engine and identity).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import pytest
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelRequest
from sqlalchemy.ext.asyncio import AsyncConnection

from store import Database, LeaseLost, NewRun, Run, Worker, record_checkpoint
from store.leases import gone_from_this_host
from store.schema import RunRow, ThreadRow, metadata

from .store_workers import LONG, OpenWorker

pytestmark = pytest.mark.anyio

SHORT = timedelta(milliseconds=200)
DEADLINE = 20.0

T = TypeVar("T")

RUNS = metadata.tables[RunRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]


async def queued_run(db: Database, content: str = "Where is ORD-5678?") -> Run:
    thread = await db.threads.create(user_id="alice", title="t")
    run = (await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=content))).run
    return run


async def run_row(db: Database, run_id: str) -> sa.RowMapping:
    runs = RUNS
    async with db.engine.connect() as connection:
        return (await connection.execute(sa.select(runs).where(runs.c.run_id == run_id))).mappings().one()


async def _eventually(attempt: Callable[[], Awaitable[T | None]]) -> T:
    """The first truthy result of `attempt`, tried again and again (bounded)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            result = await attempt()
            if result:
                return result
            await asyncio.sleep(0.05)


async def _claim_when_lapsed(db: Database, run_id: str) -> Run:
    """Claim `run_id` for `db`'s worker as soon as it may."""
    started = await _eventually(lambda: db.runs.start_reserving(run_id, events=1))
    return started[0]


async def test_one_claimer_wins_among_many(open_worker: OpenWorker) -> None:
    workers = [await open_worker(f"worker-{n}") for n in range(8)]
    run = await queued_run(workers[0])
    started = await asyncio.gather(*(w.runs.start_reserving(run.run_id, events=4) for w in workers))
    winners = [w for w, s in zip(workers, started, strict=True) if s is not None]
    assert len(winners) == 1
    claimed, _, first_event_id = next(s for s in started if s is not None)
    assert (claimed.status, claimed.attempt, first_event_id) == ("running", 1, 1)
    assert claimed.lease_owner == winners[0].runs.worker.worker_id
    row = await run_row(workers[0], run.run_id)
    assert (row["status"], row["attempt"], row["lease_owner"]) == ("running", 1, claimed.lease_owner)
    # Only the winner reserved event ids.
    assert (await workers[0].threads.get(run.thread_id)).last_event_id == 4


async def test_concurrent_sweeps_reserve_each_run_once(open_worker: OpenWorker) -> None:
    workers = [await open_worker(f"worker-{n}") for n in range(4)]
    runs = [await queued_run(workers[0]) for _ in range(6)]
    swept = await asyncio.gather(*(w.leases.sweep(limit=3, queued_for=timedelta(0)) for w in workers))
    taken = [run_id for run_ids in swept for run_id in run_ids]
    assert sorted(taken) == sorted(r.run_id for r in runs)
    assert all(len(run_ids) <= 3 for run_ids in swept)
    for worker, run_ids in zip(workers, swept, strict=True):
        for run_id in run_ids:
            row = await run_row(worker, run_id)
            assert (row["status"], row["lease_owner"]) == ("queued", worker.runs.worker.worker_id)
            # A reservation: only its worker starts the run.
            others = [w for w in workers if w is not worker]
            assert await others[0].runs.start_reserving(run_id, events=1) is None
            started = await worker.runs.start_reserving(run_id, events=1)
            assert started is not None
            assert started[0].attempt == 1


async def test_a_sweep_leaves_fresh_runs_to_the_process_that_queued_them(open_worker: OpenWorker) -> None:
    first, second = await open_worker("first"), await open_worker("second")
    run = await queued_run(first)
    assert await second.leases.sweep(limit=5, queued_for=timedelta(hours=1)) == []
    assert await second.leases.sweep(limit=0, queued_for=timedelta(0)) == []
    assert await second.leases.sweep(limit=5, queued_for=timedelta(0)) == [run.run_id]


async def test_a_live_lease_is_not_taken(open_worker: OpenWorker) -> None:
    holder, other = await open_worker("holder", lease=LONG), await open_worker("other")
    run = await queued_run(holder)
    assert await holder.runs.start_reserving(run.run_id, events=1) is not None
    assert await other.runs.start_reserving(run.run_id, events=1) is None
    assert await other.leases.sweep(limit=5, queued_for=timedelta(0)) == []
    # Nor by the holder itself a second time: one attempt drives it.
    assert await holder.runs.start_reserving(run.run_id, events=1) is None
    assert (await run_row(holder, run.run_id))["attempt"] == 1


async def test_an_expired_lease_is_taken_over(open_worker: OpenWorker) -> None:
    dead, heir = await open_worker("dead", lease=SHORT), await open_worker("heir")
    run = await queued_run(dead)
    assert await dead.runs.start_reserving(run.run_id, events=1) is not None
    taken = await _claim_when_lapsed(heir, run.run_id)
    assert (taken.status, taken.attempt, taken.lease_owner) == ("running", 2, "heir")
    assert taken.lease_expires_at is not None


async def test_a_sweep_takes_over_a_dead_workers_runs(open_worker: OpenWorker) -> None:
    dead, heir = await open_worker("dead", lease=SHORT), await open_worker("heir")
    run = await queued_run(dead)
    assert await dead.runs.start_reserving(run.run_id, events=1) is not None
    swept = await _eventually(lambda: heir.leases.sweep(limit=5, queued_for=timedelta(hours=1)))
    assert swept == [run.run_id]
    started = await heir.runs.start_reserving(run.run_id, events=1)
    assert started is not None
    assert (started[0].attempt, started[0].lease_owner) == (2, "heir")


async def test_a_fenced_out_worker_writes_nothing(open_worker: OpenWorker) -> None:
    stale, heir = await open_worker("stale", lease=SHORT), await open_worker("heir")
    run = await queued_run(stale)
    started = await stale.runs.start_reserving(run.run_id, events=8)
    assert started is not None
    stale_run = started[0]
    heir_run = await _claim_when_lapsed(heir, run.run_id)

    # The stale worker's checkpoint: its messages and bookkeeping roll back together.
    conversation = Conversation(conversation_id=run.thread_id)
    conversation.messages = [ModelRequest.user_text_prompt("Where is ORD-5678?")]

    async def checkpoint(connection: AsyncConnection) -> None:
        await record_checkpoint(connection, stale_run, event_id=3)

    with pytest.raises(LeaseLost):
        await stale.conversations.save_with(conversation, also=checkpoint)
    assert await heir.conversations.load(run.thread_id) is None
    row = await run_row(heir, run.run_id)
    assert (row["checkpoints"], row["status"], row["lease_owner"]) == (0, "running", "heir")
    threads = _threads
    async with heir.engine.connect() as connection:
        covered = (
            await connection.execute(
                sa.select(threads.c.checkpoint_event_id).where(threads.c.thread_id == run.thread_id)
            )
        ).scalar_one()
    assert covered == 0

    # Nor can it end the run, or put it back in the queue.
    with pytest.raises(LeaseLost):
        await stale.runs.finish(run.run_id, "completed")
    assert await stale.runs.requeue(run.run_id) is False
    assert (await heir.runs.get(run.run_id)).status == "running"

    # The new owner checkpoints and ends it.
    async with heir.engine.begin() as connection:
        await record_checkpoint(connection, heir_run, event_id=9, finish="completed")
    ended = await heir.runs.get(run.run_id)
    assert (ended.status, ended.checkpoints, ended.lease_owner) == ("completed", 1, "heir")
    assert (await heir.threads.get(run.thread_id)).status == "idle"


async def test_heartbeat_extends_the_leases_a_worker_holds(open_worker: OpenWorker) -> None:
    one, two = await open_worker("one"), await open_worker("two")
    mine, theirs = await queued_run(one), await queued_run(one)
    assert await one.runs.start_reserving(mine.run_id, events=1) is not None
    assert await two.runs.start_reserving(theirs.run_id, events=1) is not None
    before_mine = (await run_row(one, mine.run_id))["lease_expires_at"]
    before_theirs = (await run_row(one, theirs.run_id))["lease_expires_at"]
    await asyncio.sleep(0.01)  # so that the clock has moved on, even a coarse one
    assert await one.leases.heartbeat() == [mine.run_id]
    assert (await run_row(one, mine.run_id))["lease_expires_at"] > before_mine
    assert (await run_row(one, theirs.run_id))["lease_expires_at"] == before_theirs


async def test_a_heartbeat_given_runs_renews_only_theirs(open_worker: OpenWorker) -> None:
    # A runner names the runs it drives: one it holds but no longer drives is left to lapse.
    one = await open_worker("one")
    driven, undriven = await queued_run(one), await queued_run(one)
    for run in (driven, undriven):
        assert await one.runs.start_reserving(run.run_id, events=1) is not None
    before = (await run_row(one, undriven.run_id))["lease_expires_at"]
    assert await one.leases.heartbeat([driven.run_id, "no-such-run"]) == [driven.run_id]
    assert await one.leases.heartbeat([]) == []
    assert (await run_row(one, undriven.run_id))["lease_expires_at"] == before


async def test_heartbeats_keep_a_short_lease_from_being_taken(open_worker: OpenWorker) -> None:
    # The holder's heartbeat renews a lease that already lapsed, as long as nobody took it.
    holder, other = await open_worker("holder", lease=LONG), await open_worker("other")
    run = await queued_run(holder)
    assert await holder.runs.start_reserving(run.run_id, events=1) is not None
    lapsed = (await run_row(holder, run.run_id))["created_at"]
    async with holder.engine.begin() as connection:
        await connection.execute(
            RUNS.update().where(RUNS.c.run_id == run.run_id).values(lease_expires_at=lapsed)
        )
    assert await holder.leases.heartbeat() == [run.run_id]
    assert await other.runs.start_reserving(run.run_id, events=1) is None


async def test_taken_over_names_only_runs_another_worker_holds(open_worker: OpenWorker) -> None:
    stale, heir = await open_worker("stale", lease=SHORT), await open_worker("heir")
    lost, finished, waiting = await queued_run(stale), await queued_run(stale), await queued_run(stale)
    assert await stale.runs.start_reserving(lost.run_id, events=1) is not None
    started = await stale.runs.start_reserving(finished.run_id, events=1)
    assert started is not None
    await stale.runs.finish(finished.run_id, "completed")
    await _claim_when_lapsed(heir, lost.run_id)
    run_ids = [lost.run_id, finished.run_id, waiting.run_id]
    assert await stale.leases.taken_over(run_ids) == [lost.run_id]
    assert await heir.leases.taken_over(run_ids) == []
    assert await stale.leases.heartbeat() == []


async def test_release_puts_a_workers_runs_back_for_anyone(open_worker: OpenWorker) -> None:
    leaving, staying = await open_worker("leaving"), await open_worker("staying")
    running, reserved = await queued_run(leaving), await queued_run(leaving)
    assert await leaving.runs.start_reserving(running.run_id, events=1) is not None
    assert await leaving.leases.sweep(limit=5, queued_for=timedelta(0)) == [reserved.run_id]
    assert sorted(await leaving.leases.release()) == sorted([running.run_id, reserved.run_id])
    for run in (running, reserved):
        row = await run_row(staying, run.run_id)
        assert (row["status"], row["lease_owner"], row["lease_expires_at"]) == ("queued", None, None)
        started = await staying.runs.start_reserving(run.run_id, events=1)
        assert started is not None
        assert started[0].lease_owner == "staying"
    assert await leaving.leases.release() == []


async def test_a_run_left_running_before_leases_existed_is_free(open_worker: OpenWorker) -> None:
    old, new = await open_worker("old"), await open_worker("new")
    run = await queued_run(old)
    assert await old.runs.start_reserving(run.run_id, events=1) is not None
    async with old.engine.begin() as connection:
        await connection.execute(
            RUNS.update().where(RUNS.c.run_id == run.run_id).values(lease_owner=None, lease_expires_at=None)
        )
    started = await new.runs.start_reserving(run.run_id, events=1)
    assert started is not None
    assert started[0].attempt == 2


def test_worker_ids_are_unique_and_fit_the_column() -> None:
    ids = {Worker().worker_id for _ in range(100)}
    assert len(ids) == 100
    assert all(len(worker_id) <= 64 and worker_id.count(":") == 2 for worker_id in ids)


async def test_a_dead_process_of_this_host_gives_its_runs_up_at_once(open_worker: OpenWorker) -> None:
    gone = await asyncio.create_subprocess_exec("true")  # a pid that no longer exists once waited for
    await gone.wait()
    host = socket.gethostname()[:40]
    owners = {
        "dead here": f"{host}:{gone.pid}:dead",
        "alive here": f"{host}:{os.getpid()}:alive",
        "elsewhere": f"another-host:{gone.pid}:far",
    }
    runs: dict[str, Run] = {}
    for label, owner in owners.items():
        holder = await open_worker(owner, lease=LONG)
        runs[label] = await queued_run(holder)
        assert await holder.runs.start_reserving(runs[label].run_id, events=1) is not None
    heir = await open_worker("heir")

    assert await heir.leases.expire_dead_local() == [owners["dead here"]]

    assert await heir.leases.sweep(limit=5, queued_for=timedelta(hours=1)) == [runs["dead here"].run_id]
    started = await heir.runs.start_reserving(runs["dead here"].run_id, events=1)
    assert started is not None
    assert (started[0].attempt, started[0].lease_owner) == (2, "heir")
    for label in ("alive here", "elsewhere"):
        assert (await run_row(heir, runs[label].run_id))["lease_owner"] == owners[label]


def test_gone_from_this_host_reads_only_this_hosts_worker_ids() -> None:
    host = socket.gethostname()[:40]
    assert not gone_from_this_host(f"{host}:{os.getpid()}:me")
    assert not gone_from_this_host("another-host:1:x")
    assert not gone_from_this_host(f"{host}:not-a-pid:x")
    assert not gone_from_this_host("heir")
    assert not gone_from_this_host(f"{host}:{10**30}:x")
