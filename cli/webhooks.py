"""`durable-chat webhooks`: the webhook deliveries still pending or given up."""

from __future__ import annotations

import asyncio

from .output import say

__all__ = ("show_webhooks",)

_COLUMNS = ("EVENT", "TYPE", "ATTEMPTS", "NEXT ATTEMPT", "URL", "LAST ERROR")


def show_webhooks(database_url: str) -> int:
    """Print each undelivered webhook: its event, attempts, next attempt (or `given up`) and last error."""
    from store import Database, DeliveryState

    async def listed() -> list[DeliveryState]:
        async with await Database.connect(database_url) as db:
            return await db.webhooks.undelivered()

    deliveries = asyncio.run(listed())
    if not deliveries:
        say("no webhooks pending or failing")
        return 0
    rows = [
        (
            str(d.event_id),
            d.type.replace("_", ".", 1),
            str(d.attempts),
            "given up" if d.next_attempt_at is None else d.next_attempt_at.strftime("%Y-%m-%d %H:%M:%S"),
            d.url,
            d.last_error or "-",
        )
        for d in deliveries
    ]
    widths = [max(len(row[i]) for row in [_COLUMNS, *rows]) for i in range(len(_COLUMNS) - 1)]
    for row in [_COLUMNS, *rows]:
        say("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]))
    return 0
