"""Keeping this process's leases while runs are driven outside a `Runner` (the terminal chat)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from store import Database, StoreError

__all__ = ("holding_leases",)


@contextlib.asynccontextmanager
async def holding_leases(db: Database) -> AsyncGenerator[None]:
    """Renew this process's leases while the block runs, as a server's runner does, so a server
    sharing the database does not take a long turn over."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(db.leases.worker.lease.total_seconds() / 3)
            with contextlib.suppress(StoreError):  # the next beat tries again; the lease has slack
                await db.leases.heartbeat()

    task = asyncio.create_task(beat(), name="heartbeat")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])
