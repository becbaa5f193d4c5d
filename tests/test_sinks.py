"""Sinks: collecting, dropping, teeing; transcripts of event streams."""

from __future__ import annotations

import pytest
from inline_snapshot import snapshot

from stream import (
    ApprovalDecided,
    ApprovalRequired,
    CollectingSink,
    GuardrailTripped,
    NullSink,
    PendingCall,
    RunFinished,
    RunStarted,
    Sink,
    StreamEvent,
    TeeSink,
    TextDelta,
    TextDone,
    TextWithdrawn,
    ToolCall,
    ToolResult,
    UserMessage,
    transcript,
)

HELLO = [TextDelta(run_id="run-1", part_id="p0", delta=word) for word in ("Hello ", "world", "!")]


class RecordingSink:
    """Writes what it is given into a log shared with other sinks, to see the order across them."""

    def __init__(self, name: str, log: list[str], *, fail: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail = fail

    async def emit(self, event: StreamEvent) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} is down")
        self.log.append(f"{self.name} emit {event.type}")

    async def flush(self) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} is down")
        self.log.append(f"{self.name} flush")


@pytest.mark.anyio
async def test_collecting_sink_keeps_events_and_counts_what_is_flushed() -> None:
    sink = CollectingSink()

    await sink.emit(HELLO[0])
    await sink.flush()
    await sink.emit(HELLO[1])

    assert sink.events == HELLO[:2]
    assert sink.flushed == 1
    assert sink.transcript() == snapshot(["text p0: 'Hello world'"])


@pytest.mark.anyio
async def test_null_sink_takes_anything_and_passes_nothing_on() -> None:
    log: list[str] = []
    collected = CollectingSink()
    # Between two sinks of a tee: whatever it is given, it neither fails nor stops the next one.
    tee: Sink = TeeSink(RecordingSink("before", log), NullSink(), collected)

    for event in HELLO:
        await tee.emit(event)
    await tee.flush()

    assert log == ["before emit text_delta"] * len(HELLO) + ["before flush"]
    assert collected.events == HELLO
    assert collected.flushed == len(HELLO)
    assert vars(NullSink()) == {}  # it keeps nothing of what it took


@pytest.mark.anyio
async def test_tee_sink_passes_events_and_flushes_to_each_sink_in_order() -> None:
    log: list[str] = []
    collected = CollectingSink()
    tee = TeeSink(RecordingSink("log", log), collected, RecordingSink("live", log))

    await tee.emit(HELLO[0])
    await tee.flush()

    assert log == ["log emit text_delta", "live emit text_delta", "log flush", "live flush"]
    assert collected.events == [HELLO[0]]
    assert collected.flushed == 1


@pytest.mark.anyio
async def test_tee_sink_stops_at_a_failing_sink() -> None:
    log: list[str] = []
    tee = TeeSink(RecordingSink("log", log, fail=True), RecordingSink("live", log))

    with pytest.raises(RuntimeError, match="log is down"):
        await tee.emit(HELLO[0])
    with pytest.raises(RuntimeError, match="log is down"):
        await tee.flush()
    assert log == []


@pytest.mark.anyio
async def test_tees_nest() -> None:
    inner = CollectingSink()
    outer = CollectingSink()
    tee = TeeSink(TeeSink(inner), outer)

    for event in HELLO:
        await tee.emit(event)

    assert inner.events == outer.events == HELLO


def refund_run() -> list[StreamEvent]:
    """A paused refund, its approval, and the resumed run, as the agent would emit them."""
    return [
        RunStarted(run_id="run-1", kind="message"),
        UserMessage(run_id="run-1", content="Please refund ORD-5678"),
        ToolCall(run_id="run-1", tool_call_id="c1", tool_name="lookup_order", args={"order_id": "ORD-5678"}),
        ToolResult(
            run_id="run-1",
            tool_call_id="c1",
            tool_name="lookup_order",
            outcome="success",
            content={"order_id": "ORD-5678", "total": 99.98},
        ),
        ToolCall(
            run_id="run-1",
            tool_call_id="c2",
            tool_name="issue_refund",
            args={"order_id": "ORD-5678", "amount": 99.98},
        ),
        ApprovalRequired(
            run_id="run-1",
            approvals=[
                PendingCall(
                    tool_call_id="c2",
                    tool_name="issue_refund",
                    args={"order_id": "ORD-5678", "amount": 99.98},
                )
            ],
        ),
        RunFinished(run_id="run-1", status="awaiting_approval"),
        ApprovalDecided(
            run_id="run-1",
            tool_call_id="c2",
            decision="approved",
            decided_by="alice",
            override_args={"order_id": "ORD-5678", "amount": 50.0},
        ),
        RunStarted(run_id="run-2", kind="resume"),
        ToolResult(
            run_id="run-2",
            tool_call_id="c2",
            tool_name="issue_refund",
            outcome="success",
            content="Refunded $50.00 for ORD-5678",
        ),
        TextDelta(run_id="run-2", part_id="p0", delta="Done: "),
        TextDelta(run_id="run-2", part_id="p0", delta="refunded "),
        TextDelta(run_id="run-2", part_id="p0", delta="$50.00."),
        TextDone(run_id="run-2", part_id="p0", text="Done: refunded $50.00."),
        RunFinished(run_id="run-2", status="completed", output="Done: refunded $50.00."),
    ]


