"""Files that arrive inside a message as data URLs (the AI SDK's `file` parts, AG-UI's binary parts).

Each is checked as an upload is (`web.files`: size, type sniffed from the bytes, name, quota) and
stored as a file of the thread, so the message attaches it by id like any other. A data URL is
whole in the request body: the body limit of those endpoints grows by the file limit
(`inline_body_limit`); the multipart endpoint streams and suits large files better.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from urllib.parse import unquote_to_bytes

from store import NewFile, NotFound, QuotaExceeded, StoredFile

from .errors import ApiError
from .media import Sniffer, UnsupportedType, media_type_of, safe_name
from .services import Services

__all__ = ("InlineFiles", "decode_data_url", "inline_body_limit", "inline_files_of", "save_inline_file")

InlineFiles = dict[tuple[str, str], StoredFile]
"""A thread's files by (sha256, name): what a message's data URLs may be already."""


async def inline_files_of(s: Services, thread_id: str, user_id: str) -> InlineFiles:
    """The thread's files by content and name, for `save_inline_file(known=...)`."""
    return {(f.sha256, f.name): f for f in await s.db.files.list(thread_id, user_id=user_id)}


def inline_body_limit(s: Services) -> int:
    """The body limit of an endpoint that takes files as data URLs: one file at the limit, in base64, and the rest."""
    return s.settings.max_body_bytes + (s.settings.max_file_bytes * 4) // 3 + 1024


def decode_data_url(url: str) -> tuple[str | None, bytes]:
    """The declared type and the bytes of a `data:` URL.

    Raises:
        ApiError: 422 `validation_error` for anything but a well-formed data URL.
    """
    if not url.startswith("data:") or "," not in url:
        raise ApiError(422, "validation_error", "a file must be given as a data: URL")
    header, _, payload = url[5:].partition(",")
    fields = header.split(";")
    declared = fields[0] or None
    try:
        if "base64" in fields[1:]:
            return declared, base64.b64decode(payload, validate=True)
        return declared, unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as error:
        raise ApiError(422, "validation_error", "the file's data: URL is not valid base64") from error


async def save_inline_file(
    s: Services,
    thread_id: str,
    user_id: str,
    *,
    data: bytes,
    declared: str | None,
    name: str | None,
    known: InlineFiles | None = None,
) -> StoredFile:
    """Store bytes a message carried as a file of the thread, checked as an upload is.

    `known`: the thread's files (`inline_files_of`); one with the same bytes and name is the file,
    not stored again: a client that retries its POST (as `useChat` does) resends its data URLs.

    Raises:
        ApiError: 413 `file_too_large` or `quota_exceeded`, 415 `unsupported_media_type`, 404 for a thread gone.
    """
    limit = s.settings.max_file_bytes
    if len(data) > limit:
        raise ApiError(413, "file_too_large", f"the file is larger than the limit of {limit} bytes")
    safe = safe_name(name)
    sha256 = hashlib.sha256(data).hexdigest()
    if known is not None and (same := known.get((sha256, safe))) is not None:
        return same
    sniffer = Sniffer()
    sniffer.feed(data)
    sniffer.finish()
    try:
        media_type = media_type_of(sniffer, declared=declared, name=safe, allowed=s.settings.file_types)
    except UnsupportedType as error:
        raise ApiError(415, "unsupported_media_type", str(error)) from error
    new = NewFile(
        thread_id=thread_id,
        user_id=user_id,
        name=safe,
        media_type=media_type,
        source=io.BytesIO(data),
        size=len(data),
        sha256=sha256,
    )
    try:
        stored = await s.db.files.save(new, quota=s.settings.file_quota_bytes)
    except QuotaExceeded as error:
        raise ApiError(
            413,
            "quota_exceeded",
            f"this file would take your files past their quota of {s.settings.file_quota_bytes} bytes",
        ) from error
    except NotFound as error:
        raise ApiError.not_found(f"no thread {thread_id!r}") from error
    if known is not None:
        known[(sha256, safe)] = stored  # the same file twice in one message is stored once
    return stored
