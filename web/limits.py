"""Per-user limits, in this process: a token bucket on writes, a cap on open event streams."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .errors import ApiError

__all__ = ("RateLimiter", "StreamLimiter")

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


class StreamLimiter:
    """At most `per_user` event streams open at once per user; one more is `429 too_many_streams`."""

    def __init__(self, *, per_user: int, retry_after_seconds: int = 5) -> None:
        self._per_user = per_user
        self._retry_after = retry_after_seconds
        self._open: dict[str, int] = {}

    def acquire(self, user_id: str) -> Callable[[], None]:
        """Count one more stream of `user_id`; call what this returns, once, when it ends.

        Raises:
            ApiError: 429 `too_many_streams`, with `Retry-After`.
        """
        self.check(user_id)
        self._open[user_id] = self._open.get(user_id, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._open[user_id] - 1
            if left:
                self._open[user_id] = left
            else:
                del self._open[user_id]

        return release

    def check(self, user_id: str) -> None:
        """Refuse now, before a request changes anything, if `user_id` could not open one more stream.

        Raises:
            ApiError: 429 `too_many_streams`, with `Retry-After`.
        """
        count = self._open.get(user_id, 0)
        if count >= self._per_user:
            raise ApiError(
                429,
                "too_many_streams",
                f"{count} streams of this user are open already, the most allowed; close one first",
                headers={"Retry-After": str(self._retry_after)},
            )

    def open_streams(self, user_id: str) -> int:
        """How many streams `user_id` holds now."""
        return self._open.get(user_id, 0)
