"""The identity provider's signing keys: fetched from its JWKS URL, cached, refreshed within bounds.

- **Cached** for `max_age` (10 minutes): one fetch serves every request meanwhile; one fetch at
  a time (concurrent requests wait for it rather than fetching too).
- **A token naming an unknown `kid`** (the provider rotated its keys) fetches the set again at
  once, but at most once per `refresh_interval` (30 s): a stream of made-up `kid`s cannot turn
  this server into a client hammering the provider.
- **Only keys for the pinned algorithm** are kept (a key's `alg`, else its type and curve, and
  `use` absent or `sig`), so a token can never pick which kind of key checks it.
- **A provider that cannot be reached** keeps the keys already fetched in use; with none yet,
  requests are answered `503` until a fetch succeeds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import cast

import httpx2
from jwt import PyJWK, PyJWTError

__all__ = ("KeySet", "KeySetUnavailable")

logger = logging.getLogger(__name__)

_MAX_BYTES = 1 << 20


class KeySetUnavailable(Exception):
    """No key set could be fetched yet."""


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._algorithm = algorithm
        self._max_age = max_age
        self._refresh_interval = refresh_interval
        self._timeout = timeout
        self._clock = clock
        self._keys: dict[str | None, PyJWK] | None = None
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._lock = asyncio.Lock()
        self.fetches = 0
        """How many times the set was fetched (for tests and monitoring)."""

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key named `kid` (or the only key, when the token names none), or `None`.

        Raises:
            KeySetUnavailable: No key set was ever fetched and the provider cannot be reached.
        """
        if self._keys is None or self._clock() - self._fetched_at >= self._max_age:
            await self._refresh(self._attempted_at)
        found = self._find(kid)
        if found is None and self._clock() - self._attempted_at >= self._refresh_interval:
            await self._refresh(self._attempted_at)
            found = self._find(kid)
        return found

    def _find(self, kid: str | None) -> PyJWK | None:
        keys = self._keys or {}
        if kid is None:
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    async def _refresh(self, seen_attempt: float) -> None:
        async with self._lock:
            if self._attempted_at != seen_attempt:
                return  # another request fetched while this one waited
            self._attempted_at = self._clock()
            self.fetches += 1
            try:
                self._keys = await self._fetch()
                self._fetched_at = self._attempted_at
            except (httpx2.HTTPError, ValueError) as error:
                logger.warning("cannot fetch the identity provider's keys from %s: %s", self._url, error)
        if self._keys is None:
            raise KeySetUnavailable(f"the identity provider's keys at {self._url} cannot be fetched")

    async def _fetch(self) -> dict[str | None, PyJWK]:
        async with (
            httpx2.AsyncClient(timeout=self._timeout, follow_redirects=False) as client,
            client.stream("GET", self._url, headers={"Accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise ValueError(f"it answered {response.status_code}")
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
