"""The browser page, driven by Playwright in Debian's headless Chromium against a real server.

One server for the module (the demo model, a fresh SQLite file); each test signs in through the
URL fragment, opens its own new thread and uses the page as a person would (see `tests.browser`).
"""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import Page, expect

from .browser import check_accessibility, new_chat_and_send, screenshot, sign_in
from .live_server import LiveServer


def test_refund_with_approval(server: LiveServer, page: Page, tmp_path: Path) -> None:
    sign_in(page, server)
    screenshot(page, "empty", tmp_path)
    new_chat_and_send(page, "Please refund ORD-5678")
    steps = page.get_by_test_id("tool-step")
    expect(steps.filter(has_text="Lookup order · ORD-5678")).to_have_count(1)
    calls = page.get_by_test_id("tool-call")
    expect(calls.filter(has_text="issue_refund")).to_contain_text("99.98")
    lookup = page.get_by_test_id("tool-result").filter(has_text="lookup_order")
    expect(lookup).to_contain_text("success")
    # Tool steps are collapsed, with a readable label and their status.
    expect(steps.first.get_by_test_id("tool-label")).to_be_visible()
    expect(steps.first.get_by_test_id("tool-call")).to_be_hidden()

    card = page.get_by_test_id("approval-card")
    expect(card).to_have_count(1)
    expect(card).to_contain_text("issue_refund")
    expect(card.get_by_test_id("approval-args")).to_contain_text('"amount": 99.98')
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "awaiting_approval")
    expect(steps.filter(has_text="Issue refund")).to_have_attribute("data-status", "waiting")
    check_accessibility(page, "a pending approval")
    screenshot(page, "approval-pending", tmp_path)
    card.get_by_test_id("approve").click()

    expect(card.get_by_test_id("approval-decision")).to_contain_text("Approved by alice")
    expect(card.get_by_test_id("approve")).to_have_count(0)
    refund = page.get_by_test_id("tool-result").filter(has_text="issue_refund")
    expect(refund).to_have_attribute("data-outcome", "success")
    final = page.get_by_test_id("assistant-text").last
    expect(final).to_contain_text("Refunded $99.98 for ORD-5678.")
    # Replies are rendered as markdown: a paragraph, not raw text.
    expect(final.locator("p")).to_have_count(1)
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    current = page.get_by_test_id("thread-item").first
    expect(current).to_have_attribute("aria-current", "true")
    # The new thread is named after its first message, in the list and in the header.
    expect(current.locator(".thread-name")).to_have_text("Please refund ORD-5678")
    expect(page.get_by_test_id("thread-title")).to_have_text("Please refund ORD-5678")
    check_accessibility(page, "a decided approval")
    screenshot(page, "conversation", tmp_path)
    steps.first.locator("summary").click()
    expect(steps.first.get_by_test_id("tool-call")).to_be_visible()
    screenshot(page, "tool-step-open", tmp_path)


