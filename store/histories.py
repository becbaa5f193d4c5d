"""The conversation store's hot path: a load and a save, one trip to the database each where it can be.

A load reads the record and, unless the history ending at its head is cached, the entries the
cache lacks: from the head back to the head cached for the conversation, or to the first
entry. On SQLite both statements run in one function on aiosqlite's thread; on PostgreSQL the
second is only sent when needed. A save writes the new entries and the record, guarded by its
revision, in one function on SQLite's thread and in one statement on PostgreSQL (the record's
update or insert, and the entries' insert only if it succeeded). Statements are compiled once
per dialect (`compiled.py`); each database's trip is in its module in `dialects/`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import sqlalchemy as sa
from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import checkpoints, codec
from .checkpoints import Checkpoint
from .compiled import Compiled, checked_out, driver_errors, executed, fetch, per_dialect
from .dialects import postgresql as pg
from .dialects import sqlite as lite
from .errors import NotFound
from .history_cache import CachedHistory
from .history_trips import HeadRead, NewEntry, RecordSave, RecordWrite
from .instructions import named
from .refusals import Refusal
from .schema import ConversationEntryRow, ConversationRecordRow, EntryId, metadata

__all__ = (
    "HISTORY",
    "NO_STOP",
    "RECORD_COLUMNS",
    "Statements",
    "Writing",
    "read_chain",
    "read_head",
    "write",
)

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
    instructions_id=sa.bindparam("instructions_id"),
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
    paused: Mapping[RecordWrite, Compiled]
    """PostgreSQL: the record writes with a run's checkpoint that holds calls (`pauses.py`)."""


@per_dialect
def statements(dialect: Dialect) -> Statements:
    """The load's and the save's statements for `dialect`."""
    writes: dict[RecordWrite, Compiled]
    checkpointed: dict[RecordWrite, Compiled]
    paused: dict[RecordWrite, Compiled]
    if dialect.name == "postgresql":
        writes = {name: Compiled.of(pg.save_statement(s), dialect) for name, s in _RECORD_WRITES.items()}
        checkpointed = {
            name: Compiled.of(pg.save_statement(s, with_checkpoint=True), dialect)
            for name, s in _RECORD_WRITES.items()
        }
        paused = {
            name: Compiled.of(pg.save_statement(s, with_checkpoint=True, with_pause=True), dialect)
            for name, s in _RECORD_WRITES.items()
        }
        alone = Compiled.of(pg.checkpointed(None), dialect)
    else:
        writes = {name: Compiled.of(s, dialect) for name, s in _RECORD_WRITES.items()}
        checkpointed, paused, alone = writes, writes, writes["update"]  # unused: SQLite runs them apart
    return Statements(
        record=Compiled.of(_RECORD, dialect),
        history=Compiled.of(HISTORY, dialect),
        insert_entries=Compiled.of(_INSERT_ENTRIES, dialect),
        writes=writes,
        checkpointed=checkpointed,
        checkpoint_alone=alone,
        paused=paused,
    )


@per_dialect
def _carrying(dialect: Dialect, first: RecordWrite, second: RecordWrite) -> Compiled:
    """PostgreSQL: `second`'s record write with a run's checkpoint, carrying `first`'s in the same statement."""
    statement = pg.save_statement(
        _RECORD_WRITES[second], with_checkpoint=True, carrying=pg.carried(_RECORD_WRITES[first])
    )
    return Compiled.of(statement, dialect)


