"""Leases: which worker drives which run, and until when, when several processes share a database.

A worker (one server process) drives a run only while it holds the run's lease: `runs.lease_owner`
names the worker and `runs.lease_expires_at` says until when. Deliberate choices:

- **A claim is one statement**: a guarded UPDATE that matches only a run nobody holds (queued and
  free, or reserved for this worker) or one whose lease lapsed (`claiming.py`, with its thread's
  reservation of event ids in the same trip). On PostgreSQL the row is picked
  `FOR NO KEY UPDATE SKIP LOCKED`, so concurrent claimers never queue behind each other: one gets the row,
  the others nothing, at once. SQLite has one writer at a time, so its plain guarded UPDATE is as good.
- **The database's clock**: on PostgreSQL, expiries are computed and compared on the server, so
  workers on several hosts agree on them whatever their own clocks say. SQLite serves one host.
- **Fencing**: every write of a run's progress (a checkpoint, its end, its requeue) is guarded by
  `lease_owner = <this worker>`; a worker whose run was taken over writes nothing and gets
  `LeaseLost` (see `store.runs`).
- **Reservations**: a sweep takes runs nobody drives (queued for a while, or under a lapsed lease)
  by reserving them for this worker: owner and expiry set, status `queued`. Starting one turns it
  `running` (`Runs.start_reserving`); nobody else starts it before the reservation lapses.
- The heartbeat renews the leases of the runs the worker drives in one statement; a worker that
  dies stops renewing, and its runs are taken over once their leases lapse. A run it holds but
  does not drive (a reservation whose claim missed) is not renewed: it lapses like a dead worker's.
- **A dead process on this host need not lapse**: at start, a worker ends the leases of workers
  named after this host whose process is gone (`expire_dead_local`), so a lone server restarted
  after a crash continues its runs at once instead of a lease later. A process that still exists
  (or a reused pid) is left to its lease. Hosts sharing one database need distinct host names.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .engine import reader, translate_errors
from .schema import RunRow, UtcDateTime, active, metadata, now_utc, status_is

__all__ = (
    "DEFAULT_LEASE",
    "Leases",
    "Worker",
    "claimable",
    "clock",
    "gone_from_this_host",
    "new_worker_id",
    "release",
    "skip_locked",
)

DEFAULT_LEASE = timedelta(seconds=30)
"""How long a claim holds without a heartbeat: how long a dead worker's runs wait for a new one."""

_runs = metadata.tables[RunRow.__tablename__]


def _host() -> str:
    return socket.gethostname()[:40]


def new_worker_id() -> str:
    """`host:pid:random`: readable in the database, unique even when a pid is reused (64 chars at most)."""
    return f"{_host()}:{os.getpid()}:{secrets.token_hex(4)}"


def gone_from_this_host(worker_id: str) -> bool:
    """Whether `worker_id` names a process of this host that no longer exists."""
    host, _, rest = worker_id.partition(":")
    pid_text, _, _ = rest.partition(":")
    if host != _host() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False  # exists (another user's), or not a pid at all
    return False


@dataclass(frozen=True)
class Worker:
    """One process driving runs: its identity in `runs.lease_owner`, and how long its claims hold."""

    worker_id: str = field(default_factory=new_worker_id)
    lease: timedelta = DEFAULT_LEASE


def clock(dialect_name: str, offset: timedelta = timedelta(0)) -> sa.ColumnElement[datetime]:
    """Now plus `offset`, as a SQL expression: the server's clock on PostgreSQL, this process's on SQLite."""
    if dialect_name == "postgresql":
        now = sa.func.statement_timestamp(type_=UtcDateTime())
        return now + sa.cast(sa.literal(offset, sa.Interval()), sa.Interval()) if offset else now
    return sa.literal(now_utc() + offset, UtcDateTime())


def _lapsed(now: sa.ColumnElement[datetime]) -> sa.ColumnElement[bool]:
    # No expiry at all: a run left `running` before leases existed (schema 0002) is free to take.
    return sa.or_(_runs.c.lease_expires_at.is_(None), _runs.c.lease_expires_at < now)


def claimable(
    worker_id: str | sa.ColumnElement[str], now: sa.ColumnElement[datetime]
) -> sa.ColumnElement[bool]:
    """Runs `worker_id` (a value, or a bound parameter) may start: queued and free or reserved for it,
    or under a lapsed lease."""
    runs = _runs.c
    return sa.or_(
        sa.and_(
            status_is(runs.status, "queued"),
            sa.or_(runs.lease_owner.is_(None), runs.lease_owner == worker_id, _lapsed(now)),
        ),
        sa.and_(status_is(runs.status, "running"), _lapsed(now)),
    )


def skip_locked(query: sa.Select[tuple[str]], dialect_name: str) -> sa.Select[tuple[str]]:
    """`query` locking the rows it picks, skipping those another transaction holds (PostgreSQL only).

    `FOR NO KEY UPDATE`, as the UPDATE that follows takes it (no key changes): a plain `FOR UPDATE`
    also conflicts with the `FOR KEY SHARE` an insert referencing the row takes, for nothing.
    """
    if dialect_name != "postgresql":
        return query
    return query.with_for_update(skip_locked=True, key_share=True)