def test_reload_mid_stream_shows_the_whole_conversation(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Where is my order ORD-9012?")
    # Reload as soon as the run shows anything: what was stored plus the events after it is everything.
    expect(page.get_by_test_id("tool-call").first).to_be_attached()
    page.reload()
    _expect_whole_lookup_conversation(page)
    # A second reload, after the run ended, shows the same conversation from stored messages alone.
    page.reload()
    _expect_whole_lookup_conversation(page)


def _expect_whole_lookup_conversation(page: Page) -> None:
    expect(page.get_by_test_id("user-message")).to_have_text(["Where is my order ORD-9012?"])
    expect(page.get_by_test_id("tool-call")).to_have_count(1)
    expect(page.get_by_test_id("tool-call")).to_contain_text("lookup_order")
    expect(page.get_by_test_id("tool-result")).to_have_count(1)
    expect(page.get_by_test_id("assistant-text")).to_have_count(1)
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")


def test_edit_arguments_then_approve(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please refund ORD-9012")
    card = page.get_by_test_id("approval-card")
    card.get_by_test_id("edit").click()
    editor = card.get_by_test_id("args-editor")
    expect(editor).to_be_focused()
    args = json.loads(editor.input_value())

    # Invalid JSON never reaches the server; arguments that fail the tool's schema come back as a 422.
    editor.fill("{not json")
    card.get_by_test_id("save-approve").click()
    expect(card.get_by_test_id("approval-error")).to_contain_text("Invalid JSON")
    editor.fill(json.dumps({**args, "amount": "fifty"}))
    card.get_by_test_id("save-approve").click()
    expect(card.get_by_test_id("approval-error")).to_contain_text("amount")
    expect(card.get_by_test_id("approve")).to_be_visible()

    editor.fill(json.dumps({**args, "amount": 50}, indent=2))
    card.get_by_test_id("save-approve").click()
    expect(card.get_by_test_id("approval-decision")).to_contain_text("Approved")
    expect(card.get_by_test_id("approval-edit")).to_have_text(["amount: 149.99 → 50"])
    expect(page.get_by_test_id("tool-result").filter(has_text="issue_refund")).to_contain_text("50")
    expect(page.get_by_test_id("assistant-text").last).to_contain_text("Refunded $50.00")
    # The call's line shows the arguments that ran, and says a human changed them.
    call = page.get_by_test_id("tool-call").filter(has_text="issue_refund")
    expect(call.get_by_test_id("tool-args")).to_contain_text('"amount":50')
    expect(call.get_by_test_id("edited-marker")).to_have_count(1)


def test_reject_with_a_reason(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please refund ORD-3456")
    card = page.get_by_test_id("approval-card")
    card.get_by_test_id("reject").click()
    reason = card.get_by_test_id("reason-input")
    expect(reason).to_be_focused()
    reason.fill("not eligible")
    reason.press("Enter")
    expect(card.get_by_test_id("approval-decision")).to_contain_text("Rejected")
    expect(card.get_by_test_id("approval-reason")).to_have_text("Reason: “not eligible”")
    refund = page.get_by_test_id("tool-result").filter(has_text="issue_refund")
    expect(refund).to_have_attribute("data-outcome", "denied")
    expect(page.get_by_test_id("tool-step").filter(has_text="Issue refund")).to_have_attribute(
        "data-status", "denied"
    )
    expect(page.get_by_test_id("assistant-text").last).to_contain_text("not eligible")


def test_reconnects_after_the_server_restarts(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Where is my order ORD-9012?")
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")
    expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")

    server.stop()
    server.start()
    message_input = page.get_by_test_id("message-input")
    message_input.fill("Where is my order ORD-3456?")
    page.get_by_test_id("send").click()
    # The stream resumed after its last id: the new run shows, and nothing before it doubled.
    expect(page.get_by_test_id("user-message")).to_have_count(2)
    expect(page.get_by_test_id("assistant-text")).to_have_count(2)
    expect(page.get_by_test_id("assistant-text").last).to_contain_text("ORD-3456")
    expect(page.get_by_test_id("tool-call")).to_have_count(2)


def test_the_composer_says_why_it_cannot_send_while_a_decision_is_pending(
    server: LiveServer, page: Page
) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please refund ORD-5678")
    expect(page.get_by_test_id("approval-card")).to_be_visible()
    hint = page.get_by_test_id("composer-hint")
    expect(hint).to_have_text(
        "A decision is pending: approve or reject the request above before sending a new message."
    )
    expect(page.get_by_test_id("send")).to_be_disabled()
    message_input = page.get_by_test_id("message-input")
    message_input.fill("hello?")
    message_input.press("Enter")
    # Nothing was sent: no raw error, the text stays for later.
    expect(page.get_by_test_id("send-error")).to_be_hidden()
    expect(message_input).to_have_value("hello?")
    expect(page.get_by_test_id("user-message")).to_have_count(1)
    page.get_by_test_id("approval-card").get_by_test_id("approve").click()
    expect(hint).to_be_hidden()
    expect(page.get_by_test_id("send")).to_be_enabled()


def test_without_a_token_the_page_asks_for_one(server: LiveServer, page: Page, tmp_path: Path) -> None:
    page.goto("/")
    form = page.get_by_test_id("token-form")
    expect(form).to_be_visible()
    check_accessibility(page, "the sign-in form")
    screenshot(page, "sign-in", tmp_path)
    page.get_by_test_id("token-input").fill("v1.bogus.1.bad")
    page.get_by_test_id("sign-in").click()
    expect(page.get_by_test_id("token-error")).to_be_visible()
    page.get_by_test_id("token-input").fill(server.token("alice"))
    page.get_by_test_id("sign-in").click()
    expect(page.get_by_test_id("new-thread")).to_be_visible()
    expect(page.get_by_test_id("signed-in-as")).to_have_text("Signed in as alice")


def test_reload_during_a_long_run_loses_and_doubles_nothing(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    # The demo model calls a tool again after every result until the run's turn limit stops it,
    # with one closing text at the end: a run long enough to reload in the middle of.
    new_chat_and_send(page, "loop forever ORD-5678")
    expect(page.get_by_test_id("tool-call").nth(1)).to_be_attached()
    page.reload()
    expect(page.get_by_test_id("assistant-text")).to_have_count(1)
    live = transcript_lines(page)
    page.reload()
    expect(page.get_by_test_id("assistant-text")).to_have_count(1)
    assert transcript_lines(page) == live


def transcript_lines(page: Page) -> list[str]:
    """What the transcript shows, one line per item, with times (which move) left out."""
    items = page.get_by_test_id("transcript").locator(":scope > *")
    lines: list[str] = []
    for item in items.all():
        texts = item.evaluate(
            "node => { const copy = node.cloneNode(true); copy.querySelectorAll('time').forEach(t => t.remove());"
            " return copy.textContent; }"
        )
        lines.append(f"{item.get_attribute('data-testid')}: {' '.join(str(texts).split())}")
    return lines
