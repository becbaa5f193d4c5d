"""`Files`: a thread's files, their bytes stored once per user and content, wherever `Blobs` keeps them.

How the rows and the backend stay consistent through crashes and races is in docs/files.md.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .blobs import Blobs
from .engine import insert_new, reader, translate_errors
from .errors import NotFound, StoreError
from .recent_bytes import RecentBytes
from .schema import FileBlobRow, FileGarbageRow, FileRow, ThreadRow, metadata, now_utc

__all__ = ("CLAIM_GRACE", "Files", "NewFile", "QuotaExceeded", "StoredFile")

logger = logging.getLogger(__name__)

_files = metadata.tables[FileRow.__tablename__]
_blobs = metadata.tables[FileBlobRow.__tablename__]
_garbage = metadata.tables[FileGarbageRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]

CLAIM_GRACE = timedelta(hours=1)
"""How long an upload may take to store bytes it claimed before a sweep takes them for abandoned."""

_ATTEMPTS = 3
"""How often `save` starts again when a concurrent delete took the blob it was about to use."""


class QuotaExceeded(StoreError):
    """Storing the file would take the user past their quota."""


@dataclass(frozen=True)
class StoredFile:
    """A file of a thread, and where its bytes are."""

    file_id: str
    thread_id: str
    user_id: str
    name: str
    media_type: str
    size: int
    sha256: str
    """Of the bytes, in hex; also the file's ETag."""
    created_at: datetime
    blob_key: str
    """The backend's key of the bytes (shared by the user's files with the same bytes)."""


@dataclass(frozen=True)
class NewFile:
    """A file to save: its bytes, already received in full, and what they are."""

    thread_id: str
    user_id: str
    name: str
    media_type: str
    source: IO[bytes]
    """Readable and seekable, `size` bytes long (a spooled upload)."""
    size: int
    sha256: str


