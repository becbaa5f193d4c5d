"""The AG-UI encoder alone: hand-built event sequences in, AG-UI events (as SSE frames) out."""

from __future__ import annotations

import json

from inline_snapshot import snapshot

from stream import (
    ApprovalDecided,
    ApprovalRequired,
    AttachedFile,
    GuardrailTripped,
    PendingCall,
    RunFinished,
    RunStarted,
    StreamEvent,
    TextDelta,
    TextDone,
    TextWithdrawn,
    ToolCall,
    ToolOutcomeUnknown,
    ToolResult,
    UserMessage,
)
from web.ag_ui.encoder import AGUIStream, encode_event, interrupt_id_to_tool_call_id

R = "run-1"


def frames(events: list[StreamEvent]) -> list[dict[str, object]]:
    stream = AGUIStream(thread_id="chat-1", run_id="client-run-1")
    out = [*stream.start(), *(e for event in events for e in stream.encode(event)), *stream.end()]
    decoded: list[dict[str, object]] = []
    for event in out:
        frame = encode_event(event).decode()
        assert frame.startswith("data: ")
        assert frame.endswith("\n\n")
        assert frame.count("\n") == 2
        decoded.append(json.loads(frame.removeprefix("data: ")))
    return decoded


def test_a_question_answered_after_a_tool() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        UserMessage(run_id=R, content="Where is ORD-1?"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="lookup_order", args={"order_id": "ORD-1"}),
        ToolResult(
            run_id=R, tool_call_id="c1", tool_name="lookup_order", outcome="success", content={"total": 5}
        ),
        GuardrailTripped(run_id=R, guardrail="leak", stage="output"),
        TextDelta(run_id=R, part_id="p1", delta="Order "),
        TextDelta(run_id=R, part_id="p1", delta="ORD-1."),
        TextDone(run_id=R, part_id="p1", text="Order ORD-1."),
        RunFinished(run_id=R, status="completed", output="Order ORD-1."),
    ]
    assert frames(events) == snapshot(
        [
            {"type": "RUN_STARTED", "threadId": "chat-1", "runId": "client-run-1"},
            {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "lookup_order"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"order_id": "ORD-1"}'},
            {"type": "TOOL_CALL_END", "toolCallId": "c1"},
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": "c1.result",
                "toolCallId": "c1",
                "content": '{"total":5}',
                "role": "tool",
            },
            {
                "type": "CUSTOM",
                "name": "guardrail_tripped",
                "value": {"guardrail": "leak", "stage": "output"},
            },
            {"type": "TEXT_MESSAGE_START", "messageId": "p1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "p1", "delta": "Order "},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "p1", "delta": "ORD-1."},
            {"type": "TEXT_MESSAGE_END", "messageId": "p1"},
            {
                "type": "RUN_FINISHED",
                "threadId": "chat-1",
                "runId": "client-run-1",
                "result": "Order ORD-1.",
                "outcome": {"type": "success"},
            },
        ]
    )


def test_a_pause_ends_with_an_interrupt_per_pending_call() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="issue_refund", args={"amount": 5}),
        ApprovalRequired(
            run_id=R, approvals=[PendingCall(tool_call_id="c1", tool_name="issue_refund", args={"amount": 5})]
        ),
        RunFinished(run_id=R, status="awaiting_approval"),
        ApprovalDecided(run_id=R, tool_call_id="c1", decision="rejected", decided_by="alice", reason="no"),
    ]
    out = frames(events)
    assert out[-1] == snapshot(
        {
            "type": "RUN_FINISHED",
            "threadId": "chat-1",
            "runId": "client-run-1",
            "outcome": {
                "type": "interrupt",
                "interrupts": [
                    {
                        "id": "int-c1",
                        "reason": "tool_call",
                        "message": 'Approve issue_refund({"amount":5})?',
                        "toolCallId": "c1",
                        "responseSchema": {
                            "properties": {
                                "approved": {"type": "boolean"},
                                "editedArgs": {"type": "object"},
                                "reason": {"type": "string"},
                            },
                            "required": ["approved"],
                            "type": "object",
                        },
                    }
                ],
            },
        }
    )
    # The interrupt names the call it holds, as pydantic-ai's adapter reads it back.
    assert interrupt_id_to_tool_call_id("int-c1") == "c1"


