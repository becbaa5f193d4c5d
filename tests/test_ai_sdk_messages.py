"""A thread's history as UIMessages, folded from hand-built runs and events, without a database."""

from __future__ import annotations

from datetime import UTC, datetime

from inline_snapshot import snapshot

from store import Run
from store.schema import RunKind
from stream import (
    ApprovalDecided,
    ApprovalRequired,
    PendingCall,
    RunFinished,
    RunStarted,
    StoredEvent,
    StreamEvent,
    TextDelta,
    TextDone,
    TextWithdrawn,
    ToolCall,
    ToolResult,
    UserMessage,
)
from web.ai_sdk.history import dump_ui_message, ui_messages

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def run(run_id: str, kind: RunKind, content: str | None = None, key: str | None = None) -> Run:
    return Run(
        run_id=run_id,
        thread_id="t",
        kind=kind,
        status="completed",
        content=content,
        idempotency_key=key,
        error=None,
        attempt=1,
        checkpoints=1,
        created_at=NOW,
        started_at=NOW,
        finished_at=NOW,
    )


def logged(*events: StreamEvent) -> list[StoredEvent]:
    return [StoredEvent(index + 1, event) for index, event in enumerate(events)]


def dumped(runs: list[Run], events: list[StoredEvent]) -> list[object]:
    return [dump_ui_message(m) for m in ui_messages(runs, events)]


def test_a_paused_turn_its_decision_and_its_continuation() -> None:
    runs = [run("r1", "message", "Refund ORD-1", key="client-msg-1"), run("r2", "resume")]
    events = logged(
        RunStarted(run_id="r1", kind="message"),
        UserMessage(run_id="r1", content="Refund ORD-1"),
        ToolCall(run_id="r1", tool_call_id="c1", tool_name="lookup_order", args={"order_id": "ORD-1"}),
        ToolResult(
            run_id="r1", tool_call_id="c1", tool_name="lookup_order", outcome="success", content={"total": 5}
        ),
        ToolCall(run_id="r1", tool_call_id="c2", tool_name="issue_refund", args={"amount": 5}),
        ApprovalRequired(
            run_id="r1",
            approvals=[PendingCall(tool_call_id="c2", tool_name="issue_refund", args={"amount": 5})],
        ),
        RunFinished(run_id="r1", status="awaiting_approval"),
    )
    paused = dumped(runs[:1], events)
    assert paused == snapshot(
        [
            {
                "id": "client-msg-1",
                "role": "user",
                "parts": [{"type": "text", "text": "Refund ORD-1", "state": "done"}],
            },
            {
                "id": "r1",
                "role": "assistant",
                "parts": [
                    {"type": "step-start"},
                    {
                        "type": "tool-lookup_order",
                        "toolCallId": "c1",
                        "state": "output-available",
                        "input": {"order_id": "ORD-1"},
                        "output": {"total": 5},
                    },
                    {"type": "step-start"},
                    {
                        "type": "tool-issue_refund",
                        "toolCallId": "c2",
                        "state": "approval-requested",
                        "input": {"amount": 5},
                        "approval": {"id": "c2"},
                    },
                ],
            },
        ]
    )
    decided = [
        *events,
        StoredEvent(
            8, ApprovalDecided(run_id="r1", tool_call_id="c2", decision="approved", decided_by="alice")
        ),
    ]
    assert dumped(runs[:1], decided)[1]["parts"][-1] == snapshot(
        {
            "type": "tool-issue_refund",
            "toolCallId": "c2",
            "state": "approval-responded",
            "input": {"amount": 5},
            "approval": {"id": "c2", "approved": True},
        }
    )
    resumed = [
        *decided,
        *[
            StoredEvent(9 + i, e)
            for i, e in enumerate(
                [
                    RunStarted(run_id="r2", kind="resume"),
                    ToolResult(
                        run_id="r2",
                        tool_call_id="c2",
                        tool_name="issue_refund",
                        outcome="success",
                        content="done",
                    ),
                    TextDelta(run_id="r2", part_id="p1", delta="Refunded."),
                    TextDone(run_id="r2", part_id="p1", text="Refunded."),
                    RunFinished(run_id="r2", status="completed", output="Refunded."),
                ]
            )
        ],
    ]
    assert dumped(runs, resumed)[1] == snapshot(
        {
            "id": "r1",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-lookup_order",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"order_id": "ORD-1"},
                    "output": {"total": 5},
                },
                {"type": "step-start"},
                {
                    "type": "tool-issue_refund",
                    "toolCallId": "c2",
                    "state": "output-available",
                    "input": {"amount": 5},
                    "output": "done",
                    "approval": {"id": "c2", "approved": True},
                },
                {"type": "step-start"},
                {"type": "text", "text": "Refunded.", "state": "done"},
            ],
        }
    )


