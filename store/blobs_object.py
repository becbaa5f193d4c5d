"""`ObjectBlobs`: file bytes in object storage (S3, GCS, Azure, a local directory) through obstore."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import IO

import obstore
from obstore.store import ObjectStore, from_url

__all__ = ("ObjectBlobs",)

_STREAM_PIECE = 256 * 1024
"""How much of an object a read hands on at a time (obstore's default is 10 MB)."""


class ObjectBlobs:
    """Blobs as objects named by their keys under the URL's bucket and prefix."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    @classmethod
    def from_url(cls, url: str) -> ObjectBlobs:
        """A store for `url`; a `file://` directory is created when missing. Credentials come from the
        environment as obstore reads them (`AWS_*`, `GOOGLE_*`, `AZURE_*`)."""
        if url.startswith("file://"):
            return cls(from_url(url, mkdir=True))
        return cls(from_url(url))

    async def put(self, key: str, source: IO[bytes], size: int) -> None:
        """Upload the bytes; object stores make a put visible in full or not at all."""
        source.seek(0)
        await obstore.put_async(self._store, key, source)

    async def read(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        if start >= end:
            return
        try:
            result = await obstore.get_async(self._store, key, options={"range": (start, end)})
        except FileNotFoundError:  # obstore's error for a missing object
            return
        async for piece in result.stream(min_chunk_size=_STREAM_PIECE):
            yield bytes(piece)

    async def read_whole(self, keys: Sequence[str]) -> dict[str, bytes]:
        """One request per key, all at once."""
        found = await asyncio.gather(*(self._whole(key) for key in keys))
        return {key: data for key, data in zip(keys, found, strict=True) if data is not None}

    async def _whole(self, key: str) -> bytes | None:
        try:
            result = await obstore.get_async(self._store, key)
        except FileNotFoundError:
            return None
        return bytes(await result.bytes_async())

    async def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                await obstore.delete_async(self._store, key)

    async def aclose(self) -> None:
        """Nothing to close: obstore's clients hold no connection between requests."""
