"""The page in Chromium: attaching files (button, paste, drop), their previews on the message, downloads."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from .browser import new_chat, sign_in
from .live_server import LiveServer, auth

CSV = b"order,amount\nORD-5678,99.98\n"


def tiny_png() -> bytes:
    """A real 2x2 PNG, which the browser decodes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_files_are_attached_previewed_and_downloaded(server: LiveServer, page: Page, tmp_path: Path) -> None:
    png = tiny_png()
    (tmp_path / "photo.png").write_bytes(png)
    (tmp_path / "orders.csv").write_bytes(CSV)
    sign_in(page, server)
    new_chat(page)
    page.get_by_test_id("file-input").set_input_files([tmp_path / "photo.png", tmp_path / "orders.csv"])
    expect(page.get_by_test_id("pending-file")).to_have_count(2)
    expect(page.get_by_test_id("pending-file").last).to_contain_text("orders.csv · 28 B")
    message_input = page.get_by_test_id("message-input")
    message_input.fill("Where is my order ORD-5678?")
    message_input.press("Enter")
    expect(page.get_by_test_id("user-message").last).to_have_text("Where is my order ORD-5678?")
    expect(page.get_by_test_id("pending-files")).to_be_hidden()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")

    for _ in range(2):  # as sent, then after a reload
        turn = page.get_by_test_id("user-turn").last
        image = turn.get_by_test_id("attachment-image")
        expect(image).to_have_attribute("alt", "photo.png")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=\"attachment-image\"]')?.naturalWidth === 2"
        )
        chip = turn.get_by_test_id("attachment")
        expect(chip).to_have_text("orders.csv · 28 B")
        with page.expect_download() as downloading:
            chip.click()
        download = downloading.value
        assert download.suggested_filename == "orders.csv"
        assert Path(download.path()).read_bytes() == CSV
        page.reload()
        expect(page.get_by_test_id("user-message").last).to_have_text("Where is my order ORD-5678?")


def test_a_pasted_image_and_a_dropped_file_are_attached(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat(page)
    png = list(tiny_png())
    page.get_by_test_id("message-input").evaluate(
        """(input, bytes) => {
            const data = new DataTransfer();
            data.items.add(new File([new Uint8Array(bytes)], "image.png", { type: "image/png" }));
            input.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }""",
        png,
    )
    expect(page.get_by_test_id("pending-file")).to_have_count(1)
    expect(page.get_by_test_id("pending-file")).to_contain_text("image.png")
    page.get_by_test_id("composer").evaluate(
        """(zone, text) => {
            const data = new DataTransfer();
            data.items.add(new File([text], "notes.md", { type: "text/markdown" }));
            zone.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
        }""",
        "# Notes\n",
    )
    expect(page.get_by_test_id("pending-file")).to_have_count(2)
    expect(page.get_by_test_id("pending-file").last).to_contain_text("notes.md · 8 B")
    # A file the server refuses is said so, and not attached.
    page.get_by_test_id("composer").evaluate(
        """(zone) => {
            const data = new DataTransfer();
            data.items.add(new File(["<!DOCTYPE html><html></html>"], "page.png", { type: "image/png" }));
            zone.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
        }"""
    )
    expect(page.get_by_test_id("send-error")).to_be_visible()
    expect(page.get_by_test_id("pending-file")).to_have_count(2)


def test_a_photo_alone_is_sent_and_another_clients_files_show_live(server: LiveServer, page: Page) -> None:
    token = sign_in(page, server)
    new_chat(page)
    thread_id = re.search(r"thread=([^&]+)", page.url).group(1)  # pyright: ignore[reportOptionalMemberAccess]
    png = list(tiny_png())
    page.get_by_test_id("message-input").evaluate(
        """(input, bytes) => {
            const data = new DataTransfer();
            data.items.add(new File([new Uint8Array(bytes)], "photo.png", { type: "image/png" }));
            input.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }""",
        png,
    )
    expect(page.get_by_test_id("pending-file")).to_have_count(1)
    page.get_by_test_id("message-input").press("Enter")  # no text: the photo alone is the message
    expect(page.get_by_test_id("pending-files")).to_be_hidden()
    expect(page.get_by_test_id("user-turn")).to_have_count(1)
    expect(page.get_by_test_id("user-turn").last.get_by_test_id("attachment-image")).to_have_attribute(
        "alt", "photo.png"
    )
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")

    # Another client (the API) sends a file to the thread this page shows: it appears as it is sent.
    with httpx.Client(base_url=server.base_url, headers=auth(token), timeout=30) as api:
        uploaded = api.post(
            f"/api/threads/{thread_id}/files", files={"file": ("orders.csv", CSV, "text/csv")}
        )
        assert uploaded.status_code == 201, uploaded.text
        sent = api.post(
            f"/api/threads/{thread_id}/messages",
            json={"content": "From my phone", "files": [uploaded.json()["file_id"]]},
        )
        assert sent.status_code == 202, sent.text
    turn = page.get_by_test_id("user-turn").nth(1)
    expect(turn.get_by_test_id("user-message")).to_have_text("From my phone")
    expect(turn.get_by_test_id("attachment")).to_have_text("orders.csv · 28 B")
    with page.expect_download() as downloading:
        turn.get_by_test_id("attachment").click()
    assert Path(downloading.value.path()).read_bytes() == CSV
