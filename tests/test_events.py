"""Stream events: their JSON form (`event_data`) and reading it back (`event_from_data`)."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic import TypeAdapter, ValidationError

from stream import (
    AgentChanged,
    ApprovalDecided,
    ApprovalEscalated,
    ApprovalRequired,
    EventType,
    GuardrailTripped,
    PendingCall,
    RunFinished,
    RunStarted,
    StoredEvent,
    StreamEvent,
    TextDelta,
    TextDone,
    TextWithdrawn,
    ToolCall,
    ToolOutcomeUnknown,
    ToolResult,
    UserMessage,
    event_data,
    event_from_data,
)

# One event of each type, optional fields set wherever a type has them.
EXAMPLES: list[StreamEvent] = [
    RunStarted(run_id="run-1", kind="message"),
    UserMessage(run_id="run-1", content="Refund ORD-5678, please"),
    TextDelta(run_id="run-1", part_id="p0", delta="Hello "),
    TextDone(run_id="run-1", part_id="p0", text="Hello world"),
    TextWithdrawn(run_id="run-1", part_id="p0", replacement="[removed]"),
    ToolCall(run_id="run-1", tool_call_id="call-1", tool_name="lookup_order", args={"order_id": "ORD-5678"}),
    ToolResult(
        run_id="run-1",
        tool_call_id="call-1",
        tool_name="lookup_order",
        outcome="success",
        content={"order_id": "ORD-5678", "total": 99.98, "items": [{"name": "Widget Pro", "qty": 2}]},
    ),
    ApprovalRequired(
        run_id="run-1",
        approvals=[
            PendingCall(tool_call_id="call-2", tool_name="cancel_order", args={"order_id": "ORD-5678"}),
            PendingCall(tool_call_id="call-3", tool_name="cancel_order", args={"order_id": "ORD-9012"}),
            PendingCall(tool_call_id="call-4", tool_name="book", args={"ref": "X"}, outcome="unknown"),
            PendingCall(
                tool_call_id="call-5", tool_name="wire", args={}, metadata={"why": "abroad", "limit": None}
            ),
            PendingCall(
                tool_call_id="call-6",
                tool_name="charge",
                args={"cents": 500},
                agent="payments",
                path=["travel", "booking", "payments"],
            ),
        ],
    ),
    TextDelta(run_id="run-1", part_id="p2", delta="Booked", agent="booking", parent_tool_call_id="call-1"),
    AgentChanged(run_id="run-1", agent="billing", previous="router"),
    ToolOutcomeUnknown(run_id="run-1", tool_call_id="call-4", tool_name="book"),
    ApprovalDecided(
        run_id="run-1",
        tool_call_id="call-2",
        decision="approved",
        decided_by="alice",
        override_args={"order_id": "ORD-5678", "reason": "customer asked"},
    ),
    ApprovalEscalated(
        run_id="run-1", tool_call_id="call-2", reviewers="managers", expires_at="2026-11-27T12:00:00+00:00"
    ),
    GuardrailTripped(run_id="run-1", guardrail="no_internal_details", stage="output"),
    RunFinished(run_id="run-1", status="failed", output="partial", error="the model timed out"),
    RunFinished(
        run_id="run-1",
        status="completed",
        output={"city": "Lisbon", "nights": 3},
        output_type="Trip",
        output_tool_call_id="call-6",
    ),
]


def test_examples_cover_every_event_type() -> None:
    assert sorted({event.type for event in EXAMPLES}) == sorted(get_args(EventType))


def test_event_type_names_every_member_of_the_union() -> None:
    (union, *_) = get_args(StreamEvent)
    assert sorted(member.model_fields["type"].default for member in get_args(union)) == sorted(
        get_args(EventType)
    )


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda event: event.type)
def test_round_trip(event: StreamEvent) -> None:
    data = event_data(event)

    assert event_from_data(event.type, data) == event
    assert "type" not in json.loads(data)
    assert json.loads(data)["run_id"] == "run-1"


def test_a_pending_call_names_its_outcome_only_when_it_is_unknown() -> None:
    event = ApprovalRequired(
        run_id="run-1",
        approvals=[
            PendingCall(tool_call_id="c1", tool_name="book", args={}),
            PendingCall(tool_call_id="c2", tool_name="book", args={}, outcome="unknown"),
        ],
    )

    assert json.loads(event_data(event))["approvals"] == snapshot(
        [
            {"tool_call_id": "c1", "tool_name": "book", "args": {}},
            {"tool_call_id": "c2", "tool_name": "book", "args": {}, "outcome": "unknown"},
        ]
    )


def test_a_pending_call_carries_its_metadata_only_when_it_has_some() -> None:
    event = ApprovalRequired(
        run_id="run-1",
        approvals=[
            PendingCall(tool_call_id="c1", tool_name="wire", args={}, metadata={"why": "abroad"}),
            PendingCall(tool_call_id="c2", tool_name="wire", args={}),
        ],
    )

    assert json.loads(event_data(event))["approvals"] == snapshot(
        [
            {"tool_call_id": "c1", "tool_name": "wire", "args": {}, "metadata": {"why": "abroad"}},
            {"tool_call_id": "c2", "tool_name": "wire", "args": {}},
        ]
    )
    with pytest.raises(ValidationError):
        PendingCall(tool_call_id="c3", tool_name="wire", args={}, metadata={"when": object()})


def test_event_data_is_compact_utf8_json() -> None:
    event = TextDelta(run_id="run-1", part_id="p0", delta='Grüße, "Welt" 👋\n')

    assert event_data(event) == snapshot(
        b'{"run_id":"run-1","part_id":"p0","delta":"Gr\xc3\xbc\xc3\x9fe, \\"Welt\\" \xf0\x9f\x91\x8b\\n"}'
    )


def test_optional_fields_that_are_none_are_left_out() -> None:
    decided = ApprovalDecided(run_id="run-1", tool_call_id="call-2", decision="rejected", decided_by="bob")
    finished = RunFinished(run_id="run-1", status="completed")

    assert json.loads(event_data(decided)) == snapshot(
        {"run_id": "run-1", "tool_call_id": "call-2", "decision": "rejected", "decided_by": "bob"}
    )
    assert json.loads(event_data(finished)) == snapshot({"run_id": "run-1", "status": "completed"})
    assert event_from_data("approval_decided", event_data(decided)) == decided
    assert event_from_data("run_finished", event_data(finished)) == finished


def test_json_nulls_inside_values_are_kept() -> None:
    # Only optional fields are dropped when None; null content and null arguments are data.
    result = ToolResult(
        run_id="run-1", tool_call_id="call-1", tool_name="ping", outcome="success", content=None
    )
    call = ToolCall(run_id="run-1", tool_call_id="call-1", tool_name="search_faq", args={"query": None})
    decided = ApprovalDecided(
        run_id="run-1",
        tool_call_id="call-1",
        decision="approved",
        decided_by="alice",
        override_args={"note": None},
    )

    assert json.loads(event_data(result))["content"] is None
    assert json.loads(event_data(call))["args"] == {"query": None}
    assert json.loads(event_data(decided))["override_args"] == {"note": None}
    for event in (result, call, decided):
        assert event_from_data(event.type, event_data(event)) == event


def test_unknown_type_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown stream event type 'text_exploded'"):
        event_from_data("text_exploded", b'{"run_id": "run-1"}')


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(b'{"run_id": "run-1"}', id="missing-field"),
        pytest.param(b'{"run_id": "run-1", "kind": "message", "extra": 1}', id="extra-field"),
        pytest.param(b'{"run_id": "run-1", "kind": "restart"}', id="bad-literal"),
        pytest.param(b'{"run_id": "run-1", "kind": "message", "type": "run_finished"}', id="other-type"),
    ],
)
def test_bad_data_is_a_value_error_naming_the_type(data: bytes) -> None:
    with pytest.raises(ValueError, match="invalid data for stream event type 'run_started'"):
        event_from_data("run_started", data)


def test_events_are_frozen_and_closed() -> None:
    event = TextDelta(run_id="run-1", part_id="p0", delta="Hi")

    with pytest.raises(ValidationError, match="frozen"):
        event.delta = "Bye"  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(ValidationError, match="extra"):
        TextDelta(run_id="run-1", part_id="p0", delta="Hi", colour="red")  # pyright: ignore[reportCallIssue]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param((1, 2), id="tuple"),
        pytest.param({1: "a"}, id="int-key"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param({"when": object()}, id="object"),
    ],
)
def test_non_json_values_are_rejected_when_the_event_is_made(value: object) -> None:
    with pytest.raises(ValidationError):
        ToolResult(run_id="run-1", tool_call_id="call-1", tool_name="t", outcome="success", content=value)
    with pytest.raises(ValidationError):
        ToolCall(run_id="run-1", tool_call_id="call-1", tool_name="t", args={"value": value})


def test_stream_event_validates_by_discriminator() -> None:
    adapter = TypeAdapter[StreamEvent](StreamEvent)

    event = adapter.validate_python({"type": "text_done", "run_id": "run-1", "part_id": "p0", "text": "Hi"})

    assert event == TextDone(run_id="run-1", part_id="p0", text="Hi")


def test_stored_event_is_frozen() -> None:
    stored = StoredEvent(event_id=7, event=EXAMPLES[0])

    with pytest.raises(AttributeError):
        stored.event_id = 8  # pyright: ignore[reportAttributeAccessIssue]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


@given(
    args=st.dictionaries(st.text(max_size=8), json_values, max_size=4), content=json_values, text=st.text()
)
def test_any_json_round_trips(args: dict[str, object], content: object, text: str) -> None:
    events: list[StreamEvent] = [
        ToolCall(run_id=text, tool_call_id=text, tool_name=text, args=args),
        ToolResult(run_id=text, tool_call_id=text, tool_name=text, outcome="failed", content=content),
        TextDelta(run_id=text, part_id=text, delta=text),
    ]

    for event in events:
        assert event_from_data(event.type, event_data(event)) == event
