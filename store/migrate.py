"""Bringing a database to the schema this code expects, through Alembic.

durable-chat's own migrations live in `store/migrations` and record their revision in
`alembic_version`. An app that ships tables of its own (the demo shop does) keeps an Alembic folder
of its own, whose `env.py` calls `run_environment(its_metadata)`, and runs it with
`upgrade(engine, location=..., version_table=...)` under its own version table, so the two
histories never mix.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import sqlalchemy as sa
from alembic import command, context
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from .errors import SchemaTooNew

__all__ = (
    "CORE_MIGRATIONS",
    "alembic_config",
    "current_revision",
    "head_revision",
    "run_environment",
    "upgrade",
)

logger = logging.getLogger(__name__)

CORE_MIGRATIONS = Path(__file__).with_name("migrations")
"""durable-chat's own migrations."""
_VERSION_TABLE = "alembic_version"
# Any constant will do: it only has to be the same in every process that migrates this database.
_PG_MIGRATION_LOCK = 0x6463_6D69_6772


def alembic_config(location: Path = CORE_MIGRATIONS, *, version_table: str = _VERSION_TABLE) -> Config:
    """The Alembic configuration of the migrations in `location`, with no ini file."""
    config = Config()
    config.set_main_option("script_location", str(location))
    config.attributes["version_table"] = version_table
    return config


def head_revision(location: Path = CORE_MIGRATIONS) -> str:
    head = ScriptDirectory.from_config(alembic_config(location)).get_current_head()
    assert head is not None, f"the migrations folder {str(location)!r} holds no revision"
    return head


async def current_revision(engine: AsyncEngine, *, version_table: str = _VERSION_TABLE) -> str | None:
    """The schema revision the database is at, or `None` for a database these migrations never touched."""
    async with engine.connect() as connection:
        return await connection.run_sync(_current, version_table)


async def upgrade(
    engine: AsyncEngine,
    *,
    target: str = "head",
    location: Path = CORE_MIGRATIONS,
    version_table: str = _VERSION_TABLE,
) -> str | None:
    """Upgrade the database to `target`, and return the revision it was at before.

    Safe to run from several processes at once on PostgreSQL (an advisory lock serializes them).

    Args:
        target: The revision to reach.
        location: The Alembic folder; durable-chat's own by default.
        version_table: Where these migrations record their revision.

    Raises:
        SchemaTooNew: The database is at a revision these migrations don't know.
    """
    config = alembic_config(location, version_table=version_table)
    if engine.dialect.name == "sqlite":
        return await _upgrade_sqlite(engine, config, target)
    async with engine.begin() as connection:
        # A migration may rewrite big tables, and a second process waits here for the first to
        # finish: the timeouts of a serving engine's sessions do not apply to either.
        await connection.execute(text("SET LOCAL statement_timeout = 0"))
        await connection.execute(text("SET LOCAL lock_timeout = 0"))
        await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
        return await connection.run_sync(_upgrade, config, target)


def run_environment(target_metadata: sa.MetaData) -> None:
    """The body of a migrations folder's `env.py`: async, batch mode on SQLite, and the connection
    and version table `upgrade` lends; from the `alembic` command line, an engine of its own."""
    config = context.config
    version_table: str = config.attributes.get("version_table", _VERSION_TABLE)

    def run(connection: Connection) -> None:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            version_table=version_table,
        )
        with context.begin_transaction():
            context.run_migrations()

    async def run_with_own_engine(url: str) -> None:
        engine = create_async_engine(url)
        async with engine.connect() as connection:
            await connection.run_sync(run)
        await engine.dispose()

    connection: Connection | None = config.attributes.get("connection")
    if context.is_offline_mode():
        context.configure(
            url=config.get_main_option("sqlalchemy.url"),
            target_metadata=target_metadata,
            literal_binds=True,
            version_table=version_table,
        )
        with context.begin_transaction():
            context.run_migrations()
    elif connection is not None:
        run(connection)
    else:
        asyncio.run(run_with_own_engine(config.get_main_option("sqlalchemy.url") or ""))


async def _upgrade_sqlite(engine: AsyncEngine, config: Config, target: str) -> str | None:
    # Python's sqlite3 runs DDL outside any transaction unless told otherwise: drive the
    # transaction by hand, IMMEDIATE so that a second process waits for the first to finish
    # migrating instead of racing it, and so that a failed migration leaves nothing behind.
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            before = await connection.run_sync(_upgrade, config, target)
        except BaseException:
            await connection.exec_driver_sql("ROLLBACK")
            raise
        await connection.exec_driver_sql("COMMIT")
        return before


def _current(connection: Connection, version_table: str) -> str | None:
    return MigrationContext.configure(
        connection, opts={"version_table": version_table}
    ).get_current_revision()


def _upgrade(connection: Connection, config: Config, target: str) -> str | None:
    version_table: str = config.attributes["version_table"]
    before = _current(connection, version_table)
    script = ScriptDirectory.from_config(config)
    if before is not None and not _known(script, before):
        owner = (
            "durable-chat"
            if version_table == _VERSION_TABLE
            else f"the app whose version table is {version_table!r}"
        )
        raise SchemaTooNew(
            f"the database is at schema revision {before!r}, which this version of {owner} does not "
            f"know (its newest is {script.get_current_head()!r}): upgrade {owner}"
        )
    if before == script.get_current_head() and target == "head":
        return before
    config.attributes["connection"] = connection
    logger.info("upgrading the database schema (%s) from %s to %s", version_table, before, target)
    command.upgrade(config, target)
    return before


def _known(script: ScriptDirectory, revision: str) -> bool:
    return any(candidate.revision == revision for candidate in script.walk_revisions())
