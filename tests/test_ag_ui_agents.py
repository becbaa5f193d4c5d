"""Several agents in AG-UI, from hand-built events: a delegated agent's work as a subagent invocation
(`SUBAGENT_STARTED` with its name and the call that delegated, `subagentRunId` on its events,
`SUBAGENT_FINISHED`, suspended at a pause), the interrupt of a nested approval carrying the invocation,
and text messages naming their agent."""

from __future__ import annotations

from ag_ui.core import SubagentStartedEvent
from inline_snapshot import snapshot

from stream import RunFinished
from web.ag_ui.encoder import AGUIStream

from .test_ag_ui_events import frames
from .test_ai_sdk_agents import DECIDED, PAUSED, RESUMED


def test_a_nested_approval_is_an_interrupt_of_a_suspended_subagent() -> None:
    assert frames(PAUSED) == snapshot(
        [
            {"type": "RUN_STARTED", "threadId": "chat-1", "runId": "client-run-1"},
            {"type": "TOOL_CALL_START", "toolCallId": "b1", "toolCallName": "ask_booking"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": "b1", "delta": '{"task": "go"}'},
            {"type": "TOOL_CALL_END", "toolCallId": "b1"},
            {"type": "SUBAGENT_STARTED", "subagentRunId": "b1", "name": "booking", "parentToolCallId": "b1"},
            {
                "type": "TOOL_CALL_START",
                "subagentRunId": "b1",
                "toolCallId": "k1",
                "toolCallName": "ask_payments",
            },
            {"type": "TOOL_CALL_ARGS", "subagentRunId": "b1", "toolCallId": "k1", "delta": "{}"},
            {"type": "TOOL_CALL_END", "subagentRunId": "b1", "toolCallId": "k1"},
            {
                "type": "SUBAGENT_STARTED",
                "subagentRunId": "k1",
                "name": "payments",
                "parentSubagentRunId": "b1",
                "parentToolCallId": "k1",
            },
            {"type": "TOOL_CALL_START", "subagentRunId": "k1", "toolCallId": "p1", "toolCallName": "charge"},
            {"type": "TOOL_CALL_ARGS", "subagentRunId": "k1", "toolCallId": "p1", "delta": '{"cents": 300}'},
            {"type": "TOOL_CALL_END", "subagentRunId": "k1", "toolCallId": "p1"},
            {
                "type": "SUBAGENT_FINISHED",
                "subagentRunId": "k1",
                "outcome": {"type": "suspended", "interruptIds": ["int-p1"]},
            },
            {
                "type": "SUBAGENT_FINISHED",
                "subagentRunId": "b1",
                "outcome": {"type": "suspended", "interruptIds": []},
            },
            {
                "type": "RUN_FINISHED",
                "threadId": "chat-1",
                "runId": "client-run-1",
                "outcome": {
                    "type": "interrupt",
                    "interrupts": [
                        {
                            "subagentRunId": "k1",
                            "id": "int-p1",
                            "reason": "tool_call",
                            "message": 'Approve charge({"cents":300})?',
                            "toolCallId": "p1",
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
            },
        ]
    )


def test_the_resumed_run_finishes_its_subagents() -> None:
    assert frames([*DECIDED, *RESUMED]) == snapshot(
        [
            {"type": "RUN_STARTED", "threadId": "chat-1", "runId": "client-run-1"},
            {"type": "SUBAGENT_STARTED", "subagentRunId": "k1", "name": "payments", "parentToolCallId": "k1"},
            {
                "type": "TOOL_CALL_RESULT",
                "subagentRunId": "k1",
                "messageId": "p1.result",
                "toolCallId": "p1",
                "content": "charged 300",
                "role": "tool",
            },
            {
                "type": "TEXT_MESSAGE_START",
                "subagentRunId": "k1",
                "messageId": "k1.1.0",
                "role": "assistant",
                "name": "payments",
            },
            {"type": "TEXT_MESSAGE_CONTENT", "subagentRunId": "k1", "messageId": "k1.1.0", "delta": "paid"},
            {"type": "TEXT_MESSAGE_END", "subagentRunId": "k1", "messageId": "k1.1.0"},
            {
                "type": "SUBAGENT_FINISHED",
                "subagentRunId": "k1",
                "result": "paid",
                "outcome": {"type": "success"},
            },
            {"type": "SUBAGENT_STARTED", "subagentRunId": "b1", "name": "booking", "parentToolCallId": "b1"},
            {
                "type": "TOOL_CALL_RESULT",
                "subagentRunId": "b1",
                "messageId": "k1.result",
                "toolCallId": "k1",
                "content": "paid",
                "role": "tool",
            },
            {
                "type": "TEXT_MESSAGE_START",
                "subagentRunId": "b1",
                "messageId": "b1.1.0",
                "role": "assistant",
                "name": "booking",
            },
            {"type": "TEXT_MESSAGE_CONTENT", "subagentRunId": "b1", "messageId": "b1.1.0", "delta": "booked"},
            {"type": "TEXT_MESSAGE_END", "subagentRunId": "b1", "messageId": "b1.1.0"},
            {
                "type": "SUBAGENT_FINISHED",
                "subagentRunId": "b1",
                "result": "booked",
                "outcome": {"type": "success"},
            },
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": "b1.result",
                "toolCallId": "b1",
                "content": "booked",
                "role": "tool",
            },
            {"type": "CUSTOM", "name": "agent_changed", "value": {"agent": "router", "previous": "billing"}},
            {"type": "TEXT_MESSAGE_START", "messageId": "t1", "role": "assistant", "name": "billing"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "t1", "delta": "Your deposit is paid."},
            {"type": "TEXT_MESSAGE_END", "messageId": "t1"},
            {
                "type": "RUN_FINISHED",
                "threadId": "chat-1",
                "runId": "client-run-1",
                "result": "Your deposit is paid.",
                "outcome": {"type": "success"},
            },
        ]
    )


def test_a_resumed_run_told_the_turn_announces_the_chain_outermost_first() -> None:
    stream = AGUIStream(thread_id="chat-1", run_id="client-run-2")
    stream.continuing(PAUSED)
    events = [e for event in RESUMED for e in stream.encode(event)]
    started = [
        e.model_dump(mode="json", by_alias=True, exclude_none=True)
        for e in events
        if isinstance(e, SubagentStartedEvent)
    ]
    assert started == snapshot(
        [
            {
                "type": "SUBAGENT_STARTED",
                "subagentRunId": "b1",
                "name": "booking",
                "parentToolCallId": "b1",
            },
            {
                "type": "SUBAGENT_STARTED",
                "subagentRunId": "k1",
                "name": "payments",
                "parentSubagentRunId": "b1",
                "parentToolCallId": "k1",
            },
        ]
    )


def test_a_run_that_fails_or_is_cancelled_closes_its_open_subagents_innermost_first() -> None:
    opened = PAUSED[:4]  # the run started, booking delegated to payments, which called `charge`
    ends = {
        "failed": RunFinished(run_id="r1", agent="billing", status="failed", error="The model broke."),
        "cancelled": RunFinished(run_id="r1", agent="billing", status="cancelled"),
    }
    closing = {
        status: [f for f in frames([*opened, end]) if str(f["type"]).startswith(("SUBAGENT_", "RUN_"))][-3:]
        for status, end in ends.items()
    }
    cut = [f for f in frames(opened) if str(f["type"]).startswith(("SUBAGENT_", "RUN_"))][-3:]

    assert closing == snapshot(
        {
            "failed": [
                {
                    "type": "SUBAGENT_ERROR",
                    "subagentRunId": "k1",
                    "message": "The model broke.",
                    "code": "run_failed",
                },
                {
                    "type": "SUBAGENT_ERROR",
                    "subagentRunId": "b1",
                    "message": "The model broke.",
                    "code": "run_failed",
                },
                {"type": "RUN_ERROR", "message": "The model broke.", "code": "run_failed"},
            ],
            "cancelled": [
                {
                    "type": "SUBAGENT_ERROR",
                    "subagentRunId": "k1",
                    "message": "The run was cancelled.",
                    "code": "cancelled",
                },
                {
                    "type": "SUBAGENT_ERROR",
                    "subagentRunId": "b1",
                    "message": "The run was cancelled.",
                    "code": "cancelled",
                },
                {
                    "type": "RUN_FINISHED",
                    "threadId": "chat-1",
                    "runId": "client-run-1",
                    "outcome": {"type": "cancelled"},
                },
            ],
        }
    )
    assert cut == snapshot(
        [
            {
                "type": "SUBAGENT_ERROR",
                "subagentRunId": "k1",
                "message": "The stream ended before the run finished.",
                "code": "ended",
            },
            {
                "type": "SUBAGENT_ERROR",
                "subagentRunId": "b1",
                "message": "The stream ended before the run finished.",
                "code": "ended",
            },
            {"type": "RUN_ERROR", "message": "The stream ended before the run finished.", "code": "ended"},
        ]
    )
