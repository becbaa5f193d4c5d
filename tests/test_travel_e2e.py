"""The travel desk example (`examples/travel`) served with `--app`, end to end over real processes.

The server runs `durable-chat serve --app travel:app` in a folder holding the example's modules, as
a user's project would; a stand-in airline API runs beside it. Pause, approval with edited (and
wrongly typed) arguments, rejection with a reason, the deps factory's values reaching the tools,
a record, a conditional `ApprovalRequired`, and a booking whose server is killed between the
airline's booking and its answer: reported as unknown, not made twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from .live_server import LiveServer, SseEvent, auth, has, read_events
from .travel import TENANT, Airline

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(travel_server: LiveServer) -> LiveServer:
    return travel_server


@pytest.fixture
async def client(server: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as opened:
        yield opened


async def turn(
    client: httpx.AsyncClient, token: str, thread_id: str, content: str, until: str = "run_finished"
) -> list[SseEvent]:
    """Send a message and follow the thread's events from where they stood until `until`."""
    before = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()["last_event_id"]
    response = await client.post(
        f"/api/threads/{thread_id}/messages", json={"content": content}, headers=auth(token)
    )
    assert response.status_code == 202, response.text
    return await read_events(client, thread_id, token, until=has(until), after=before)


async def new_thread(client: httpx.AsyncClient, token: str) -> str:
    response = await client.post("/api/threads", json={"title": "trip"}, headers=auth(token))
    return str(response.json()["thread_id"])


def finished(events: list[SseEvent]) -> dict[str, object]:
    return [event.data for event in events if event.type == "run_finished"][-1]


def paused_again(events: list[SseEvent]) -> bool:
    """The run continued after the restart, found its call's outcome unknown and paused."""
    return any(e.type == "tool_outcome_unknown" for e in events) and events[-1].type == "run_finished"


def pending_call(events: list[SseEvent]) -> dict[str, str]:
    """The one call the run's `approval_required` waits on."""
    [required] = [event.data for event in events if event.type == "approval_required"][-1:]
    calls = required["approvals"]
    assert isinstance(calls, list)
    assert len(calls) == 1  # pyright: ignore[reportUnknownArgumentType]
    call: dict[str, str] = calls[0]  # pyright: ignore[reportUnknownVariableType]  # JSON from the stream
    return call


async def test_a_booking_pauses_refuses_a_wrongly_typed_edit_and_books_the_edited_flight(
    client: httpx.AsyncClient, server: LiveServer, airline: Airline
) -> None:
    token = server.token("ada")
    thread_id = await new_thread(client, token)
    found = await turn(client, token, thread_id, "Flights to Lisbon?")
    assert "TP-101" in str(finished(found)["output"])

    paused = await turn(client, token, thread_id, "Book TP-101 for Ada Lovelace")
    assert finished(paused)["status"] == "awaiting_approval"
    [pending] = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()[
        "pending_approvals"
    ]
    approve = f"/api/threads/{thread_id}/tool-calls/{pending['tool_call_id']}/approve"

    wrong = await client.post(
        approve, json={"override_args": {"flight_id": "TP-205", "passenger": 42}}, headers=auth(token)
    )
    assert wrong.status_code == 422
    assert wrong.json()["error"]["code"] == "invalid_arguments"
    assert wrong.json()["error"]["details"] == [
        {"loc": "passenger", "msg": "42 is not of type 'string'", "type": ""}
    ]

    before = paused[-1].event_id
    right = await client.post(
        approve, json={"override_args": {"flight_id": "TP-205", "passenger": "Ada L."}}, headers=auth(token)
    )
    assert right.status_code == 200
    resumed = await read_events(client, thread_id, token, until=has("run_finished"), after=before)
    output = str(finished(resumed)["output"])
    # The edited flight was booked, on the account the deps factory gave the run (TRAVEL_TENANT).
    assert output.startswith("Booked TP-205 for Ada L.: reference BK-")
    assert f"account {TENANT}" in output
    [booking] = [b for b in airline.bookings() if b["passenger"] == "Ada L."]
    assert (booking["flight_id"], booking["tenant"]) == ("TP-205", TENANT)


