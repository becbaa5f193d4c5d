"""Where a run's events go: the sink protocol, small sinks, and transcripts for tests.

A run pushes each event into one `Sink` as it happens and calls `flush` at every checkpoint, so what
was emitted before a checkpoint is durable (or delivered) when the checkpoint is. The event log, a
terminal printer and live SSE fan-out are sinks; `TeeSink` feeds several at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from .events import (
    AgentChanged,
    ApprovalDecided,
    ApprovalEscalated,
    ApprovalRequired,
    GuardrailTripped,
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

__all__ = ["CollectingSink", "NullSink", "Sink", "TeeSink", "transcript"]


class Sink(Protocol):
    """Receives the events of a run, in order."""

    async def emit(self, event: StreamEvent) -> None:
        """Take one event; it may be buffered until `flush`."""
        ...

    async def flush(self) -> None:
        """Make everything emitted so far durable or delivered; a checkpoint calls it."""
        ...


@dataclass
class CollectingSink:
    """Keeps every event in memory, for tests."""

    events: list[StreamEvent] = field(default_factory=list[StreamEvent])
    """Every event emitted, in order."""
    flushed: int = 0
    """How many of `events` had been emitted at the last `flush`."""

    async def emit(self, event: StreamEvent) -> None:
        """Append the event to `events`."""
        self.events.append(event)

    async def flush(self) -> None:
        """Record how many events are flushed."""
        self.flushed = len(self.events)

    def transcript(self, *, merge_deltas: bool = True) -> list[str]:
        """The collected events as readable lines; see `transcript`."""
        return transcript(self.events, merge_deltas=merge_deltas)


class NullSink:
    """Drops every event."""

    async def emit(self, event: StreamEvent) -> None:
        """Do nothing."""

    async def flush(self) -> None:
        """Do nothing."""


class TeeSink:
    """Passes every event, and every flush, to each of its sinks in order.

    An error from one sink propagates at once: the sinks after it do not get that event or flush,
    so a failing event log stops the run rather than leaving clients ahead of what was stored.
    """

    def __init__(self, *sinks: Sink) -> None:
        self.sinks: tuple[Sink, ...] = sinks

    async def emit(self, event: StreamEvent) -> None:
        """Emit the event to each sink in turn."""
        for sink in self.sinks:
            await sink.emit(event)

    async def flush(self) -> None:
        """Flush each sink in turn."""
        for sink in self.sinks:
            await sink.flush()


def transcript(events: Iterable[StreamEvent], *, merge_deltas: bool = True) -> list[str]:
    """Render events as short readable lines, for snapshot tests.

    Volatile ids (`run_id`, `tool_call_id`) are left out; values are shown with `repr`.

    Args:
        events: The events, in order.
        merge_deltas: Render consecutive `text_delta`s of one part as a single
            `text <part_id>: '<all the deltas>'` line.
    """
    lines: list[str] = []
    merging: TextDelta | None = None  # the first delta of the run being merged
    deltas: list[str] = []
    for event in events:
        if merge_deltas and isinstance(event, TextDelta):
            if merging is not None and merging.part_id == event.part_id:
                deltas.append(event.delta)
                continue
            if merging is not None:
                lines.append(_who(merging) + f"text {merging.part_id}: {''.join(deltas)!r}")
            merging, deltas = event, [event.delta]
            continue
        if merging is not None:
            lines.append(_who(merging) + f"text {merging.part_id}: {''.join(deltas)!r}")
            merging = None
        lines.append(_line(event) if isinstance(event, AgentChanged) else _who(event) + _line(event))
    if merging is not None:
        lines.append(_who(merging) + f"text {merging.part_id}: {''.join(deltas)!r}")
    return lines


def _who(event: StreamEvent) -> str:
    """`agent: ` before the line of an event a named agent produced."""
    if event.agent is None:
        return ""
    return f"{event.agent}: "


def _line(event: StreamEvent) -> str:
    match event:
        case RunStarted(kind=kind):
            return f"run_started {kind}"
        case UserMessage(content=content):
            return f"user_message {content!r}"
        case TextDelta(part_id=part_id, delta=delta):
            return f"text_delta {part_id} {delta!r}"
        case TextDone(part_id=part_id, text=text):
            return f"text_done {part_id} {text!r}"
        case TextWithdrawn(part_id=part_id, replacement=replacement):
            return f"text_withdrawn {part_id} -> {replacement!r}"
        case ToolCall(tool_name=tool_name, args=args):
            return f"tool_call {tool_name} {args!r}"
        case ToolResult(tool_name=tool_name, outcome=outcome, content=content):
            return f"tool_result {tool_name} {outcome} {content!r}"
        case ToolOutcomeUnknown(tool_name=tool_name, tool_call_id=tool_call_id):
            return f"tool_outcome_unknown {tool_name} {tool_call_id}"
        case ApprovalRequired(approvals=approvals):
            calls = ", ".join(
                f"{call.tool_name} {call.args!r}"
                + (f" outcome={call.outcome}" if call.outcome else "")
                + (f" metadata={call.metadata!r}" if call.metadata is not None else "")
                for call in approvals
            )
            return f"approval_required [{calls}]"
        case ApprovalDecided(
            decision=decision, decided_by=decided_by, override_args=override_args, reason=reason
        ):
            line = f"approval_decided {decision} by {decided_by!r}"
            if override_args is not None:
                line += f" override_args={override_args!r}"
            if reason is not None:
                line += f" reason={reason!r}"
            return line
        case ApprovalEscalated(reviewers=reviewers, expires_at=expires_at):
            return f"approval_escalated to {reviewers!r} until {expires_at}"
        case GuardrailTripped(guardrail=guardrail, stage=stage):
            return f"guardrail_tripped {stage} {guardrail}"
        case AgentChanged(agent=agent, previous=previous):
            return f"agent_changed {previous} -> {agent}"
        case RunFinished(status=status, output=output, output_type=output_type, error=error):
            line = f"run_finished {status}"
            if output is not None:
                line += f" output={output!r}"
            if output_type is not None:
                line += f" output_type={output_type}"
            if error is not None:
                line += f" error={error!r}"
            return line
