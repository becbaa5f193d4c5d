"""The decision trail in the browser: every kind of decision survives a reload; refusals are not successes.

One server for the module (see `tests.browser`); each test works in its own new thread.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

from .browser import check_accessibility, new_chat_and_send, screenshot, sign_in
from .live_server import LiveServer


def _card(page: Page) -> Locator:
    card = page.get_by_test_id("approval-card")
    expect(card).to_have_count(1)
    return card


def _trail(page: Page) -> dict[str, object]:
    """What the decided card and the refund's step say, as text."""
    card = _card(page)
    step = page.get_by_test_id("tool-step").filter(has_text="Issue refund")
    return {
        "decision": card.get_by_test_id("approval-decision").inner_text(),
        "decided at": card.get_by_test_id("decided-at").get_attribute("datetime") is not None,
        "edits": card.get_by_test_id("approval-edit").all_inner_texts(),
        "original": card.get_by_test_id("approval-original-args").all_text_contents(),
        "reason": card.get_by_test_id("approval-reason").all_inner_texts(),
        "args shown": json.loads(card.get_by_test_id("approval-args").inner_text()),
        "ran with": step.get_by_test_id("tool-args").text_content(),
        "edited marker": step.get_by_test_id("edited-marker").count(),
        "step status": step.get_attribute("data-status"),
    }


def test_an_approval_survives_a_reload(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please refund ORD-5678")
    _card(page).get_by_test_id("approve").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    live = _trail(page)
    assert live == {
        "decision": live["decision"],
        "decided at": True,
        "edits": [],
        "original": [],
        "reason": [],
        "args shown": {"order_id": "ORD-5678", "amount": 99.98, "reason": "Please refund ORD-5678"},
        "ran with": '{"order_id":"ORD-5678","amount":99.98,"reason":"Please refund ORD-5678"}',
        "edited marker": 0,
        "step status": "success",
    }
    assert str(live["decision"]).startswith("Approved by alice · ")
    page.reload()
    expect(_card(page).get_by_test_id("approval-decision")).to_be_visible()
    assert _trail(page) == live
    # The card stays where the call was made: right after the refund's step, before the reply.
    order = (
        page.get_by_test_id("transcript")
        .locator(":scope > *")
        .evaluate_all("nodes => nodes.map(n => n.dataset.testid)")
    )
    assert order == ["user-turn", "tool-step", "tool-step", "approval-card", "assistant-turn"]


def test_an_edited_approval_survives_a_reload(server: LiveServer, page: Page, tmp_path: Path) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please refund ORD-3456")
    card = _card(page)
    # The reviewer sees what the app says about the call: the order, what remains refundable.
    context = card.get_by_test_id("approval-context")
    expect(context.locator("dt")).to_have_text(["Order", "Status", "Total", "Already refunded", "Refundable"])
    expect(context.locator("dd").nth(0)).to_have_text("ORD-3456: Cable Kit x5")
    expect(context.locator("dd").nth(2)).to_have_text("$24.95")
    card.get_by_test_id("edit").click()
    args = json.loads(card.get_by_test_id("args-editor").input_value())
    card.get_by_test_id("args-editor").fill(json.dumps({**args, "amount": 4.99, "reason": "partial"}))
    card.get_by_test_id("save-approve").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    expect(page.get_by_test_id("assistant-text").last).to_contain_text("Refunded $4.99")
    live = _trail(page)
    assert {key: live[key] for key in ("edits", "args shown", "ran with", "edited marker")} == {
        "edits": ["amount: 24.95 → 4.99", 'reason: "Please refund ORD-3456" → "partial"'],
        "args shown": {"order_id": "ORD-3456", "amount": 4.99, "reason": "partial"},
        "ran with": '{"order_id":"ORD-3456","amount":4.99,"reason":"partial"}',
        "edited marker": 1,
    }
    original = json.loads(str(live["original"][0]))  # pyright: ignore[reportIndexIssue]
    assert original == {"order_id": "ORD-3456", "amount": 24.95, "reason": "Please refund ORD-3456"}
    page.reload()
    expect(_card(page).get_by_test_id("approval-edit")).to_have_count(2)
    assert _trail(page) == live
    check_accessibility(page, "an edited approval after a reload")
    _card(page).locator("details.original summary").click()
    _card(page).scroll_into_view_if_needed()
    screenshot(page, "decision-trail", tmp_path)


def test_a_rejection_with_its_reason_survives_a_reload(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please refund ORD-9012")
    card = _card(page)
    card.get_by_test_id("reject").click()
    card.get_by_test_id("reason-input").fill("over the limit")
    card.get_by_test_id("confirm-reject").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    live = _trail(page)
    assert {key: live[key] for key in ("reason", "edits", "step status")} == {
        "reason": ["Reason: “over the limit”"],
        "edits": [],
        "step status": "denied",
    }
    assert str(live["decision"]).startswith("Rejected by alice · ")
    page.reload()
    expect(_card(page).get_by_test_id("approval-reason")).to_be_visible()
    assert _trail(page) == live


def test_a_refund_the_business_rules_refuse_is_not_a_success(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please refund ORD-5678")
    card = _card(page)
    card.get_by_test_id("edit").click()
    args = json.loads(card.get_by_test_id("args-editor").input_value())
    card.get_by_test_id("args-editor").fill(json.dumps({**args, "amount": 5000}))
    card.get_by_test_id("save-approve").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    step = page.get_by_test_id("tool-step").filter(has_text="Issue refund")
    for _ in range(2):
        expect(step).to_have_attribute("data-status", "refused")
        expect(step.get_by_test_id("tool-status")).to_have_text("refused")
        # Whatever the module's earlier tests refunded, $5,000 is more than remains.
        expect(step.get_by_test_id("tool-refusal")).to_have_text(
            re.compile("is more than the|already refunded in full")
        )
        color = step.get_by_test_id("tool-status").evaluate("node => getComputedStyle(node).color")
        green = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--success')")
        assert color != _rgb(green)
        page.reload()


def _rgb(hex_color: str) -> str:
    value = hex_color.strip().lstrip("#")
    red, green, blue = (int(value[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgb({red}, {green}, {blue})"


def test_parallel_calls_get_a_card_each_after_their_step(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Please cancel ORD-9012 and ORD-3456")
    cards = page.get_by_test_id("approval-card")
    expect(cards).to_have_count(2)
    expect(cards.get_by_test_id("approval-args")).to_have_text(
        [
            json.dumps({"order_id": o, "reason": "Please cancel ORD-9012 and ORD-3456"}, indent=2)
            for o in ("ORD-9012", "ORD-3456")
        ]
    )
    expect(page.get_by_test_id("composer-hint")).to_be_visible()
    cards.nth(0).get_by_test_id("approve").click()
    # One decided, one still pending: still blocked.
    expect(cards.nth(0).get_by_test_id("approval-decision")).to_be_visible()
    expect(page.get_by_test_id("send")).to_be_disabled()
    cards.nth(1).get_by_test_id("reject").click()
    cards.nth(1).get_by_test_id("confirm-reject").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    page.reload()
    expect(page.get_by_test_id("approval-decision")).to_have_count(2)
    decisions = page.get_by_test_id("approval-decision").all_inner_texts()
    assert [text.split(" by ")[0] for text in decisions] == ["Approved", "Rejected"]
