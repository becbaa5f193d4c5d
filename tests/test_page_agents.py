"""Several agents in the browser (`tests.agent_chains:desk_app`): each reply names its agent, a hand-off
is a divider, a delegated agent's steps nest under the call that delegated (collapsed, expandable),
live and after a reload, and a nested approval's card shows the chain and decides it. The venue example
(`examples/venue`) as served, for its screenshot."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from .browser import check_accessibility, new_chat_and_send, opened_context, screenshot, send, sign_in
from .live_server import LiveServer, sqlite_url
from .venue import EXAMPLE


@pytest.fixture(scope="module")
def effects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("desk-effects") / "effects.txt"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, effects: Path) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("desk")
    yield from _running(
        LiveServer(
            sqlite_url(directory),
            directory,
            {"AGENT_CHAIN_EFFECTS": str(effects)},
            app="tests.agent_chains:desk_app",
            model=None,
        )
    )


def _running(started: LiveServer) -> Iterator[LiveServer]:
    started.start()
    try:
        yield started
    finally:
        started.stop()


CHAIN = "billing \u203a booking \u203a payments"
"""How the card shows the chain of agents."""


def _step(scope: Page | Locator, tool_call_id: str) -> Locator:
    return scope.locator(f'[data-testid="tool-step"][data-tool-call-id="{tool_call_id}"]')


def _replies(page: Page) -> list[tuple[str, str]]:
    """(agent, text) of each of the thread's own replies."""
    turns = page.get_by_test_id("assistant-turn")
    return [
        (turn.get_by_test_id("agent-name").inner_text(), turn.get_by_test_id("assistant-text").inner_text())
        for turn in turns.all()
    ]


def test_who_spoke_nested_steps_and_a_nested_approval(
    server: LiveServer, page: Page, effects: Path, tmp_path: Path
) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Hello")
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    expect(page.get_by_test_id("agent-changed")).to_have_text("Billing took over")
    assert _replies(page) == [("router", "Billing will help you.")]

    send(page, "Pay the deposit")
    card = page.get_by_test_id("approval-card")
    expect(card).to_have_count(1)
    expect(card.get_by_test_id("approval-agent")).to_have_text("payments")
    expect(card.get_by_test_id("approval-chain")).to_have_text(CHAIN)
    expect(card.get_by_test_id("tool-name")).to_have_text("charge")
    # The call that delegated waits, collapsed; its agent's steps are inside, out of sight until opened.
    outer = _step(page, "billing_2_0")
    expect(outer).to_have_attribute("data-status", "waiting")
    expect(outer.get_by_test_id("delegated-to").first).to_have_text("→ booking")
    charge = _step(page, "payments_0_0")
    expect(charge).to_be_hidden()
    outer.locator("summary").first.click()
    inner = _step(outer, "booking_0_0")
    expect(inner.get_by_test_id("delegated-to").first).to_have_text("→ payments")
    inner.locator("summary").first.click()
    expect(charge).to_be_visible()
    expect(charge).to_have_attribute("data-status", "waiting")
    expect(charge).to_have_attribute("data-agent", "payments")
    # The card follows the outermost call, where a collapsed transcript shows it.
    assert outer.evaluate("(step) => step.nextElementSibling.dataset.testid") == "approval-card"
    check_accessibility(page, "a nested approval, its delegated steps open")
    screenshot(page, "nested-approval", tmp_path)

    # Reloaded while it waits: the card, after the same step; the delegations it waits inside are read
    # at once, so the resumed run's events find their steps.
    page.reload()
    card = page.get_by_test_id("approval-card")
    expect(card.get_by_test_id("approval-chain")).to_have_text(CHAIN)
    outer = _step(page, "billing_2_0")
    charge = _step(page, "payments_0_0")
    expect(charge).to_have_attribute("data-status", "waiting")
    expect(outer).to_have_attribute("data-status", "waiting")
    assert outer.evaluate("(step) => step.nextElementSibling.dataset.testid") == "approval-card"

    card.get_by_test_id("approve").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    expect(card.get_by_test_id("approval-decision")).to_contain_text("Approved by alice")
    expect(charge).to_have_attribute("data-status", "success")
    nested_texts = outer.get_by_test_id("delegated-text")
    expect(nested_texts).to_have_text(["payments charged", "booking done"])
    expect(outer.get_by_test_id("delegated-turn").get_by_test_id("agent-name")).to_have_text(
        ["payments", "booking"]
    )
    expect(outer).to_have_attribute("data-status", "success")
    assert _replies(page) == [("router", "Billing will help you."), ("billing", "Your deposit is paid.")]
    assert effects.read_text() == "charged 300\n"

    page.reload()
    expect(page.get_by_test_id("assistant-turn")).to_have_count(2)
    assert _replies(page) == [("router", "Billing will help you."), ("billing", "Your deposit is paid.")]
    expect(page.get_by_test_id("agent-changed")).to_have_text("Billing took over")
    card = page.get_by_test_id("approval-card")
    expect(card.get_by_test_id("approval-chain")).to_have_text(CHAIN)
    expect(card.get_by_test_id("approval-decision")).to_contain_text("Approved by alice")
    # After a reload a delegated agent's steps are read when their call is opened.
    outer = _step(page, "billing_2_0")
    expect(outer.get_by_test_id("delegation")).to_have_count(0)
    outer.locator("summary").first.click()
    expect(outer.get_by_test_id("delegated-to").first).to_have_text("→ booking")
    expect(outer.get_by_test_id("delegated-text")).to_have_text(["booking done"])
    inner = _step(outer, "booking_0_0")
    inner.locator("summary").first.click()
    expect(outer.get_by_test_id("delegated-text")).to_have_text(["payments charged", "booking done"])
    charge = _step(page, "payments_0_0")
    expect(charge).to_have_attribute("data-status", "success")
    # A call that delegated to no one opens as before, with nothing nested.
    handoff = _step(page, "router_0_0")
    handoff.locator("summary").first.click()
    expect(handoff).to_have_attribute("data-delegation-loaded", "none")
    expect(handoff.get_by_test_id("delegation")).to_have_count(0)
    check_accessibility(page, "a reloaded thread of several agents")


