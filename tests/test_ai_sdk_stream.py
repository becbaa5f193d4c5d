"""The AI SDK encoder alone: hand-built event sequences in, UI message stream chunks out."""

from __future__ import annotations

import json

from inline_snapshot import snapshot
from pydantic_ai.ui.vercel_ai.response_types import TextDeltaChunk

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
from web.ai_sdk.encoder import UIMessageStream, encode_chunk

R = "run-1"


def frames(
    events: list[StreamEvent], *, message_id: str | None = "msg-1", decided: tuple[str, ...] = ()
) -> list[str]:
    """The response's SSE frames, each `data:` payload as its JSON text."""
    stream = UIMessageStream(message_id=message_id, decided=decided)
    chunks = [*stream.start(), *(c for e in events for c in stream.encode(e)), *stream.end()]
    lines: list[str] = []
    for chunk in chunks:
        frame = encode_chunk(chunk).decode()
        assert frame.startswith("data: ")
        assert frame.endswith("\n\n")
        assert frame.count("\n") == 2
        lines.append(frame.removeprefix("data: ").removesuffix("\n\n"))
    return lines


def test_every_frame_is_json_or_done() -> None:
    lines = frames(
        [RunStarted(run_id=R, kind="message"), RunFinished(run_id=R, status="completed", output="x")]
    )
    assert lines[-1] == "[DONE]"
    assert all(isinstance(json.loads(line), dict) for line in lines[:-1])


def test_a_question_answered_after_a_tool() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        UserMessage(run_id=R, content="Where is ORD-1?"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="lookup_order", args={"order_id": "ORD-1"}),
        ToolResult(
            run_id=R, tool_call_id="c1", tool_name="lookup_order", outcome="success", content={"total": 5}
        ),
        TextDelta(run_id=R, part_id="p1", delta="Order "),
        TextDelta(run_id=R, part_id="p1", delta="ORD-1."),
        TextDone(run_id=R, part_id="p1", text="Order ORD-1."),
        RunFinished(run_id=R, status="completed", output="Order ORD-1."),
    ]
    assert frames(events) == snapshot(
        [
            '{"type":"start","messageId":"msg-1"}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"c1","toolName":"lookup_order","input":{"order_id":"ORD-1"}}',
            '{"type":"tool-output-available","toolCallId":"c1","output":{"total":5}}',
            '{"type":"finish-step"}',
            '{"type":"start-step"}',
            '{"type":"text-start","id":"p1"}',
            '{"type":"text-delta","delta":"Order ","id":"p1"}',
            '{"type":"text-delta","delta":"ORD-1.","id":"p1"}',
            '{"type":"text-end","id":"p1"}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"stop"}',
            "[DONE]",
        ]
    )


def test_a_pause_for_approval_and_the_resumed_run() -> None:
    paused: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="issue_refund", args={"amount": 5}),
        ToolCall(run_id=R, tool_call_id="c2", tool_name="cancel_order", args={"order_id": "ORD-1"}),
        ApprovalRequired(
            run_id=R,
            approvals=[
                PendingCall(tool_call_id="c1", tool_name="issue_refund", args={"amount": 5}),
                PendingCall(tool_call_id="c2", tool_name="cancel_order", args={"order_id": "ORD-1"}),
            ],
        ),
        RunFinished(run_id=R, status="awaiting_approval"),
    ]
    assert frames(paused) == snapshot(
        [
            '{"type":"start","messageId":"msg-1"}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"c1","toolName":"issue_refund","input":{"amount":5}}',
            '{"type":"tool-input-available","toolCallId":"c2","toolName":"cancel_order","input":{"order_id":"ORD-1"}}',
            '{"type":"tool-approval-request","approvalId":"c1","toolCallId":"c1"}',
            '{"type":"tool-approval-request","approvalId":"c2","toolCallId":"c2"}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"tool-calls"}',
            "[DONE]",
        ]
    )
    resumed: list[StreamEvent] = [
        RunStarted(run_id="run-2", kind="resume"),
        ToolResult(
            run_id="run-2", tool_call_id="c1", tool_name="issue_refund", outcome="success", content="done"
        ),
        ToolResult(
            run_id="run-2", tool_call_id="c2", tool_name="cancel_order", outcome="denied", content="no"
        ),
        TextDone(run_id="run-2", part_id="p2", text="Refunded; not cancelled."),
        RunFinished(run_id="run-2", status="completed", output="Refunded; not cancelled."),
    ]
    # A continuation names no message: the client's own assistant message goes on.
    assert frames(resumed, message_id=None) == snapshot(
        [
            '{"type":"start"}',
            '{"type":"tool-output-available","toolCallId":"c1","output":"done"}',
            '{"type":"tool-output-denied","toolCallId":"c2"}',
            '{"type":"start-step"}',
            '{"type":"text-start","id":"p2"}',
            '{"type":"text-delta","delta":"Refunded; not cancelled.","id":"p2"}',
            '{"type":"text-end","id":"p2"}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"stop"}',
            "[DONE]",
        ]
    )


