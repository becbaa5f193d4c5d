"""The conversation store's hot path: a load and a save, one trip to the database each where it can be.

A load reads the record and, unless the history ending at its head is cached, the entries the
cache lacks: from the head back to the head cached for the conversation, or to the first
entry. On SQLite both statements run in one function on aiosqlite's thread; on PostgreSQL the
second is only sent when needed. A save writes the new entries and the record, guarded by its
revision, in one function on SQLite's thread and in one statement on PostgreSQL (the record's
update or insert, and the entries' insert only if it succeeded). Statements are compiled once
per dialect (`compiled.py`).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from pydantic_ai.conversation_store import ConversationEntry
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import checkpoints, codec
from .checkpoints import Checkpoint
from .compiled import COMMIT, Compiled, begun, checked_out, driver_errors, executed, fetch, per_dialect
from .dialects import postgresql as pg
from .dialects import sqlite as lite
from .dialects.sqlite import SqliteWork
from .errors import NotFound
from .history_cache import CachedHistory
from .refusals import Refusal, refused
from .schema import ConversationEntryRow, ConversationRecordRow, EntryId, metadata
from .sqlite_driver import run_here, run_on_thread

__all__ = ("HISTORY", "NO_STOP", "RECORD_COLUMNS", "Statements", "read_chain", "read_head", "write")

_entries = metadata.tables[ConversationEntryRow.__tablename__]
_records = metadata.tables[ConversationRecordRow.__tablename__]
NO_LIMIT = 2**62
NO_STOP = "00000000-0000-0000-0000-000000000000"
"""A stop entry no history holds (entries get version-7 UUIDs): read to the first entry."""

RECORD_COLUMNS = (
    _records.c.conversation_id,
    _records.c.scope,
    _records.c.head_id,
    _records.c.revision,
    _records.c.updated_at,
    _records.c.usage,
    _records.c.deferred_tool_requests,
    _records.c.forked_from,
    _records.c.forked_at,
    _records.c.branches,
    _records.c.format_version,
)
RECORD_NAMES = tuple(column.name for column in RECORD_COLUMNS)
_HEAD = RECORD_NAMES.index("head_id")
_VALUES = RECORD_NAMES


def _history_query() -> sa.Select[str, str | None, bytes]:
    """The entries ending at `head_id`, newest last: at most `limit`, none before the entry `stop`."""
    head = (
        sa.select(
            _entries.c.entry_id,
            _entries.c.parent_id,
            _entries.c.message,
            sa.literal(1, sa.Integer).label("depth"),
        )
        .where(_entries.c.entry_id == sa.bindparam("head_id", type_=EntryId()))
        .cte("chain", recursive=True)
    )
    step = (
        sa.select(
            _entries.c.entry_id, _entries.c.parent_id, _entries.c.message, (head.c.depth + 1).label("depth")
        )
        .join(head, _entries.c.entry_id == head.c.parent_id)
        .where(head.c.depth < sa.bindparam("limit", type_=sa.BigInteger))
        .where(head.c.parent_id != sa.bindparam("stop", type_=EntryId()))
    )
    chain = head.union_all(step)
    return sa.select(chain.c.entry_id, chain.c.parent_id, chain.c.message).order_by(chain.c.depth.desc())


HISTORY = _history_query()
_RECORD = sa.select(*RECORD_COLUMNS).where(_records.c.conversation_id == sa.bindparam("conversation_id"))
_INSERT_ENTRIES = _entries.insert().values(
    entry_id=sa.bindparam("entry_id"),
    parent_id=sa.bindparam("parent_id"),
    kind=sa.bindparam("kind"),
    message=sa.bindparam("message"),
)
_SET = {name: sa.bindparam(f"v_{name}", type_=_records.c[name].type) for name in _VALUES}
_UPDATE_RECORD = (
    _records.update()
    .where(_records.c.conversation_id == sa.bindparam("b_conversation_id"))
    .where(_records.c.revision == sa.bindparam("b_expected"))
    .values(_SET)
)
_INSERT_ROOT = _records.insert().values({**_SET, "family_id": sa.bindparam("b_conversation_id")})
# NULL when the source was deleted meanwhile: the NOT NULL constraint turns that into a conflict.
_INSERT_FORK = _records.insert().values(
    {
        **_SET,
        "family_id": sa.select(_records.c.family_id)
        .where(_records.c.conversation_id == sa.bindparam("b_forked_from"))
        .scalar_subquery(),
    }
)


def _one_statement(record_write: Any, *, checkpointed: bool = False) -> sa.Select[int] | sa.Select[int, int]:
    """PostgreSQL: `record_write` and the new entries' insert in one statement, the entries only if it wrote.

    The record's foreign key to its head is checked at the end of the statement, when the entries
    it names are in. `checkpointed`: a run's checkpoint too (`dialects.postgresql.checkpointed`).
    """
    written = record_write.returning(_records.c.conversation_id).cte("written")
    rows = (
        sa.func.unnest(
            sa.bindparam("entry_ids", type_=postgresql.ARRAY(postgresql.UUID(as_uuid=False))),
            sa.bindparam("parent_ids", type_=postgresql.ARRAY(postgresql.UUID(as_uuid=False))),
            sa.bindparam("kinds", type_=postgresql.ARRAY(sa.String)),
            sa.bindparam("messages", type_=postgresql.ARRAY(postgresql.BYTEA)),
        )
        .table_valued("entry_id", "parent_id", "kind", "message")
        .render_derived(name="new_entries")
    )
    inserted = _entries.insert().from_select(
        ["entry_id", "parent_id", "kind", "message"],
        sa.select(rows.c.entry_id, rows.c.parent_id, rows.c.kind, rows.c.message).where(
            sa.exists(sa.select(written.c.conversation_id))
        ),
    )
    if checkpointed:
        return pg.checkpointed(written, inserted.cte("inserted"))
    return sa.select(sa.func.count()).select_from(written).add_cte(inserted.cte("inserted"))


RecordWrite = Literal["update", "insert_root", "insert_fork"]
"""How a save writes its record: over the revision it read, as a new conversation, or as a fork."""

_RECORD_WRITES: dict[RecordWrite, sa.Update | sa.Insert] = {
    "update": _UPDATE_RECORD,
    "insert_root": _INSERT_ROOT,
    "insert_fork": _INSERT_FORK,
}


@dataclass(frozen=True)
class Statements:
    """The hot path's statements, compiled for one dialect."""

    record: Compiled
    history: Compiled
    insert_entries: Compiled
    writes: Mapping[RecordWrite, Compiled]
    """The record's write (on PostgreSQL with the new entries' insert, one statement)."""
    checkpointed: Mapping[RecordWrite, Compiled]
    """PostgreSQL: the record writes with a run's checkpoint in the same statement."""
    checkpoint_alone: Compiled
    """PostgreSQL: a run's checkpoint without a conversation."""


