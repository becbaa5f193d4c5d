"""The identity provider's signing keys: fetched from its JWKS URL, cached, refreshed within bounds.

- **Cached** for `max_age` (10 minutes): one fetch serves every request meanwhile.
- **Single-flight**: at most one fetch is in the air; every request that needs it (the first
  requests after a start, all at once) waits for that one rather than fetching too, and a request
  that gives up waiting does not cancel it for the others.
- **A token naming an unknown `kid`** (the provider rotated its keys) fetches the set again at
  once, but at most once per `refresh_interval` (30 s): a stream of made-up `kid`s cannot turn
  this server into a client hammering the provider.
- **A failed fetch backs off**: no other fetch starts before its `Retry-After` (when the provider
  sent one, up to `max_backoff`), else before a delay that doubles with each failure in a row
  (`backoff`, 5 s, up to `max_backoff`, 5 minutes). Meanwhile the keys already fetched stay in use,
  stale or not; with none yet, requests are refused at once (`KeySetUnavailable`, answered `503`
  with the time left as `Retry-After`), made-up `kid`s or not.
- **A deadline on the whole fetch** (`timeout`, 5 s, from connecting to the last byte), not only
  on each read: a provider trickling its answer cannot hold requests longer.
- **Only keys for the pinned algorithm** are kept (a key's `alg`, else its type and curve, and
  `use` absent or `sig`), so a token can never pick which kind of key checks it. Nothing in a
  token (`jku`, `x5u`, an embedded `jwk`) is ever fetched or used: only this URL's keys are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import cast

import httpx2
from jwt import PyJWK, PyJWTError

__all__ = ("KeySet", "KeySetUnavailable")

logger = logging.getLogger(__name__)

_MAX_BYTES = 1 << 20


class KeySetUnavailable(Exception):
    """No key set could be fetched yet; `retry_after` is how long (seconds) before the next try."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _FetchFailed(Exception):
    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class KeySet:
    """The signing keys at `url` for `algorithm`; see the module's notes."""

    def __init__(
        self,
        url: str,
        *,
        algorithm: str,
        max_age: float = 600.0,
        refresh_interval: float = 30.0,
        timeout: float = 5.0,
        backoff: float = 5.0,
        max_backoff: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._algorithm = algorithm
        self._max_age = max_age
        self._refresh_interval = refresh_interval
        self._timeout = timeout
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._clock = clock
        self._keys: dict[str | None, PyJWK] | None = None
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._retry_at = float("-inf")
        self._failures = 0
        self._inflight: asyncio.Task[None] | None = None
        self.fetches = 0
        """How many times the set was fetched (for tests and monitoring)."""

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key named `kid` (or the only key, when the token names none), or `None`.

        Raises:
            KeySetUnavailable: No key set was ever fetched, and the provider cannot be reached now.
        """
        if self._keys is None or self._clock() - self._fetched_at >= self._max_age:
            await self._refresh()
        found = self._find(kid)
        if found is None and self._clock() - self._attempted_at >= self._refresh_interval:
            await self._refresh()
            found = self._find(kid)
        if self._keys is None:
            wait = max(self._retry_at - self._clock(), 1.0)
            raise KeySetUnavailable(
                f"the identity provider's keys at {self._url} cannot be fetched", retry_after=wait
            )
        return found

    def _find(self, kid: str | None) -> PyJWK | None:
        keys = self._keys or {}
        if kid is None:
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    async def _refresh(self) -> None:
        """Fetch the set, or join the fetch in the air; nothing while backing off after a failure."""
        if self._inflight is None:
            if self._clock() < self._retry_at:
                return
            self._inflight = asyncio.create_task(self._fetch_once())
        # Shielded: a request cancelled while it waits (its client left) leaves the fetch to the others.
        await asyncio.shield(self._inflight)

    async def _fetch_once(self) -> None:
        self._attempted_at = self._clock()
        self.fetches += 1
        try:
            async with asyncio.timeout(self._timeout):
                keys = await self._fetch()
        except (httpx2.HTTPError, ValueError, TimeoutError, _FetchFailed) as error:
            self._failures += 1
            hinted = error.retry_after if isinstance(error, _FetchFailed) else None
            delay = hinted if hinted is not None else self._backoff * 2 ** (self._failures - 1)
            delay = min(max(delay, 0.0), self._max_backoff)
            self._retry_at = self._clock() + delay
            reason = "no answer within the deadline" if isinstance(error, TimeoutError) else str(error)
            logger.warning(
                "cannot fetch the identity provider's keys from %s (%s); next try in %.0f s",
                self._url,
                reason,
                delay,
            )
        else:
            self._keys, self._fetched_at, self._failures = keys, self._attempted_at, 0
        finally:
            self._inflight = None

    async def _fetch(self) -> dict[str | None, PyJWK]:
        async with (
            httpx2.AsyncClient(timeout=self._timeout, follow_redirects=False) as client,
            client.stream("GET", self._url, headers={"Accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise _FetchFailed(
                    f"it answered {response.status_code}",
                    retry_after=_retry_after(response.headers.get("retry-after")),
                )
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > _MAX_BYTES:
                    raise ValueError(f"its answer is larger than {_MAX_BYTES} bytes")
        try:
            document: object = json.loads(body)
        except RecursionError as error:
            raise ValueError("its answer is not a JWK set") from error
        # Decoded JSON: dicts have string keys, and nothing but dicts, lists and scalars occurs.
        entries = cast("dict[str, object]", document).get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise ValueError("its answer is not a JWK set")
        keys: dict[str | None, PyJWK] = {}
        for entry in cast("list[object]", entries):
            if not isinstance(entry, dict):
                continue
            jwk = cast("dict[str, object]", entry)
            if jwk.get("use", "sig") != "sig":
                continue
            try:
                key = PyJWK(jwk)
            except PyJWTError:
                continue  # a key type this library or this server does not use
            if key.algorithm_name == self._algorithm:
                keys[key.key_id] = key
        return keys


def _retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (a number of seconds or an HTTP date); `None` if unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value[:9])
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (moment - datetime.now(UTC)).total_seconds()
    return seconds if math.isfinite(seconds) else None
