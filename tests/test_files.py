"""Files in the store: saved once per user and content, scoped to their thread, deleted with it.

On both databases, and with the bytes in the database or in a local directory through obstore.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from store import Database, NewFile, NotFound, QuotaExceeded, StoredFile
from store.blobs_database import CHUNK_BYTES
from store.recent_bytes import FILE_LIMIT
from store.schema import FileBlobRow, FileChunkRow, FileGarbageRow, FileRow, ThreadRow, metadata

from .statements import sent_statements
from .test_cli import run_cli

pytestmark = pytest.mark.anyio

_blobs = metadata.tables[FileBlobRow.__tablename__]
_threads = metadata.tables[ThreadRow.__tablename__]


@pytest.fixture(params=["database", "directory"])
async def db(request: pytest.FixtureRequest, database_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    files_url = None if request.param == "database" else (tmp_path / "blobs").as_uri()
    opened = await Database.connect(database_url, files_url=files_url)
    try:
        yield opened
    finally:
        await opened.aclose()


def new_file(thread_id: str, data: bytes, *, user_id: str = "ann", name: str = "a.txt") -> NewFile:
    return NewFile(
        thread_id=thread_id,
        user_id=user_id,
        name=name,
        media_type="text/plain",
        source=io.BytesIO(data),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


async def stored_bytes(db: Database) -> dict[str, int]:
    """How many blob rows, chunks and doomed keys the database holds, and objects the directory."""
    async with db.engine.connect() as connection:
        counts = {
            table: (
                await connection.execute(sa.select(sa.func.count()).select_from(metadata.tables[table]))
            ).scalar_one()
            for table in (FileBlobRow.__tablename__, FileChunkRow.__tablename__, FileGarbageRow.__tablename__)
        }
    return counts


async def test_a_file_is_read_back_whole_and_in_ranges(db: Database) -> None:
    thread = await db.threads.create(user_id="ann")
    data = bytes(range(256)) * (3 * CHUNK_BYTES // 256 + 7)
    stored = await db.files.save(new_file(thread.thread_id, data))

    got = await db.files.get(stored.file_id, thread_id=thread.thread_id, user_id="ann")
    assert got == stored
    assert await db.files.read_bytes(got) == data
    for start, end in [
        (0, 1),
        (CHUNK_BYTES - 1, CHUNK_BYTES + 1),
        (5, len(data)),
        (len(data) - 3, len(data) + 9),
    ]:
        assert b"".join([p async for p in db.files.stream(got, start, end)]) == data[start:end]
    assert [f.file_id for f in await db.files.list(thread.thread_id)] == [stored.file_id]


async def test_another_threads_or_users_file_is_not_found(db: Database) -> None:
    mine = await db.threads.create(user_id="ann")
    other = await db.threads.create(user_id="ann")
    stored = await db.files.save(new_file(mine.thread_id, b"hello"))
    for thread_id, user_id in [(other.thread_id, "ann"), (mine.thread_id, "bob")]:
        with pytest.raises(NotFound):
            await db.files.get(stored.file_id, thread_id=thread_id, user_id=user_id)
        with pytest.raises(NotFound):
            await db.files.delete(stored.file_id, thread_id=thread_id, user_id=user_id)
        assert await db.files.get_many([stored.file_id], thread_id=thread_id, user_id=user_id) == {}
    assert await db.files.list(mine.thread_id, user_id="bob") == []
    assert await db.files.get_many([stored.file_id, "none"], thread_id=mine.thread_id, user_id="ann") == {
        stored.file_id: stored
    }
    assert await db.files.read_bytes(stored) == b"hello"


async def test_the_same_bytes_are_stored_once_per_user_and_kept_while_a_file_uses_them(db: Database) -> None:
    first = await db.threads.create(user_id="ann")
    second = await db.threads.create(user_id="ann")
    a = await db.files.save(new_file(first.thread_id, b"same bytes"))
    b = await db.files.save(new_file(second.thread_id, b"same bytes", name="b.txt"))
    c = await db.files.save(
        new_file((await db.threads.create(user_id="bob")).thread_id, b"same bytes", user_id="bob")
    )
    assert a.blob_key == b.blob_key != c.blob_key
    assert await db.files.usage("ann") == len(b"same bytes")

    await db.files.delete(a.file_id, thread_id=first.thread_id, user_id="ann")
    assert await db.files.read_bytes(b) == b"same bytes"
    await db.files.delete(b.file_id, thread_id=second.thread_id, user_id="ann")
    with pytest.raises(NotFound):
        await db.files.read_bytes(b)
    assert await db.files.read_bytes(c) == b"same bytes"
    assert (await stored_bytes(db))[FileBlobRow.__tablename__] == 1
    assert await db.files.usage("ann") == 0


async def test_the_quota_counts_bytes_once(db: Database) -> None:
    thread = await db.threads.create(user_id="ann")
    await db.files.save(new_file(thread.thread_id, b"x" * 60), quota=100)
    await db.files.save(new_file(thread.thread_id, b"x" * 60), quota=100)  # the same bytes: nothing new
    with pytest.raises(QuotaExceeded):
        await db.files.save(new_file(thread.thread_id, b"y" * 41), quota=100)
    await db.files.save(new_file(thread.thread_id, b"y" * 40), quota=100)
    assert await db.files.usage("ann") == 100
    assert len(await db.files.list(thread.thread_id)) == 3


async def test_deleting_a_thread_deletes_its_files_and_their_bytes(db: Database, tmp_path: Path) -> None:
    doomed = await db.threads.create(user_id="ann")
    kept = await db.threads.create(user_id="ann")
    await db.files.save(new_file(doomed.thread_id, b"only here"))
    shared = await db.files.save(new_file(doomed.thread_id, b"also kept"))
    other = await db.files.save(new_file(kept.thread_id, b"also kept"))

    await db.delete_thread(doomed.thread_id)

    assert await db.files.list(doomed.thread_id) == []
    assert await db.files.read_bytes(other) == b"also kept"
    assert other.blob_key == shared.blob_key
    counts = await stored_bytes(db)
    assert counts[FileBlobRow.__tablename__] == 1
    assert counts[FileGarbageRow.__tablename__] == 0
    assert counts[FileChunkRow.__tablename__] == (1 if _in_database(db) else 0)
    assert _objects(tmp_path) == ([] if _in_database(db) else [other.blob_key])


async def test_a_purge_deletes_the_files_of_the_threads_it_erases(db: Database, tmp_path: Path) -> None:
    thread = await db.threads.create(user_id="ann")
    await db.files.save(new_file(thread.thread_id, b"old"))
    async with db.engine.begin() as connection:
        await connection.execute(_threads.update().values(updated_at=datetime(2000, 1, 1, tzinfo=UTC)))

    assert (await db.threads.purge(timedelta(days=1))).removed == 1
    assert await db.files.collect() == 1
    assert await stored_bytes(db) == {
        FileBlobRow.__tablename__: 0,
        FileChunkRow.__tablename__: 0,
        FileGarbageRow.__tablename__: 0,
    }
    assert _objects(tmp_path) == []


async def test_a_claim_an_upload_abandoned_is_collected_after_its_grace(db: Database, tmp_path: Path) -> None:
    """An upload that died between claiming a blob and storing its file leaves a claim and maybe bytes."""
    thread = await db.threads.create(user_id="ann")
    new = new_file(thread.thread_id, b"abandoned")
    key, ready = await db.files._claim(new, None)  # pyright: ignore[reportPrivateUsage]  (the crash point)
    assert not ready
    await db.files.blobs.put(key, new.source, new.size)

    assert await db.files.collect() == 0  # it may still be storing them
    assert await db.files.list(thread.thread_id) == []
    assert await db.files.collect(grace=timedelta(0)) == 1
    assert (await stored_bytes(db))[FileChunkRow.__tablename__] == 0
    assert _objects(tmp_path) == []

    # An upload of the same bytes after all that stores them afresh.
    again = await db.files.save(new_file(thread.thread_id, b"abandoned"))
    assert await db.files.read_bytes(again) == b"abandoned"


async def test_a_file_saved_into_a_deleted_thread_is_not_found_and_leaves_nothing(db: Database) -> None:
    thread = await db.threads.create(user_id="ann")
    await db.delete_thread(thread.thread_id)
    with pytest.raises(NotFound):
        await db.files.save(new_file(thread.thread_id, b"too late"))
    assert await stored_bytes(db) == {
        FileBlobRow.__tablename__: 0,
        FileChunkRow.__tablename__: 0,
        FileGarbageRow.__tablename__: 0,
    }


async def test_file_rows_hold_no_bytes(db: Database) -> None:
    thread = await db.threads.create(user_id="ann")
    await db.files.save(new_file(thread.thread_id, b"secret contents"))
    async with db.engine.connect() as connection:
        row = (await connection.execute(sa.select(metadata.tables[FileRow.__tablename__]))).one()
        blob = (await connection.execute(sa.select(_blobs))).one()
    assert b"secret contents" not in repr((row, blob)).encode()


def _in_database(db: Database) -> bool:
    return type(db.files.blobs).__name__ == "DatabaseBlobs"


def _objects(tmp_path: Path) -> list[str]:
    root = tmp_path / "blobs"
    if not root.exists():
        return []
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


async def test_the_purge_command_deletes_the_files_bytes_from_the_configured_store(
    database_url: str, tmp_path: Path
) -> None:
    files_url = (tmp_path / "blobs").as_uri()
    async with await Database.connect(database_url, files_url=files_url) as db:
        old = await db.threads.create(user_id="ann")
        kept = await db.threads.create(user_id="ann")
        await db.files.save(new_file(old.thread_id, b"old bytes"))
        await db.files.save(new_file(old.thread_id, b"shared bytes"))
        shared = await db.files.save(new_file(kept.thread_id, b"shared bytes"))
        async with db.engine.begin() as connection:
            await connection.execute(
                _threads.update()
                .where(_threads.c.thread_id == old.thread_id)
                .values(updated_at=datetime(2000, 1, 1, tzinfo=UTC))
            )

    result = run_cli(
        "purge",
        "--older-than",
        "90d",
        "--db",
        database_url,
        cwd=tmp_path,
        env={"DURABLE_CHAT_FILES_URL": files_url},
    )

    assert result.returncode == 0, result.stderr
    assert _objects(tmp_path) == [shared.blob_key]
    async with await Database.connect(database_url, files_url=files_url) as db:
        assert await db.files.list(old.thread_id) == []
        assert await db.files.read_bytes(shared) == b"shared bytes"


async def test_uploads_of_the_same_bytes_at_once_share_one_blob(db: Database) -> None:
    thread = await db.threads.create(user_id="ann")
    saved: list[str] = []

    async def save() -> None:
        saved.append((await db.files.save(new_file(thread.thread_id, b"at once" * 1000))).blob_key)

    async with anyio.create_task_group() as tasks:
        for _ in range(4):
            tasks.start_soon(save)
    assert len(saved) == 4
    assert len(set(saved)) == 1
    assert (await stored_bytes(db))[FileBlobRow.__tablename__] == 1
    for stored in await db.files.list(thread.thread_id):
        assert await db.files.read_bytes(stored) == b"at once" * 1000


async def test_a_delete_racing_an_upload_of_the_same_bytes_loses_nothing(db: Database) -> None:
    thread = await db.threads.create(user_id="ann")
    data = b"contested" * 1000
    first = await db.files.save(new_file(thread.thread_id, data))

    async def delete() -> None:
        await db.files.delete(first.file_id, thread_id=thread.thread_id, user_id="ann")

    later: list[StoredFile] = []

    async def save() -> None:
        later.append(await db.files.save(new_file(thread.thread_id, data)))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(save)
        tasks.start_soon(delete)
    # Whichever won, the file saved has its bytes.
    assert [f.file_id for f in await db.files.list(thread.thread_id)] == [later[0].file_id]
    assert (
        await db.files.read_bytes(
            await db.files.get(later[0].file_id, thread_id=thread.thread_id, user_id="ann")
        )
        == data
    )


async def test_the_first_read_after_a_save_takes_the_bytes_in_hand_and_a_restart_reads_them(
    database_url: str,
) -> None:
    db = await Database.connect(database_url)
    restarted = await Database.connect(database_url)  # another server process, as after a restart
    try:
        thread = await db.threads.create(user_id="ann")
        data = bytes(range(256)) * (3 * CHUNK_BYTES // 256 + 7)
        big = b"b" * (FILE_LIMIT + 1)
        stored = await db.files.save(new_file(thread.thread_id, data))
        stored_big = await db.files.save(new_file(thread.thread_id, big, name="big.txt"))

        with sent_statements(db.engine) as sent:
            assert await db.files.read_bytes(stored) == data
        assert [s for s in sent if "file_chunks" in s] == []
        for store, file, expected in ((db, stored, data), (db, stored_big, big), (restarted, stored, data)):
            with sent_statements(store.engine) as sent:
                assert await store.files.read_bytes(file) == expected
            assert [s for s in sent if "file_chunks" in s] != []

        # A deleted file's bytes are not handed out from memory either.
        gone = await db.files.save(new_file(thread.thread_id, b"gone", name="gone.txt"))
        await db.files.delete(gone.file_id, thread_id=thread.thread_id, user_id="ann")
        with pytest.raises(NotFound, match="are gone"):
            await db.files.read_bytes(gone)
    finally:
        await restarted.aclose()
        await db.aclose()
