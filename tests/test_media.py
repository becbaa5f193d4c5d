"""Sniffing an upload's type from its bytes, and making its name safe: pure functions, tested alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web.media import DEFAULT_MEDIA_TYPES, Sniffer, UnsupportedType, media_type_of, safe_name
from web.settings import Settings, SettingsError

JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01" + bytes(50)
GIF = b"GIF89a" + bytes(50)
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(50)
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(50)


def sniffed(data: bytes, *, declared: str | None = None, name: str = "f", pieces: int = 1) -> str:
    sniffer = Sniffer()
    size = max(1, len(data) // pieces)
    for start in range(0, len(data), size):
        sniffer.feed(data[start : start + size])
    sniffer.finish()
    return media_type_of(sniffer, declared=declared, name=name, allowed=DEFAULT_MEDIA_TYPES)


@pytest.mark.parametrize(
    ("data", "declared", "name", "expected"),
    [
        (JPEG, "image/jpg", "a.jpg", "image/jpeg"),
        (GIF, None, "a", "image/gif"),
        (WEBP, "image/webp; charset=binary", "a.webp", "image/webp"),
        (PNG, "application/octet-stream", "a", "image/png"),
        (b"\xef\xbb\xbfhello", None, "a.txt", "text/plain"),
        (b"# notes", "text/x-markdown", "a", "text/markdown"),
        (b"a,b", None, "ORDERS.CSV", "text/csv"),
        (b"[1, 2]", None, "x.json", "application/json"),
        (b"a,b\n1,2\n", "application/vnd.ms-excel", "orders.csv", "text/csv"),
        (b"# notes", "text/markdown", "notes.txt", "text/markdown"),
        (b"tab\tand\r\nnewlines\x0c", "text/plain", "a", "text/plain"),
    ],
)
def test_types_sniffed_from_the_bytes(data: bytes, declared: str | None, name: str, expected: str) -> None:
    assert sniffed(data, declared=declared, name=name) == expected


@pytest.mark.parametrize(
    ("data", "declared", "message"),
    [
        (b"", "text/plain", "the file is empty: there are no bytes to tell its type from"),
        (PNG, "image/gif", "the file was declared image/gif but its bytes are image/png"),
        (
            b"<html><body>hi</body></html>",
            "text/plain",
            "the file was declared text/plain but its bytes are text/html",
        ),
        (b"  <svg onload='x'/>", None, "files of type text/html are not accepted"),
        (b"text", "image/png", "the file was declared image/png but its bytes are text"),
        (b"text", "text/html", "the file was declared text/html but its bytes are text"),
        (
            b"bell\x07",
            "text/plain",
            "the file was declared text/plain but its bytes are application/octet-stream",
        ),
    ],
)
def test_refused_types_say_why(data: bytes, declared: str | None, message: str) -> None:
    with pytest.raises(UnsupportedType) as refused:
        sniffed(data, declared=declared)
    assert str(refused.value) == message


@given(st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs"))).map(str.encode), st.integers(1, 9))
def test_text_split_anywhere_is_still_text(data: bytes, pieces: int) -> None:
    sniffer = Sniffer()
    size = max(1, len(data) // pieces)
    for start in range(0, len(data), size):
        sniffer.feed(data[start : start + size])
    sniffer.finish()
    assert sniffer.text


def test_a_truncated_character_is_not_text() -> None:
    sniffer = Sniffer()
    sniffer.feed("é".encode()[:1])
    sniffer.finish()
    assert not sniffer.text


@given(st.text())
def test_any_name_becomes_a_safe_one(raw: str) -> None:
    name = safe_name(raw)
    assert name
    assert len(name) <= 255
    assert "/" not in name
    assert "\\" not in name
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in name)
    assert name == safe_name(name)


def test_file_settings_from_the_environment(tmp_path: object) -> None:
    env = {
        "DURABLE_CHAT_MAX_FILE_MB": "2.5",
        "DURABLE_CHAT_FILE_QUOTA_MB": "10",
        "DURABLE_CHAT_FILE_TYPES": "image/png, Text/Plain",
        "DURABLE_CHAT_FILES_URL": "s3://bucket/files",
    }
    settings = Settings.load(database_url="sqlite+aiosqlite:///x.db", secret="s" * 32, environ=env)
    assert settings.max_file_bytes == 2_621_440
    assert settings.file_quota_bytes == 10 * 1024 * 1024
    assert settings.file_types == {"image/png", "text/plain"}
    assert settings.files_url == "s3://bucket/files"
    defaults = Settings.load(database_url="sqlite+aiosqlite:///x.db", secret="s" * 32, environ={})
    assert (defaults.max_file_bytes, defaults.files_url) == (20 * 1024 * 1024, None)
    assert defaults.file_types == DEFAULT_MEDIA_TYPES
    for name, value in [("DURABLE_CHAT_FILE_TYPES", "png"), ("DURABLE_CHAT_MAX_FILE_MB", "0")]:
        with pytest.raises(SettingsError):
            Settings.load(database_url="sqlite+aiosqlite:///x.db", secret="s" * 32, environ={name: value})
