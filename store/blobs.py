"""`Blobs`: where the bytes of files are kept, behind one small interface with two backends.

The database (`store.blobs_database`, the default) or object storage through obstore
(`store.blobs_object`: S3, GCS, Azure, a local directory), chosen by a URL. A backend knows keys
and bytes only; which file uses which bytes, and when bytes may go, is `store.files`' business.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import IO, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ("Blobs", "open_blobs")


class Blobs(Protocol):
    """A store of immutable byte strings by key."""

    async def put(self, key: str, source: IO[bytes], size: int) -> None:
        """Store the `size` bytes `source` reads from its start under `key`, in full or not at all."""
        ...

    def read(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        """The bytes `start` to `end` (exclusive) of `key`, a piece at a time."""
        ...

    async def read_whole(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The bytes of each of `keys`, whole, by key, in one trip where the backend can; keys with
        nothing stored are left out."""
        ...

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete the bytes of `keys`; keys with nothing stored are skipped."""
        ...

    async def aclose(self) -> None: ...


def open_blobs(files_url: str | None, engine: AsyncEngine) -> Blobs:
    """The backend `files_url` names: `None` or `database` for the database behind `engine`, else an
    obstore URL (`s3://bucket/prefix`, `gs://…`, `az://…`, `file:///absolute/directory`, `memory://`).

    Raises:
        ValueError: obstore does not know the URL's scheme.
    """
    if files_url is None or files_url in ("", "database"):
        from .blobs_database import DatabaseBlobs

        return DatabaseBlobs(engine)
    from .blobs_object import ObjectBlobs

    return ObjectBlobs.from_url(files_url)
