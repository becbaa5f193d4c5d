"""Several agents in the AI SDK's UI message stream and history, from hand-built events: the agent as
message metadata, a delegated agent's steps as preliminary outputs of the call that delegated, and a
nested approval answerable at the top of the message."""

from __future__ import annotations

from inline_snapshot import snapshot

from stream import (
    AgentChanged,
    ApprovalDecided,
    ApprovalRequired,
    PendingCall,
    RunFinished,
    RunStarted,
    StreamEvent,
    TextDelta,
    TextDone,
    ToolCall,
    ToolResult,
)
from web.ai_sdk.encoder import UIMessageStream, encode_chunk
from web.ai_sdk.history import dump_ui_message, ui_messages

from .test_ai_sdk_messages import logged, run
from .test_ai_sdk_stream import frames

PATH = ["billing", "booking", "payments"]
BOOKING = {"agent": "booking", "parent_tool_call_id": "b1"}
PAYMENTS = {"agent": "payments", "parent_tool_call_id": "k1"}

PAUSED: list[StreamEvent] = [
    RunStarted(run_id="r1", agent="billing", kind="message"),
    ToolCall(run_id="r1", agent="billing", tool_call_id="b1", tool_name="ask_booking", args={"task": "go"}),
    ToolCall(run_id="r1", **BOOKING, tool_call_id="k1", tool_name="ask_payments", args={}),
    ToolCall(run_id="r1", **PAYMENTS, tool_call_id="p1", tool_name="charge", args={"cents": 300}),
    ApprovalRequired(
        run_id="r1",
        agent="billing",
        approvals=[
            PendingCall(
                tool_call_id="p1", tool_name="charge", args={"cents": 300}, agent="payments", path=PATH
            )
        ],
    ),
    RunFinished(run_id="r1", agent="billing", status="awaiting_approval"),
]
DECIDED: list[StreamEvent] = [
    ApprovalDecided(run_id="r1", tool_call_id="p1", decision="approved", decided_by="alice"),
]
RESUMED: list[StreamEvent] = [
    RunStarted(run_id="r2", agent="billing", kind="resume"),
    ToolResult(
        run_id="r2",
        **PAYMENTS,
        tool_call_id="p1",
        tool_name="charge",
        outcome="success",
        content="charged 300",
    ),
    TextDelta(run_id="r2", **PAYMENTS, part_id="k1.1.0", delta="paid"),
    TextDone(run_id="r2", **PAYMENTS, part_id="k1.1.0", text="paid"),
    ToolResult(
        run_id="r2", **BOOKING, tool_call_id="k1", tool_name="ask_payments", outcome="success", content="paid"
    ),
    TextDone(run_id="r2", **BOOKING, part_id="b1.1.0", text="booked"),
    ToolResult(
        run_id="r2",
        agent="billing",
        tool_call_id="b1",
        tool_name="ask_booking",
        outcome="success",
        content="booked",
    ),
    AgentChanged(run_id="r2", agent="router", previous="billing"),
    TextDone(run_id="r2", agent="billing", part_id="t1", text="Your deposit is paid."),
    RunFinished(run_id="r2", agent="billing", status="completed", output="Your deposit is paid."),
]


def test_a_nested_approval_in_the_stream() -> None:
    assert frames(PAUSED) == snapshot(
        [
            '{"type":"start","messageId":"msg-1"}',
            '{"type":"message-metadata","messageMetadata":{"agent":"billing"}}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"b1","toolName":"ask_booking","input":{"task":"go"}}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"input-available","input":{}}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":{"agent":"payments","parts":[{"type":"tool-charge","toolCallId":"p1","state":"input-available","input":{"cents":300}}]},"preliminary":true}]},"preliminary":true}',
            '{"type":"finish-step"}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"p1","toolName":"charge","input":{"cents":300}}',
            '{"type":"tool-approval-request","approvalId":"p1","toolCallId":"p1"}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"tool-calls"}',
            "[DONE]",
        ]
    )
    # The decision's answer continues the client's message: the decided call's result at the top,
    # then the outer call's. Not told the turn's earlier events, it does not know the chain of calls
    # the resumed agents run in, so it sends no preliminary output (told, it does: below).
    assert frames(RESUMED, message_id=None, decided=("p1",)) == snapshot(
        [
            '{"type":"start"}',
            '{"type":"message-metadata","messageMetadata":{"agent":"billing"}}',
            '{"type":"tool-output-available","toolCallId":"p1","output":"charged 300"}',
            '{"type":"tool-output-available","toolCallId":"b1","output":"booked"}',
            '{"type":"data-agent-changed","data":{"agent":"router","previous":"billing"},"transient":true}',
            '{"type":"start-step"}',
            '{"type":"text-start","id":"t1"}',
            '{"type":"text-delta","delta":"Your deposit is paid.","id":"t1"}',
            '{"type":"text-end","id":"t1"}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"stop"}',
            "[DONE]",
        ]
    )


