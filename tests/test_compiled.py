"""`store.compiled.per_dialect`: statements compiled once per dialect name and driver, whatever the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from store.compiled import per_dialect
from store.engine import create_engine, dispose, normalize_url
from store.histories import statements

pytestmark = pytest.mark.anyio


async def test_every_engine_of_a_dialect_shares_the_statements_compiled_for_the_first(tmp_path: Path) -> None:
    first = create_engine(normalize_url(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}"))
    second = create_engine(normalize_url(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}"))
    try:
        assert first.dialect is not second.dialect
        assert statements(first.dialect) is statements(second.dialect)
    finally:
        await dispose(first)
        await dispose(second)


def test_a_dialect_name_driver_and_key_each_build_once() -> None:
    built: list[tuple[str, str, int]] = []

    @per_dialect
    def build(dialect: Dialect, key: int) -> tuple[str, str, int]:
        built.append((dialect.name, dialect.driver, key))
        return built[-1]

    asyncpg, psycopg = postgresql.asyncpg.dialect(), postgresql.psycopg.dialect()
    assert build(asyncpg, 1) is build(postgresql.asyncpg.dialect(), 1)
    build(asyncpg, 2)
    build(psycopg, 1)
    assert built == [("postgresql", "asyncpg", 1), ("postgresql", "asyncpg", 2), ("postgresql", "psycopg", 1)]
