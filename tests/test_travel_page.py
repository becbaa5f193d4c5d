"""The page shows a call whose outcome became unknown (its server died midway) as such: what the reviewer
must know, the earlier decision, no editing, and a way to run it again. In Chromium, on the travel desk."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from .browser import check_accessibility, screenshot, sign_in
from .live_server import LiveServer, auth
from .travel import Airline

DEADLINE = 30.0


@pytest.fixture(scope="module")
def server(travel_server: LiveServer) -> LiveServer:
    return travel_server


def _until(check: object, what: str) -> object:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = check()  # pyright: ignore[reportCallIssue]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_call_of_unknown_outcome_is_shown_for_what_it_is_and_runs_again(
    server: LiveServer, airline: Airline, page: Page, tmp_path: Path
) -> None:
    token = server.token("erin")
    with httpx.Client(base_url=server.base_url, headers=auth(token), timeout=30) as client:
        check(server, airline, page, client, tmp_path)


def check(server: LiveServer, airline: Airline, page: Page, client: httpx.Client, tmp_path: Path) -> None:
    thread_id = client.post("/api/threads", json={}).json()["thread_id"]
    client.post(f"/api/threads/{thread_id}/messages", json={"content": "Book BA-777 for Erin Brockovich"})

    def pending() -> list[dict[str, object]]:
        return client.get(f"/api/threads/{thread_id}").json()["pending_approvals"]

    [call] = _until(pending, "the booking to wait for approval")  # pyright: ignore[reportGeneralTypeIssues]
    airline.hold(60)
    try:
        client.post(f"/api/threads/{thread_id}/tool-calls/{call['tool_call_id']}/approve", json={})
        _until(
            lambda: [b for b in airline.bookings() if b["passenger"] == "Erin Brockovich"],
            "the airline's booking",
        )
        server.kill()
    finally:
        airline.hold(0)
    server.start()
    _until(lambda: [a for a in pending() if a.get("outcome") == "unknown"], "the call to be held again")

    sign_in(page, server, "erin")
    page.goto(f"/#thread={thread_id}")
    card = page.get_by_test_id("approval-card").filter(has=page.get_by_test_id("approval-outcome-unknown"))
    expect(card).to_be_visible()
    expect(card.get_by_test_id("approval-outcome-unknown")).to_contain_text("Outcome unknown")
    expect(card.get_by_test_id("approval-previous")).to_contain_text("Approved earlier by erin")
    expect(card.get_by_test_id("edit")).to_have_count(0)
    check_accessibility(page, "a card of unknown outcome")
    screenshot(page, "approval-outcome-unknown", tmp_path)

    card.get_by_test_id("approve").click()

    expect(page.get_by_test_id("assistant-text").last).to_contain_text("Booked BA-777 for Erin Brockovich")
    assert len([b for b in airline.bookings() if b["passenger"] == "Erin Brockovich"]) == 1
