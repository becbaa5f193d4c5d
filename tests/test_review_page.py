"""The review page (`/review`) in Chromium, beside the customer's chat page, on the staffed shop.

One server for the module (see `tests.browser`); the reviewer and the customer each get their own
browser context (their own storage), as two people on two machines would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from .browser import PHONE, check_accessibility, new_chat_and_send, opened_context, screenshot, sign_in
from .live_server import LiveServer, sqlite_url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("review_page")
    started = LiveServer(sqlite_url(directory), directory, app="agent.demo:staffed_shop_app")
    started.start()
    yield started
    started.stop()


def _open_review(
    page: Page, server: LiveServer, user: str = "sam", roles: tuple[str, ...] = ("support",)
) -> None:
    token = server.token(user, roles=roles)
    page.goto(f"/review#token={token}")
    expect(page.get_by_test_id("connection")).to_have_text("● live")
    assert token not in page.url


def _item(page: Page, text: str) -> Locator:
    item = page.get_by_test_id("pending-items").get_by_test_id("review-item").filter(has_text=text)
    expect(item).to_have_count(1)
    return item


def test_a_reviewer_approves_and_rejects_while_the_customer_watches(
    server: LiveServer, browser: Browser, tmp_path: Path
) -> None:
    with opened_context(browser, server) as staff, opened_context(browser, server) as shopper:
        review = staff.new_page()
        _open_review(review, server)
        customer = shopper.new_page()
        sign_in(customer, server, "carol")

        # The customer asks; the reviewer's queue shows it at once, from the live stream.
        new_chat_and_send(customer, "Please refund ORD-9012")
        waiting = customer.get_by_test_id("approval-card")
        expect(waiting.get_by_test_id("awaiting-reviewer")).to_contain_text("support")
        expect(waiting.get_by_test_id("approve")).to_have_count(0)
        item = _item(review, "Please refund ORD-9012")
        expect(item.get_by_test_id("item-meta")).to_contain_text("carol · for support")
        expect(item.get_by_test_id("deadline")).to_have_text(re.compile(r"^Expires in 3h 59m$"))
        expect(review.get_by_test_id("pending-count")).to_have_text("1")
        context = item.get_by_test_id("approval-context")
        expect(context.locator("dt")).to_have_text(
            ["Order", "Status", "Total", "Already refunded", "Refundable"]
        )
        expect(context.locator("dd").nth(2)).to_have_text("$149.99")
        item.get_by_test_id("conversation").locator("summary").click()
        expect(item.get_by_test_id("user-message")).to_have_text("Please refund ORD-9012")
        expect(item.get_by_test_id("tool-step")).to_have_count(2)
        expect(item.get_by_test_id("tool-step").last).to_have_attribute("data-status", "waiting")
        check_accessibility(review, "the review queue with a call open")
        screenshot(review, "review-queue", tmp_path, full_page=True)

        item.get_by_test_id("approve").click()
        expect(item.get_by_test_id("approval-decision")).to_contain_text("Approved by sam")
        expect(review.get_by_test_id("pending-count")).to_have_text("0")
        # The customer's page follows: the decision, then the resumed run's reply.
        expect(waiting.get_by_test_id("approval-decision")).to_contain_text("Approved by sam")
        expect(customer.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
        expect(customer.get_by_test_id("assistant-text").last).to_contain_text("$149.99")

        # A cancellation, edited nowhere, rejected with a reason.
        new_chat_and_send(customer, "Please cancel ORD-5678")
        item = _item(review, "Please cancel ORD-5678")
        item.get_by_test_id("reject").click()
        item.get_by_test_id("reason-input").fill("already shipped")
        item.get_by_test_id("confirm-reject").click()
        expect(item.get_by_test_id("approval-reason")).to_have_text("Reason: “already shipped”")
        card = customer.get_by_test_id("approval-card")
        expect(card.get_by_test_id("approval-decision")).to_contain_text("Rejected by sam")
        expect(card.get_by_test_id("approval-reason")).to_have_text("Reason: “already shipped”")
        expect(customer.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
        expect(customer.get_by_test_id("assistant-text").last).to_contain_text("already shipped")

        # The decided tab: newest first, each with its trail (who, as which role, when, why).
        review.get_by_test_id("tab-decided").click()
        decided = review.get_by_test_id("decided-items").get_by_test_id("review-item")
        expect(decided).to_have_count(2)
        expect(decided.nth(0).get_by_test_id("approval-decision")).to_contain_text("Rejected by sam")
        expect(decided.nth(0).get_by_test_id("decided-role")).to_have_text("Decided as: support")
        expect(decided.nth(0).get_by_test_id("approval-reason")).to_have_text("Reason: “already shipped”")
        expect(decided.nth(1).get_by_test_id("approval-decision")).to_contain_text("Approved by sam")
        expect(decided.nth(1).get_by_test_id("decided-at")).to_have_attribute(
            "datetime", re.compile(r"^\d{4}-\d\d-\d\dT")
        )
        expect(decided.nth(1).get_by_test_id("approval-unedited")).to_be_visible()
        check_accessibility(review, "the decided tab")
        screenshot(review, "review-decided", tmp_path, full_page=True)


def test_an_edited_approval_shows_both_arguments(server: LiveServer, browser: Browser) -> None:
    with opened_context(browser, server) as staff, opened_context(browser, server) as shopper:
        customer = shopper.new_page()
        sign_in(customer, server, "dave")
        new_chat_and_send(customer, "Please refund ORD-5678")
        expect(customer.get_by_test_id("awaiting-reviewer")).to_be_visible()
        # Not the customer's to decide: the composer says who it waits for, not "approve or reject".
        hint = customer.get_by_test_id("composer-hint")
        expect(hint).to_have_text(
            "Waiting for a reviewer (support) to decide the request above; the reply goes on once they have."
        )
        expect(customer.get_by_test_id("send")).to_be_disabled()
        review = staff.new_page()
        _open_review(review, server, "mia", ("support", "managers"))
        item = _item(review, "Please refund ORD-5678")
        item.get_by_test_id("edit").click()
        item.get_by_test_id("args-editor").fill(
            '{"order_id": "ORD-5678", "amount": 60, "reason": "one broken"}'
        )
        item.get_by_test_id("save-approve").click()
        expect(item.get_by_test_id("approval-edit")).to_have_text(
            ["amount: 99.98 → 60", 'reason: "Please refund ORD-5678" → "one broken"']
        )
        expect(customer.get_by_test_id("assistant-text").last).to_contain_text("$60.00")
        expect(hint).to_be_hidden()
        review.get_by_test_id("tab-decided").click()
        first = review.get_by_test_id("decided-items").get_by_test_id("review-item").first
        expect(first.get_by_test_id("approval-edit")).to_have_count(2)
        expect(first.get_by_test_id("approval-original-args")).to_contain_text('"amount": 99.98')


def test_a_decision_by_another_reviewer_reaches_the_queue_live(server: LiveServer, browser: Browser) -> None:
    with (
        opened_context(browser, server) as first,
        opened_context(browser, server) as second,
        opened_context(browser, server) as shopper,
    ):
        sam, mia = first.new_page(), second.new_page()
        _open_review(sam, server, "sam")
        _open_review(mia, server, "mia")
        customer = shopper.new_page()
        sign_in(customer, server, "fred")
        new_chat_and_send(customer, "Please cancel ORD-3456")
        waiting = _item(sam, "Please cancel ORD-3456")
        _item(mia, "Please cancel ORD-3456").get_by_test_id("approve").click()
        # Sam's card turns into the decision, from the stream: no buttons left to press.
        expect(waiting.get_by_test_id("approval-decision")).to_contain_text("Approved by mia")
        expect(waiting.get_by_test_id("approve")).to_have_count(0)
        expect(waiting.get_by_test_id("decided-role")).to_have_text("Decided as: support")
        expect(customer.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")


def test_a_plain_user_is_told_a_role_is_required(server: LiveServer, page: Page) -> None:
    page.goto(f"/review#token={server.token('carol')}")
    expect(page.get_by_test_id("reviewer-required")).to_be_visible()
    expect(page.get_by_test_id("pending-items")).to_be_hidden()


def test_the_queue_on_a_phone(server: LiveServer, browser: Browser, tmp_path: Path) -> None:
    with opened_context(browser, server) as shopper:
        customer = shopper.new_page()
        sign_in(customer, server, "erin")
        new_chat_and_send(customer, "Please cancel ORD-9012")
        expect(customer.get_by_test_id("awaiting-reviewer")).to_be_visible()
    with opened_context(browser, server, viewport=PHONE, is_mobile=True, has_touch=True) as phone:
        review = phone.new_page()
        _open_review(review, server)
        item = _item(review, "Please cancel ORD-9012")
        expect(item.get_by_test_id("approve")).to_be_visible()
        width = review.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"the page scrolls sideways on a phone: {width}px"
        screenshot(review, "review-phone", tmp_path)
        item.get_by_test_id("approve").click()
        expect(item.get_by_test_id("approval-decision")).to_contain_text("Approved by sam")