# -- a load ----------------------------------------------------------------------------------------


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
    read = HeadRead(
        record=compiled.record,
        history=compiled.history,
        record_parameters=record_parameters,
        history_parameters=history_parameters if history else None,
        head_slot=head_slot,
        record_head=_HEAD,
        skip=skip,
        cached_head=cached_head,
    )
    dialect = lite if engine.dialect.name == "sqlite" else pg
    raw_record, raw_rows = await checked_out(engine, compiled.history.sql, dialect.read_head, read)
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
    rows: Sequence[tuple[Any, ...]],
    head_id: str,
    *,
    limit: int | None,
    instructions: Mapping[str, bytes],
    stop: str = NO_STOP,
) -> CachedHistory:
    """The entries of `rows` (from `read_chain`), checked to end at `stop` or the first entry unless cut by `limit`.

    `instructions` holds the texts of the instructions the rows name, by digest.

    Raises:
        NotFound: The history is incomplete: a concurrent delete or rewrite released some of it.
        CorruptData: A row does not hold a valid message.
    """
    wanted = NO_LIMIT if limit is None else limit
    if not rows or (len(rows) < wanted and rows[0][1] is not None and rows[0][1] != stop):
        # Released by a concurrent delete or rewrite; the ABC retries when the record changed.
        raise NotFound(f"the history ending at entry {head_id!r} is incomplete")
    messages = codec.decode_messages(
        [(row[0], row[2]) for row in rows],
        where=f"in the history ending at entry {head_id!r}",
        instructions=instructions,
    )
    return CachedHistory(
        tuple(
            ConversationEntry(id=row[0], parent_id=row[1], message=message)
            for row, message in zip(rows, messages, strict=True)
        ),
        tuple(len(row[2]) + len(instructions.get(named(row[2]) or "", b"")) for row in rows),
    )


# -- a save ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Writing:
    """A save's write, held for another save's unit of work to carry first (`write(carrying=)`)."""

    conversation_id: str
    values: Mapping[str, Any] | None
    entries: Sequence[NewEntry] = ()
    expected_revision: str | None = None
    forked_from: str | None = None
    checkpoint: Checkpoint | None = None


async def write(
    target: AsyncEngine | AsyncConnection,
    values: Mapping[str, Any] | None,
    *,
    entries: Sequence[NewEntry] = (),
    expected_revision: str | None = None,
    forked_from: str | None = None,
    checkpoint: Checkpoint | None = None,
    carrying: Writing | None = None,
) -> bool:
    """Write the record `values` and the new `entries`, guarded by `expected_revision`; whether it was written.

    `None` for `expected_revision` inserts the record (a fork's joins its source's family). With
    `checkpoint`, a run's checkpoint is written in the same transaction (`values` `None`: only it).
    Given an engine, the write is its own transaction, committed in the same trip on SQLite and a
    single statement on PostgreSQL; given a connection, it joins the connection's transaction.
    `carrying` (given an engine, where `carries` says it can): another conversation's write, done
    first in the same unit of work on SQLite, in the same statement on PostgreSQL; should either be
    refused, neither is stored.

    Raises:
        LeaseLost: The checkpoint's run is no longer held by its worker; nothing was written.
        NotFound: The checkpoint's run or thread was deleted; nothing was written.
        ConversationConflict: `carrying`'s conversation was saved by another meanwhile; nothing was written.
    """
    dialect = target.dialect
    commit = isinstance(target, AsyncEngine)
    save = _record_save(
        dialect,
        values,
        entries=entries,
        expected_revision=expected_revision,
        forked_from=forked_from,
        checkpoint=checkpoint,
        commit=commit,
    )
    ran: list[str] = []
    refusal: Refusal | None
    try:
        if carrying is not None:
            assert commit, "a carried write is a unit of work of its own"
            refusal = await _write_carrying(target, carrying, save, ran)
        else:
            work = functools.partial(lite.write if dialect.name == "sqlite" else pg.write, save=save, ran=ran)
            if commit:
                refusal = await checked_out(target, save.record.sql, work)
            else:
                async with driver_errors(target, save.record.sql) as pooled:
                    refusal = await work(pooled)
    finally:
        executed(*ran)
    if refusal is None:
        return True
    if checkpoint is not None:
        checkpoints.raise_refusal(refusal, checkpoint)
    return False


def carries(dialect: Dialect, first: Checkpoint | None, second: Checkpoint | None) -> bool:
    """Whether a save with the checkpoint `second` can carry one with `first` (`write(carrying=)`).

    On SQLite, always: one unit of work (with one checkpoint of the run where PostgreSQL's condition
    holds, two otherwise). On PostgreSQL, one statement, where a run's row is updated once: both
    checkpoints must be of the same run, the first only marking the thread and the trace (a delegated
    run's parent's response, `RunCheckpoints.carried`), the second holding no calls (`_merged`).
    """
    return dialect.name == "sqlite" or _merged(first, second) is not None