@per_dialect
def statements(dialect: Dialect) -> Statements:
    """The load's and the save's statements for `dialect`."""
    writes: dict[RecordWrite, Compiled]
    checkpointed: dict[RecordWrite, Compiled]
    if dialect.name == "postgresql":
        writes = {name: Compiled.of(_one_statement(s), dialect) for name, s in _RECORD_WRITES.items()}
        checkpointed = {
            name: Compiled.of(_one_statement(s, checkpointed=True), dialect)
            for name, s in _RECORD_WRITES.items()
        }
        alone = Compiled.of(pg.checkpointed(None), dialect)
    else:
        writes = {name: Compiled.of(s, dialect) for name, s in _RECORD_WRITES.items()}
        checkpointed, alone = writes, writes["update"]  # unused: SQLite runs them apart
    return Statements(
        record=Compiled.of(_RECORD, dialect),
        history=Compiled.of(HISTORY, dialect),
        insert_entries=Compiled.of(_INSERT_ENTRIES, dialect),
        writes=writes,
        checkpointed=checkpointed,
        checkpoint_alone=alone,
    )


# -- a load ----------------------------------------------------------------------------------------


def _read_on_thread(
    connection: sqlite3.Connection,
    record_sql: str,
    record_parameters: tuple[Any, ...],
    history_sql: str,
    history_parameters: list[Any] | None,
    head_slot: int,
    cached_head: object,
) -> tuple[Any, list[Any] | None]:
    row = connection.execute(record_sql, record_parameters).fetchone()
    if row is None or history_parameters is None or row[_HEAD] is None or row[_HEAD] == cached_head:
        return row, None
    history_parameters[head_slot] = row[_HEAD]
    return row, connection.execute(history_sql, history_parameters).fetchall()


async def _read_pooled(
    pooled: Any,
    dialect_name: str,
    compiled: Statements,
    record_parameters: tuple[Any, ...],
    history_parameters: list[Any] | None,
    head_slot: int,
    skip: object,
    cached_head: str | None,
) -> tuple[Any, list[Any] | None]:
    """`read_head`'s statements on a pooled connection: the record's row, and the history's rows or `None`."""
    if dialect_name == "sqlite":
        return await run_here(
            pooled.dbapi_connection,
            _read_on_thread,
            compiled.record.sql,
            record_parameters,
            compiled.history.sql,
            history_parameters,
            head_slot,
            skip,
        )
    driver = pooled.driver_connection
    raw_record = await driver.fetchrow(compiled.record.sql, *record_parameters)
    head = None if raw_record is None else raw_record[_HEAD]
    if history_parameters is None or head is None or str(head) == cached_head:
        return raw_record, None
    history_parameters[head_slot] = head
    return raw_record, await driver.fetch(compiled.history.sql, *history_parameters)


