"""The typed stream events of a thread and their JSON form.

An event is what a run tells the user's clients: text as it streams, tool activity, approvals,
guardrails, the run's start and end. The same event is sent live over SSE and stored in the event
log for replay, so its JSON form (`event_data`) is a contract: every field but `type` (which
travels as the SSE `event` name and in its own database column), with unset optional fields left
out. `event_from_data` reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

__all__ = [
    "AgentChanged",
    "ApprovalDecided",
    "ApprovalEscalated",
    "ApprovalRequired",
    "AttachedFile",
    "EventType",
    "GuardrailTripped",
    "PendingCall",
    "RunFinished",
    "RunStarted",
    "StoredEvent",
    "StreamEvent",
    "TextDelta",
    "TextDone",
    "TextWithdrawn",
    "ToolCall",
    "ToolResult",
    "UserMessage",
    "event_data",
    "event_from_data",
]

_JSON_OBJECT: TypeAdapter[dict[str, JsonValue]] = TypeAdapter(dict[str, JsonValue])
_JSON_VALUE: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


def _check_json_object(value: dict[str, object]) -> dict[str, object]:
    _JSON_OBJECT.validate_python(value)
    return value


def _check_json_value(value: object) -> object:
    _JSON_VALUE.validate_python(value)
    return value


# Statically as loose as callers need (`dict[str, Any]` from a parsed tool call fits), checked at
# construction to hold only JSON values: an event that cannot be stored and read back unchanged
# should fail where it is made, not when the event log writes it. Dump richer values (models,
# dataclasses, datetimes) with `mode="json"` first.
JsonObject = Annotated[dict[str, object], AfterValidator(_check_json_object)]
Json = Annotated[object, AfterValidator(_check_json_value)]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    run_id: str
    """The run that produced the event."""
    trace_id: str | None = None
    """The OpenTelemetry trace of the run (32 hex digits), when the process traces; left out otherwise."""
    agent: str | None = None
    """The agent that produced the event: a delegated agent's name, or the speaking agent's in an app
    with hand-offs; left out for an app's only agent."""
    parent_tool_call_id: str | None = None
    """Inside a delegated run: the tool call whose sub-run produced the event; left out otherwise."""


class RunStarted(_Event):
    """A run began: for a new user message, to resume after approvals, to recover a crashed run, or to
    answer the last user message again (`regenerate`: the thread's last reply is dropped)."""

    type: Literal["run_started"] = "run_started"
    kind: Literal["message", "resume", "recover", "regenerate"]


class AttachedFile(BaseModel):
    """A file attached to a user message, as the stored message refers to it."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    file_id: str
    name: str
    media_type: str
    size: int


class UserMessage(_Event):
    """The user message the run answers."""

    type: Literal["user_message"] = "user_message"
    content: str
    attachments: list[AttachedFile] | None = None
    """The files attached to the message, in order; left out when none."""


class TextDelta(_Event):
    """A piece of the model's text, to append to the part `part_id`."""

    type: Literal["text_delta"] = "text_delta"
    part_id: str
    delta: str


class TextDone(_Event):
    """The part `part_id` is complete; `text` is all of it."""

    type: Literal["text_done"] = "text_done"
    part_id: str
    text: str


class TextWithdrawn(_Event):
    """An output guardrail replaced text already streamed: drop the part's deltas, show `replacement`."""

    type: Literal["text_withdrawn"] = "text_withdrawn"
    part_id: str
    replacement: str


class ToolCall(_Event):
    """The model called a tool; sent for every call, those that then wait for approval included."""

    type: Literal["tool_call"] = "tool_call"
    tool_call_id: str
    tool_name: str
    args: JsonObject


class ToolResult(_Event):
    """A tool call ended: it ran (`success`), a human rejected it (`denied`) or it raised (`failed`)."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    outcome: Literal["success", "denied", "failed"]
    content: Json
    """What the model is told; JSON null is a value here, not an absent field."""


class PendingCall(BaseModel):
    """A tool call that waits for a human decision."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    tool_call_id: str
    tool_name: str
    args: JsonObject
    outcome: Literal["unknown"] | None = Field(default=None, exclude_if=lambda value: value is None)
    """`unknown`: the call was started before and its process died before it finished; the reviewer
    decides whether it runs again (left out when the call is simply waiting for its first decision)."""
    metadata: JsonObject | None = Field(default=None, exclude_if=lambda value: value is None)
    """What the tool (`ApprovalRequired(metadata=...)`) or the deferral said about the call, for the
    reviewer; left out when it said nothing."""
    agent: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The agent whose call it is, when it is a delegated agent's (or the app has hand-offs)."""
    path: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    """The chain of agents down to `agent`, outermost first (`["travel", "booking", "payments"]`)."""
    reviewers: str = Field(default="user", exclude_if=lambda value: value == "user")
    """Who decides: the role a reviewer must hold; left out when the thread's user decides (`user`)."""
    expires_at: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The deadline the server enforces (ISO 8601); left out when there is none."""


class ToolOutcomeUnknown(_Event):
    """A call found started but never finished (its process died): it may or may not have acted.

    It is not run again on its own; it waits for a human decision (an `approval_required` follows).
    """

    type: Literal["tool_outcome_unknown"] = "tool_outcome_unknown"
    tool_call_id: str
    tool_name: str


class ApprovalRequired(_Event):
    """The run paused: each of `approvals` needs a decision before a new run resumes."""

    type: Literal["approval_required"] = "approval_required"
    approvals: list[PendingCall]


class ApprovalDecided(_Event):
    """A human decided on a pending call; `run_id` is the run that paused for it."""

    type: Literal["approval_decided"] = "approval_decided"
    tool_call_id: str
    decision: Literal["approved", "rejected"]
    decided_by: str
    override_args: JsonObject | None = None
    """The arguments that replace the model's, as a whole, when the approver edited them."""
    reason: str | None = None
    """Why the call was rejected, as the approver wrote it."""
    decided_at: str | None = None
    """When, as stored (ISO 8601): what a client shows live is what it shows after a reload."""
    decided_role: str | None = None
    """The role a reviewer decided with; left out when the thread's user or the server decided."""


