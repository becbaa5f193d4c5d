"""Workers at the store level: a `Database` each, with its own engine and identity, on one database.

`conftest` imports the fixture `open_worker`; `test_runner` has one of its own, for runtimes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from store import Database, Worker

if TYPE_CHECKING:  # conftest imports this module
    from .conftest import MigratedDatabases

__all__ = ("LONG", "OpenWorker", "open_worker")

LONG = timedelta(seconds=60)
"""A lease no test outlives."""

OpenWorker = Callable[..., Awaitable[Database]]


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
async def open_worker(
    request: pytest.FixtureRequest, migrated_databases: MigratedDatabases
) -> AsyncIterator[OpenWorker]:
    """Opens workers on one empty database: `await open_worker("w1", lease=...)`."""
    url = await migrated_databases.empty(request.param)
    opened: list[Database] = []

    async def open_one(worker_id: str, *, lease: timedelta = LONG) -> Database:
        db = await Database.connect(url, worker=Worker(worker_id=worker_id, lease=lease))
        opened.append(db)
        return db

    try:
        yield open_one
    finally:
        for db in opened:
            await db.aclose()
