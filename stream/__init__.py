"""Typed stream events, the output-sink protocol and its sinks, and SSE framing.

This package imports nothing from the project's other packages, nor any web framework.
"""

from __future__ import annotations

from .events import (
    AgentChanged,
    ApprovalDecided,
    ApprovalEscalated,
    ApprovalRequired,
    AttachedFile,
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
from .sinks import CollectingSink, NullSink, Sink, TeeSink, transcript
from .sse import encode_event, encode_events, encode_frame, ping_frame

__all__ = [
    "AgentChanged",
    "ApprovalDecided",
    "ApprovalEscalated",
    "ApprovalRequired",
    "AttachedFile",
    "CollectingSink",
    "EventType",
    "GuardrailTripped",
    "NullSink",
    "PendingCall",
    "RunFinished",
    "RunStarted",
    "Sink",
    "StoredEvent",
    "StreamEvent",
    "TeeSink",
    "TextDelta",
    "TextDone",
    "TextWithdrawn",
    "ToolCall",
    "ToolOutcomeUnknown",
    "ToolResult",
    "UserMessage",
    "encode_event",
    "encode_events",
    "encode_frame",
    "event_data",
    "event_from_data",
    "ping_frame",
    "transcript",
]
