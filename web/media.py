"""What an uploaded file is: its type sniffed from its bytes (never taken on the client's word), its name made safe."""

from __future__ import annotations

import codecs
import contextlib
import posixpath
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

__all__ = (
    "DEFAULT_MEDIA_TYPES",
    "RASTER_IMAGES",
    "Sniffer",
    "UnsupportedType",
    "media_type_of",
    "safe_name",
)

DEFAULT_MEDIA_TYPES = frozenset(
    {
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "application/pdf",
        "text/plain",
        "text/markdown",
        "text/csv",
        "application/json",
    }
)
"""The types an upload may have unless the deployment says otherwise."""

RASTER_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Shown inline when downloaded; every other type is an attachment."""

TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv", "application/json"})
"""Types whose bytes are UTF-8 text: told apart by what the client declared, or the name's extension."""

_BINARY_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"})
"""Types recognised by their magic numbers."""

_MARKUP = frozenset({"text/html", "image/svg+xml", "application/xml", "text/xml", "application/xhtml+xml"})
"""Text that browsers would run as a document: named for what it is, so only a deployment allowing it accepts it."""

_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "text/x-markdown": "text/markdown",
    "application/csv": "text/csv",
    "text/comma-separated-values": "text/csv",
    # What browsers on Windows declare a CSV file as when Excel is installed (an Excel file's own
    # bytes are no text, so they are refused still).
    "application/vnd.ms-excel": "text/csv",
    "text/json": "application/json",
}
_UNDECLARED = frozenset({"", "application/octet-stream"})
_EXTENSIONS = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".json": "application/json",
}

HEAD_BYTES = 8192
"""How much of the start of a file the magic numbers are looked for in."""

_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
"""The control characters (Unicode's Cc) but tab, line feed, form feed and carriage return."""
MAX_NAME_LENGTH = 255


class UnsupportedType(Exception):
    """The file's bytes are of a type not accepted, or not of the type the client declared."""


@dataclass
class Sniffer:
    """Watches a file's bytes go by: keeps its start, and whether the whole is UTF-8 text."""

    head: bytearray = field(default_factory=bytearray)
    text: bool = True
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")()
    )

    def feed(self, data: bytes) -> None:
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        if self.text:
            self._check(data, final=False)

    def finish(self) -> None:
        if self.text:
            self._check(b"", final=True)

    def _check(self, data: bytes, *, final: bool) -> None:
        try:
            decoded = self._decoder.decode(data, final=final)
        except UnicodeDecodeError:
            self.text = False
            return
        # Text has no NULs or other control characters but whitespace (binary data decodes as UTF-8 often enough).
        if _CONTROL.search(decoded):
            self.text = False


def media_type_of(sniffer: Sniffer, *, declared: str | None, name: str, allowed: frozenset[str]) -> str:
    """The file's type: from its bytes, and for text from the declared type or the name's extension.

    Raises:
        UnsupportedType: The type is not `allowed`, or contradicts `declared`.
    """
    if not sniffer.head:
        raise UnsupportedType("the file is empty: there are no bytes to tell its type from")
    claimed = _normalized(declared)
    sniffed = _sniffed(bytes(sniffer.head), text=sniffer.text)
    if sniffed is None:  # text, of the declared type or the one its name suggests
        if claimed is None:
            media_type = _EXTENSIONS.get(posixpath.splitext(name.lower())[1], "text/plain")
        elif claimed in TEXT_TYPES:
            media_type = claimed
        else:
            raise UnsupportedType(f"the file was declared {claimed} but its bytes are text")
    else:
        if claimed is not None and claimed != sniffed:
            raise UnsupportedType(f"the file was declared {claimed} but its bytes are {sniffed}")
        media_type = sniffed
    if media_type not in allowed:
        raise UnsupportedType(f"files of type {media_type} are not accepted")
    return media_type


def _sniffed(head: bytes, *, text: bool) -> str | None:
    """The type the bytes' start shows; `None` for text of no more specific type."""
    import puremagic  # here: the settings read `DEFAULT_MEDIA_TYPES` in commands that sniff nothing

    # (Its `string` parameter is untyped; it takes bytes and returns its guesses, best first.)
    sniff = cast(Callable[[bytes], Sequence[object]], puremagic.magic_string)  # pyright: ignore[reportUnknownMemberType]
    matches: Sequence[object] = ()
    with contextlib.suppress(puremagic.PureError):  # raised for bytes it knows nothing of
        matches = sniff(head)
    types = [t for match in matches if isinstance(t := getattr(match, "mime_type", None), str) and t]
    for media_type in types:
        if media_type in _BINARY_TYPES:
            return media_type
    if text:
        # Markup anywhere in the magic's guesses is named for what it is; other guesses (JSON, CSV) are
        # not trusted over the declared type: any UTF-8 text may look like them.
        if markup := next((t for t in types if t in _MARKUP), None):
            return markup
        if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"<" and _looks_like_markup(head):
            return "text/html"
        return None
    return types[0] if types else "application/octet-stream"


def _looks_like_markup(head: bytes) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:64].lower()
    return start.startswith(
        (b"<!doctype", b"<html", b"<svg", b"<?xml", b"<script", b"<body", b"<head", b"<iframe")
    )


def _normalized(declared: str | None) -> str | None:
    """The declared type without parameters, by its usual name; `None` when the client declared nothing useful."""
    if declared is None:
        return None
    bare = declared.split(";", 1)[0].strip().lower()
    if bare in _UNDECLARED:
        return None
    return _ALIASES.get(bare, bare)


def safe_name(raw: str | None) -> str:
    """A file name fit to store and show: its last path component, no control or format characters,
    NFC, trimmed, at most `MAX_NAME_LENGTH` characters; `file` when nothing is left."""
    if not raw:
        return "file"
    text = unicodedata.normalize("NFC", raw)
    text = text.replace("\\", "/").rsplit("/", 1)[-1]
    # Cc: control characters; Cf: format characters such as the right-to-left override, which can
    # make "photo\u202egnp.exe" read as "photoexe.png".
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp"))
    text = text.strip().strip(".").strip()
    if len(text) > MAX_NAME_LENGTH:
        stem, extension = posixpath.splitext(text)
        extension = extension[:16]
        text = stem[: MAX_NAME_LENGTH - len(extension)] + extension
    return text or "file"
