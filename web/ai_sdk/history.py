"""A thread's history as the AI SDK's `UIMessage`s: a pure fold of its runs and its event log.

Built from the same events, with the same steps and parts, as the UI message stream
(`web.ai_sdk.encoder`), so a client that loads the history after a reload holds what one that
streamed the turns holds. The differences are deliberate: text an output guardrail withdrew shows
only its replacement, and each call shows its decision (`approval-responded`) once made.

An assistant message is one *turn*: a `message` run (or a `regenerate` run, which replaces the
previous turn's reply) and the `resume` runs that continue it after decisions. Its id is the
turn's first run id, which the stream's `start` chunk also names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import SerializationInfo, SerializerFunctionWrapHandler, model_serializer
from pydantic_ai.ui.vercel_ai.request_types import (
    StepStartUIPart,
    TextUIPart,
    ToolApprovalRequested,
    ToolApprovalRequestedPart,
    ToolApprovalResponded,
    ToolApprovalRespondedPart,
    ToolInputAvailablePart,
    ToolOutputAvailablePart,
    ToolOutputDeniedPart,
    ToolOutputErrorPart,
    UIMessage,
    UIMessagePart,
)
from pydantic_core import to_json

from store import Run
from stream import (
    AgentChanged,
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
)

from .encoder import output_metadata

__all__ = ("TURN_KINDS", "dump_ui_message", "ui_messages", "user_message_id")

TURN_KINDS = frozenset({"message", "regenerate"})
"""The kinds of run that begin an assistant message; the others continue the last one."""


def user_message_id(run: Run) -> str:
    """The id of a message run's user message: the client's own id (the idempotency key) when it gave one."""
    return run.idempotency_key or f"{run.run_id}.user"


def dump_ui_message(message: UIMessage) -> dict[str, Any]:
    """A message as the AI SDK reads it (an approval's `descriptor` included)."""
    return message.model_dump(mode="json", by_alias=True, serialize_as_any=True)


class _Requested(ToolApprovalRequested):
    """An approval request with the call's metadata, as the AI SDK keeps it (`approval.descriptor`)."""

    descriptor: Any | None = None

    # No return annotation, as pydantic-ai's parts have none: one would change the serialization schema.
    @model_serializer(mode="wrap")
    def _omit_unset_descriptor(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):
        return _without_unset_descriptor(handler(self), info)


class _Responded(ToolApprovalResponded):
    """A decided approval; the AI SDK keeps the request's `descriptor` with the decision."""

    descriptor: Any | None = None

    # No return annotation, as pydantic-ai's parts have none: one would change the serialization schema.
    @model_serializer(mode="wrap")
    def _omit_unset_descriptor(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):
        return _without_unset_descriptor(handler(self), info)


def _without_unset_descriptor(data: dict[str, Any], info: SerializationInfo) -> dict[str, Any]:
    # The AI SDK types both optional: JSON leaves them out rather than send `null` (this serializer
    # replaces the one `ToolApprovalResponded` leaves `reason` out with).
    if info.mode_is_json():
        for key in ("descriptor", "reason"):
            if data.get(key) is None:
                data.pop(key, None)
    return data


def ui_messages(
    runs: Sequence[Run], events: Sequence[StoredEvent], *, files: Mapping[str, UIMessagePart] | None = None
) -> list[UIMessage]:
    """The thread's messages, oldest first, from its runs (oldest first) and its events (in id order).

    `files`: the `file` part of each file of the thread, by id; a user message shows its attached
    files with them, and a file deleted since as the text `[file removed]`.
    """
    by_run: dict[str, list[StoredEvent]] = {}
    for stored in events:
        by_run.setdefault(stored.event.run_id, []).append(stored)
    turns: list[_Message] = []
    for run in runs:
        last = turns[-1] if turns else None
        match run.kind:
            case "message":
                attached = [(files or {}).get(file_id, _REMOVED) for file_id in run.attached]
                turns.append(
                    _Message(user_message_id(run), "user", [_Text("", run.content or ""), *attached])
                )
                reply = _Reply(run.run_id)
            case "regenerate":
                if last is not None and last.role == "assistant":
                    turns.pop()
                reply = _Reply(run.run_id)
            case "resume" | "recover":
                if last is not None and last.role == "assistant":
                    turns.pop()
                    reply = _Reply(last.message_id, last.parts, metadata=last.metadata)
                else:
                    reply = _Reply(run.run_id)
        for stored in by_run.get(run.run_id, ()):
            reply.apply(stored)
        if reply.parts:
            turns.append(_Message(reply.message_id, "assistant", reply.parts, reply.metadata))
    return [_ui_message(m) for m in turns]


@dataclass
class _Tool:
    tool_call_id: str
    tool_name: str
    input: object
    state: str = "input-available"
    output: object = None
    error_text: str = ""
    approval: ToolApprovalRequested | ToolApprovalResponded | None = None
    metadata: object = None
    """The call's metadata, the approval's `descriptor`."""


@dataclass
class _Text:
    part_id: str
    text: str


_Part = StepStartUIPart | _Text | _Tool | UIMessagePart

_REMOVED = TextUIPart(text="[file removed]", state="done")


@dataclass
class _Message:
    message_id: str
    role: Literal["user", "assistant"]
    parts: list[_Part]
    metadata: dict[str, object] | None = None


@dataclass
class _Reply:
    """An assistant message being built, event by event, as the stream encoder builds it."""

    message_id: str
    parts: list[_Part] = field(default_factory=list[_Part])
    metadata: dict[str, object] | None = None
    """The message's metadata: the structured output its last run ended with."""
    in_step: bool = False
    after_tools: bool = False

    def apply(self, stored: StoredEvent) -> None:
        event = stored.event
        if event.parent_tool_call_id is not None:
            # A delegated agent's steps were the stream's preliminary outputs; what stays is the
            # result of a call of its that the client decided on (at the top of the message).
            if isinstance(event, ToolResult) and self._tool(event.tool_call_id) is not None:
                self._apply(event.model_copy(update={"parent_tool_call_id": None}))
            return
        if event.agent is not None and not isinstance(event, AgentChanged):
            self.metadata = {**(self.metadata or {}), "agent": event.agent}
        self._apply(event)

    def _apply(self, event: StreamEvent) -> None:
        parts = self.parts
        match event:
            case RunStarted():
                self.in_step = False
            case TextDelta(part_id=part_id, delta=delta) if delta:
                text = self._text(part_id)
                if text is None:
                    self._model_output()
                    parts.append(_Text(part_id, delta))
                else:
                    text.text += delta
            case TextDone(part_id=part_id, text=whole) | TextWithdrawn(part_id=part_id, replacement=whole):
                text = self._text(part_id)
                if text is not None:
                    text.text = whole
                elif whole:
                    self._model_output()
                    parts.append(_Text(part_id, whole))
            case ToolCall(tool_call_id=tool_call_id, tool_name=tool_name, args=args):
                self._model_output()
                parts.append(_Tool(tool_call_id, tool_name, args))
            case ToolResult(tool_call_id=tool_call_id, outcome=outcome, content=content):
                self.after_tools = True
                tool = self._tool(tool_call_id)
                if tool is not None:
                    tool.state = {"success": "output-available", "denied": "output-denied"}.get(
                        outcome, "output-error"
                    )
                    tool.output = content
                    tool.error_text = content if isinstance(content, str) else to_json(content).decode()
            case ApprovalRequired(approvals=calls):
                nested = [c for c in calls if _surfaced(c) and self._tool(c.tool_call_id) is None]
                if nested:
                    self._step()
                    parts.extend(_Tool(c.tool_call_id, c.tool_name, c.args) for c in nested)
                for call in calls:
                    tool = self._tool(call.tool_call_id)
                    # A reviewer's call is no request the client can answer: it stays waiting.
                    if tool is not None and call.reviewers == "user":
                        tool.state = "approval-requested"
                        tool.metadata = call.metadata
                        tool.approval = _Requested(id=call.tool_call_id, descriptor=call.metadata)
            case ApprovalDecided(tool_call_id=tool_call_id, decision=decision, reason=reason):
                tool = self._tool(tool_call_id)
                if tool is not None:
                    if tool.state == "approval-requested":
                        tool.state = "approval-responded"
                    tool.approval = _Responded(
                        id=tool_call_id,
                        approved=decision == "approved",
                        reason=reason,
                        descriptor=tool.metadata,
                    )
            case RunFinished(output=output, output_tool_call_id=call_id) as finished:
                metadata = output_metadata(finished)
                if metadata is not None:
                    self.metadata = {**(self.metadata or {}), **metadata}
                    tool = None if call_id is None else self._tool(call_id)
                    if tool is not None and tool.state == "output-available":
                        tool.output = output
            case _:
                pass

    def _step(self) -> None:
        self.parts.append(StepStartUIPart())
        self.in_step, self.after_tools = True, False

    def _model_output(self) -> None:
        if self.after_tools or not self.in_step:
            self._step()

    def _text(self, part_id: str) -> _Text | None:
        return next((p for p in self.parts if isinstance(p, _Text) and p.part_id == part_id), None)

    def _tool(self, tool_call_id: str) -> _Tool | None:
        return next((p for p in self.parts if isinstance(p, _Tool) and p.tool_call_id == tool_call_id), None)


def _surfaced(call: PendingCall) -> bool:
    """Whether a delegated agent's call is put at the top of the message, for the client's decision."""
    return call.reviewers == "user" and call.path is not None and len(call.path) > 1


def _ui_message(message: _Message) -> UIMessage:
    parts = [_ui_part(p) for p in message.parts]
    if message.metadata is None:  # left out, as the AI SDK types it optional
        return UIMessage(id=message.message_id, role=message.role, parts=parts)
    return UIMessage(id=message.message_id, role=message.role, parts=parts, metadata=message.metadata)


def _ui_part(part: _Part) -> UIMessagePart:
    match part:
        case _Text(text=text):
            return TextUIPart(text=text, state="done")
        case _Tool():
            return _tool_part(part)
        case _:
            return part


def _tool_part(tool: _Tool) -> UIMessagePart:
    kind, call_id, args, approval = f"tool-{tool.tool_name}", tool.tool_call_id, tool.input, tool.approval
    match tool.state:
        case "output-available":
            return ToolOutputAvailablePart(
                type=kind, tool_call_id=call_id, input=args, output=tool.output, approval=approval
            )
        case "output-denied":
            return ToolOutputDeniedPart(type=kind, tool_call_id=call_id, input=args, approval=approval)
        case "output-error":
            return ToolOutputErrorPart(
                type=kind, tool_call_id=call_id, input=args, error_text=tool.error_text, approval=approval
            )
        case "approval-requested":
            return ToolApprovalRequestedPart(type=kind, tool_call_id=call_id, input=args, approval=approval)
        case "approval-responded":
            return ToolApprovalRespondedPart(type=kind, tool_call_id=call_id, input=args, approval=approval)
        case _:
            return ToolInputAvailablePart(type=kind, tool_call_id=call_id, input=args)