def _merged(first: Checkpoint | None, second: Checkpoint | None) -> Checkpoint | None:
    """The one checkpoint of a run that `first` then `second` amount to, when `first` only marks the
    thread and the trace: the thread's mark and the trace as the two one after the other would leave
    them (the second's where it gives one, else the first's). `None` when they are not so."""
    if (
        first is None
        or second is None
        or first.run.run_id != second.run.run_id
        or first.run.lease_owner != second.run.lease_owner
        or first.records
        or first.events
        or first.finish is not None
        or first.pause is not None
        or second.pause is not None
    ):
        return None
    return replace(
        second,
        event_id=second.event_id if second.event_id is not None else first.event_id,
        trace_id=second.trace_id if second.trace_id is not None else first.trace_id,
    )


async def _write_carrying(
    engine: AsyncEngine, carrying: Writing, save: RecordSave, ran: list[str]
) -> Refusal | None:
    """`write`'s unit of work carrying another's write first: the second's refusal, if refused;
    the first's raised."""
    dialect = engine.dialect
    # One checkpoint of the run where the first only marks the thread (on PostgreSQL, always).
    merged = _merged(carrying.checkpoint, save.checkpoint)
    sqlite = dialect.name == "sqlite"
    carried = _record_save(
        dialect,
        carrying.values,
        entries=carrying.entries,
        expected_revision=carrying.expected_revision,
        forked_from=carrying.forked_from,
        checkpoint=None if sqlite and merged is not None else carrying.checkpoint,
        commit=True,
    )
    if sqlite:
        saves = [carried, save if merged is None else replace(save, checkpoint=merged)]
        refused = await checked_out(
            engine, save.record.sql, functools.partial(lite.write_all, saves=saves, ran=ran)
        )
        if refused is not None and refused[0] == 0:
            _raise_for(refused[1], carrying.checkpoint, carrying.conversation_id)
        return None if refused is None else refused[1]
    assert merged is not None, "PostgreSQL carries a write whose checkpoint only marks the thread"
    record = _carrying(dialect, _how(carrying.expected_revision, carrying.forked_from), save.how)
    save = replace(save, record=record, checkpoint=merged)
    refusal = await checked_out(
        engine, record.sql, functools.partial(pg.write, save=save, carrying=carried, ran=ran)
    )
    if refusal == "carried conflict":
        raise ConversationConflict(carrying.conversation_id)
    return refusal


def _raise_for(refusal: Refusal, checkpoint: Checkpoint | None, conversation_id: str) -> NoReturn:
    if checkpoint is not None:
        checkpoints.raise_refusal(refusal, checkpoint)
    raise ConversationConflict(conversation_id)


def _record_save(
    dialect: Dialect,
    values: Mapping[str, Any] | None,
    *,
    entries: Sequence[NewEntry],
    expected_revision: str | None,
    forked_from: str | None,
    checkpoint: Checkpoint | None,
    commit: bool,
) -> RecordSave:
    """What a save's trip carries: its statements and their values (see `write`)."""
    compiled = statements(dialect)
    how = _how(expected_revision, forked_from)
    if dialect.name != "sqlite" and checkpoint is not None:
        if values is None:
            assert checkpoint.pause is None, "a pause is stored with its conversation"
            record = compiled.checkpoint_alone
        else:
            record = (compiled.checkpointed if checkpoint.pause is None else compiled.paused)[how]
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
    return RecordSave(
        how=how,
        insert_entries=compiled.insert_entries,
        entries=entries,
        record=record,
        bound=bound,
        writes_record=values is not None,
        checkpoint=checkpoint,
        dialect=dialect,
        commit=commit,
    )


def _how(expected_revision: str | None, forked_from: str | None) -> RecordWrite:
    return (
        "update" if expected_revision is not None else "insert_root" if forked_from is None else "insert_fork"
    )