def test_a_replay_leaves_out_requests_decided_already() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="issue_refund", args={}),
        ToolCall(run_id=R, tool_call_id="c2", tool_name="issue_refund", args={}),
        ApprovalRequired(
            run_id=R,
            approvals=[
                PendingCall(tool_call_id="c1", tool_name="issue_refund", args={}),
                PendingCall(tool_call_id="c2", tool_name="issue_refund", args={}),
            ],
        ),
        RunFinished(run_id=R, status="awaiting_approval"),
        ApprovalDecided(run_id=R, tool_call_id="c1", decision="approved", decided_by="alice"),
    ]
    requests = [line for line in frames(events, decided=("c1",)) if "tool-approval-request" in line]
    assert requests == snapshot(['{"type":"tool-approval-request","approvalId":"c2","toolCallId":"c2"}'])


def test_failures_guardrails_withdrawals_and_recoveries() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        TextDelta(run_id=R, part_id="p1", delta="half a sen"),
        RunStarted(run_id=R, kind="recover"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="lookup_order", args={}),
        ToolResult(
            run_id=R, tool_call_id="c1", tool_name="lookup_order", outcome="failed", content={"error": "boom"}
        ),
        GuardrailTripped(run_id=R, guardrail="leak", stage="output"),
        ToolOutcomeUnknown(run_id=R, tool_call_id="c1", tool_name="lookup_order"),
        TextDelta(run_id=R, part_id="p2", delta="the stack trace is"),
        TextWithdrawn(run_id=R, part_id="p2", replacement="[withdrawn]"),
        TextDelta(run_id=R, part_id="p3", delta=""),
        TextDone(run_id=R, part_id="p3", text="blanked, then done"),
        RunFinished(run_id=R, status="failed", error="The assistant hit a problem."),
    ]
    assert frames(events) == snapshot(
        [
            '{"type":"start","messageId":"msg-1"}',
            '{"type":"start-step"}',
            '{"type":"text-start","id":"p1"}',
            '{"type":"text-delta","delta":"half a sen","id":"p1"}',
            '{"type":"text-end","id":"p1"}',
            '{"type":"finish-step"}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"c1","toolName":"lookup_order","input":{}}',
            '{"type":"tool-output-error","toolCallId":"c1","errorText":"{\\"error\\":\\"boom\\"}"}',
            '{"type":"data-guardrail-tripped","data":{"guardrail":"leak","stage":"output"},"transient":true}',
            '{"type":"data-tool-outcome-unknown","data":{"toolCallId":"c1","toolName":"lookup_order"},"transient":true}',
            '{"type":"finish-step"}',
            '{"type":"start-step"}',
            '{"type":"text-start","id":"p2"}',
            '{"type":"text-delta","delta":"the stack trace is","id":"p2"}',
            '{"type":"text-end","id":"p2"}',
            '{"type":"text-start","id":"p2.replacement"}',
            '{"type":"text-delta","delta":"[withdrawn]","id":"p2.replacement"}',
            '{"type":"text-end","id":"p2.replacement"}',
            '{"type":"text-start","id":"p3"}',
            '{"type":"text-delta","delta":"blanked, then done","id":"p3"}',
            '{"type":"text-end","id":"p3"}',
            '{"type":"error","errorText":"The assistant hit a problem."}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"error"}',
            "[DONE]",
        ]
    )


