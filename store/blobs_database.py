"""`DatabaseBlobs`: file bytes in the database's `file_chunks` table, in pieces of `CHUNK_BYTES`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import IO

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import reader, translate_errors
from .schema import FileChunkRow, metadata

__all__ = ("CHUNK_BYTES", "DatabaseBlobs")

CHUNK_BYTES = 256 * 1024
"""The size of a stored piece: small enough to hold a few in memory, large enough for few rows."""

_chunks = metadata.tables[FileChunkRow.__tablename__]


class DatabaseBlobs:
    """Blobs stored as rows of `file_chunks`, keyed by (blob key, byte offset)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = reader(engine)

    async def put(self, key: str, source: IO[bytes], size: int) -> None:
        """Write the pieces in one transaction, so a crash leaves none of them."""
        source.seek(0)
        with translate_errors("storing a file's bytes"):
            try:
                async with self._engine.begin() as connection:
                    # A retried put of the same key (an upload that died before it was done) starts afresh.
                    await connection.execute(_chunks.delete().where(_chunks.c.blob_key == key))
                    offset = 0
                    while offset < size:
                        data = source.read(min(CHUNK_BYTES, size - offset))
                        if not data:
                            raise ValueError(f"the source ended at byte {offset} of {size}")
                        await connection.execute(
                            _chunks.insert().values(blob_key=key, offset=offset, data=data)
                        )
                        offset += len(data)
            except exc.IntegrityError:
                # A concurrent put of the same key committed first: a key names one user's one content,
                # so its bytes are these, stored in full.
                return

    async def read(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        """One short read per piece: nothing is held open while the caller sends a piece on."""
        if start >= end:
            return
        query = (
            sa.select(_chunks.c.offset)
            .where(_chunks.c.blob_key == key, _chunks.c.offset < end)
            .order_by(_chunks.c.offset)
        )
        with translate_errors("reading a file's bytes"):
            async with self._reader.connect() as connection:
                offsets = list((await connection.execute(query)).scalars())
        # The pieces from the last one starting at or before `start` on.
        first = max((i for i, offset in enumerate(offsets) if offset <= start), default=0)
        piece = sa.select(_chunks.c.data).where(
            _chunks.c.blob_key == key, _chunks.c.offset == sa.bindparam("offset")
        )
        for offset in offsets[first:]:
            with translate_errors("reading a file's bytes"):
                async with self._reader.connect() as connection:
                    data = (await connection.execute(piece, {"offset": offset})).scalar_one_or_none()
            if data is None:
                return  # deleted meanwhile
            yield bytes(data[max(0, start - offset) : end - offset])

    async def read_whole(self, keys: Sequence[str]) -> dict[str, bytes]:
        """Every piece of every key in one statement (a model request wants whole files, not a piece to send on)."""
        if not keys:
            return {}
        query = (
            sa.select(_chunks.c.blob_key, _chunks.c.data)
            .where(_chunks.c.blob_key.in_(keys))
            .order_by(_chunks.c.blob_key, _chunks.c.offset)
        )
        pieces: dict[str, list[bytes]] = {}
        with translate_errors("reading files' bytes"):
            async with self._reader.connect() as connection:
                for key, data in await connection.execute(query):
                    pieces.setdefault(key, []).append(data)
        return {key: b"".join(found) for key, found in pieces.items()}

    async def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with translate_errors("deleting files' bytes"):
            async with self._engine.begin() as connection:
                await connection.execute(_chunks.delete().where(_chunks.c.blob_key.in_(keys)))

    async def aclose(self) -> None:
        """Nothing to close: the database's engine belongs to the `Database`."""