async def read_head(
    engine: AsyncEngine,
    conversation_id: str,
    *,
    cached_head: str | None,
    limit: int | None,
    history: bool,
) -> tuple[dict[str, Any] | None, list[tuple[Any, ...]] | None]:
    """The record of `conversation_id` and, with `history`, the entries of its history not cached.

    Reads nothing more when the record's head is `cached_head`; otherwise the entries from its head
    back to `cached_head` (excluded) or to the first entry, at most `limit` of them. The rows are
    `(entry_id, parent_id, message_bytes)`, oldest first; `None` when not read.
    """
    compiled = statements(engine.dialect)
    stop = cached_head if cached_head is not None and limit is None else NO_STOP
    head_slot = compiled.history.index("head_id")
    skip = (
        None
        if cached_head is None
        else compiled.history.parameters({"head_id": cached_head, "limit": 0, "stop": NO_STOP})[head_slot]
    )
    record_parameters = compiled.record.parameters({"conversation_id": conversation_id})
    history_parameters = list(
        compiled.history.parameters(
            {"head_id": NO_STOP, "limit": NO_LIMIT if limit is None else limit, "stop": stop}
        )
    )
    raw_record, raw_rows = await checked_out(
        engine,
        compiled.history.sql,
        _read_pooled,
        engine.dialect.name,
        compiled,
        record_parameters,
        history_parameters if history else None,
        head_slot,
        skip,
        cached_head,
    )
    executed(compiled.record.sql, *([] if raw_rows is None else [compiled.history.sql]))
    if raw_record is None:
        return None, None
    record = dict(zip(RECORD_NAMES, compiled.record.row(raw_record), strict=True))
    rows = None if raw_rows is None else compiled.history.rows(raw_rows)
    return record, rows


async def read_chain(
    engine: AsyncEngine, head_id: str, *, limit: int | None, stop: str = NO_STOP
) -> list[tuple[Any, ...]]:
    """The entries from `head_id` back to `stop` (excluded) or the first one, at most `limit`, oldest first."""
    compiled = statements(engine.dialect).history
    return await fetch(
        engine, compiled, {"head_id": head_id, "limit": NO_LIMIT if limit is None else limit, "stop": stop}
    )


def decode_chain(
    rows: Sequence[tuple[Any, ...]], head_id: str, *, limit: int | None, stop: str = NO_STOP
) -> CachedHistory:
    """The entries of `rows` (from `read_chain`), checked to end at `stop` or the first entry unless cut by `limit`.

    Raises:
        NotFound: The history is incomplete: a concurrent delete or rewrite released some of it.
        CorruptData: A row does not hold a valid message.
    """
    wanted = NO_LIMIT if limit is None else limit
    if not rows or (len(rows) < wanted and rows[0][1] is not None and rows[0][1] != stop):
        # Released by a concurrent delete or rewrite; the ABC retries when the record changed.
        raise NotFound(f"the history ending at entry {head_id!r} is incomplete")
    messages = codec.decode_messages(
        [(row[0], row[2]) for row in rows], where=f"in the history ending at entry {head_id!r}"
    )
    return CachedHistory(
        tuple(
            ConversationEntry(id=row[0], parent_id=row[1], message=message)
            for row, message in zip(rows, messages, strict=True)
        ),
        tuple(len(row[2]) for row in rows),
    )


# -- a save ----------------------------------------------------------------------------------------


def _write_on_thread(
    connection: sqlite3.Connection,
    insert_sql: str,
    entry_rows: list[tuple[Any, ...]],
    record_sql: str | None,
    record_parameters: tuple[Any, ...],
    then: SqliteWork | None,
    commit: bool,
    ran: list[str],
) -> Refusal | None:
    try:
        refusal: Refusal | None = None
        if record_sql is not None:
            if entry_rows:
                ran.append(insert_sql)
                connection.executemany(insert_sql, entry_rows)
            ran.append(record_sql)
            if connection.execute(record_sql, record_parameters).rowcount != 1:
                refusal = "conflict"
        if refusal is None and then is not None:
            refusal = then(connection, ran)
        if commit:
            if refusal is None:
                connection.commit()
                ran.append(COMMIT)
            else:
                connection.rollback()
    except BaseException:
        if commit and connection.in_transaction:
            connection.rollback()
        raise
    return refusal


