"""The webhooks' deliveries: one row per review event and endpoint, until it is answered 2xx or given up.

The outbox is `review_events`, written in the transaction of each change. A sender schedules the
events each endpoint has not got yet, claims due deliveries (on PostgreSQL skipping rows another
worker holds, so each is sent by one worker at a time), and records each attempt's outcome.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import insert_new, translate_errors
from .schema import ReviewEventRow, WebhookDeliveryRow, metadata, now_utc

__all__ = ("Delivery", "DeliveryState", "Webhooks")

_events = metadata.tables[ReviewEventRow.__tablename__]
_deliveries = metadata.tables[WebhookDeliveryRow.__tablename__]

_LOOKBACK = 1000
"""Event ids below the newest one scheduled that are checked again: an id taken by a transaction that
committed late would otherwise be skipped."""


@dataclass(frozen=True)
class Delivery:
    """A review event to POST to `url`, claimed by this worker."""

    event_id: int
    url: str
    attempts: int
    type: str
    data: dict[str, object]
    created_at: datetime


@dataclass(frozen=True)
class DeliveryState:
    """A delivery not done yet, for `durable-chat webhooks`."""

    event_id: int
    url: str
    type: str
    attempts: int
    next_attempt_at: datetime | None
    last_error: str | None
    created_at: datetime


class Webhooks:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def schedule(self, url: str, *, since: timedelta) -> int:
        """Add a delivery to `url` for each review event it has none for (newer than `since` ago the first time)."""
        d, e = _deliveries.c, _events.c
        with translate_errors("scheduling webhooks"):
            async with self._engine.begin() as connection:
                newest = (
                    await connection.execute(sa.select(sa.func.max(d.event_id)).where(d.url == url))
                ).scalar_one_or_none()
                query = sa.select(e.event_id, e.created_at).where(
                    ~sa.exists().where(d.url == url, d.event_id == e.event_id)
                )
                if newest is None:
                    query = query.where(e.created_at >= now_utc() - since)
                else:
                    query = query.where(e.event_id > newest - _LOOKBACK)
                rows = (await connection.execute(query.order_by(e.event_id).limit(1000))).all()
                if not rows:
                    return 0
                await connection.execute(
                    insert_new(connection.dialect.name, _deliveries),
                    [
                        {"event_id": event_id, "url": url, "attempts": 0, "next_attempt_at": created_at}
                        for event_id, created_at in rows
                    ],
                )
                return len(rows)

    async def claim(
        self, now: datetime, *, hold: timedelta, limit: int = 50, url: str | None = None
    ) -> list[Delivery]:
        """Due deliveries (to `url`, when given), each held for `hold` (no other worker takes it
        meanwhile), oldest first."""
        d, e = _deliveries.c, _events.c
        due = (
            sa.select(d.event_id, d.url, d.attempts)
            .where(d.next_attempt_at.is_not(None), d.next_attempt_at <= now)
            .order_by(d.next_attempt_at)
            .limit(limit)
        )
        if url is not None:
            due = due.where(d.url == url)
        with translate_errors("claiming webhooks"):
            async with self._engine.begin() as connection:
                if connection.dialect.name == "postgresql":
                    due = due.with_for_update(skip_locked=True)
                rows = (await connection.execute(due)).all()
                claimed: list[Delivery] = []
                for event_id, endpoint, attempts in rows:
                    held = await connection.execute(
                        _deliveries.update()
                        .where(d.event_id == event_id, d.url == endpoint, d.next_attempt_at <= now)
                        .values(next_attempt_at=now + hold)
                    )
                    if held.rowcount != 1:
                        continue
                    event = (
                        await connection.execute(
                            sa.select(e.type, e.data, e.created_at).where(e.event_id == event_id)
                        )
                    ).one()
                    claimed.append(
                        Delivery(
                            event_id, endpoint, attempts, event.type, json.loads(event.data), event.created_at
                        )
                    )
                return claimed

    async def delivered(self, delivery: Delivery, now: datetime) -> None:
        await self._set(
            delivery, attempts=delivery.attempts + 1, next_attempt_at=None, delivered_at=now, last_error=None
        )

    async def failed(self, delivery: Delivery, error: str, *, retry_at: datetime | None) -> None:
        """Record a failed attempt; `retry_at` None gives up."""
        await self._set(
            delivery,
            attempts=delivery.attempts + 1,
            next_attempt_at=retry_at,
            delivered_at=None,
            last_error=error[:1000],
        )

    async def undelivered(self, *, limit: int = 100) -> list[DeliveryState]:
        """Deliveries pending or given up, oldest first."""
        d, e = _deliveries.c, _events.c
        query = (
            sa.select(d.event_id, d.url, e.type, d.attempts, d.next_attempt_at, d.last_error, e.created_at)
            .join(_events, e.event_id == d.event_id)
            .where(d.delivered_at.is_(None))
            .order_by(d.event_id, d.url)
            .limit(limit)
        )
        with translate_errors("listing webhooks"):
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).all()
        return [DeliveryState(*row) for row in rows]

    async def _set(self, delivery: Delivery, **values: object) -> None:
        d = _deliveries.c
        with translate_errors("recording a webhook attempt"):
            async with self._engine.begin() as connection:
                await connection.execute(
                    _deliveries.update()
                    .where(d.event_id == delivery.event_id, d.url == delivery.url)
                    .values(**values)
                )
