"""Fresh, throwaway places to store data in, and how many bytes a system left in one.

Each system gets its own SQLite file or PostgreSQL database, so one system's tables never share
pages, indexes or locks with another's, and a size measured is that system's alone.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from bench.floors import asyncpg_dsn
from bench.systems import Location

__all__ = ["PostgresScratch", "Scratch", "SqliteScratch"]


class Scratch(ABC):
    """Hands out fresh locations of one dialect and removes them all at the end."""

    title: str

    @abstractmethod
    async def new(self, label: str) -> Location: ...

    @abstractmethod
    async def storage_bytes(self, location: Location) -> int:
        """What the data at `location` takes on disk, once the system using it is closed."""

    @abstractmethod
    async def aclose(self) -> None: ...


class SqliteScratch(Scratch):
    title = "SQLite"

    def __init__(self, directory: str | None = None) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="bench-store-", dir=directory))
        self._count = 0

    async def new(self, label: str) -> Location:
        self._count += 1
        path = self.directory / f"{self._count:02d}-{label}.db"
        return Location("sqlite", f"sqlite+aiosqlite:///{path}", str(path))

    async def storage_bytes(self, location: Location) -> int:
        assert location.path is not None
        return _checkpointed_bytes(Path(location.path))

    async def aclose(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _checkpointed_bytes(path: Path) -> int:
    # Fold the write-ahead log back into the file first, so no page is counted twice or missed.
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    wal = path.with_name(f"{path.name}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


class PostgresScratch(Scratch):
    title = "PostgreSQL"

    def __init__(self, url: str, admin: asyncpg.Connection, server_version: str) -> None:
        self.url = url
        self.admin = admin
        self.server_version = server_version
        self._prefix = f"bench_store_{os.getpid()}"
        self._databases: list[str] = []

    @classmethod
    async def connect(cls, url: str) -> PostgresScratch:
        admin = await asyncpg.connect(asyncpg_dsn(url))
        version = str(await admin.fetchval("SHOW server_version"))
        return cls(url, admin, version)

    async def new(self, label: str) -> Location:
        name = f"{self._prefix}_{len(self._databases) + 1:02d}_{label.replace('-', '_')}"
        await self.admin.execute(f'CREATE DATABASE "{name}"')
        self._databases.append(name)
        return Location(
            "postgresql", make_url(self.url).set(database=name).render_as_string(hide_password=False)
        )

    async def storage_bytes(self, location: Location) -> int:
        connection = await asyncpg.connect(asyncpg_dsn(location.url))
        try:
            # Tables with their indexes and TOAST, in every schema the system may have used.
            total = await connection.fetchval(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'p', 'm') "
                "AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
            )
        finally:
            await connection.close()
        return int(total)

    async def aclose(self) -> None:
        try:
            for name in self._databases:
                await self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await self.admin.close()