async def write(
    target: AsyncEngine | AsyncConnection,
    values: Mapping[str, Any] | None,
    *,
    entries: Sequence[tuple[str, str | None, str, bytes]] = (),
    expected_revision: str | None = None,
    forked_from: str | None = None,
    checkpoint: Checkpoint | None = None,
) -> bool:
    """Write the record `values` and the new `entries`, guarded by `expected_revision`; whether it was written.

    `None` for `expected_revision` inserts the record (a fork's joins its source's family). With
    `checkpoint`, a run's checkpoint is written in the same transaction (`values` `None`: only it).
    Given an engine, the write is its own transaction, committed in the same trip on SQLite and a
    single statement on PostgreSQL; given a connection, it joins the connection's transaction.

    Raises:
        LeaseLost: The checkpoint's run is no longer held by its worker; nothing was written.
        NotFound: The checkpoint's run or thread was deleted; nothing was written.
    """
    compiled = statements(target.dialect)
    how: RecordWrite = (
        "update" if expected_revision is not None else "insert_root" if forked_from is None else "insert_fork"
    )
    if target.dialect.name != "sqlite" and checkpoint is not None:
        record = compiled.checkpointed[how] if values is not None else compiled.checkpoint_alone
    else:
        record = compiled.writes[how]
    bound: dict[str, Any] = {}
    if values is not None:
        bound = {f"v_{name}": value for name, value in values.items()}
        bound |= {
            "b_conversation_id": values["conversation_id"],
            "b_expected": expected_revision,
            "b_forked_from": forked_from,
        }
    commit = isinstance(target, AsyncEngine)
    ran: list[str] = []
    work: Callable[[Any], Awaitable[Refusal | None]]
    if target.dialect.name == "sqlite":
        then = None if checkpoint is None else lite.checkpoint_work(checkpoint, target.dialect)
        work = functools.partial(
            _write_sqlite, compiled.insert_entries, entries, record, bound, values, then, commit, ran
        )
    else:
        work = functools.partial(
            _write_pg,
            record=record,
            bound=bound,
            entries=entries,
            checkpoint=checkpoint,
            commit=commit,
            ran=ran,
        )
    try:
        if commit:
            refusal = await checked_out(target, record.sql, work)
        else:
            async with driver_errors(target, record.sql) as pooled:
                refusal = await work(pooled)
    finally:
        executed(*ran)
    if refusal is None:
        return True
    if checkpoint is not None:
        checkpoints.raise_refusal(refusal, checkpoint)
    return False


async def _write_sqlite(
    insert: Compiled,
    entries: Sequence[tuple[str, str | None, str, bytes]],
    record: Compiled,
    bound: dict[str, Any],
    values: Mapping[str, Any] | None,
    then: SqliteWork | None,
    commit: bool,
    ran: list[str],
    pooled: Any,
) -> Refusal | None:
    """`write` on SQLite: the entries, the record and the checkpoint in one unit of work (`run_here`)."""
    entry_rows = [
        insert.parameters({"entry_id": entry_id, "parent_id": parent_id, "kind": kind, "message": message})
        for entry_id, parent_id, kind, message in entries
    ]
    # Inside a transaction of SQLAlchemy's (`commit` false), the unit leaves it open: the thread's.
    return await (run_here if commit else run_on_thread)(
        pooled.dbapi_connection,
        _write_on_thread,
        insert.sql,
        entry_rows,
        None if values is None else record.sql,
        () if values is None else record.parameters(bound),
        then,
        commit,
        ran,
    )


async def _write_pg(
    pooled: Any,
    *,
    record: Compiled,
    bound: dict[str, Any],
    entries: Sequence[tuple[str, str | None, str, bytes]],
    checkpoint: Checkpoint | None,
    commit: bool,
    ran: list[str],
) -> Refusal | None:
    """`write` on PostgreSQL: one statement (`_one_statement`), in the connection's transaction unless `commit`."""
    if not commit:
        await begun(pooled)
    bound |= {
        "entry_ids": [entry[0] for entry in entries],
        "parent_ids": [entry[1] for entry in entries],
        "kinds": [entry[2] for entry in entries],
        "messages": [entry[3] for entry in entries],
    }
    if checkpoint is not None:
        bound |= pg.checkpoint_values(checkpoint)
    ran.append(record.sql)
    try:
        count: int = await pooled.driver_connection.fetchval(record.sql, *record.parameters(bound))
    except Exception as error:
        refusal = refused(error)
        if refusal is None:
            raise
        return refusal
    if commit:
        ran.append(COMMIT)
    return None if checkpoint is not None or count == 1 else "conflict"