class Leases:
    """The leases one worker holds on the `runs` table: sweeping, heartbeat, release."""

    def __init__(self, engine: AsyncEngine, worker: Worker) -> None:
        self._engine = engine
        self._reader = reader(engine)
        self.worker = worker

    async def sweep(self, *, limit: int, queued_for: timedelta) -> list[str]:
        """Reserve up to `limit` runs nobody drives, oldest first, and return their ids.

        Nobody drives a run queued for longer than `queued_for` with no owner (the process that
        queued it is busy or gone), nor one whose lease lapsed (its worker died).
        """
        if limit <= 0:
            return []
        with translate_errors("sweeping for runs to take over"):
            async with self._engine.begin() as connection:
                dialect = connection.dialect.name
                runs = _runs.c
                now = clock(dialect)
                free = sa.or_(
                    sa.and_(
                        status_is(runs.status, "queued"),
                        runs.lease_owner.is_(None),
                        runs.created_at < clock(dialect, -queued_for),
                    ),
                    sa.and_(
                        sa.or_(status_is(runs.status, "running"), runs.lease_owner.is_not(None)), _lapsed(now)
                    ),
                )
                picked = skip_locked(
                    sa.select(runs.run_id)
                    .where(active(runs.status), free)
                    .order_by(runs.created_at)
                    .limit(limit),
                    dialect,
                )
                result = await connection.execute(
                    _runs.update()
                    .where(runs.run_id.in_(picked.scalar_subquery()))
                    .values(
                        status="queued",
                        lease_owner=self.worker.worker_id,
                        lease_expires_at=clock(dialect, self.worker.lease),
                    )
                    .returning(runs.run_id)
                )
                return list(result.scalars())

    async def expire_dead_local(self) -> list[str]:
        """End the leases of workers of this host whose process is gone; return those workers.

        Their runs are then free for a sweep at once, instead of after their leases lapse.
        """
        with translate_errors("ending the leases of dead workers"):
            async with self._engine.begin() as connection:
                owners = (
                    await connection.execute(
                        sa.select(_runs.c.lease_owner)
                        .where(
                            active(_runs.c.status),
                            _runs.c.lease_owner.like(f"{_host()}:%"),
                            _runs.c.lease_owner != self.worker.worker_id,
                        )
                        .distinct()
                    )
                ).scalars()
                dead = sorted(owner for owner in owners if owner is not None and gone_from_this_host(owner))
                if dead:
                    await connection.execute(
                        _runs.update()
                        .where(_runs.c.lease_owner.in_(dead), active(_runs.c.status))
                        .values(lease_expires_at=None)
                    )
        return dead

    async def heartbeat(self, run_ids: Sequence[str] | None = None) -> list[str]:
        """Renew the leases this worker holds, in one statement; return the runs it still holds.

        `run_ids`: only those runs' (the ones it drives), so that a run it holds but no longer
        drives lapses and is taken over; `None`: every lease it holds.
        """
        if run_ids is not None and not run_ids:
            return []
        query = _runs.update().where(_runs.c.lease_owner == self.worker.worker_id, active(_runs.c.status))
        if run_ids is not None:
            query = query.where(_runs.c.run_id.in_(run_ids))
        with translate_errors("renewing leases"):
            async with self._engine.begin() as connection:
                result = await connection.execute(
                    query.values(
                        lease_expires_at=clock(connection.dialect.name, self.worker.lease)
                    ).returning(_runs.c.run_id)
                )
                return list(result.scalars())

    async def taken_over(self, run_ids: Sequence[str]) -> list[str]:
        """Those of `run_ids` another worker holds now, or that were cancelled: this worker must stop driving them."""
        if not run_ids:
            return []
        query = sa.select(_runs.c.run_id).where(
            _runs.c.run_id.in_(run_ids),
            sa.or_(
                sa.and_(
                    active(_runs.c.status),
                    _runs.c.lease_owner.is_not(None),
                    _runs.c.lease_owner != self.worker.worker_id,
                ),
                status_is(_runs.c.status, "cancelled"),
            ),
        )
        with translate_errors("checking leases"):
            async with self._reader.connect() as connection:
                return list((await connection.execute(query)).scalars())

    async def release(self) -> list[str]:
        """Put every run this worker holds back in the queue, free for any worker; return their ids."""
        with translate_errors("releasing leases"):
            async with self._engine.begin() as connection:
                return await release(connection, self.worker.worker_id)


async def release(connection: AsyncConnection, worker_id: str, run_id: str | None = None) -> list[str]:
    """Requeue the runs `worker_id` holds (only `run_id`, when given), clearing their leases."""
    query = _runs.update().where(_runs.c.lease_owner == worker_id, active(_runs.c.status))
    if run_id is not None:
        query = query.where(_runs.c.run_id == run_id)
    result = await connection.execute(
        query.values(status="queued", lease_owner=None, lease_expires_at=None).returning(_runs.c.run_id)
    )
    return list(result.scalars())