def test_transcript_of_a_paused_and_resumed_run() -> None:
    assert transcript(refund_run()) == snapshot(
        [
            "run_started message",
            "user_message 'Please refund ORD-5678'",
            "tool_call lookup_order {'order_id': 'ORD-5678'}",
            "tool_result lookup_order success {'order_id': 'ORD-5678', 'total': 99.98}",
            "tool_call issue_refund {'order_id': 'ORD-5678', 'amount': 99.98}",
            "approval_required [issue_refund {'order_id': 'ORD-5678', 'amount': 99.98}]",
            "run_finished awaiting_approval",
            "approval_decided approved by 'alice' override_args={'order_id': 'ORD-5678', 'amount': 50.0}",
            "run_started resume",
            "tool_result issue_refund success 'Refunded $50.00 for ORD-5678'",
            "text p0: 'Done: refunded $50.00.'",
            "text_done p0 'Done: refunded $50.00.'",
            "run_finished completed output='Done: refunded $50.00.'",
        ]
    )


def test_transcript_without_merging_deltas() -> None:
    assert transcript(refund_run()[-5:], merge_deltas=False) == snapshot(
        [
            "text_delta p0 'Done: '",
            "text_delta p0 'refunded '",
            "text_delta p0 '$50.00.'",
            "text_done p0 'Done: refunded $50.00.'",
            "run_finished completed output='Done: refunded $50.00.'",
        ]
    )


def test_transcript_merges_only_consecutive_deltas_of_one_part() -> None:
    events: list[StreamEvent] = [
        TextDelta(run_id="r", part_id="p0", delta="a"),
        TextDelta(run_id="r", part_id="p0", delta="b"),
        TextDelta(run_id="r", part_id="p1", delta="c"),
        TextDelta(run_id="r", part_id="p0", delta="d"),
        TextDone(run_id="r", part_id="p0", text="abd"),
        TextDelta(run_id="r", part_id="p0", delta="e"),
    ]

    assert transcript(events) == snapshot(
        ["text p0: 'ab'", "text p1: 'c'", "text p0: 'd'", "text_done p0 'abd'", "text p0: 'e'"]
    )


def test_transcript_of_guardrails_rejections_and_failures() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id="r", kind="recover"),
        TextDelta(run_id="r", part_id="p0", delta="Traceback (most recent call last):"),
        TextWithdrawn(run_id="r", part_id="p0", replacement="Sorry, something went wrong."),
        GuardrailTripped(run_id="r", guardrail="no_internal_details", stage="output"),
        ApprovalDecided(
            run_id="r", tool_call_id="c", decision="rejected", decided_by="bob", reason="not eligible"
        ),
        ToolResult(
            run_id="r", tool_call_id="c", tool_name="cancel_order", outcome="denied", content="not eligible"
        ),
        RunFinished(run_id="r", status="failed", error="the model timed out"),
        RunFinished(run_id="r", status="blocked"),
    ]

    assert transcript(events) == snapshot(
        [
            "run_started recover",
            "text p0: 'Traceback (most recent call last):'",
            "text_withdrawn p0 -> 'Sorry, something went wrong.'",
            "guardrail_tripped output no_internal_details",
            "approval_decided rejected by 'bob' reason='not eligible'",
            "tool_result cancel_order denied 'not eligible'",
            "run_finished failed error='the model timed out'",
            "run_finished blocked",
        ]
    )
