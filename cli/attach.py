"""`/attach PATH` in the terminal chat: a local file stored as a file of the thread, checked as an upload is."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import BinaryIO

from store import Database, NewFile, QuotaExceeded, StoredFile
from web import DEFAULT_MEDIA_TYPES, Sniffer, UnsupportedType, media_type_of, safe_name

__all__ = ("ATTACH", "AttachError", "attach_path")

ATTACH = "/attach"
MAX_FILE_BYTES = 20 * 1024 * 1024
"""As the server's default `DURABLE_CHAT_MAX_FILE_MB`."""
_PIECE = 256 * 1024


class AttachError(Exception):
    """The file cannot be attached; the message says why, for the user."""


async def attach_path(db: Database, thread_id: str, user_id: str, path: Path) -> StoredFile:
    """Store the file at `path` in the thread (its type sniffed from its bytes, as an upload's).

    Raises:
        AttachError: Not a readable file, too large, or of a type not accepted.
    """
    # Read in a thread: the loop keeps serving while a large file is hashed.
    source, sniffer, digest, size = await asyncio.to_thread(_read, path)
    with source:
        name = safe_name(path.name)
        try:
            media_type = media_type_of(sniffer, declared=None, name=name, allowed=DEFAULT_MEDIA_TYPES)
        except UnsupportedType as error:
            raise AttachError(str(error)) from error
        new = NewFile(
            thread_id=thread_id,
            user_id=user_id,
            name=name,
            media_type=media_type,
            source=source,
            size=size,
            sha256=digest,
        )
        try:
            return await db.files.save(new)
        except QuotaExceeded as error:
            raise AttachError(str(error)) from error


def _read(path: Path) -> tuple[BinaryIO, Sniffer, str, int]:
    """The open file, what its bytes look like, their sha256 and size."""
    try:
        source = path.expanduser().open("rb")
    except OSError as error:
        raise AttachError(f"cannot read {str(path)!r}: {error.strerror or error}") from error
    sniffer, digest, size = Sniffer(), hashlib.sha256(), 0
    while piece := source.read(_PIECE):
        size += len(piece)
        if size > MAX_FILE_BYTES:
            source.close()
            raise AttachError(f"{path.name!r} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
        sniffer.feed(piece)
        digest.update(piece)
    sniffer.finish()
    return source, sniffer, digest.hexdigest(), size
