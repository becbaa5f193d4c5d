"""Per-user rate limiting of writes: a token bucket per user, in this process."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .errors import ApiError

__all__ = ("RateLimiter",)

_MAX_USERS = 10_000
"""Buckets kept before idle ones (full again) are forgotten, so memory stays bounded."""


class RateLimiter:
    """`burst` requests at once, refilled at `per_second`; beyond that, `429 rate_limited`."""

    def __init__(
        self, *, burst: float, per_second: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._burst = burst
        self._rate = per_second
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def check(self, user_id: str) -> None:
        """Take one token from `user_id`'s bucket.

        Raises:
            ApiError: 429 `rate_limited`, with `Retry-After` in whole seconds.
        """
        now = self._clock()
        tokens, since = self._buckets.get(user_id, (self._burst, now))
        tokens = min(self._burst, tokens + (now - since) * self._rate)
        if tokens < 1:
            self._buckets[user_id] = (tokens, now)
            retry_after = max(1, math.ceil((1 - tokens) / self._rate))
            raise ApiError(
                429,
                "rate_limited",
                f"too many requests; retry in {retry_after} s",
                headers={"Retry-After": str(retry_after)},
            )
        self._buckets[user_id] = (tokens - 1, now)
        if len(self._buckets) > _MAX_USERS:
            self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        for user_id, (tokens, since) in list(self._buckets.items()):
            if tokens + (now - since) * self._rate >= self._burst:
                del self._buckets[user_id]