class ApprovalEscalated(_Event):
    """A call's deadline passed and it went to other reviewers, with a new deadline."""

    type: Literal["approval_escalated"] = "approval_escalated"
    tool_call_id: str
    reviewers: str
    expires_at: str | None
    """The new deadline (ISO 8601), or `None`."""


class GuardrailTripped(_Event):
    """A guardrail stopped the user's input or changed the model's output."""

    type: Literal["guardrail_tripped"] = "guardrail_tripped"
    guardrail: str
    stage: Literal["input", "output"]


class AgentChanged(_Event):
    """A hand-off: the thread's next turns are answered by `agent` (after `previous`)."""

    type: Literal["agent_changed"] = "agent_changed"
    previous: str | None = None


class RunFinished(_Event):
    """The run ended; it holds nothing in memory after this event."""

    type: Literal["run_finished"] = "run_finished"
    status: Literal["completed", "awaiting_approval", "blocked", "failed", "cancelled"]
    output: Json | None = None
    """The run's output: its text, or a structured output as JSON."""
    output_type: str | None = None
    """The name of a structured output's type (`"NoFlightFound"`; for a union, the member's);
    left out when the output is text."""
    output_tool_call_id: str | None = None
    """The output tool call that gave `output`, when an output tool gave it."""
    error: str | None = None
    """A message fit for the user; never a traceback."""


_AnyEvent = (
    RunStarted
    | UserMessage
    | TextDelta
    | TextDone
    | TextWithdrawn
    | ToolCall
    | ToolResult
    | ToolOutcomeUnknown
    | ApprovalRequired
    | ApprovalDecided
    | ApprovalEscalated
    | GuardrailTripped
    | AgentChanged
    | RunFinished
)
StreamEvent = Annotated[_AnyEvent, Field(discriminator="type")]
"""Any stream event; `event.type` tells which."""

EventType = Literal[
    "run_started",
    "user_message",
    "text_delta",
    "text_done",
    "text_withdrawn",
    "tool_call",
    "tool_result",
    "tool_outcome_unknown",
    "approval_required",
    "approval_decided",
    "approval_escalated",
    "guardrail_tripped",
    "agent_changed",
    "run_finished",
]
"""The `type` of every stream event, the SSE `event` name."""

_EVENT_CLASSES: tuple[type[_AnyEvent], ...] = (
    RunStarted,
    UserMessage,
    TextDelta,
    TextDone,
    TextWithdrawn,
    ToolCall,
    ToolResult,
    ToolOutcomeUnknown,
    ApprovalRequired,
    ApprovalDecided,
    ApprovalEscalated,
    GuardrailTripped,
    AgentChanged,
    RunFinished,
)
_CLASS_BY_TYPE: dict[str, type[_AnyEvent]] = {cls.model_fields["type"].default: cls for cls in _EVENT_CLASSES}

# Only fields that default to None are dropped when None; `exclude_none` would also drop a
# `ToolResult` whose content is JSON null, and the event would no longer read back.
_OPTIONAL_FIELDS: dict[type[_AnyEvent], tuple[str, ...]] = {
    cls: tuple(name for name, field in cls.model_fields.items() if field.default is None)
    for cls in _EVENT_CLASSES
}


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event with its id in the thread's event log (the SSE `id`)."""

    event_id: int
    event: StreamEvent
    data: bytes | None = field(default=None, compare=False, repr=False)
    """`event_data(event)`, when whoever made it had it already: encoded once for the log and the stream."""

    def encoded(self) -> bytes:
        """The event's `event_data`."""
        return event_data(self.event) if self.data is None else self.data


def event_data(event: StreamEvent) -> bytes:
    """The event as the JSON of an SSE `data` field: every field but `type`, unset optional ones left out."""
    exclude = {"type", *(name for name in _OPTIONAL_FIELDS[type(event)] if getattr(event, name) is None)}
    return event.model_dump_json(exclude=exclude).encode()


def event_from_data(type: str, data: bytes) -> StreamEvent:
    """Read back an event from its type and `event_data` JSON.

    Raises:
        ValueError: `type` names no event, or `data` is not a valid event of that type.
    """
    cls = _CLASS_BY_TYPE.get(type)
    if cls is None:
        raise ValueError(f"unknown stream event type {type!r}")
    try:
        return cls.model_validate_json(data)
    except ValidationError as error:
        raise ValueError(f"invalid data for stream event type {type!r}: {error}") from error
