"""Webhooks: each review event POSTed to every configured endpoint, signed per Standard Webhooks.

The body is `{"type": "approval.requested" | ..., "timestamp", "data"}`; the headers `webhook-id`
(the same on every retry), `webhook-timestamp` and `webhook-signature`, made by the `standardwebhooks`
library. A delivery that fails (any non-2xx answer, a timeout, no connection) is retried after about
a second, doubling up to an hour, for 25 hours. Each endpoint has a task of its own sending at most
`per_endpoint` requests at once: a hanging endpoint holds that many connections and delays only its
own notifications, never another endpoint's nor a run. It lives in `web/` as the one package that
speaks HTTP (the worker knows none). See `docs/review.md`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial

import httpx2
from standardwebhooks.webhooks import Webhook

from store import Database, Delivery, now_utc
from worker import Periodic

__all__ = ("WebhookSender", "retry_delay")

logger = logging.getLogger(__name__)

FIRST_RETRY = timedelta(seconds=1)
MAX_RETRY = timedelta(hours=1)
GIVE_UP_AFTER = timedelta(hours=25)
"""Retries go on for at least a day."""
PER_ENDPOINT = 4
"""Requests in flight to one endpoint at most."""
HOLD_TIMEOUTS = 3
"""A claimed delivery is this worker's for this many request timeouts (at least `MIN_HOLD`): its
attempt is over by then, so past it the worker died and another sends it again."""
MIN_HOLD = timedelta(seconds=30)


def retry_delay(attempts: int) -> timedelta:
    """How long to wait after the `attempts`-th failed attempt: 1 s, 2 s, 4 s... up to an hour."""
    return min(FIRST_RETRY * (2 ** min(max(attempts - 1, 0), 20)), MAX_RETRY)


def webhook_type(event_type: str) -> str:
    """`approval_requested` → `approval.requested`."""
    return event_type.replace("_", ".", 1)


class WebhookSender:
    """Delivers review events to `urls`, signed with `secret` (`whsec_…`)."""

    def __init__(
        self,
        db: Database,
        urls: Sequence[str],
        secret: str,
        *,
        poll_seconds: float = 1.0,
        timeout_seconds: float = 10.0,
        per_endpoint: int = PER_ENDPOINT,
    ) -> None:
        self._db = db
        self._urls = list(urls)
        self._signer = Webhook(secret)
        self._timeout = timeout_seconds
        self._hold = max(MIN_HOLD, timedelta(seconds=HOLD_TIMEOUTS * timeout_seconds))
        self._per_endpoint = per_endpoint
        # Named by position: a URL may carry a token.
        self._rounds = [
            Periodic(
                partial(self.send_due_to, url), seconds=poll_seconds, name=f"sending webhooks to endpoint {n}"
            )
            for n, url in enumerate(self._urls, 1)
        ]

    async def start(self) -> None:
        for rounds in self._rounds:
            rounds.start()

    async def aclose(self) -> None:
        for rounds in self._rounds:
            await rounds.aclose()

    async def send_due(self, now: datetime | None = None) -> int:
        """`send_due_to` every endpoint at once; return how many were delivered."""
        return sum(await asyncio.gather(*(self.send_due_to(url, now) for url in self._urls)))

    async def send_due_to(self, url: str, now: datetime | None = None) -> int:
        """Schedule `url`'s new events, then attempt its deliveries due at `now`, `per_endpoint` at a time,
        until none is left; return how many were delivered."""
        moment = now_utc() if now is None else now
        await self._db.webhooks.schedule(url, since=GIVE_UP_AFTER)
        delivered = 0
        async with httpx2.AsyncClient(timeout=self._timeout, follow_redirects=False) as client:
            while True:
                # Claimed only as many as are sent at once, so none waits out its hold unsent.
                claimed = await self._db.webhooks.claim(
                    moment, hold=self._hold, limit=self._per_endpoint, url=url
                )
                delivered += sum(await asyncio.gather(*(self._attempt(client, d) for d in claimed)))
                if len(claimed) < self._per_endpoint:
                    return delivered

    async def _attempt(self, client: httpx2.AsyncClient, delivery: Delivery) -> bool:
        body = json.dumps(
            {
                "type": webhook_type(delivery.type),
                "timestamp": delivery.created_at.isoformat(),
                "data": delivery.data,
            },
            separators=(",", ":"),
        )
        message_id = f"msg_{delivery.event_id}"
        sent_at = now_utc()
        headers = {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(int(sent_at.timestamp())),
            "webhook-signature": self._signer.sign(message_id, sent_at, body),
        }
        error: str | None = None
        try:
            answer = await client.post(delivery.url, content=body.encode(), headers=headers)
            if not 200 <= answer.status_code < 300:
                error = f"answered {answer.status_code}"
        except httpx2.HTTPError as failure:
            error = f"{type(failure).__name__}: {failure}"
        now = now_utc()
        if error is None:
            await self._db.webhooks.delivered(delivery, now)
            return True
        given_up = now - delivery.created_at >= GIVE_UP_AFTER
        retry_at = None if given_up else now + retry_delay(delivery.attempts + 1)
        logger.warning(
            "webhook %s to %s failed (%s)%s", message_id, delivery.url, error, "; gave up" if given_up else ""
        )
        await self._db.webhooks.failed(delivery, error, retry_at=retry_at)
        return False