def test_withdrawals_recoveries_and_the_other_ends() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        TextDelta(run_id=R, part_id="p1", delta="half"),
        RunStarted(run_id=R, kind="recover"),
        TextDelta(run_id=R, part_id="p2", delta="leaked"),
        TextWithdrawn(run_id=R, part_id="p2", replacement="[withdrawn]"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="cancel_order", args={}),
        ToolOutcomeUnknown(run_id=R, tool_call_id="c1", tool_name="cancel_order"),
        ToolResult(
            run_id=R, tool_call_id="c1", tool_name="cancel_order", outcome="denied", content="rejected"
        ),
        RunFinished(run_id=R, status="failed", error="The assistant hit a problem."),
    ]
    assert frames(events) == snapshot(
        [
            {"type": "RUN_STARTED", "threadId": "chat-1", "runId": "client-run-1"},
            {"type": "TEXT_MESSAGE_START", "messageId": "p1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "p1", "delta": "half"},
            {"type": "TEXT_MESSAGE_END", "messageId": "p1"},
            {"type": "TEXT_MESSAGE_START", "messageId": "p2", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "p2", "delta": "leaked"},
            {
                "type": "CUSTOM",
                "name": "text_withdrawn",
                "value": {"message_id": "p2", "replacement": "[withdrawn]"},
            },
            {"type": "TEXT_MESSAGE_END", "messageId": "p2"},
            {"type": "TEXT_MESSAGE_START", "messageId": "p2.replacement", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "p2.replacement", "delta": "[withdrawn]"},
            {"type": "TEXT_MESSAGE_END", "messageId": "p2.replacement"},
            {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "cancel_order"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
            {"type": "TOOL_CALL_END", "toolCallId": "c1"},
            {
                "type": "CUSTOM",
                "name": "tool_outcome_unknown",
                "value": {"tool_call_id": "c1", "tool_name": "cancel_order"},
            },
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": "c1.result",
                "toolCallId": "c1",
                "content": "rejected",
                "role": "tool",
            },
            {"type": "RUN_ERROR", "message": "The assistant hit a problem.", "code": "run_failed"},
        ]
    )
    assert frames([RunStarted(run_id=R, kind="message"), RunFinished(run_id=R, status="cancelled")])[
        -1
    ] == snapshot(
        {
            "type": "RUN_FINISHED",
            "threadId": "chat-1",
            "runId": "client-run-1",
            "outcome": {"type": "cancelled"},
        }
    )
    assert frames(
        [RunStarted(run_id=R, kind="message"), RunFinished(run_id=R, status="blocked", output="no")]
    )[-1] == snapshot(
        {
            "type": "RUN_FINISHED",
            "threadId": "chat-1",
            "runId": "client-run-1",
            "result": "no",
            "outcome": {"type": "success"},
        }
    )
    assert frames([RunStarted(run_id=R, kind="message")])[-1] == snapshot(
        {"type": "RUN_ERROR", "message": "The stream ended before the run finished.", "code": "ended"}
    )


def test_an_interrupt_carries_its_calls_metadata() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="wire", args={"amount": 250}),
        ToolCall(run_id=R, tool_call_id="c2", tool_name="transfer", args={"amount": 5}),
        ApprovalRequired(
            run_id=R,
            approvals=[
                PendingCall(
                    tool_call_id="c1", tool_name="wire", args={"amount": 250}, metadata={"why": "abroad"}
                ),
                PendingCall(tool_call_id="c2", tool_name="transfer", args={"amount": 5}),
            ],
        ),
        RunFinished(run_id=R, status="awaiting_approval"),
    ]
    outcome = frames(events)[-1]["outcome"]
    assert isinstance(outcome, dict)
    assert [i.get("metadata") for i in outcome["interrupts"]] == [{"why": "abroad"}, None]  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def test_the_output_call_gets_its_result_and_the_run_its_output_and_type() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="final_result_Flight", args={"number": "TP1"}),
        ToolResult(
            run_id=R,
            tool_call_id="c1",
            tool_name="final_result_Flight",
            outcome="failed",
            content="seats: missing",
        ),
        ToolCall(run_id=R, tool_call_id="c2", tool_name="final_result_NoFlightFound", args={}),
        ToolResult(
            run_id=R,
            tool_call_id="c2",
            tool_name="final_result_NoFlightFound",
            outcome="success",
            content="Final result processed.",
        ),
        RunFinished(
            run_id=R, status="completed", output={}, output_type="NoFlightFound", output_tool_call_id="c2"
        ),
    ]
    assert frames(events)[4:] == snapshot(
        [
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": "c1.result",
                "toolCallId": "c1",
                "content": "seats: missing",
                "role": "tool",
            },
            {"type": "TOOL_CALL_START", "toolCallId": "c2", "toolCallName": "final_result_NoFlightFound"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": "c2", "delta": "{}"},
            {"type": "TOOL_CALL_END", "toolCallId": "c2"},
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": "c2.result",
                "toolCallId": "c2",
                "content": "Final result processed.",
                "role": "tool",
            },
            {
                "type": "CUSTOM",
                "name": "structured_output",
                "value": {"output": {}, "output_type": "NoFlightFound", "tool_call_id": "c2"},
            },
            {
                "type": "RUN_FINISHED",
                "threadId": "chat-1",
                "runId": "client-run-1",
                "result": {},
                "outcome": {"type": "success"},
            },
        ]
    )


def test_the_user_messages_files_are_told_live_with_their_endpoints() -> None:
    files = [
        AttachedFile(file_id="f1", name="photo.png", media_type="image/png", size=812),
        AttachedFile(file_id="f2", name="orders.csv", media_type="text/csv", size=28),
    ]
    stream = AGUIStream(thread_id="chat-1", run_id="client-run-1", files_thread_id="t-1")
    events = stream.encode(UserMessage(run_id=R, content="", attachments=files))
    assert [json.loads(encode_event(e).decode().removeprefix("data: ")) for e in events] == snapshot(
        [
            {
                "type": "CUSTOM",
                "name": "user_files",
                "value": {
                    "files": [
                        {
                            "file_id": "f1",
                            "name": "photo.png",
                            "media_type": "image/png",
                            "size": 812,
                            "url": "/api/threads/t-1/files/f1",
                        },
                        {
                            "file_id": "f2",
                            "name": "orders.csv",
                            "media_type": "text/csv",
                            "size": 28,
                            "url": "/api/threads/t-1/files/f2",
                        },
                    ]
                },
            }
        ]
    )
    assert stream.encode(UserMessage(run_id=R, content="hi")) == []
    # Without the stored thread to name the endpoints, nothing is said of them.
    assert frames([UserMessage(run_id=R, content="hi", attachments=files)])[1]["type"] == "RUN_ERROR"