def test_the_ends_of_a_response() -> None:
    blocked = [RunStarted(run_id=R, kind="message"), RunFinished(run_id=R, status="blocked", output="no")]
    cancelled = [RunStarted(run_id=R, kind="message"), RunFinished(run_id=R, status="cancelled")]
    assert frames(blocked)[-2:] == snapshot(['{"type":"finish","finishReason":"content-filter"}', "[DONE]"])
    assert frames(cancelled)[-2:] == snapshot(['{"type":"abort","reason":"cancelled"}', "[DONE]"])
    # A stream that ended without the run's end (its thread was deleted).
    assert frames([RunStarted(run_id=R, kind="message")])[-2:] == snapshot(
        ['{"type":"finish","finishReason":"other"}', "[DONE]"]
    )


def test_a_calls_metadata_is_its_approval_descriptor() -> None:
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
    requests = [line for line in frames(events) if "tool-approval-request" in line]
    assert requests == snapshot(
        [
            '{"type":"tool-approval-request","approvalId":"c1","toolCallId":"c1","approvalDescriptor":{"why":"abroad"}}',
            '{"type":"tool-approval-request","approvalId":"c2","toolCallId":"c2"}',
        ]
    )


def test_a_structured_output_closes_its_call_with_the_output_and_is_the_messages_metadata() -> None:
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        # The model's first output was refused (a field missing): the call is closed with the retry.
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
    assert frames(events) == snapshot(
        [
            '{"type":"start","messageId":"msg-1"}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"c1","toolName":"final_result_Flight","input":{"number":"TP1"}}',
            '{"type":"tool-output-error","toolCallId":"c1","errorText":"seats: missing"}',
            '{"type":"finish-step"}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"c2","toolName":"final_result_NoFlightFound","input":{}}',
            '{"type":"tool-output-available","toolCallId":"c2","output":"Final result processed."}',
            '{"type":"tool-output-available","toolCallId":"c2","output":{}}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"stop","messageMetadata":{"output":{},"outputType":"NoFlightFound"}}',
            "[DONE]",
        ]
    )
    # A text output is the message's text: no metadata, and nothing closed again.
    text = frames(
        [RunStarted(run_id=R, kind="message"), RunFinished(run_id=R, status="completed", output="Hi")]
    )
    assert text[-2:] == snapshot(['{"type":"finish","finishReason":"stop"}', "[DONE]"])


def test_a_chunk_is_one_sse_frame_written_by_the_stream_framing() -> None:
    # A newline in the text stays escaped inside the JSON: one `data:` line, as the AI SDK reads it.
    assert encode_chunk(TextDeltaChunk(id="p1", delta="a\nb")) == (
        b'data: {"type":"text-delta","delta":"a\\nb","id":"p1"}\n\n'
    )


def test_the_user_messages_files_are_told_live_with_their_endpoints() -> None:
    photo = AttachedFile(file_id="f1", name="photo.png", media_type="image/png", size=812)
    events: list[StreamEvent] = [
        RunStarted(run_id=R, kind="message"),
        UserMessage(run_id=R, content="", attachments=[photo]),
        RunFinished(run_id=R, status="completed"),
    ]
    stream = UIMessageStream(message_id="msg-1", thread_id="t/1")
    chunks = [c.encode(6) for e in events for c in stream.encode(e)]
    assert chunks == snapshot(
        [
            '{"type":"data-user-files","data":{"files":[{"fileId":"f1","filename":"photo.png","mediaType":"image/png","size":812,"url":"/api/threads/t%2F1/files/f1"}]},"transient":true}'
        ]
    )
    # Without files, or without the thread to name their endpoints, nothing is said.
    assert UIMessageStream(message_id="m", thread_id="t").encode(UserMessage(run_id=R, content="hi")) == []
    assert UIMessageStream(message_id="m").encode(events[1]) == []
