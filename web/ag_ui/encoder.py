"""A thread's stream events as AG-UI 1.0 events: a pure encoder.

The event types and their SSE framing are the `ag-ui-protocol` package's (`ag_ui.core`,
`ag_ui.encoder.EventEncoder`), and a pending call becomes the interrupt pydantic-ai's own AG-UI
adapter sends, so an approval form built for it (`approved`, `editedArgs`, `reason`) works here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from pydantic_ai.messages import ToolCallPart

# pydantic-ai's AG-UI adapter makes its interrupts here; reusing it keeps ours the same shape.
from pydantic_ai.ui.ag_ui._interrupt import (
    approval_to_interrupt,
    interrupt_id_to_tool_call_id,
)
from pydantic_core import to_json

from stream import (
    AgentChanged,
    ApprovalDecided,
    ApprovalEscalated,
    ApprovalRequired,
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

from ..attachments import file_url

__all__ = ("AGUIStream", "encode_event", "interrupt_id_to_tool_call_id")

_ENCODER = EventEncoder()


def encode_event(event: BaseEvent) -> bytes:
    """One SSE frame: `data: <json>`, as the protocol's own encoder writes it."""
    return _ENCODER.encode(event).encode()


class AGUIStream:
    """The AG-UI events of one run request: `RUN_STARTED`, the run's events, then how it ended."""

    def __init__(self, *, thread_id: str, run_id: str, files_thread_id: str | None = None) -> None:
        """`thread_id`, `run_id`: the client's, from its `RunAgentInput`. `files_thread_id`: the
        stored thread whose files the user's message attaches (their endpoints go in `user_files`)."""
        self._thread_id = thread_id
        self._files_thread_id = files_thread_id
        self._run_id = run_id
        self._open_texts: list[str] = []
        self._pending: list[PendingCall] = []
        self._finished: RunFinished | None = None
        self._subagents: list[str] = []
        """The subagent invocations under way, in the order they started (one per call that delegated)."""
        self._made_in: dict[str, str] = {}
        """The call each delegated call was made in (its invocation's id)."""
        self._names: dict[str, str] = {}
        """The agent of each invocation."""

    def continuing(self, earlier: Iterable[StreamEvent]) -> None:
        """Learn the chain of invocations from the turn's earlier events, for a run that resumes them."""
        for event in earlier:
            if event.parent_tool_call_id is not None:
                self._names.setdefault(event.parent_tool_call_id, event.agent or "agent")
                if isinstance(event, ToolCall):
                    self._made_in[event.tool_call_id] = event.parent_tool_call_id

    def start(self) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self._thread_id, run_id=self._run_id)]

    def encode(self, event: StreamEvent) -> list[BaseEvent]:
        """The AG-UI events that tell the client about `event` (often none).

        A delegated agent's events are a subagent invocation's (`subagentRunId`: the id of the call
        that delegated, announced by `SUBAGENT_STARTED` with the agent's name and that call); a text
        message names its agent (`name`) whenever the server named one.
        """
        parent = event.parent_tool_call_id
        events = self._finish_subagent(event) if isinstance(event, ToolResult) else []
        if parent is not None and parent not in self._subagents:
            self._names.setdefault(parent, event.agent or "agent")
            events += self._start(parent)
        if isinstance(event, ToolCall) and parent is not None:
            self._made_in[event.tool_call_id] = parent
        encoded = self._encode(event)
        if parent is not None:
            encoded = [e.model_copy(update={"subagent_run_id": parent}) for e in encoded]
        if event.agent is not None:
            encoded = [
                e.model_copy(update={"name": event.agent}) if isinstance(e, TextMessageStartEvent) else e
                for e in encoded
            ]
        return [*events, *encoded]

    def _start(self, invocation: str) -> list[BaseEvent]:
        """`SUBAGENT_STARTED` for `invocation`, after those it runs in that are not under way."""
        chain = [invocation]
        while chain[-1] in self._made_in and self._made_in[chain[-1]] not in self._subagents:
            chain.append(self._made_in[chain[-1]])
        events: list[BaseEvent] = []
        for call in reversed(chain):
            self._subagents.append(call)
            events.append(
                SubagentStartedEvent(
                    subagent_run_id=call,
                    name=self._names.get(call, "agent"),
                    parent_tool_call_id=call,
                    parent_subagent_run_id=self._made_in.get(call),
                )
            )
        return events

    def _finish_subagent(self, result: ToolResult) -> list[BaseEvent]:
        """The call that delegated returned: its invocation (and any left open within it) ended."""
        if result.tool_call_id not in self._subagents:
            return []
        index = self._subagents.index(result.tool_call_id)
        ended, self._subagents = self._subagents[index:], self._subagents[:index]
        return [
            SubagentFinishedEvent(
                subagent_run_id=call,
                result=result.content if call == result.tool_call_id else None,
                outcome=SubagentFinishedSuccessOutcome(),
            )
            for call in reversed(ended)
        ]

    def _encode(self, event: StreamEvent) -> list[BaseEvent]:
        match event:
            case RunStarted():
                return self._close_texts()  # a recovered run streams unfinished parts again
            case TextDelta(part_id=part_id, delta=delta):
                if not delta:  # blanked by an output guardrail
                    return []
                events: list[BaseEvent] = []
                if part_id not in self._open_texts:
                    self._open_texts.append(part_id)
                    events.append(TextMessageStartEvent(message_id=part_id, role="assistant"))
                return [*events, TextMessageContentEvent(message_id=part_id, delta=delta)]
            case TextDone(part_id=part_id, text=text):
                if part_id in self._open_texts:
                    self._open_texts.remove(part_id)
                    return [TextMessageEndEvent(message_id=part_id)]
                return _whole_text(part_id, text) if text else []
            case TextWithdrawn(part_id=part_id, replacement=replacement):
                # Streamed text cannot be taken back: say so (a custom event a client may act on), then replace.
                events = [
                    CustomEvent(
                        name="text_withdrawn", value={"message_id": part_id, "replacement": replacement}
                    )
                ]
                if part_id in self._open_texts:
                    self._open_texts.remove(part_id)
                    events.append(TextMessageEndEvent(message_id=part_id))
                return [*events, *_whole_text(f"{part_id}.replacement", replacement)]
            case ToolCall(tool_call_id=tool_call_id, tool_name=tool_name, args=args):
                return [
                    ToolCallStartEvent(tool_call_id=tool_call_id, tool_call_name=tool_name),
                    ToolCallArgsEvent(tool_call_id=tool_call_id, delta=json.dumps(args)),
                    ToolCallEndEvent(tool_call_id=tool_call_id),
                ]
            case ToolResult(tool_call_id=tool_call_id, content=content):
                text = content if isinstance(content, str) else to_json(content).decode()
                return [
                    ToolCallResultEvent(
                        message_id=f"{tool_call_id}.result",
                        tool_call_id=tool_call_id,
                        content=text,
                        role="tool",
                    )
                ]
            case ApprovalRequired(approvals=calls):
                self._pending = list(calls)
                return []
            case GuardrailTripped(guardrail=guardrail, stage=stage):
                return [CustomEvent(name="guardrail_tripped", value={"guardrail": guardrail, "stage": stage})]
            case AgentChanged(agent=agent, previous=previous):
                return [CustomEvent(name="agent_changed", value={"agent": agent, "previous": previous})]
            case ToolOutcomeUnknown(tool_call_id=tool_call_id, tool_name=tool_name):
                # Its interrupt follows; this says why the call is asked about again.
                value = {"tool_call_id": tool_call_id, "tool_name": tool_name}
                return [CustomEvent(name="tool_outcome_unknown", value=value)]
            case RunFinished(output=output, output_type=output_type, output_tool_call_id=call_id):
                self._finished = event
                if event.status != "completed" or output_type is None:
                    return []
                # `RUN_FINISHED.result` is the output itself: this says which type it is (a union's member).
                value = {"output": output, "output_type": output_type, "tool_call_id": call_id}
                return [CustomEvent(name="structured_output", value=value)]
            case UserMessage(attachments=attachments):
                # The user's message is the client's own: this tells it where its files are stored.
                if not attachments or self._files_thread_id is None:
                    return []
                files = [
                    {
                        "file_id": f.file_id,
                        "name": f.name,
                        "media_type": f.media_type,
                        "size": f.size,
                        "url": file_url(self._files_thread_id, f.file_id),
                    }
                    for f in attachments
                ]
                return [CustomEvent(name="user_files", value={"files": files})]
            case ApprovalDecided() | ApprovalEscalated():
                return []

    def end(self) -> list[BaseEvent]:
        """Close open messages and the invocations under way (innermost first), then `RUN_FINISHED`
        with the outcome, or `RUN_ERROR`."""
        events = self._close_texts()
        finished = self._finished
        if finished is None:
            message = "The stream ended before the run finished."
            return [*events, *self._ended(message, "ended"), RunErrorEvent(message=message, code="ended")]
        match finished.status:
            case "awaiting_approval":
                return [*events, *self._suspended(), self.interrupted(self._pending)]
            case "failed":
                message = finished.error or "The run failed."
                return [
                    *events,
                    *self._ended(message, "run_failed"),
                    RunErrorEvent(message=message, code="run_failed"),
                ]
            case "cancelled":
                outcome = RunFinishedCancelledOutcome()
                return [
                    *events,
                    *self._ended("The run was cancelled.", "cancelled"),
                    RunFinishedEvent(thread_id=self._thread_id, run_id=self._run_id, outcome=outcome),
                ]
            case "completed" | "blocked":
                return [
                    *events,
                    *self._ended("The run ended before this agent finished.", "run_ended"),
                    RunFinishedEvent(
                        thread_id=self._thread_id,
                        run_id=self._run_id,
                        result=finished.output,
                        outcome=RunFinishedSuccessOutcome(),
                    ),
                ]

    def _ended(self, message: str, code: str) -> list[BaseEvent]:
        """The invocations still under way when the run ended other than by a pause, innermost first.

        `SUBAGENT_ERROR` closes an invocation as `SUBAGENT_FINISHED` does: the protocol's finished
        outcomes are success and suspended only, and a cut-off agent is neither.
        """
        events: list[BaseEvent] = [
            SubagentErrorEvent(subagent_run_id=call, message=message, code=code)
            for call in reversed(self._subagents)
        ]
        self._subagents = []
        return events

    def _suspended(self) -> list[BaseEvent]:
        """The invocations still under way at a pause, innermost first: suspended, with their own interrupts."""
        events: list[BaseEvent] = []
        for call in reversed(self._subagents):
            own = [p.tool_call_id for p in self._pending if self._made_in.get(p.tool_call_id) == call]
            outcome = SubagentFinishedSuspendedOutcome(interrupt_ids=[_interrupt_id(c) for c in own])
            events.append(SubagentFinishedEvent(subagent_run_id=call, outcome=outcome))
        self._subagents = []
        return events

    def interrupted(self, calls: list[PendingCall]) -> BaseEvent:
        """`RUN_FINISHED` with an interrupt outcome: one interrupt per call that waits for a decision;
        a delegated agent's carries its invocation (`subagentRunId`) when this stream saw it."""
        interrupts: list[Interrupt] = [
            _interrupt(call).model_copy(update={"subagent_run_id": self._made_in.get(call.tool_call_id)})
            for call in calls
        ]
        return RunFinishedEvent(
            thread_id=self._thread_id,
            run_id=self._run_id,
            outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
        )

    def _close_texts(self) -> list[BaseEvent]:
        events: list[BaseEvent] = [TextMessageEndEvent(message_id=part_id) for part_id in self._open_texts]
        self._open_texts.clear()
        return events


def _interrupt(call: PendingCall) -> Interrupt:
    """The call's interrupt; its metadata (what the tool said of it) is the interrupt's `metadata`."""
    part = ToolCallPart(tool_name=call.tool_name, args=call.args, tool_call_id=call.tool_call_id)
    interrupt = approval_to_interrupt(
        part, {} if call.metadata is None else {call.tool_call_id: call.metadata}
    )
    if call.expires_at is None:
        return interrupt
    return interrupt.model_copy(update={"expires_at": call.expires_at})


def _interrupt_id(tool_call_id: str) -> str:
    """The id of the interrupt of the call `tool_call_id` (as `approval_to_interrupt` makes it)."""
    return approval_to_interrupt(ToolCallPart(tool_name="-", args={}, tool_call_id=tool_call_id), {}).id


def _whole_text(message_id: str, text: str) -> list[BaseEvent]:
    return [
        TextMessageStartEvent(message_id=message_id, role="assistant"),
        TextMessageContentEvent(message_id=message_id, delta=text),
        TextMessageEndEvent(message_id=message_id),
    ]