def test_a_replay_of_the_turn_after_the_decision() -> None:
    # `GET …/stream` replays the whole turn: the decided call is not asked again.
    assert frames([*PAUSED, *DECIDED, *RESUMED], decided=("p1",)) == snapshot(
        [
            '{"type":"start","messageId":"msg-1"}',
            '{"type":"message-metadata","messageMetadata":{"agent":"billing"}}',
            '{"type":"start-step"}',
            '{"type":"tool-input-available","toolCallId":"b1","toolName":"ask_booking","input":{"task":"go"}}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"input-available","input":{}}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":{"agent":"payments","parts":[{"type":"tool-charge","toolCallId":"p1","state":"input-available","input":{"cents":300}}]},"preliminary":true}]},"preliminary":true}',
            '{"type":"finish-step"}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":{"agent":"payments","parts":[{"type":"tool-charge","toolCallId":"p1","state":"output-available","input":{"cents":300},"output":"charged 300"}]},"preliminary":true}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":{"agent":"payments","parts":[{"type":"tool-charge","toolCallId":"p1","state":"output-available","input":{"cents":300},"output":"charged 300"},{"type":"text","text":"paid"}]},"preliminary":true}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":"paid"}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":"paid"},{"type":"text","text":"booked"}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":"booked"}',
            '{"type":"data-agent-changed","data":{"agent":"router","previous":"billing"},"transient":true}',
            '{"type":"start-step"}',
            '{"type":"text-start","id":"t1"}',
            '{"type":"text-delta","delta":"Your deposit is paid.","id":"t1"}',
            '{"type":"text-end","id":"t1"}',
            '{"type":"finish-step"}',
            '{"type":"finish","finishReason":"stop"}',
            "[DONE]",
        ]
    )


def test_the_history_of_a_nested_approval() -> None:
    runs = [run("r1", "message", "Pay the deposit"), run("r2", "resume")]
    paused = [dump_ui_message(m) for m in ui_messages(runs[:1], logged(*PAUSED))]
    done = [dump_ui_message(m) for m in ui_messages(runs, logged(*PAUSED, *DECIDED, *RESUMED))]
    assert paused[1:] == snapshot(
        [
            {
                "id": "r1",
                "role": "assistant",
                "metadata": {"agent": "billing"},
                "parts": [
                    {"type": "step-start"},
                    {
                        "type": "tool-ask_booking",
                        "toolCallId": "b1",
                        "state": "input-available",
                        "input": {"task": "go"},
                    },
                    {"type": "step-start"},
                    {
                        "type": "tool-charge",
                        "toolCallId": "p1",
                        "state": "approval-requested",
                        "input": {"cents": 300},
                        "approval": {"id": "p1"},
                    },
                ],
            }
        ]
    )
    assert done[1:] == snapshot(
        [
            {
                "id": "r1",
                "role": "assistant",
                "metadata": {"agent": "billing"},
                "parts": [
                    {"type": "step-start"},
                    {
                        "type": "tool-ask_booking",
                        "toolCallId": "b1",
                        "state": "output-available",
                        "input": {"task": "go"},
                        "output": "booked",
                    },
                    {"type": "step-start"},
                    {
                        "type": "tool-charge",
                        "toolCallId": "p1",
                        "state": "output-available",
                        "input": {"cents": 300},
                        "output": "charged 300",
                        "approval": {"id": "p1", "approved": True},
                    },
                    {"type": "step-start"},
                    {"type": "text", "text": "Your deposit is paid.", "state": "done"},
                ],
            }
        ]
    )


def test_the_decisions_answer_nests_the_resumed_agents_steps_when_it_knows_the_turn() -> None:
    # The endpoint tells the encoder what the turn's earlier response sent (`continuing`).
    stream = UIMessageStream(message_id=None, decided=("p1",))
    stream.continuing([*PAUSED, *DECIDED])
    chunks = [*stream.start(), *(c for e in RESUMED for c in stream.encode(e)), *stream.end()]
    sent = [encode_chunk(c).decode().removeprefix("data: ").strip() for c in chunks]
    untold = frames(RESUMED, message_id=None, decided=("p1",))
    # The same message, with the nested views between the results.
    assert [frame for frame in sent if '"preliminary":true' not in frame] == untold
    assert [frame for frame in sent if '"preliminary":true' in frame] == snapshot(
        [
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":{"agent":"payments","parts":[{"type":"tool-charge","toolCallId":"p1","state":"output-available","input":{"cents":300},"output":"charged 300"}]},"preliminary":true}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":{"agent":"payments","parts":[{"type":"tool-charge","toolCallId":"p1","state":"output-available","input":{"cents":300},"output":"charged 300"},{"type":"text","text":"paid"}]},"preliminary":true}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":"paid"}]},"preliminary":true}',
            '{"type":"tool-output-available","toolCallId":"b1","output":{"agent":"booking","parts":[{"type":"tool-ask_payments","toolCallId":"k1","state":"output-available","input":{},"output":"paid"},{"type":"text","text":"booked"}]},"preliminary":true}',
        ]
    )
