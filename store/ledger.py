"""The exactly-once ledger: one row per side-effecting tool call, keyed by thread and `tool_call_id`.

Two patterns (`docs/your-agent.md` shows both from a tool's side):

- **An effect in this database** (`Ledger.once`): the ledger row is inserted first, then the
  effect runs on the same connection and its result is stored in the row, in one transaction.
  A crash before the commit leaves neither; after it, both. A second call finds the row and gets
  the stored result without acting again. On PostgreSQL a concurrent call with the same key
  blocks on the primary key until the first transaction ends; on SQLite the insert takes the
  database's write lock, so everything after it is serialized. The write comes first because in
  SQLite's default mode a read before it would run outside the transaction.
- **An effect elsewhere** (`Ledger.start`, then `Ledger.finish`): a `started` row is committed
  before the call, and `succeeded`/`failed` after it. A row still `started` when the call comes
  again means its process died in between: the effect may or may not have happened, and only a
  human can tell. `Ledger.retry` (a reviewer's approval) lets it run once more, with the same
  idempotency key.

With the run's `owner`, a claim (the row `once` inserts first, `start`'s `started`) is fenced by the
run's lease, as its checkpoints are: it is made only while that worker holds the run running, else
`LeaseLost` and nothing runs. On PostgreSQL the claim holds the run's row (`FOR SHARE`) until its
transaction ends, so a takeover or a cancel waits for an effect that began under the lease.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .engine import insert_new, reader, translate_errors
from .errors import Conflict, CorruptData, LeaseLost, NotFound
from .schema import RunRow, ToolExecutionRow, ToolExecutionStatus, metadata, now_utc, status_is

__all__ = ("Execution", "Ledger", "idempotency_key", "mark_retry")

_ledger = metadata.tables[ToolExecutionRow.__tablename__]
_runs = metadata.tables[RunRow.__tablename__]

T = TypeVar("T")


@dataclass(frozen=True)
class Execution:
    """A tool call's row in the ledger."""

    thread_id: str
    tool_call_id: str
    tool_name: str
    run_id: str
    status: ToolExecutionStatus
    result: object
    """The effect's result, decoded from JSON, once it succeeded."""
    error: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime


def idempotency_key(thread_id: str, tool_call_id: str) -> str:
    """The key an external API deduplicates a call's retries by: stable for the call, opaque outside."""
    return hashlib.sha256(f"{thread_id}:{tool_call_id}".encode()).hexdigest()[:32]