def test_a_regenerated_reply_replaces_the_last_one() -> None:
    runs = [run("r1", "message", "Hi"), run("r2", "regenerate", "Hi")]
    events = logged(
        RunStarted(run_id="r1", kind="message"),
        TextDone(run_id="r1", part_id="p1", text="Hello!"),
        RunFinished(run_id="r1", status="completed", output="Hello!"),
        RunStarted(run_id="r2", kind="regenerate"),
        TextDone(run_id="r2", part_id="p2", text="Hello again!"),
        RunFinished(run_id="r2", status="completed", output="Hello again!"),
    )
    assert dumped(runs, events) == snapshot(
        [
            {"id": "r1.user", "role": "user", "parts": [{"type": "text", "text": "Hi", "state": "done"}]},
            {
                "id": "r2",
                "role": "assistant",
                "parts": [{"type": "step-start"}, {"type": "text", "text": "Hello again!", "state": "done"}],
            },
        ]
    )


def test_withdrawn_text_shows_only_its_replacement_and_rejections_their_reason() -> None:
    runs = [run("r1", "message", "Cancel ORD-1"), run("r2", "resume"), run("r3", "message", "Still there?")]
    events = logged(
        RunStarted(run_id="r1", kind="message"),
        ToolCall(run_id="r1", tool_call_id="c1", tool_name="cancel_order", args={}),
        ApprovalRequired(
            run_id="r1", approvals=[PendingCall(tool_call_id="c1", tool_name="cancel_order", args={})]
        ),
        RunFinished(run_id="r1", status="awaiting_approval"),
        ApprovalDecided(run_id="r1", tool_call_id="c1", decision="rejected", decided_by="alice", reason="no"),
        RunStarted(run_id="r2", kind="resume"),
        ToolResult(
            run_id="r2", tool_call_id="c1", tool_name="cancel_order", outcome="denied", content="rejected: no"
        ),
        TextDelta(run_id="r2", part_id="p1", delta="leaked"),
        TextWithdrawn(run_id="r2", part_id="p1", replacement="[withdrawn]"),
        RunFinished(run_id="r2", status="completed", output="[withdrawn]"),
    )
    # The third run is queued: its user message shows, no reply yet.
    assert dumped(runs, events) == snapshot(
        [
            {
                "id": "r1.user",
                "role": "user",
                "parts": [{"type": "text", "text": "Cancel ORD-1", "state": "done"}],
            },
            {
                "id": "r1",
                "role": "assistant",
                "parts": [
                    {"type": "step-start"},
                    {
                        "type": "tool-cancel_order",
                        "toolCallId": "c1",
                        "state": "output-denied",
                        "input": {},
                        "approval": {"id": "c1", "approved": False, "reason": "no"},
                    },
                    {"type": "step-start"},
                    {"type": "text", "text": "[withdrawn]", "state": "done"},
                ],
            },
            {
                "id": "r3.user",
                "role": "user",
                "parts": [{"type": "text", "text": "Still there?", "state": "done"}],
            },
        ]
    )


def test_a_structured_output_and_an_approvals_metadata_after_a_reload() -> None:
    runs = [run("r1", "message", "Wire 250, then find me a flight"), run("r2", "resume")]
    events = logged(
        RunStarted(run_id="r1", kind="message"),
        ToolCall(run_id="r1", tool_call_id="c1", tool_name="wire", args={"amount": 250}),
        ApprovalRequired(
            run_id="r1",
            approvals=[
                PendingCall(
                    tool_call_id="c1", tool_name="wire", args={"amount": 250}, metadata={"why": "abroad"}
                )
            ],
        ),
        RunFinished(run_id="r1", status="awaiting_approval"),
    )
    paused = dumped(runs[:1], events)[1]
    assert paused["parts"][-1]["approval"] == snapshot({"id": "c1", "descriptor": {"why": "abroad"}})  # pyright: ignore[reportIndexIssue, reportCallIssue, reportArgumentType]
    assert "metadata" not in paused
    resumed = [
        *events,
        *(
            StoredEvent(5 + i, e)
            for i, e in enumerate(
                [
                    ApprovalDecided(run_id="r1", tool_call_id="c1", decision="approved", decided_by="alice"),
                    RunStarted(run_id="r2", kind="resume"),
                    ToolResult(
                        run_id="r2", tool_call_id="c1", tool_name="wire", outcome="success", content="wired"
                    ),
                    ToolCall(
                        run_id="r2", tool_call_id="c2", tool_name="final_result", args={"number": "TP1"}
                    ),
                    ToolResult(
                        run_id="r2",
                        tool_call_id="c2",
                        tool_name="final_result",
                        outcome="success",
                        content="Final result processed.",
                    ),
                    RunFinished(
                        run_id="r2",
                        status="completed",
                        output={"number": "TP1", "seats": 2},
                        output_type="Flight",
                        output_tool_call_id="c2",
                    ),
                ]
            )
        ),
    ]
    assert dumped(runs, resumed)[1] == snapshot(
        {
            "id": "r1",
            "role": "assistant",
            "metadata": {"output": {"number": "TP1", "seats": 2}, "outputType": "Flight"},
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-wire",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"amount": 250},
                    "output": "wired",
                    "approval": {"id": "c1", "approved": True, "descriptor": {"why": "abroad"}},
                },
                {"type": "step-start"},
                {
                    "type": "tool-final_result",
                    "toolCallId": "c2",
                    "state": "output-available",
                    "input": {"number": "TP1"},
                    "output": {"number": "TP1", "seats": 2},
                },
            ],
        }
    )
