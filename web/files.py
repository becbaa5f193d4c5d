"""The files API: upload a thread's files, list, download and delete them.

Scoped like every thread endpoint: another user's thread, or a file of another thread, is a
`404`, exactly as one that does not exist. How a file is received and typed is in
`web.uploads` and `web.media`; where its bytes are kept, `store.files`.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from store import NewFile, NotFound, QuotaExceeded, StoredFile

from .access import owned_thread, user_of
from .errors import ApiError
from .media import RASTER_IMAGES, UnsupportedType, media_type_of, safe_name
from .responses import JsonResponse
from .services import services
from .text import unstorable
from .uploads import receive_upload

__all__ = ("file_json", "file_routes")

logger = logging.getLogger(__name__)

_MAX_ID_LENGTH = 200


def file_routes() -> list[BaseRoute]:
    return [
        Route("/api/threads/{thread_id}/files", upload_file, methods=["POST"]),
        Route("/api/threads/{thread_id}/files", list_files, methods=["GET"]),
        Route("/api/threads/{thread_id}/files/{file_id}", download_file, methods=["GET"]),
        Route("/api/threads/{thread_id}/files/{file_id}", delete_file, methods=["DELETE"]),
    ]


async def upload_file(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    thread = await owned_thread(request, s, user_id)
    upload = await receive_upload(request, max_bytes=s.settings.max_file_bytes)
    try:
        name = safe_name(upload.filename)
        try:
            media_type = media_type_of(
                upload.sniffer, declared=upload.declared_type, name=name, allowed=s.settings.file_types
            )
        except UnsupportedType as error:
            raise ApiError(415, "unsupported_media_type", str(error)) from error
        new = NewFile(
            thread_id=thread.thread_id,
            user_id=user_id,
            name=name,
            media_type=media_type,
            source=upload.spool,
            size=upload.size,
            sha256=upload.sha256,
        )
        try:
            stored = await s.db.files.save(new, quota=s.settings.file_quota_bytes)
        except QuotaExceeded as error:
            raise ApiError(
                413,
                "quota_exceeded",
                f"this file would take your files past their quota of {s.settings.file_quota_bytes} bytes",
            ) from error
        except NotFound as error:  # the thread was deleted meanwhile
            raise ApiError.not_found(f"no thread {thread.thread_id!r}") from error
    finally:
        upload.close()
    return JsonResponse(file_json(stored), status_code=201)


async def list_files(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s)
    thread = await owned_thread(request, s, user_id)
    files = await s.db.files.list(thread.thread_id, user_id=user_id)
    return JsonResponse({"files": [file_json(f) for f in files]})


async def download_file(request: Request) -> Response:
    s = services(request)
    stored = await _owned_file(request)
    etag = f'"{stored.sha256}"'
    headers = {
        "ETag": etag,
        "Accept-Ranges": "bytes",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Content-Disposition": _disposition(stored),
    }
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    window = _range(request, stored, etag)
    if window is None:
        start, end, status = 0, stored.size, 200
    else:
        start, end = window
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{stored.size}"
    headers["Content-Length"] = str(end - start)
    return StreamingResponse(
        s.db.files.stream(stored, start, end),
        status_code=status,
        media_type=stored.media_type,
        headers=headers,
    )


async def delete_file(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    thread = await owned_thread(request, s, user_id)
    file_id = _file_id(request)
    try:
        await s.db.files.delete(file_id, thread_id=thread.thread_id, user_id=user_id)
    except NotFound as error:
        raise ApiError.not_found(f"no file {file_id!r}") from error
    return Response(status_code=204)


def file_json(stored: StoredFile) -> dict[str, object]:
    return {
        "file_id": stored.file_id,
        "name": stored.name,
        "media_type": stored.media_type,
        "size": stored.size,
        "sha256": stored.sha256,
        "created_at": stored.created_at.isoformat(),
    }


async def _owned_file(request: Request) -> StoredFile:
    s = services(request)
    user_id = user_of(request, s)
    thread = await owned_thread(request, s, user_id)
    file_id = _file_id(request)
    try:
        return await s.db.files.get(file_id, thread_id=thread.thread_id, user_id=user_id)
    except NotFound as error:
        raise ApiError.not_found(f"no file {file_id!r}") from error


def _file_id(request: Request) -> str:
    value = str(request.path_params["file_id"])
    if len(value) > _MAX_ID_LENGTH or unstorable(value):
        raise ApiError.not_found(f"no file {value[:_MAX_ID_LENGTH]!r}")
    return value


def _disposition(stored: StoredFile) -> str:
    """Raster images may show in the page; anything else is only ever saved (never rendered by the browser)."""
    kind = "inline" if stored.media_type in RASTER_IMAGES else "attachment"
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in stored.name)
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(stored.name, safe='')}"


def _matches(header: str | None, etag: str) -> bool:
    if header is None:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in header.split(",")]
    return "*" in tags or etag in tags


def _range(request: Request, stored: StoredFile, etag: str) -> tuple[int, int] | None:
    """The one byte range asked for, as (start, end exclusive); `None` for the whole file.

    Several ranges, or a malformed header, are answered with the whole file, as RFC 9110 allows.

    Raises:
        ApiError: 416 `range_not_satisfiable` for a range past the end of the file.
    """
    header = request.headers.get("range")
    if header is None or not header.startswith("bytes=") or "," in header:
        return None
    if_range = request.headers.get("if-range")
    if if_range is not None and if_range.strip() != etag:
        return None
    first, _, last = header.removeprefix("bytes=").strip().partition("-")
    if not (first.isdigit() or first == "") or not (last.isdigit() or last == "") or first == last == "":
        return None
    size = stored.size
    if first == "":
        start, end = max(0, size - int(last)), size
        if int(last) == 0:
            start = size
    else:
        start = int(first)
        end = size if last == "" else min(int(last) + 1, size)
        if last != "" and int(last) < start:
            return None
    if start >= size or start >= end:
        raise ApiError(
            416,
            "range_not_satisfiable",
            f"the range {header!r} lies outside the file's {size} bytes",
            headers={"Content-Range": f"bytes */{size}"},
        )
    return start, end
