"""Bringing a database to the schema this code expects, through Alembic."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from .errors import SchemaTooNew

__all__ = ("alembic_config", "current_revision", "head_revision", "upgrade")

logger = logging.getLogger(__name__)

_MIGRATIONS = Path(__file__).with_name("migrations")
# Any constant will do: it only has to be the same in every process that migrates this database.
_PG_MIGRATION_LOCK = 0x6463_6D69_6772


def alembic_config() -> Config:
    """The Alembic configuration of durable-chat's migrations, with no ini file."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations folder holds no revision"
    return head


async def current_revision(engine: AsyncEngine) -> str | None:
    """The schema revision the database is at, or `None` for a database durable-chat never touched."""
    async with engine.connect() as connection:
        return await connection.run_sync(_current)


async def upgrade(engine: AsyncEngine, *, target: str = "head") -> str | None:
    """Upgrade the database to `target`, and return the revision it was at before.

    Safe to run from several processes at once on PostgreSQL (an advisory lock serializes them).

    Raises:
        SchemaTooNew: The database is at a revision these migrations don't know.
    """
    if engine.dialect.name == "sqlite":
        return await _upgrade_sqlite(engine, target)
    async with engine.begin() as connection:
        # A migration may rewrite big tables, and a second process waits here for the first to
        # finish: the timeouts of a serving engine's sessions do not apply to either.
        await connection.execute(text("SET LOCAL statement_timeout = 0"))
        await connection.execute(text("SET LOCAL lock_timeout = 0"))
        await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
        return await connection.run_sync(_upgrade, target)


async def _upgrade_sqlite(engine: AsyncEngine, target: str) -> str | None:
    # Python's sqlite3 runs DDL outside any transaction unless told otherwise: drive the
    # transaction by hand, IMMEDIATE so that a second process waits for the first to finish
    # migrating instead of racing it, and so that a failed migration leaves nothing behind.
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            before = await connection.run_sync(_upgrade, target)
        except BaseException:
            await connection.exec_driver_sql("ROLLBACK")
            raise
        await connection.exec_driver_sql("COMMIT")
        return before


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _upgrade(connection: Connection, target: str) -> str | None:
    config = alembic_config()
    before = _current(connection)
    script = ScriptDirectory.from_config(config)
    if before is not None and not _known(script, before):
        raise SchemaTooNew(
            f"the database is at schema revision {before!r}, which this version of durable-chat "
            f"does not know (its newest is {script.get_current_head()!r}): upgrade durable-chat"
        )
    if before == script.get_current_head() and target == "head":
        return before
    config.attributes["connection"] = connection
    logger.info("upgrading the database schema from %s to %s", before, target)
    command.upgrade(config, target)
    return before


def _known(script: ScriptDirectory, revision: str) -> bool:
    return any(candidate.revision == revision for candidate in script.walk_revisions())