@pytest.fixture(scope="module")
def venue_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The venue example (`examples/venue`) served from a folder holding its modules, as a user's project."""
    project = tmp_path_factory.mktemp("venue")
    for module in ("venue.py", "venue_model.py"):
        shutil.copy(EXAMPLE / module, project / module)
    deposits = {"VENUE_DEPOSITS": str(project / "deposits.jsonl")}
    yield from _running(LiveServer(sqlite_url(project), project, deposits, app="venue:app", model=None))


HOLD = "Hold the Garden Room on 2027-06-12"


def test_the_venue_desk_hands_off_delegates_and_waits_for_the_deposit(
    venue_server: LiveServer, browser: Browser, tmp_path: Path
) -> None:
    with opened_context(browser, venue_server) as context:
        page = context.new_page()
        sign_in(page, venue_server)
        new_chat_and_send(page, HOLD)  # the desk hands the thread to the rooms agent
        expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
        expect(page.get_by_test_id("agent-changed")).to_have_text("Rooms took over")
        send(page, HOLD)
        card = page.get_by_test_id("approval-card")
        expect(card.get_by_test_id("approval-agent")).to_have_text("payments")
        expect(card.get_by_test_id("approval-chain")).to_have_text("rooms \u203a payments")
        expect(card.get_by_test_id("tool-name")).to_have_text("charge_deposit")
        # The rooms agent's `hold_room` waits on the payments agent it delegated the deposit to.
        outer = page.locator('[data-testid="tool-step"][data-status="waiting"]').first
        expect(outer.get_by_test_id("delegated-to").first).to_have_text("\u2192 payments")
        outer.locator("summary").first.click()
        charge = outer.locator('[data-testid="tool-step"][data-agent="payments"]')
        expect(charge).to_be_visible()
        expect(charge).to_have_attribute("data-status", "waiting")
        check_accessibility(page, "the venue desk waiting for a deposit's approval")
        screenshot(page, "venue-desk", tmp_path)
