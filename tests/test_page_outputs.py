"""Structured output and approval metadata on the page, in Chromium, on the flight desk (`tests.outputs_app`).

A structured output is a card of its fields after the call that gave it, and its call is done, not
"running…"; an output pydantic-ai asked again for leaves no call open; an approval card shows what
the tool said about the call. All of it survives a reload.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .browser import check_accessibility, new_chat_and_send, screenshot, send, sign_in
from .live_server import LiveServer, sqlite_url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("page_outputs")
    started = LiveServer(sqlite_url(directory), directory, app="tests.outputs_app:app", model=None)
    started.start()
    yield started
    started.stop()


def _fields(page: Page, nth: int = -1) -> dict[str, str]:
    card = page.get_by_test_id("output-card").nth(nth)
    names = card.locator("dt").all_inner_texts()
    values = card.locator("dd").all_inner_texts()
    return dict(zip(names, values, strict=True))


def _statuses(page: Page) -> list[tuple[str, str | None]]:
    steps = page.get_by_test_id("tool-step")
    return [
        (
            steps.nth(i).get_by_test_id("tool-name").first.text_content() or "",
            steps.nth(i).get_attribute("data-status"),
        )
        for i in range(steps.count())
    ]


def test_a_structured_output_is_a_card_of_its_fields(server: LiveServer, page: Page, tmp_path: Path) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Flights to Lisbon?")
    card = page.get_by_test_id("output-card")
    expect(card).to_have_attribute("data-output-type", "FlightFound")
    expect(card.get_by_test_id("output-type")).to_have_text("Flight found")
    assert _fields(page) == {"flight_number": "TP-101", "destination": "Lisbon", "price": "420"}
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    assert _statuses(page) == [("final_result_FlightFound", "success")]
    # The card follows the call that gave it.
    expect(page.get_by_test_id("tool-step").locator("+ [data-testid=output-card]")).to_have_count(1)
    check_accessibility(page, "a structured output")
    screenshot(page, "structured-output", tmp_path)

    page.reload()
    expect(page.get_by_test_id("output-card")).to_have_count(1)
    assert _fields(page) == {"flight_number": "TP-101", "destination": "Lisbon", "price": "420"}
    assert _statuses(page) == [("final_result_FlightFound", "success")]


def test_an_output_asked_again_leaves_no_call_running(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Flights to Atlantis?")
    card = page.get_by_test_id("output-card")
    expect(card).to_have_attribute("data-output-type", "NoFlightFound")
    expect(card.get_by_test_id("output-type")).to_have_text("No flight found")
    expect(card.get_by_test_id("output-empty")).to_be_visible()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    live = _statuses(page)
    assert live == [("final_result_FlightFound", "failed"), ("final_result_NoFlightFound", "success")]
    # Another member of the same union: named apart, although both have no fields to tell them by.
    send(page, "Flights to Lisbon?")
    expect(page.get_by_test_id("output-card")).to_have_count(2)
    expect(page.get_by_test_id("output-card").last).to_have_attribute("data-output-type", "FlightFound")

    page.reload()
    expect(page.get_by_test_id("output-card")).to_have_count(2)
    expect(page.get_by_test_id("output-card").first).to_have_attribute("data-output-type", "NoFlightFound")
    assert _statuses(page)[:2] == live


def test_an_approval_card_shows_what_the_tool_said_of_the_call(
    server: LiveServer, page: Page, tmp_path: Path
) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Book TP-101")
    card = page.get_by_test_id("approval-card")
    metadata = card.get_by_test_id("approval-metadata")
    expect(metadata).to_be_visible()
    expect(metadata).to_contain_text("About this call")
    rows = dict(
        zip(metadata.locator("dt").all_inner_texts(), metadata.locator("dd").all_inner_texts(), strict=True)
    )
    assert rows == {"fare": "non-refundable", "checked_bags": "1", "price": "420"}
    check_accessibility(page, "an approval card with metadata")
    screenshot(page, "approval-metadata", tmp_path)

    card.get_by_test_id("approve").click()
    expect(page.get_by_test_id("output-card")).to_have_attribute("data-output-type", "Booked")
    assert _fields(page) == {"reference": "BK-TP-101", "flight_number": "TP-101", "passenger": "Ada Lovelace"}

    page.reload()
    expect(page.get_by_test_id("approval-card").get_by_test_id("approval-decision")).to_contain_text(
        "Approved"
    )
    expect(page.get_by_test_id("approval-card").get_by_test_id("approval-metadata")).to_contain_text(
        "non-refundable"
    )
    expect(page.get_by_test_id("output-card")).to_have_attribute("data-output-type", "Booked")
