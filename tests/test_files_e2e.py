"""Files over a real server process: `kill -9` in the middle of an upload leaves nothing behind."""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .live_server import LiveServer, auth, sqlite_url
from .waiting import eventually_sync

DEADLINE = 30.0
BOUNDARY = "e2e-boundary-51c2"


@pytest.fixture(params=["database", "directory"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    env = {} if request.param == "database" else {"DURABLE_CHAT_FILES_URL": (tmp_path / "blobs").as_uri()}
    started = LiveServer(sqlite_url(tmp_path), tmp_path, env)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def test_kill_9_mid_upload_leaves_nothing_listed_or_stored(server: LiveServer, tmp_path: Path) -> None:
    headers = auth(server.token("ann"))
    thread_id = httpx.post(f"{server.base_url}/api/threads", json={}, headers=headers).json()["thread_id"]
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    size = 8 * 1024 * 1024
    request = (
        f"POST /api/threads/{thread_id}/files HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: {headers['Authorization']}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {len(head) + size + len(BOUNDARY) + 8}\r\n\r\n"
    ).encode()
    assert not _spooling(server.pid)
    with socket.create_connection(("127.0.0.1", server.port)) as connection:
        connection.sendall(request + head + b"x" * (size // 2))
        # The server is spooling the file: it holds an unnamed temporary file open.
        eventually_sync(lambda: _spooling(server.pid), "the server to spool the upload")
        server.kill()

    server.start()
    listed = httpx.get(f"{server.base_url}/api/threads/{thread_id}/files", headers=headers)
    assert listed.json() == {"files": []}
    with sqlite3.connect(tmp_path / "chat.db") as db:
        counts = [db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in _TABLES]
    assert counts == [0, 0, 0, 0]
    assert _objects(tmp_path / "blobs") == []

    # And the same upload goes through afterwards.
    again = httpx.post(
        f"{server.base_url}/api/threads/{thread_id}/files",
        files={"file": ("small.txt", b"hello\n", "text/plain")},
        headers=headers,
    )
    assert again.status_code == 201, again.text


_TABLES = ("files", "file_blobs", "file_chunks", "file_garbage")


def _spooling(pid: int) -> bool:
    """Whether the process holds a deleted (or never named, `O_TMPFILE`) file open."""
    directory = Path(f"/proc/{pid}/fd")
    for entry in directory.iterdir():
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.endswith("(deleted)"):
            return True
    return False


def _objects(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []
