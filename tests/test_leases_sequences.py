"""Run leases under any sequence of operations by three workers, against a model of who holds the run."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from store import Database, LeaseLost, Run, Worker, record_checkpoint

from .conftest import MigratedDatabases
from .test_leases import LONG, RUNS, queued_run, run_row

pytestmark = pytest.mark.anyio

_OPERATIONS = ("claim", "sweep", "lapse", "heartbeat", "release", "checkpoint")


@pytest.mark.parametrize(
    "backend", [pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)]
)
@settings(max_examples=40, deadline=None)
@example(steps=[("claim", 0), ("lapse", 0), ("claim", 1), ("checkpoint", 0), ("checkpoint", 1)])
@example(steps=[("claim", 0), ("lapse", 0), ("sweep", 1), ("heartbeat", 0), ("claim", 0), ("claim", 1)])
@given(steps=st.lists(st.tuples(st.sampled_from(_OPERATIONS), st.integers(0, 2)), min_size=1, max_size=16))
async def test_any_sequence_of_lease_operations_keeps_one_holder(
    backend: str, migrated_databases: MigratedDatabases, steps: list[tuple[str, int]]
) -> None:
    """Three workers do anything to one run; the store agrees with a model of who holds it, and only
    the holder ever writes a checkpoint."""
    url = await migrated_databases.empty(backend)  # pyright: ignore[reportArgumentType]
    workers = [await Database.connect(url, worker=Worker(worker_id=f"w{n}", lease=LONG)) for n in range(3)]
    try:
        run = await queued_run(workers[0])
        status, owner, lapsed, checkpoints = "queued", None, False, 0
        claimed: dict[int, Run] = {}
        for operation, index in steps:
            worker = workers[index]
            name = f"w{index}"
            match operation:
                case "claim":
                    may = (status == "queued" and (owner in (None, name) or lapsed)) or (
                        status == "running" and lapsed
                    )
                    started = await worker.runs.start_reserving(run.run_id, events=1)
                    assert (started is not None) == may
                    if started is not None:
                        claimed[index] = started[0]
                        status, owner, lapsed = "running", name, False
                case "sweep":
                    may = (status == "queued" and owner is None) or (
                        (status == "running" or owner is not None) and lapsed
                    )
                    swept = await worker.leases.sweep(limit=1, queued_for=timedelta(0))
                    assert swept == ([run.run_id] if may else [])
                    if may:
                        status, owner, lapsed = "queued", name, False
                case "lapse":
                    async with worker.engine.begin() as connection:
                        await connection.execute(
                            RUNS.update()
                            .where(RUNS.c.run_id == run.run_id, RUNS.c.lease_owner.is_not(None))
                            .values(lease_expires_at=run.created_at)
                        )
                    lapsed = owner is not None or lapsed
                case "heartbeat":
                    assert await worker.leases.heartbeat() == ([run.run_id] if owner == name else [])
                    lapsed = lapsed and owner != name
                case "release":
                    assert await worker.leases.release() == ([run.run_id] if owner == name else [])
                    if owner == name:
                        status, owner, lapsed = "queued", None, False
                case _:
                    mine = claimed.get(index)
                    if mine is None:
                        continue
                    try:
                        async with worker.engine.begin() as connection:
                            await record_checkpoint(connection, mine, event_id=0)
                    except LeaseLost:
                        assert (status, owner) != ("running", name)
                    else:
                        assert (status, owner) == ("running", name)
                        checkpoints += 1
            row = await run_row(workers[0], run.run_id)
            assert (row["status"], row["lease_owner"], row["checkpoints"]) == (status, owner, checkpoints)
    finally:
        for db in workers:
            await db.aclose()
