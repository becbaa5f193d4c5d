"""The venue example (`examples/venue`) in process: a conversation through its hand-offs (desk →
intake → dates → rooms) and the rooms agent's delegated payment, whose nested approval pauses the
whole run and, approved with an edited amount, resumes the payments agent; every event names its
agent. On SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from agent import Runtime, decide, open_runtime, run_step
from store import NewRun
from stream import event_from_data, transcript

from .venue import venue

pytestmark = pytest.mark.anyio


async def say(runtime: Runtime, thread_id: str, content: str) -> str:
    queued = await runtime.db.runs.queue(NewRun(thread_id=thread_id, kind="message", content=content))
    return await run_step(runtime, queued.run.run_id)


async def test_a_booking_goes_through_the_desks_and_the_nested_deposit_approval(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VENUE_DEPOSITS", str(tmp_path / "deposits.jsonl"))
    async with open_runtime(venue().app, database_url) as runtime:
        thread_id = (await runtime.db.threads.create(user_id="ada", title="wedding")).thread_id
        statuses = [
            await say(runtime, thread_id, message)
            for message in (
                "Hello",
                "We're planning a wedding for 80 guests",
                "A wedding for 80 guests",
                "Is 2027-06-12 free?",
                "Is 2027-06-12 free?",
                "Hold the Garden Room on 2027-06-12",
                "Hold the Garden Room on 2027-06-12",
            )
        ]
        [pending] = await runtime.db.approvals.list(thread_id=thread_id, status="pending")
        decision = await decide(
            runtime.db,
            thread_id,
            pending.tool_call_id,
            decision="approved",
            decided_by="ada",
            override_args={"amount": 250.0, "reference": pending.args["reference"]},
        )
        assert decision.resume_run_id is not None
        resumed = await run_step(runtime, decision.resume_run_id)
        thread = await runtime.db.threads.get(thread_id)
        records = await runtime.db.records.list(thread_id)
        events = [event_from_data(e.type, e.data) for e in await runtime.db.events.read(thread_id)]

    assert statuses == ["completed"] * 6 + ["awaiting_approval"]
    assert resumed == "completed"
    assert (pending.tool_name, pending.agent, pending.path) == (
        "charge_deposit",
        "payments",
        ("rooms", "payments"),
    )
    assert pending.args == {"amount": 300.0, "reference": pending.args["reference"]}
    assert thread.agent == "rooms"
    assert [(r.kind, r.data) for r in records] == [("EventBrief", {"kind": "wedding", "guests": 80})]
    # The deposit was charged once, with the amount the reviewer set.
    charged = (tmp_path / "deposits.jsonl").read_text().splitlines()
    assert len(charged) == 1
    assert '"amount": 250.0' in charged[0]
    lines = [
        re.sub(r"[0-9a-f]{8}\.\d\.\d+\.\d+|[a-z]+-\d+-[0-9a-f]{8}-\d(\.\d+\.\d+)?|-[0-9a-f]{6}\b", "ID", line)
        for line in transcript(events)
    ]
    assert lines == snapshot(
        [
            "desk: run_started message",
            "desk: user_message 'Hello'",
            "desk: text ID: 'Welcome to the Harbour Hall events desk. Tell me about your event, ask whether a date is free, hold a room (Garden Room, Ballroom or Loft) or ask for our packages.'",
            "desk: text_done ID 'Welcome to the Harbour Hall events desk. Tell me about your event, ask whether a date is free, hold a room (Garden Room, Ballroom or Loft) or ask for our packages.'",
            "desk: run_finished completed output='Welcome to the Harbour Hall events desk. Tell me about your event, ask whether a date is free, hold a room (Garden Room, Ballroom or Loft) or ask for our packages.'",
            "desk: run_started message",
            'desk: user_message "We\'re planning a wedding for 80 guests"',
            "desk: tool_call transfer_to_intake {}",
            "agent_changed desk -> intake",
            'desk: tool_result transfer_to_intake success "The conversation is now with intake; it answers the user\'s next message."',
            'desk: text ID: "I\'m passing you to our intake desk: it answers your next message."',
            'desk: text_done ID "I\'m passing you to our intake desk: it answers your next message."',
            'desk: run_finished completed output="I\'m passing you to our intake desk: it answers your next message."',
            "intake: run_started message",
            "intake: user_message 'A wedding for 80 guests'",
            "intake: tool_call record_event {'kind': 'wedding', 'guests': 80}",
            "intake: tool_result record_event success {'kind': 'wedding', 'guests': 80}",
            "intake: text ID: 'Noted: a wedding for 80 guests. Ask me about dates next.'",
            "intake: text_done ID 'Noted: a wedding for 80 guests. Ask me about dates next.'",
            "intake: run_finished completed output='Noted: a wedding for 80 guests. Ask me about dates next.'",
            "intake: run_started message",
            "intake: user_message 'Is 2027-06-12 free?'",
            "intake: tool_call transfer_to_dates {}",
            "agent_changed intake -> dates",
            'intake: tool_result transfer_to_dates success "The conversation is now with dates; it answers the user\'s next message."',
            'intake: text ID: "I\'m passing you to our dates desk: it answers your next message."',
            'intake: text_done ID "I\'m passing you to our dates desk: it answers your next message."',
            'intake: run_finished completed output="I\'m passing you to our dates desk: it answers your next message."',
            "dates: run_started message",
            "dates: user_message 'Is 2027-06-12 free?'",
            "dates: tool_call check_date {'date': '2027-06-12'}",
            "dates: tool_result check_date success {'date': '2027-06-12', 'free': ['Garden Room', 'Loft']}",
            "dates: text ID: 'On 2027-06-12 we have free: Garden Room, Loft.'",
            "dates: text_done ID 'On 2027-06-12 we have free: Garden Room, Loft.'",
            "dates: run_finished completed output='On 2027-06-12 we have free: Garden Room, Loft.'",
            "dates: run_started message",
            "dates: user_message 'Hold the Garden Room on 2027-06-12'",
            "dates: tool_call transfer_to_rooms {}",
            "agent_changed dates -> rooms",
            'dates: tool_result transfer_to_rooms success "The conversation is now with rooms; it answers the user\'s next message."',
            'dates: text ID: "I\'m passing you to our rooms desk: it answers your next message."',
            'dates: text_done ID "I\'m passing you to our rooms desk: it answers your next message."',
            'dates: run_finished completed output="I\'m passing you to our rooms desk: it answers your next message."',
            "rooms: run_started message",
            "rooms: user_message 'Hold the Garden Room on 2027-06-12'",
            "rooms: tool_call hold_room {'room': 'Garden Room', 'date': '2027-06-12'}",
            "payments: tool_call charge_deposit {'amount': 300.0, 'reference': 'GARDENROOM-2027-06-12ID'}",
            "rooms: approval_required [charge_deposit {'amount': 300.0, 'reference': 'GARDENROOM-2027-06-12ID'}]",
            "rooms: run_finished awaiting_approval",
            "approval_decided approved by 'ada' override_args={'amount': 250.0, 'reference': 'GARDENROOM-2027-06-12ID'}",
            "rooms: run_started resume",
            "payments: tool_result charge_deposit success {'receipt': 'DEP-0001', 'amount': 250.0, 'reference': 'GARDENROOM-2027-06-12ID'}",
            "payments: text ID: 'Deposit DEP-0001 of $250.00 taken.'",
            "payments: text_done ID 'Deposit DEP-0001 of $250.00 taken.'",
            "rooms: tool_result hold_room success {'room': 'Garden Room', 'date': '2027-06-12', 'reference': 'GARDENROOM-2027-06-12ID', 'payment': 'Deposit DEP-0001 of $250.00 taken.'}",
            "rooms: text ID: 'The Garden Room is held for 2027-06-12. Deposit DEP-0001 of $250.00 taken.'",
            "rooms: text_done ID 'The Garden Room is held for 2027-06-12. Deposit DEP-0001 of $250.00 taken.'",
            "rooms: run_finished completed output='The Garden Room is held for 2027-06-12. Deposit DEP-0001 of $250.00 taken.'",
        ]
    )
