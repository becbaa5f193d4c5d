"""The files API in process: every status with its error body, scoping, downloads, hostile uploads.

On SQLite and PostgreSQL, with the bytes in the database or in a local directory through obstore.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
import sqlalchemy as sa
from dirty_equals import IsDatetime, IsStr
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.types import Message, Scope

from agent.loader import OWN_PACKAGES
from store.schema import FileBlobRow, FileChunkRow, FileRow, metadata

from .asgi import Api, error_of, open_api

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(200))
PDF = b"%PDF-1.7\n" + b"1 0 obj << >> endobj\n" * 20 + b"%%EOF\n"
HTML = b"<!DOCTYPE html><html><body><script>alert(document.cookie)</script></body></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><rect/></svg>'
MB = 1024 * 1024


@pytest.fixture(params=["database", "directory"])
def files_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return None if request.param == "database" else (tmp_path / "blobs").as_uri()


@pytest.fixture
async def api(database_url: str, tmp_path: Path, files_url: str | None) -> AsyncIterator[Api]:
    env = {} if files_url is None else {"DURABLE_CHAT_FILES_URL": files_url}
    async with open_api(database_url, tmp_path, env=env) as opened:
        yield opened


async def new_thread(api: Api, user: str = "ann") -> str:
    answer = await api.client.post("/api/threads", json={}, headers=api.auth(user))
    assert answer.status_code == 201
    return answer.json()["thread_id"]


async def upload(
    api: Api,
    thread_id: str,
    data: bytes,
    *,
    name: str = "f.bin",
    media_type: str | None = None,
    user: str = "ann",
) -> httpx.Response:
    file = (name, data) if media_type is None else (name, data, media_type)
    return await api.client.post(
        f"/api/threads/{thread_id}/files", files={"file": file}, headers=api.auth(user)
    )


async def test_an_upload_is_listed_downloaded_and_deleted(api: Api) -> None:
    thread_id = await new_thread(api)
    answer = await upload(api, thread_id, PNG, name="photo.png", media_type="image/png")
    assert answer.status_code == 201
    created = answer.json()
    assert created == {
        "file_id": IsStr(),
        "name": "photo.png",
        "media_type": "image/png",
        "size": len(PNG),
        "sha256": hashlib.sha256(PNG).hexdigest(),
        "created_at": IsDatetime(iso_string=True),
    }
    url = f"/api/threads/{thread_id}/files/{created['file_id']}"
    listed = await api.client.get(f"/api/threads/{thread_id}/files", headers=api.auth("ann"))
    assert listed.json() == {"files": [created]}

    got = await api.client.get(url, headers=api.auth("ann"))
    assert got.status_code == 200
    assert got.content == PNG
    assert got.headers["content-type"] == "image/png"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == "sandbox"
    assert got.headers["content-disposition"] == "inline; filename=\"photo.png\"; filename*=UTF-8''photo.png"
    assert got.headers["etag"] == f'"{created["sha256"]}"'

    deleted = await api.client.delete(url, headers=api.auth("ann"))
    assert deleted.status_code == 204
    assert error_of(*_answer(await api.client.get(url, headers=api.auth("ann")))) == (404, "not_found")
    assert error_of(*_answer(await api.client.delete(url, headers=api.auth("ann")))) == (404, "not_found")
    assert (await api.client.get(f"/api/threads/{thread_id}/files", headers=api.auth("ann"))).json() == {
        "files": []
    }
    assert await _rows(api, FileBlobRow.__tablename__) == 0
    assert await _rows(api, FileChunkRow.__tablename__) == 0


async def test_text_and_pdf_are_attachments_typed_by_their_bytes(api: Api) -> None:
    thread_id = await new_thread(api)
    cases = [
        ("notes.md", b"# Title\n\nsome *text*\n", None, "text/markdown"),
        ("orders.csv", b"order,total\nORD-1,9.99\n", "text/csv", "text/csv"),
        ("data.json", b'{"a": [1, 2]}', "application/json", "application/json"),
        ("readme", "plain text, ünïcode\n".encode(), "application/octet-stream", "text/plain"),
        ("invoice.pdf", PDF, "application/pdf", "application/pdf"),
    ]
    for name, data, declared, expected in cases:
        answer = await upload(api, thread_id, data, name=name, media_type=declared)
        assert answer.status_code == 201, answer.text
        assert answer.json()["media_type"] == expected
        got = await api.client.get(
            f"/api/threads/{thread_id}/files/{answer.json()['file_id']}", headers=api.auth("ann")
        )
        assert got.content == data
        assert got.headers["content-type"].split(";")[0] == expected
        assert got.headers["content-disposition"].startswith("attachment; ")


async def test_etags_and_ranges(api: Api) -> None:
    thread_id = await new_thread(api)
    created = (await upload(api, thread_id, PDF, name="a.pdf")).json()
    url = f"/api/threads/{thread_id}/files/{created['file_id']}"
    etag = f'"{created["sha256"]}"'
    auth = api.auth("ann")

    unchanged = await api.client.get(url, headers={**auth, "If-None-Match": etag})
    assert (unchanged.status_code, unchanged.content, unchanged.headers["etag"]) == (304, b"", etag)
    changed = await api.client.get(url, headers={**auth, "If-None-Match": '"other"'})
    assert changed.status_code == 200

    part = await api.client.get(url, headers={**auth, "Range": "bytes=5-14"})
    assert (part.status_code, part.content, part.headers["content-range"]) == (
        206,
        PDF[5:15],
        f"bytes 5-14/{len(PDF)}",
    )
    tail = await api.client.get(url, headers={**auth, "Range": "bytes=-6"})
    assert (tail.status_code, tail.content) == (206, PDF[-6:])
    rest = await api.client.get(url, headers={**auth, "Range": "bytes=100-"})
    assert (rest.status_code, rest.content) == (206, PDF[100:])
    stale = await api.client.get(url, headers={**auth, "Range": "bytes=5-14", "If-Range": '"old"'})
    assert (stale.status_code, stale.content) == (200, PDF)
    several = await api.client.get(url, headers={**auth, "Range": "bytes=0-1,4-5"})
    assert (several.status_code, several.content) == (200, PDF)

    outside = await api.client.get(url, headers={**auth, "Range": f"bytes={len(PDF)}-"})
    assert error_of(*_answer(outside)) == (416, "range_not_satisfiable")
    assert outside.headers["content-range"] == f"bytes */{len(PDF)}"


async def test_another_threads_or_users_file_is_not_found(api: Api) -> None:
    mine = await new_thread(api)
    other = await new_thread(api)
    theirs = await new_thread(api, "bob")
    file_id = (await upload(api, mine, PNG)).json()["file_id"]

    for thread_id, user in [(other, "ann"), (mine, "bob"), (theirs, "bob"), ("no-such-thread", "ann")]:
        url = f"/api/threads/{thread_id}/files/{file_id}"
        assert error_of(*_answer(await api.client.get(url, headers=api.auth(user)))) == (404, "not_found")
        assert error_of(*_answer(await api.client.delete(url, headers=api.auth(user)))) == (404, "not_found")
    for thread_id, user in [(mine, "bob"), ("no-such-thread", "ann")]:
        listed = await api.client.get(f"/api/threads/{thread_id}/files", headers=api.auth(user))
        assert error_of(*_answer(listed)) == (404, "not_found")
        assert error_of(*_answer(await upload(api, thread_id, PNG, user=user))) == (404, "not_found")
    long_id = await api.client.get(f"/api/threads/{mine}/files/{'x' * 300}", headers=api.auth("ann"))
    assert error_of(*_answer(long_id)) == (404, "not_found")
    unauthenticated = await api.client.get(f"/api/threads/{mine}/files/{file_id}")
    assert error_of(*_answer(unauthenticated)) == (401, "missing_token")
    # Still there for its owner.
    assert (
        await api.client.get(f"/api/threads/{mine}/files/{file_id}", headers=api.auth("ann"))
    ).content == PNG


@pytest.mark.parametrize(
    ("data", "declared", "name"),
    [
        pytest.param(HTML, "image/png", "x.png", id="html-as-png"),
        pytest.param(SVG, "image/png", "x.png", id="svg-as-png"),
        pytest.param(SVG, None, "x.svg", id="svg"),
        pytest.param(HTML, "text/plain", "x.txt", id="html-as-text"),
        pytest.param(PNG, "text/plain", "x.txt", id="png-as-text"),
        pytest.param(PNG, "image/jpeg", "x.jpg", id="png-as-jpeg"),
        pytest.param(b"", "text/plain", "empty.txt", id="zero-bytes"),
        pytest.param(b"MZ\x90\x00\x03" + bytes(100), None, "x.exe", id="executable"),
        pytest.param(b"plain\x00binary\xff\xfe", "text/plain", "x.txt", id="binary-as-text"),
    ],
)
async def test_a_type_not_allowed_or_not_as_declared_is_refused(
    api: Api, data: bytes, declared: str | None, name: str
) -> None:
    thread_id = await new_thread(api)
    answer = await upload(api, thread_id, data, name=name, media_type=declared)
    assert error_of(*_answer(answer)) == (415, "unsupported_media_type")
    assert await _rows(api, FileRow.__tablename__) == 0
    assert await _rows(api, FileBlobRow.__tablename__) == 0


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\ann\\report.txt", "report.txt"),
        ("bad\x00na\x1bme\x7f\t.txt", "badname.txt"),
        ("photo\u202egnp.txt", "photognp.txt"),
        ("...", "file"),
        ("x" * 300 + ".txt", "x" * 251 + ".txt"),
    ],
)
async def test_names_are_made_safe(api: Api, raw: str, safe: str) -> None:
    thread_id = await new_thread(api)
    body, content_type = _multipart(
        [(b'form-data; name="file"; filename="' + raw.encode() + b'"', b"text/plain", b"hi\n")]
    )
    answer = await api.client.post(
        f"/api/threads/{thread_id}/files",
        content=body,
        headers={**api.auth("ann"), "Content-Type": content_type},
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["name"] == safe


async def test_malformed_requests(api: Api) -> None:
    thread_id = await new_thread(api)
    url = f"/api/threads/{thread_id}/files"
    auth = api.auth("ann")
    not_form = await api.client.post(url, json={"file": "x"}, headers=auth)
    assert error_of(*_answer(not_form)) == (415, "unsupported_media_type")
    no_boundary = await api.client.post(
        url, content=b"x", headers={**auth, "Content-Type": "multipart/form-data"}
    )
    assert error_of(*_answer(no_boundary)) == (400, "invalid_multipart")
    no_file = await api.client.post(
        url, data={"other": "field"}, files={"notfile": ("a.txt", b"x")}, headers=auth
    )
    assert error_of(*_answer(no_file)) == (422, "validation_error")
    body, content_type = _multipart([(b'form-data; name="file"; filename="a.txt"', b"text/plain", b"a")] * 2)
    two = await api.client.post(url, content=body, headers={**auth, "Content-Type": content_type})
    assert error_of(*_answer(two)) == (422, "validation_error")
    body, content_type = _multipart(
        [(b'form-data; name="file"; filename="a.txt"', b"text/plain", b"abc" * 1000)]
    )
    truncated = await api.client.post(
        url, content=body[: len(body) // 2], headers={**auth, "Content-Type": content_type}
    )
    assert error_of(*_answer(truncated)) == (400, "invalid_multipart")
    garbage = await api.client.post(
        url, content=b"\r\n\r\nnot a form", headers={**auth, "Content-Type": content_type}
    )
    assert error_of(*_answer(garbage)) == (400, "invalid_multipart")
    assert await _rows(api, FileRow.__tablename__) == 0


async def test_a_file_past_the_limit_is_cut_off_unread(api: Api) -> None:
    thread_id = await new_thread(api)
    url = f"/api/threads/{thread_id}/files"
    data = b"a" * (20 * MB + 1)
    told = await upload(api, thread_id, data, name="big.txt", media_type="text/plain")
    assert error_of(*_answer(told)) == (413, "file_too_large")

    # Without a Content-Length, the body is read until the file passes the limit, and no further.
    body, content_type = _multipart(
        [(b'form-data; name="file"; filename="big.txt"', b"text/plain", data + b"a" * (4 * MB))]
    )
    pieces = [body[i : i + MB] for i in range(0, len(body), MB)]
    status, code, unread = await _send_in_pieces(
        api.app, url, pieces, [(b"content-type", content_type.encode()), *_raw(api.auth("ann"))]
    )
    assert (status, code) == (413, "file_too_large")
    assert unread >= 3  # of 25 pieces of 1 MB
    assert await _rows(api, FileRow.__tablename__) == 0

    exactly = await upload(api, thread_id, data[:-1], name="big.txt", media_type="text/plain")
    assert exactly.status_code == 201
    assert exactly.json()["size"] == 20 * MB


async def test_an_upload_is_never_held_whole_in_memory(api: Api, files_url: str | None) -> None:
    thread_id = await new_thread(api)
    body, content_type = _multipart(
        [(b'form-data; name="file"; filename="big.csv"', b"text/csv", b"1,2\n" * (5 * MB))]
    )
    pieces = [body[i : i + 64 * 1024] for i in range(0, len(body), 64 * 1024)]
    del body
    headers = [(b"content-type", content_type.encode()), *_raw(api.auth("ann"))]
    tracemalloc.start()
    try:
        status, _, _ = await _send_in_pieces(api.app, f"/api/threads/{thread_id}/files", pieces, headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 201
    # Of a 20 MB file: a few pieces, and for object storage one part of a multipart put (5 MB, S3's least).
    assert peak < (4 * MB if files_url is None else 9 * MB)


async def test_a_client_gone_mid_upload_leaves_nothing(api: Api) -> None:
    thread_id = await new_thread(api)
    body, content_type = _multipart(
        [(b'form-data; name="file"; filename="a.txt"', b"text/plain", b"x" * 100_000)]
    )
    status, _, _ = await _send_in_pieces(
        api.app,
        f"/api/threads/{thread_id}/files",
        [body[:50_000]],
        [(b"content-type", content_type.encode()), *_raw(api.auth("ann"))],
        hang_up=True,
    )
    assert status == 499 or status >= 400
    assert await _rows(api, FileRow.__tablename__) == 0
    assert await _rows(api, FileBlobRow.__tablename__) == 0


async def test_a_slow_client_holds_nothing_up(api: Api) -> None:
    """An upload whose body trickles in holds no transaction or lock: others upload meanwhile."""
    thread_id = await new_thread(api)
    body, content_type = _multipart(
        [(b'form-data; name="file"; filename="slow.txt"', b"text/plain", b"s" * 300_000)]
    )
    halfway, go_on = anyio.Event(), anyio.Event()
    results: list[tuple[int, str | None, int]] = []

    async def slow() -> None:
        headers = [(b"content-type", content_type.encode()), *_raw(api.auth("ann"))]
        results.append(
            await _send_in_pieces(
                api.app,
                f"/api/threads/{thread_id}/files",
                [body[:1000], body[1000:]],
                headers,
                gate=(halfway, go_on),
            )
        )

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(slow)
        await halfway.wait()
        assert (await upload(api, thread_id, b"quick\n", name="quick.txt")).status_code == 201
        assert (await upload(api, await new_thread(api, "bob"), PNG, user="bob")).status_code == 201
        go_on.set()
    assert results[0][0] == 201
    names = [
        f["name"]
        for f in (await api.client.get(f"/api/threads/{thread_id}/files", headers=api.auth("ann"))).json()[
            "files"
        ]
    ]
    assert names == ["quick.txt", "slow.txt"]


async def test_the_quota(database_url: str, tmp_path: Path) -> None:
    env = {"DURABLE_CHAT_FILE_QUOTA_MB": str(300 / MB), "DURABLE_CHAT_MAX_FILE_MB": str(250 / MB)}
    async with open_api(database_url, tmp_path, env=env) as api:
        thread_id = await new_thread(api)
        assert (await upload(api, thread_id, b"a" * 200, name="a.txt")).status_code == 201
        assert (await upload(api, thread_id, b"a" * 200, name="again.txt")).status_code == 201  # stored once
        over = await upload(api, thread_id, b"b" * 101, name="b.txt")
        assert error_of(*_answer(over)) == (413, "quota_exceeded")
        too_large = await upload(api, thread_id, b"c" * 251, name="c.txt")
        assert error_of(*_answer(too_large)) == (413, "file_too_large")
        assert (await upload(api, thread_id, b"b" * 100, name="b.txt")).status_code == 201
        other_user = await new_thread(api, "bob")
        assert (await upload(api, other_user, b"b" * 250, name="b.txt", user="bob")).status_code == 201


async def test_deleting_the_thread_deletes_its_files(api: Api, files_url: str | None) -> None:
    thread_id = await new_thread(api)
    await upload(api, thread_id, PNG, name="a.png")
    await upload(api, thread_id, PDF, name="a.pdf")
    assert (await api.client.delete(f"/api/threads/{thread_id}", headers=api.auth("ann"))).status_code == 204
    assert await _rows(api, FileRow.__tablename__) == 0
    assert await _rows(api, FileBlobRow.__tablename__) == 0
    assert await _rows(api, FileChunkRow.__tablename__) == 0
    if files_url is not None:
        assert _objects(Path(files_url.removeprefix("file://"))) == []


async def test_files_stay_out_of_the_logs_and_traces(
    api: Api, caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    caplog.set_level(logging.DEBUG)
    thread_id = await new_thread(api)
    answer = await upload(api, thread_id, b"the customer's secret letter\n", name="divorce-papers.txt")
    file_id = answer.json()["file_id"]
    await api.client.get(f"/api/threads/{thread_id}/files/{file_id}", headers=api.auth("ann"))
    await api.client.delete(f"/api/threads/{thread_id}/files/{file_id}", headers=api.auth("ann"))
    # Everything of ours, at any level, and the libraries' warnings (the server keeps them at WARNING).
    logged = "\n".join(
        record.getMessage()
        for record in caplog.records
        if record.name.split(".")[0] in OWN_PACKAGES or record.levelno >= logging.WARNING
    )
    assert file_id in logged  # what is logged: ids and sizes
    assert "divorce" not in logged
    assert "secret letter" not in logged
    traced = repr(
        [(span.name, dict(span.attributes or {}), span.events) for span in spans.get_finished_spans()]
    )
    assert "divorce" not in traced
    assert "secret letter" not in traced


# -- helpers -------------------------------------------------------------------------------------


def _answer(response: httpx.Response) -> tuple[int, bytes]:
    return response.status_code, response.content


async def _rows(api: Api, table: str) -> int:
    from web.services import Services

    services = api.app.state.services
    assert isinstance(services, Services)
    async with services.db.engine.connect() as connection:
        query = sa.select(sa.func.count()).select_from(metadata.tables[table])
        return (await connection.execute(query)).scalar_one()


def _multipart(parts: list[tuple[bytes, bytes, bytes]]) -> tuple[bytes, str]:
    boundary = b"test-boundary-7f3a"
    body = b"".join(
        b"--"
        + boundary
        + b"\r\nContent-Disposition: "
        + disposition
        + b"\r\nContent-Type: "
        + media
        + b"\r\n\r\n"
        + data
        + b"\r\n"
        for disposition, media, data in parts
    )
    return body + b"--" + boundary + b"--\r\n", f"multipart/form-data; boundary={boundary.decode()}"


def _objects(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode(), value.encode()) for name, value in headers.items()]


async def _send_in_pieces(
    app: Starlette,
    path: str,
    pieces: list[bytes],
    headers: list[tuple[bytes, bytes]],
    *,
    hang_up: bool = False,
    gate: tuple[anyio.Event, anyio.Event] | None = None,
) -> tuple[int, str | None, int]:
    """POST `pieces` as a server would, without a Content-Length; the status, error code and pieces left unread.

    With `gate` (reached, go on): after the first piece, set the first event and wait for the second.
    """
    left = [
        {"type": "http.request", "body": piece, "more_body": hang_up or i < len(pieces) - 1}
        for i, piece in enumerate(pieces)
    ]
    start: dict[str, object] = {}
    content = bytearray()

    given = 0

    async def receive() -> Message:
        nonlocal given
        if gate is not None and given == 1:
            gate[0].set()
            await gate[1].wait()
        given += 1
        if left:
            return left.pop(0)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            content.extend(message.get("body", b""))

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    with anyio.fail_after(60):
        await app(scope, receive, send)
    status = int(str(start.get("status", 499)))
    code = json.loads(content)["error"]["code"] if content and status >= 400 else None
    return status, code, len(left)