class Ledger:
    """The `tool_executions` table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = reader(engine)

    async def get(self, thread_id: str, tool_call_id: str) -> Execution | None:
        with translate_errors(f"reading the ledger of tool call {tool_call_id!r}"):
            async with self._reader.connect() as connection:
                return await _get(connection, thread_id, tool_call_id)

    async def once(
        self,
        thread_id: str,
        tool_call_id: str,
        *,
        run_id: str,
        tool_name: str,
        effect: Callable[[AsyncConnection], Awaitable[T]],
        encode: Callable[[T], object] = lambda value: value,
        owner: str | None = None,
    ) -> tuple[T | None, Execution | None]:
        """Run `effect` on a connection whose transaction also records its result, unless it ran before.

        With `owner`, only while that worker holds the run `run_id` running (see the module).

        Returns:
            `(result, None)` when the effect ran now; `(None, execution)` when it had run before
            (or had been started as an external effect: the caller decides what that means).

        Raises:
            NotFound: The thread does not exist (or was deleted meanwhile).
            Conflict: The tool call was recorded for another tool.
            LeaseLost: `owner` no longer holds the run; the effect did not run.
        """
        # `succeeded` with its result set before the commit: never visible to others without it.
        claim = self._claim(thread_id, tool_call_id, run_id, tool_name, "succeeded", now_utc(), owner)
        with translate_errors(f"{tool_name} for tool call {tool_call_id!r} of thread {thread_id!r}"):
            try:
                async with self._engine.begin() as connection:
                    if (await connection.execute(claim)).first() is None:
                        # Committed by an earlier or concurrent call (this insert waited for it), or
                        # fenced off: the run is no longer `owner`'s.
                        await _held(connection, run_id, owner)
                        return None, await _existing(connection, thread_id, tool_call_id, tool_name)
                    result = await effect(connection)
                    await connection.execute(
                        _ledger.update()
                        .where(_key(thread_id, tool_call_id))
                        .values(result=_dump(encode(result)))
                    )
                    return result, None
            except exc.IntegrityError as error:
                # The ledger's only constraint left to fail is its foreign key to the thread.
                raise NotFound(f"no thread {thread_id!r} to record tool call {tool_call_id!r} in") from error

    async def keep(
        self,
        connection: AsyncConnection,
        thread_id: str,
        tool_call_id: str,
        *,
        run_id: str,
        tool_name: str,
        result: object,
    ) -> None:
        """Record a call's known `result` as succeeded, on `connection`'s transaction (the caller's
        other writes commit with it), in one statement; a row the call has already is kept."""
        now = now_utc()
        statement = insert_new(self._engine.dialect.name, _ledger).values(
            thread_id=thread_id,
            tool_call_id=tool_call_id,
            run_id=run_id,
            tool_name=tool_name,
            status="succeeded",
            result=_dump(result),
            attempts=1,
            created_at=now,
            updated_at=now,
        )
        await connection.execute(statement)

    async def start(
        self, thread_id: str, tool_call_id: str, *, run_id: str, tool_name: str, owner: str | None = None
    ) -> tuple[bool, Execution]:
        """Record that an external effect starts, committed before it does; with `owner`, only while
        that worker holds the run `run_id` running (see the module).

        Returns:
            `(True, row)` when the caller may go ahead: the call is new, or a reviewer decided to
            retry it; `(False, row)` when the call has a row already: succeeded, failed, or
            `started` by an attempt that never finished (its outcome is unknown).

        Raises:
            NotFound: The thread does not exist.
            Conflict: The tool call was recorded for another tool.
            LeaseLost: `owner` no longer holds the run; nothing was recorded.
        """
        now = now_utc()
        claim = self._claim(thread_id, tool_call_id, run_id, tool_name, "started", now, owner)
        retry = (
            _ledger.update()
            .where(_key(thread_id, tool_call_id), _ledger.c.status == "retrying")
            .values(status="started", run_id=run_id, attempts=_ledger.c.attempts + 1, updated_at=now)
            .returning(_ledger.c.tool_call_id)
        )
        with translate_errors(f"starting {tool_name} for tool call {tool_call_id!r}"):
            try:
                async with self._engine.begin() as connection:
                    fresh = (await connection.execute(claim)).first() is not None
                    if not fresh:
                        await _held(connection, run_id, owner)
                        fresh = (await connection.execute(retry)).first() is not None
                    return fresh, await _existing(connection, thread_id, tool_call_id, tool_name)
            except exc.IntegrityError as error:
                raise NotFound(f"no thread {thread_id!r} to record tool call {tool_call_id!r} in") from error

    def _claim(
        self,
        thread_id: str,
        tool_call_id: str,
        run_id: str,
        tool_name: str,
        status: ToolExecutionStatus,
        now: datetime,
        owner: str | None,
    ) -> sa.Insert:
        """A call's first row, returning its key; nothing when the call has a row already, or (with
        `owner`) when that worker does not hold the run running."""
        row: dict[str, object] = {
            "thread_id": thread_id,
            "tool_call_id": tool_call_id,
            "run_id": run_id,
            "tool_name": tool_name,
            "status": status,
            "result": None,
            "attempts": 1,
            "created_at": now,
            "updated_at": now,
        }
        insert = insert_new(self._engine.dialect.name, _ledger)
        if owner is None:
            return insert.values(**row).returning(_ledger.c.tool_call_id)
        # One statement: the row comes from the run's, while it is held (SQLite: under the write
        # lock the insert takes; PostgreSQL: the run's row locked until the transaction ends).
        held = (
            sa.select(*(sa.literal(value, _ledger.c[name].type).label(name) for name, value in row.items()))
            .where(
                _runs.c.run_id == run_id, _runs.c.lease_owner == owner, status_is(_runs.c.status, "running")
            )
            .with_for_update(read=True)
        )
        return insert.from_select(list(row), held).returning(_ledger.c.tool_call_id)

    async def finish(
        self,
        thread_id: str,
        tool_call_id: str,
        *,
        status: Literal["succeeded", "failed"],
        result: object = None,
        error: str | None = None,
    ) -> None:
        """Record how a started external effect ended."""
        statement = (
            _ledger.update()
            .where(_key(thread_id, tool_call_id), _ledger.c.status == "started")
            .values(
                status=status,
                result=_dump(result) if status == "succeeded" else None,
                error=error,
                updated_at=now_utc(),
            )
        )
        with translate_errors(f"finishing tool call {tool_call_id!r}"):
            async with self._engine.begin() as connection:
                await connection.execute(statement)


async def mark_retry(connection: AsyncConnection, thread_id: str, tool_call_id: str) -> None:
    """Let a call whose outcome is unknown run once more, inside the caller's unit of work (a decision)."""
    await connection.execute(
        _ledger.update()
        .where(_key(thread_id, tool_call_id), _ledger.c.status == "started")
        .values(status="retrying", updated_at=now_utc())
    )


