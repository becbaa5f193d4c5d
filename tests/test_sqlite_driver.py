"""The one-trip aiosqlite adapter: DB-API results as SQLAlchemy's own adapter gives them, in one trip."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.engine import create_engine, dispose, normalize_url

pytestmark = pytest.mark.anyio

_metadata = sa.MetaData()
_items = sa.Table(
    "items",
    _metadata,
    sa.Column("item_id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String, unique=True),
    sa.Column("count", sa.Integer),
)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(normalize_url(f"sqlite:///{tmp_path / 'driver.db'}"))
    async with engine.begin() as connection:
        await connection.run_sync(_metadata.create_all)
    yield engine
    await dispose(engine)


async def _trips(connection: AsyncConnection, work: Callable[[], Awaitable[object]]) -> int:
    """How many calls `work` queues to the aiosqlite connection's thread."""
    driver: aiosqlite.Connection = (await connection.get_raw_connection()).driver_connection  # pyright: ignore[reportAssignmentType]
    queued = driver._execute  # pyright: ignore[reportPrivateUsage]
    trips = 0

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal trips
        trips += 1
        return await queued(*args, **kwargs)

    driver._execute = counting  # pyright: ignore[reportAttributeAccessIssue]
    try:
        await work()
    finally:
        del driver._execute  # pyright: ignore[reportAttributeAccessIssue]
    return trips


async def test_each_statement_is_one_trip_to_the_driver_thread(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        insert = await _trips(
            connection, lambda: connection.execute(_items.insert().values(name="a", count=1))
        )
        select = await _trips(connection, lambda: connection.execute(sa.select(_items)))
        many = await _trips(
            connection, lambda: connection.execute(_items.insert(), [{"name": "b"}, {"name": "c"}])
        )
    assert (insert, select, many) == (1, 1, 1)


async def test_rows_counts_and_ids_are_those_of_the_statement(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        inserted = await connection.execute(_items.insert().values(name="a", count=1))
        assert inserted.inserted_primary_key == (1,)
        many = await connection.execute(
            _items.insert(), [{"name": "b", "count": 2}, {"name": "c", "count": 3}]
        )
        assert many.rowcount == 2
        updated = await connection.execute(_items.update().where(_items.c.count >= 2).values(count=0))
        assert updated.rowcount == 2
        returned = await connection.execute(
            _items.update()
            .where(_items.c.name == "a")
            .values(count=5)
            .returning(_items.c.item_id, _items.c.count)
        )
        assert returned.all() == [(1, 5)]
        rows = (
            await connection.execute(sa.select(_items.c.name, _items.c.count).order_by(_items.c.name))
        ).all()
        assert rows == [("a", 5), ("b", 0), ("c", 0)]
        empty = await connection.execute(sa.select(_items).where(_items.c.name == "none"))
        assert empty.one_or_none() is None
        deleted = await connection.execute(_items.delete().where(_items.c.name != "a"))
        assert deleted.rowcount == 2


async def test_streamed_results_arrive_whole(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.execute(_items.insert(), [{"name": f"n{number:03}"} for number in range(250)])
        streamed = await connection.stream(sa.select(_items.c.name).order_by(_items.c.name))
        names = [row.name async for row in streamed]
    assert names == [f"n{number:03}" for number in range(250)]


async def test_driver_errors_arrive_as_sqlalchemy_errors_and_roll_back(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        await connection.execute(_items.insert().values(name="twice"))
        with pytest.raises(exc.IntegrityError, match=r"UNIQUE constraint failed: items\.name"):
            await connection.execute(_items.insert().values(name="twice"))
        await connection.rollback()
    with pytest.raises(exc.OperationalError, match="no such table: missing"):
        async with engine.connect() as connection:
            await connection.execute(sa.text("SELECT * FROM missing"))
    async with engine.connect() as connection:
        # The failed transaction left nothing, and the pooled connection still works.
        assert (await connection.execute(sa.select(sa.func.count()).select_from(_items))).scalar_one() == 0
