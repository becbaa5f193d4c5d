"""The page while a run goes on, and on a phone: stop, what the composer says, titles, the 390 px layout.

The module's server makes the demo model think a little before each response (see `tests.browser`),
so a run lasts long enough to be seen running and to be stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from .browser import (
    PHONE,
    check_accessibility,
    in_viewport,
    new_chat,
    new_chat_and_send,
    opened_context,
    screenshot,
    send,
    sign_in,
)
from .live_server import LiveServer, auth, live_server, sqlite_url

DELAY = {"DURABLE_CHAT_DEMO_DELAY_SECONDS": "0.4"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("page_runs")
    with live_server(sqlite_url(directory), directory, DELAY) as started:
        yield started


def test_stop_a_run_then_the_thread_goes_on(server: LiveServer, page: Page, tmp_path: Path) -> None:
    sign_in(page, server)
    new_chat(page)
    page.get_by_test_id("message-input").fill("loop forever ORD-5678")
    page.get_by_test_id("message-input").press("Enter")
    # Named at once after its first message, before any reply.
    expect(page.get_by_test_id("thread-title")).to_have_text("loop forever ORD-5678")
    expect(page.get_by_test_id("thread-item").first.locator(".thread-name")).to_have_text(
        "loop forever ORD-5678"
    )
    # While it runs: Stop instead of Send, and the composer says why it cannot send.
    stop = page.get_by_test_id("stop")
    expect(stop).to_be_visible()
    expect(page.get_by_test_id("send")).to_be_hidden()
    expect(page.get_by_test_id("composer-hint")).to_have_text(
        "The assistant is replying. Wait for it to finish, or press Stop."
    )
    expect(page.get_by_test_id("run-status")).to_have_text("Replying…")
    expect(page.get_by_test_id("tool-step").nth(1)).to_be_attached()
    check_accessibility(page, "a running run")
    screenshot(page, "running", tmp_path)
    stop.click()

    stopped = page.get_by_test_id("stopped")
    expect(stopped).to_have_count(1)
    expect(page.get_by_test_id("run-status")).to_have_text("Stopped")
    expect(page.get_by_test_id("send")).to_be_visible()
    expect(page.get_by_test_id("composer-hint")).to_be_hidden()
    steps = page.get_by_test_id("tool-step").count()
    assert steps >= 2
    # What is shown is what was stored: a reload shows the same, the stop included.
    page.reload()
    expect(page.get_by_test_id("stopped")).to_have_count(1)
    expect(page.get_by_test_id("run-status")).to_have_text("Stopped")
    expect(page.get_by_test_id("tool-step")).to_have_count(steps)
    expect(page.get_by_test_id("starter-prompts")).to_be_hidden()  # offered in empty threads only
    screenshot(page, "stopped", tmp_path)

    send(page, "Where is my order ORD-9012?")
    expect(page.get_by_test_id("assistant-text").last).to_contain_text("ORD-9012")
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    expect(page.get_by_test_id("stopped")).to_have_count(1)


def test_on_a_phone_the_threads_slide_out_and_the_card_is_in_view(
    server: LiveServer, browser: Browser, tmp_path: Path
) -> None:
    with opened_context(browser, server, viewport=PHONE, is_mobile=True, has_touch=True) as context:
        page = context.new_page()
        sign_in(page, server)
        # The conversation gets the screen; the thread list waits behind a button.
        expect(page.get_by_test_id("new-thread")).to_be_hidden()
        opener = page.get_by_test_id("open-threads")
        expect(opener).to_have_attribute("aria-expanded", "false")
        opener.click()
        expect(page.get_by_test_id("new-thread")).to_be_visible()
        expect(opener).to_have_attribute("aria-expanded", "true")
        check_accessibility(page, "the thread list on a phone")
        screenshot(page, "phone-threads", tmp_path)
        new_chat_and_send(page, "Please refund ORD-5678")
        expect(page.get_by_test_id("new-thread")).to_be_hidden()

        card = page.get_by_test_id("approval-card")
        expect(card.get_by_test_id("approve")).to_be_visible()
        assert in_viewport(page, "approve")
        # Nothing is wider than the screen: long arguments wrap.
        widths = page.evaluate(
            "() => [document.documentElement.scrollWidth, innerWidth,"
            " ...[...document.querySelectorAll('[data-testid=approval-args]')].map(n => n.scrollWidth - n.clientWidth)]"
        )
        assert widths[0] <= widths[1]
        assert all(overflow <= 0 for overflow in widths[2:])
        check_accessibility(page, "a pending approval on a phone")
        screenshot(page, "phone-approval", tmp_path)
        card.get_by_test_id("approve").click()
        expect(page.get_by_test_id("assistant-text").last).to_contain_text("Refunded")
        assert in_viewport(page, "assistant-text")

        # Escape closes the list, and focus goes back to its button.
        opener.click()
        expect(page.get_by_test_id("new-thread")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.get_by_test_id("new-thread")).to_be_hidden()
        expect(opener).to_be_focused()


def test_regenerate_the_last_reply_when_the_server_can(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Where is my order ORD-9012?")
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    regenerate = page.get_by_test_id("regenerate")
    probe = httpx.get(f"{server.base_url}/api/threads/-/regenerate", headers=auth(server.token("alice")))
    if probe.status_code != 405:
        # A server without `POST …/regenerate`: the page offers no button that cannot work.
        assert probe.status_code == 404
        expect(regenerate).to_have_count(0)
        return
    expect(regenerate).to_have_count(1)
    old_run = page.get_by_test_id("assistant-turn").get_attribute("data-run-id")
    regenerate.click()
    expect(page.get_by_test_id("stop")).to_be_visible()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    # The new reply takes the old one's place, live and after a reload.
    for _ in range(2):
        expect(page.get_by_test_id("user-message")).to_have_text(["Where is my order ORD-9012?"])
        expect(page.get_by_test_id("assistant-text")).to_have_count(1)
        expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")
        assert page.get_by_test_id("assistant-turn").get_attribute("data-run-id") != old_run
        page.reload()