async def _held(connection: AsyncConnection, run_id: str, owner: str | None) -> None:
    """Raise unless `owner` holds the run `run_id` running (nothing to check without an owner)."""
    if owner is None:
        return
    query = sa.select(_runs.c.lease_owner, _runs.c.status).where(_runs.c.run_id == run_id)
    found = (await connection.execute(query)).first()
    if found is None:
        raise NotFound(f"no run {run_id!r}: its thread was deleted")
    if found.lease_owner != owner or found.status != "running":
        raise LeaseLost(f"run {run_id!r} is no longer held by worker {owner!r}")


def _key(thread_id: str, tool_call_id: str) -> sa.ColumnElement[bool]:
    return (_ledger.c.thread_id == thread_id) & (_ledger.c.tool_call_id == tool_call_id)


async def _existing(
    connection: AsyncConnection, thread_id: str, tool_call_id: str, tool_name: str
) -> Execution:
    found = await _get(connection, thread_id, tool_call_id)
    if found is None:
        raise NotFound(f"thread {thread_id!r} was deleted during tool call {tool_call_id!r}")
    if found.tool_name != tool_name:
        raise Conflict(
            f"tool call {tool_call_id!r} of thread {thread_id!r} was recorded for "
            f"{found.tool_name!r}, not {tool_name!r}"
        )
    return found


async def _get(connection: AsyncConnection, thread_id: str, tool_call_id: str) -> Execution | None:
    query = sa.select(_ledger).where(_key(thread_id, tool_call_id))
    row = (await connection.execute(query)).mappings().first()
    return None if row is None else _execution(row)


def _execution(mapping: RowMapping) -> Execution:
    raw: bytes | None = mapping["result"]
    try:
        result: object = None if raw is None else json.loads(raw)
    except ValueError as error:
        raise CorruptData(
            f"the stored result of tool call {mapping['tool_call_id']!r} is unreadable"
        ) from error
    return Execution(
        thread_id=mapping["thread_id"],
        tool_call_id=mapping["tool_call_id"],
        tool_name=mapping["tool_name"],
        run_id=mapping["run_id"],
        status=mapping["status"],
        result=result,
        error=mapping["error"],
        attempts=mapping["attempts"],
        created_at=mapping["created_at"],
        updated_at=mapping["updated_at"],
    )


def _dump(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