class Files:
    """The `files` table and the bytes of its rows.

    Every method scoped by `thread_id` and `user_id` answers `NotFound` for another thread's or
    another user's file, exactly as for one that does not exist.
    """

    def __init__(self, engine: AsyncEngine, blobs: Blobs) -> None:
        self._engine = engine
        self._reader = reader(engine)
        self.blobs = blobs
        # The turn after an upload reads its bytes for the model request: hand them over, not read back.
        self._recent = RecentBytes()

    async def save(self, new: NewFile, *, quota: int | None = None) -> StoredFile:
        """Store a new file of the thread; bytes the user stored before are not stored again.

        Args:
            new: The file.
            quota: The most bytes the user's stored blobs may take together; `None`: no limit.

        Raises:
            QuotaExceeded: The new bytes would take the user's blobs past `quota`.
            NotFound: The thread does not exist (deleted meanwhile).
        """
        for _ in range(_ATTEMPTS):
            key, ready = await self._claim(new, quota)
            if not ready:
                try:
                    await self.blobs.put(key, new.source, new.size)
                except Exception:
                    # (Cancelled, the claim stays until `collect` finds it older than its grace.)
                    await self._release([(new.user_id, new.sha256)], unready=True)
                    raise
                await self._mark_ready(new, key)
            stored = await self._insert(new, key)
            if stored is not None:
                self._recent.keep(stored.blob_key, new.source, new.size)
                logger.info("stored file %s of thread %s (%d bytes)", stored.file_id, new.thread_id, new.size)
                return stored
        raise StoreError(f"storing a file in thread {new.thread_id!r} lost {_ATTEMPTS} races with deletes")

    async def get(self, file_id: str, *, thread_id: str, user_id: str) -> StoredFile:
        """The file, if it belongs to that thread of that user.

        Raises:
            NotFound: No such file there.
        """
        query = _selected().where(
            _files.c.file_id == file_id, _files.c.thread_id == thread_id, _files.c.user_id == user_id
        )
        with translate_errors(f"reading file {file_id!r}"):
            async with self._reader.connect() as connection:
                row = (await connection.execute(query)).mappings().one_or_none()
        if row is None:
            raise NotFound(f"no file {file_id!r}")
        return _stored(row)

    async def get_many(
        self, file_ids: Iterable[str], *, thread_id: str, user_id: str
    ) -> dict[str, StoredFile]:
        """Those of the files that belong to that thread of that user, by id, in one query (others left out)."""
        wanted = list(dict.fromkeys(file_ids))
        if not wanted:
            return {}
        query = _selected().where(
            _files.c.file_id.in_(wanted), _files.c.thread_id == thread_id, _files.c.user_id == user_id
        )
        with translate_errors(f"reading the files of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return {row["file_id"]: _stored(row) for row in rows}

    async def list(self, thread_id: str, *, user_id: str | None = None) -> list[StoredFile]:
        """The thread's files (of `user_id`, when given), oldest first."""
        query = (
            _selected().where(_files.c.thread_id == thread_id).order_by(_files.c.created_at, _files.c.file_id)
        )
        if user_id is not None:
            query = query.where(_files.c.user_id == user_id)
        with translate_errors(f"listing the files of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [_stored(row) for row in rows]

    def stream(self, stored: StoredFile, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        """The file's bytes `start` to `end` (exclusive; the end of the file by default), a piece at a time."""
        return self.blobs.read(stored.blob_key, start, stored.size if end is None else min(end, stored.size))

    async def read_bytes(self, stored: StoredFile) -> bytes:
        """The file's bytes, whole (for a model request; answer downloads with `stream`).

        The first read of a small file this `Files` saved takes its bytes from memory (`RecentBytes`).

        Raises:
            NotFound: The bytes are gone: the file was deleted since `stored` was read.
        """
        data = (await self.read_many([stored])).get(stored.file_id)
        if data is None:
            raise NotFound(f"the bytes of file {stored.file_id!r} are gone")
        return data

    async def read_many(self, files: Sequence[StoredFile]) -> dict[str, bytes]:
        """The bytes of each file, whole, by file id, in one trip to the backend (none for those this
        `Files` saved lately, as `read_bytes`); files whose bytes are gone are left out."""
        found: dict[str, bytes] = {}
        wanted: list[StoredFile] = []
        for stored in files:
            kept = self._recent.take(stored.blob_key, stored.size)
            if kept is not None:
                found[stored.file_id] = kept
            else:
                wanted.append(stored)
        if wanted:
            read = await self.blobs.read_whole(list(dict.fromkeys(f.blob_key for f in wanted)))
            for stored in wanted:
                data = read.get(stored.blob_key)
                if data is not None and len(data) == stored.size:
                    found[stored.file_id] = data
        return found

    async def delete(self, file_id: str, *, thread_id: str, user_id: str) -> None:
        """Delete the file, and its bytes unless another file of the user has the same.

        Raises:
            NotFound: No such file there.
        """
        query = (
            _files.delete()
            .where(_files.c.file_id == file_id, _files.c.thread_id == thread_id, _files.c.user_id == user_id)
            .returning(_files.c.user_id, _files.c.sha256)
        )
        with translate_errors(f"deleting file {file_id!r}"):
            async with self._engine.begin() as connection:
                row = (await connection.execute(query)).one_or_none()
        if row is None:
            raise NotFound(f"no file {file_id!r}")
        await self._release([(row.user_id, row.sha256)])

    async def blobs_of_thread(self, thread_id: str) -> list[tuple[str, str]]:
        """The (user_id, sha256) of the thread's files: the blobs to release once the thread is erased."""
        query = sa.select(_files.c.user_id, _files.c.sha256).where(_files.c.thread_id == thread_id).distinct()
        with translate_errors(f"listing the files of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                return [(row.user_id, row.sha256) for row in await connection.execute(query)]

    async def release(self, blobs: Iterable[tuple[str, str]]) -> None:
        """Delete the bytes of the given (user_id, sha256) blobs that no file refers to any more."""
        await self._release(list(dict.fromkeys(blobs)))

    async def collect(self, *, grace: timedelta = CLAIM_GRACE) -> int:
        """Delete every blob no file refers to (claimed by an upload longer than `grace` ago, if never
        stored in full) and finish deletes a crash interrupted; return how many blobs went.

        Run at start and after a purge: deleting a thread releases its blobs at once, but a crash or
        a file saved into a thread while it was deleted can leave some behind.
        """
        cutoff = now_utc() - grace
        query = sa.select(_blobs.c.user_id, _blobs.c.sha256).where(
            ~_referenced(), sa.or_(_blobs.c.ready, _blobs.c.claimed_at < cutoff)
        )
        with translate_errors("finding unused file bytes"):
            async with self._reader.connect() as connection:
                candidates = [(row.user_id, row.sha256) for row in await connection.execute(query)]
                leftover = list((await connection.execute(sa.select(_garbage.c.blob_key))).scalars())
        released = await self._release(candidates, unready=True, cutoff=cutoff)
        await self._drain(leftover)
        if released:
            logger.info("deleted the bytes of %d blobs no file used", released)
        return released

    async def usage(self, user_id: str) -> int:
        """How many bytes the user's blobs take (identical files counted once)."""
        query = sa.select(sa.func.coalesce(sa.func.sum(_blobs.c.size), 0)).where(_blobs.c.user_id == user_id)
        with translate_errors(f"measuring the files of {user_id!r}"):
            async with self._reader.connect() as connection:
                return int((await connection.execute(query)).scalar_one())

    # -- the steps of save and delete ----------------------------------------------------------

    async def _claim(self, new: NewFile, quota: int | None) -> tuple[str, bool]:
        """The blob for the new file's bytes, created (within the quota) when the user has none: its key
        and whether its bytes are stored in full."""
        where = (_blobs.c.user_id == new.user_id, _blobs.c.sha256 == new.sha256)
        with translate_errors(f"storing a file in thread {new.thread_id!r}"):
            async with self._engine.begin() as connection:
                row = (
                    await connection.execute(
                        _blobs.update()
                        .where(*where)
                        .values(claimed_at=now_utc())
                        .returning(_blobs.c.blob_key, _blobs.c.ready)
                    )
                ).one_or_none()
                if row is not None:
                    return row.blob_key, row.ready
                if quota is not None:
                    used = await connection.execute(
                        sa.select(sa.func.coalesce(sa.func.sum(_blobs.c.size), 0)).where(
                            _blobs.c.user_id == new.user_id
                        )
                    )
                    if used.scalar_one() + new.size > quota:
                        raise QuotaExceeded(
                            f"{new.size} more bytes would take {new.user_id!r} past the quota of {quota}"
                        )
                key = _blob_key(new.user_id, new.sha256)
                inserted = await connection.execute(
                    insert_new(connection.dialect.name, _blobs)
                    .values(
                        user_id=new.user_id,
                        sha256=new.sha256,
                        blob_key=key,
                        size=new.size,
                        ready=False,
                        claimed_at=now_utc(),
                    )
                    .returning(_blobs.c.blob_key)
                )
                if inserted.first() is None:
                    # A concurrent upload of the same bytes created it first: store them too (same key).
                    key = (await connection.execute(sa.select(_blobs.c.blob_key).where(*where))).scalar_one()
                return key, False

    async def _mark_ready(self, new: NewFile, key: str) -> None:
        with translate_errors(f"storing a file in thread {new.thread_id!r}"):
            async with self._engine.begin() as connection:
                marked = await connection.execute(
                    _blobs.update().where(_blobs.c.blob_key == key).values(ready=True)
                )
                if marked.rowcount == 0:
                    # A sweep took the claim for abandoned while the bytes were being stored: they
                    # are nobody's, and `_insert` finds the blob gone and starts again.
                    await _doom(connection, key)
        if marked.rowcount == 0:
            await self._drain([key])

    async def _insert(self, new: NewFile, key: str) -> StoredFile | None:
        """The file's row, referring to the blob; `None` when a delete took the blob meanwhile."""
        stored = StoredFile(
            file_id=str(uuid.uuid4()),
            thread_id=new.thread_id,
            user_id=new.user_id,
            name=new.name,
            media_type=new.media_type,
            size=new.size,
            sha256=new.sha256,
            created_at=now_utc(),
            blob_key=key,
        )
        values = {name: value for name, value in stored.__dict__.items() if name != "blob_key"}
        with translate_errors(f"storing a file in thread {new.thread_id!r}"):
            try:
                async with self._engine.begin() as connection:
                    await connection.execute(_files.insert().values(**values))
                return stored
            except exc.IntegrityError:
                async with self._reader.connect() as connection:
                    thread = await connection.execute(
                        sa.select(_threads.c.thread_id).where(_threads.c.thread_id == new.thread_id)
                    )
                    missing = thread.first() is None
        if missing:
            await self._release([(new.user_id, new.sha256)])
            raise NotFound(f"no thread {new.thread_id!r}")
        return None

    async def _release(
        self, blobs: list[tuple[str, str]], *, unready: bool = False, cutoff: datetime | None = None
    ) -> int:
        """Delete the rows of the blobs no file refers to, then their bytes; return how many went.

        A blob not stored in full is left to its upload, unless `unready` (the upload gave up, or,
        with `cutoff`, claimed it before then).
        """
        doomed: list[str] = []
        for user_id, sha256 in blobs:
            condition = [_blobs.c.user_id == user_id, _blobs.c.sha256 == sha256, ~_referenced()]
            if not unready:
                condition.append(_blobs.c.ready)
            elif cutoff is not None:
                condition.append(sa.or_(_blobs.c.ready, _blobs.c.claimed_at < cutoff))
            with translate_errors("releasing file bytes"):
                try:
                    async with self._engine.begin() as connection:
                        key = (
                            await connection.execute(
                                _blobs.delete().where(*condition).returning(_blobs.c.blob_key)
                            )
                        ).scalar_one_or_none()
                        if key is not None:
                            await _doom(connection, key)
                except exc.IntegrityError:
                    continue  # a file came to use it meanwhile: it stays
            if key is not None:
                doomed.append(key)
        await self._drain(doomed)
        return len(doomed)

    async def _drain(self, keys: list[str]) -> None:
        """Delete the bytes of doomed blobs, then the notes that they were doomed."""
        if not keys:
            return
        self._recent.forget(keys)
        await self.blobs.delete(keys)
        with translate_errors("releasing file bytes"):
            async with self._engine.begin() as connection:
                await connection.execute(_garbage.delete().where(_garbage.c.blob_key.in_(keys)))


async def _doom(connection: AsyncConnection, key: str) -> None:
    await connection.execute(_garbage.insert().values(blob_key=key, created_at=now_utc()))


def _referenced() -> sa.Exists:
    return sa.exists().where(_files.c.user_id == _blobs.c.user_id, _files.c.sha256 == _blobs.c.sha256)


def _blob_key(user_id: str, sha256: str) -> str:
    """A new key, never used before: the user hashed (no user id in object names), the content, a nonce."""
    user = hashlib.sha256(user_id.encode()).hexdigest()[:32]
    return f"files/{user}/{sha256}/{secrets.token_hex(8)}"


def _selected() -> sa.Select[Any]:
    return sa.select(*_files.c, _blobs.c.blob_key).join(
        _blobs, sa.and_(_blobs.c.user_id == _files.c.user_id, _blobs.c.sha256 == _files.c.sha256)
    )


def _stored(row: Mapping[Any, Any]) -> StoredFile:
    return StoredFile(
        file_id=row["file_id"],
        thread_id=row["thread_id"],
        user_id=row["user_id"],
        name=row["name"],
        media_type=row["media_type"],
        size=row["size"],
        sha256=row["sha256"],
        created_at=row["created_at"],
        blob_key=row["blob_key"],
    )