async def test_a_rejected_booking_tells_the_traveller_why(
    client: httpx.AsyncClient, server: LiveServer
) -> None:
    token = server.token("bob")
    thread_id = await new_thread(client, token)
    paused = await turn(client, token, thread_id, "Book LH-330 for Bob Smith")
    call = pending_call(paused)
    response = await client.post(
        f"/api/threads/{thread_id}/tool-calls/{call['tool_call_id']}/reject",
        json={"reason": "over the travel budget"},
        headers=auth(token),
    )
    assert response.status_code == 200
    resumed = await read_events(
        client, thread_id, token, until=has("run_finished"), after=paused[-1].event_id
    )
    assert finished(resumed)["output"] == (
        "The book flight was not done: The reviewer rejected this call: over the travel budget"
    )


async def test_a_voucher_needs_approval_only_over_100_and_an_itinerary_is_kept(
    client: httpx.AsyncClient, server: LiveServer
) -> None:
    token = server.token("cleo")
    thread_id = await new_thread(client, token)
    small = await turn(client, token, thread_id, "A $50 voucher for the delay, please")
    assert str(finished(small)["output"]).startswith("Issued voucher V-")
    large = await turn(client, token, thread_id, "A $150 voucher for the lost luggage")
    assert finished(large)["status"] == "awaiting_approval"
    call = pending_call(large)
    assert call["tool_name"] == "issue_voucher"
    await client.post(
        f"/api/threads/{thread_id}/tool-calls/{call['tool_call_id']}/approve", json={}, headers=auth(token)
    )
    resumed = await read_events(client, thread_id, token, until=has("run_finished"), after=large[-1].event_id)
    assert "for $150.00" in str(finished(resumed)["output"])

    await turn(client, token, thread_id, "Save my itinerary: TP-101 then BA-777")
    records = (await client.get(f"/api/threads/{thread_id}/records", headers=auth(token))).json()["records"]
    assert [(r["kind"], r["data"]["traveller"], r["data"]["flights"]) for r in records] == [
        ("Itinerary", "cleo", ["TP-101", "BA-777"])
    ]


async def test_a_booking_whose_server_died_before_the_airline_answered_is_reported_not_repeated(
    client: httpx.AsyncClient, server: LiveServer, airline: Airline
) -> None:
    token = server.token("dana")
    thread_id = await new_thread(client, token)
    paused = await turn(client, token, thread_id, "Book BA-777 for Dana Scully")
    call = pending_call(paused)
    approve = f"/api/threads/{thread_id}/tool-calls/{call['tool_call_id']}/approve"
    airline.hold(60)  # the airline books at once, then takes a minute to answer
    try:
        assert (await client.post(approve, json={}, headers=auth(token))).status_code == 200
        for _ in range(600):  # up to 30 s
            if [b for b in airline.bookings() if b["passenger"] == "Dana Scully"]:
                break
            await anyio.sleep(0.05)
        else:
            pytest.fail("the airline never got the booking")
        server.kill()  # between the airline's booking and its answer: the ledger says `started`
    finally:
        airline.hold(0)
    server.start()

    after_restart = await read_events(client, thread_id, token, until=paused_again, after=0)
    unknown = [event.data for event in after_restart if event.type == "tool_outcome_unknown"]
    assert [(e["tool_name"], e["tool_call_id"]) for e in unknown] == [("book_flight", call["tool_call_id"])]
    detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
    [pending] = detail["pending_approvals"]
    assert (pending["tool_call_id"], pending["outcome"], pending["previous"]["status"]) == (
        call["tool_call_id"],
        "unknown",
        "approved",
    )
    assert len([b for b in airline.bookings() if b["passenger"] == "Dana Scully"]) == 1

    # The reviewer checks with the airline and lets it run again: the same idempotency key gets the
    # booking the airline already made, not a second one.
    last = after_restart[-1].event_id
    assert (await client.post(approve, json={}, headers=auth(token))).status_code == 200
    resumed = await read_events(client, thread_id, token, until=has("run_finished"), after=last)
    assert str(finished(resumed)["output"]).startswith("Booked BA-777 for Dana Scully: reference BK-")
    assert len([b for b in airline.bookings() if b["passenger"] == "Dana Scully"]) == 1
