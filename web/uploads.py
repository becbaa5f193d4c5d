"""Receiving an upload: the multipart body streamed into a spooled file, hashed and sniffed on the way.

Only the piece the server just received is in memory: the file's bytes go to an unnamed temporary
file (gone with the process, however it ends), and the body stops being read the moment the file
passes its limit. Nothing reaches the database before the whole body is in: a client that goes
away, or a server that dies, mid-upload leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from typing import IO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from .errors import ApiError
from .media import Sniffer

__all__ = ("FILE_FIELD", "Upload", "receive_upload")

FILE_FIELD = "file"
"""The form field the file comes in."""

_FORM_OVERHEAD = 64 * 1024
"""What a multipart body may hold besides the file: boundaries, part headers, small fields."""


@dataclass
class Upload:
    """A received file: spooled to disk, with its size, hash and what its bytes look like."""

    spool: IO[bytes]
    filename: str | None = None
    declared_type: str | None = None
    size: int = 0
    sniffer: Sniffer = field(default_factory=Sniffer)
    _hash: hashlib._Hash = field(default_factory=hashlib.sha256)  # pyright: ignore[reportPrivateUsage]

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def close(self) -> None:
        self.spool.close()


class _Form:
    """The parser's callbacks: the `file` part goes to the upload, other parts are counted and dropped."""

    def __init__(self, upload: Upload, max_bytes: int) -> None:
        self.upload = upload
        self.max_bytes = max_bytes
        self.ended = False
        self.received_file = False
        self._in_file = False
        self._other_bytes = 0
        self._header_name = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}

    def on_part_begin(self) -> None:
        self._headers = {}
        self._in_file = False

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]
        self._count(end - start)

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        self._count(end - start)

    def on_header_end(self) -> None:
        self._headers[self._header_name.strip().lower()] = self._header_value.strip()
        self._header_name = self._header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        if options.get(b"name") != FILE_FIELD.encode() or b"filename" not in options:
            return
        if self.received_file:
            raise ApiError(422, "validation_error", f"send one file per request (one {FILE_FIELD!r} part)")
        self.received_file = self._in_file = True
        self.upload.filename = options[b"filename"].decode("utf-8", errors="replace")
        declared = self._headers.get(b"content-type")
        self.upload.declared_type = None if declared is None else declared.decode("latin-1")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if not self._in_file:
            self._count(end - start)
            return
        piece = data[start:end]
        upload = self.upload
        upload.size += len(piece)
        if upload.size > self.max_bytes:
            raise ApiError(413, "file_too_large", f"the file is larger than {self.max_bytes} bytes")
        upload.spool.write(piece)
        upload._hash.update(piece)  # pyright: ignore[reportPrivateUsage]
        upload.sniffer.feed(piece)

    def on_part_end(self) -> None:
        self._in_file = False

    def on_end(self) -> None:
        self.ended = True

    def _count(self, size: int) -> None:
        self._other_bytes += size
        if self._other_bytes > _FORM_OVERHEAD:
            raise ApiError(
                413, "payload_too_large", f"the form holds more than {_FORM_OVERHEAD} bytes besides the file"
            )


async def receive_upload(request: Request, *, max_bytes: int) -> Upload:
    """The file of the request's multipart body, spooled; the caller closes it.

    Raises:
        ApiError: 413 `file_too_large` past `max_bytes` (before reading more when `Content-Length`
            says so already), 415 for a body that is not `multipart/form-data`, 400
            `invalid_multipart` for a malformed or truncated body, 422 without a `file` part.
    """
    content_type, params = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"send the file as multipart/form-data, not {content_type.decode('latin-1') or 'untyped'!r}",
        )
    boundary = params.get(b"boundary")
    if not boundary:
        raise ApiError(400, "invalid_multipart", "the multipart/form-data body has no boundary")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes + _FORM_OVERHEAD:
        raise ApiError(413, "file_too_large", f"the file is larger than {max_bytes} bytes")
    upload = Upload(spool=tempfile.TemporaryFile())  # noqa: SIM115  (the caller closes it)
    form = _Form(upload, max_bytes)
    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": form.on_part_begin,
            "on_header_field": form.on_header_field,
            "on_header_value": form.on_header_value,
            "on_header_end": form.on_header_end,
            "on_headers_finished": form.on_headers_finished,
            "on_part_data": form.on_part_data,
            "on_part_end": form.on_part_end,
            "on_end": form.on_end,
        },
    )
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
        if not form.ended:
            raise ApiError(400, "invalid_multipart", "the multipart body ended before its closing boundary")
        if not form.received_file:
            raise ApiError(422, "validation_error", f"the form has no {FILE_FIELD!r} file part")
    except MultipartParseError as error:
        upload.close()
        raise ApiError(400, "invalid_multipart", f"the multipart body is malformed: {error}") from error
    except BaseException:
        upload.close()
        raise
    upload.sniffer.finish()
    upload.spool.seek(0)
    return upload
