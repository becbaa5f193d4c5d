"""A thread's stream events as the AI SDK's UI message stream (protocol v1): a pure encoder.

The chunk types and their JSON are pydantic-ai's (`pydantic_ai.ui.vercel_ai.response_types`), so
the wire matches what its own adapter sends to `useChat`; see `docs/clients.md` for the mapping.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Literal

from pydantic_ai.ui.vercel_ai.response_types import (
    AbortChunk,
    BaseChunk,
    DataChunk,
    DoneChunk,
    ErrorChunk,
    FinishChunk,
    FinishReason,
    FinishStepChunk,
    MessageMetadataChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
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
    encode_frame,
)

from ..attachments import file_url
from .subagents import SubAgents

__all__ = (
    "HEADERS",
    "SDK_VERSION",
    "ApprovalRequestChunk",
    "UIMessageStream",
    "encode_chunk",
    "output_metadata",
)

HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
"""What tells the AI SDK's transport that the body is a UI message stream."""

SDK_VERSION = 6
"""The wire of AI SDK 6, which AI SDK 7 reads unchanged (tool approvals need 6 or later)."""

RunStatus = Literal["completed", "awaiting_approval", "blocked", "failed", "cancelled"]

_FINISH_REASONS: dict[RunStatus | None, FinishReason] = {
    "completed": "stop",
    "awaiting_approval": "tool-calls",
    "blocked": "content-filter",
    "failed": "error",
    None: "other",
}


class ApprovalRequestChunk(ToolApprovalRequestChunk):
    """`tool-approval-request` with the call's metadata as its `approvalDescriptor`, which the AI SDK
    keeps as `part.approval.descriptor` (pydantic-ai's chunk predates the field)."""

    approval_descriptor: Any | None = None


def output_metadata(finished: RunFinished) -> dict[str, object] | None:
    """The assistant message's metadata for a run that ended with a structured output."""
    if finished.status != "completed" or finished.output_type is None:
        return None
    return {"output": finished.output, "outputType": finished.output_type}


def encode_chunk(chunk: BaseChunk) -> bytes:
    """One SSE frame (`stream.encode_frame`), as pydantic-ai's `VercelAIEventStream.encode_event` writes it."""
    return encode_frame(data=chunk.encode(SDK_VERSION))


class UIMessageStream:
    """The chunks of one response: the events of one or more runs, as one assistant message.

    A step (`start-step`) begins with the model's first output of each run and with every model
    response that follows tool results, as the AI SDK's own steps do, so
    `lastAssistantMessageIsCompleteWithApprovalResponses` looks at the calls of the last response.
    """

    def __init__(
        self, *, message_id: str | None, decided: Collection[str] = (), thread_id: str | None = None
    ) -> None:
        """`message_id`: the assistant message the chunks build, or `None` to continue the client's last one.

        `decided`: calls decided already, whose approval request a replay leaves out so the
        client does not offer a decision that was made. `thread_id`: the thread whose files the
        user's message attaches (their endpoints go in `data-user-files`).
        """
        self._message_id = message_id
        self._thread_id = thread_id
        self._decided = set(decided)
        self._open_texts: list[str] = []
        self._in_step = False
        self._after_tools = False
        self._status: RunStatus | None = None
        self._metadata: dict[str, object] | None = None
        self._tools: set[str] = set()
        self._agent: str | None = None
        self._subagents = SubAgents()
        self._surfaced: set[str] = set()
        """Delegated calls put at the top of the message for their decision."""
        self._earlier: set[str] = set()
        """The message's own calls made in an earlier response of the turn (`continuing`)."""

    def continuing(self, earlier: Iterable[StreamEvent]) -> None:
        """Learn what the turn's earlier responses sent (the client holds it): the calls the message
        has and the chain of calls its delegated agents run in, so this one nests their steps too."""
        for event in earlier:
            if event.parent_tool_call_id is not None:
                self._subagents.encode(event, event.parent_tool_call_id, set())
                continue
            match event:
                case ToolCall(tool_call_id=tool_call_id):
                    self._earlier.add(tool_call_id)
                case ApprovalRequired(approvals=calls):
                    self._surfaced.update(c.tool_call_id for c in calls if _nested(c))
                case _:
                    pass

    def start(self) -> list[BaseChunk]:
        return [StartChunk(message_id=self._message_id)]

    def encode(self, event: StreamEvent) -> list[BaseChunk]:
        """The chunks that tell the client about `event` (often none)."""
        if event.parent_tool_call_id is not None:
            return self._delegated(event, event.parent_tool_call_id)
        if event.agent is None or event.agent == self._agent or isinstance(event, AgentChanged):
            return self._encode(event)
        # Who speaks: the message's metadata (`{"agent": name}`), sent when it changes.
        self._agent = event.agent
        return [MessageMetadataChunk(message_metadata={"agent": event.agent}), *self._encode(event)]

    def _delegated(self, event: StreamEvent, parent: str) -> list[BaseChunk]:
        # A call this response put at the top, or one a continued message holds there (decided).
        surfaced = isinstance(event, ToolResult) and (
            event.tool_call_id in self._surfaced
            or (event.tool_call_id in self._decided and not self._subagents.seen(event.tool_call_id))
        )
        chunks = self._subagents.encode(event, parent, (self._tools | self._earlier) - self._surfaced)
        if surfaced:
            # The call the client decided on, at the top of the message: its result there too.
            chunks += self._encode(event.model_copy(update={"parent_tool_call_id": None}))
        return chunks

    def _encode(self, event: StreamEvent) -> list[BaseChunk]:
        match event:
            case RunStarted():
                # A recovered run streams its unfinished parts again under new ids: close the old ones.
                return [*self._close_texts(), *self._end_step()]
            case TextDelta(part_id=part_id, delta=delta):
                if not delta:  # a delta blanked by an output guardrail: nothing to show
                    return []
                chunks = self._model_output()
                if part_id not in self._open_texts:
                    self._open_texts.append(part_id)
                    chunks.append(TextStartChunk(id=part_id))
                return [*chunks, TextDeltaChunk(id=part_id, delta=delta)]
            case TextDone(part_id=part_id, text=text):
                if part_id in self._open_texts:
                    self._open_texts.remove(part_id)
                    return [TextEndChunk(id=part_id)]
                return [*self._model_output(), *_whole_text(part_id, text)] if text else []
            case TextWithdrawn(part_id=part_id, replacement=replacement):
                # Streamed text cannot be taken back in this protocol: end it, and add the replacement.
                chunks: list[BaseChunk] = []
                if part_id in self._open_texts:
                    self._open_texts.remove(part_id)
                    chunks.append(TextEndChunk(id=part_id))
                return [*chunks, *_whole_text(f"{part_id}.replacement", replacement)]
            case ToolCall(tool_call_id=tool_call_id, tool_name=tool_name, args=args):
                self._tools.add(tool_call_id)
                return [
                    *self._model_output(),
                    ToolInputAvailableChunk(tool_call_id=tool_call_id, tool_name=tool_name, input=args),
                ]
            case ToolResult(tool_call_id=tool_call_id, outcome=outcome, content=content):
                self._after_tools = True
                match outcome:
                    case "success":
                        return [ToolOutputAvailableChunk(tool_call_id=tool_call_id, output=content)]
                    case "denied":
                        return [ToolOutputDeniedChunk(tool_call_id=tool_call_id)]
                    case "failed":
                        text = content if isinstance(content, str) else to_json(content).decode()
                        return [ToolOutputErrorChunk(tool_call_id=tool_call_id, error_text=text)]
            case ApprovalRequired(approvals=calls):
                waiting = [c for c in calls if c.tool_call_id not in self._decided]
                # A call a reviewer decides is not sent as a request the client could answer: the
                # client learns it waits, for whom and until when.
                return [
                    *self._surface(waiting),
                    *[
                        ApprovalRequestChunk(
                            approval_id=call.tool_call_id,
                            tool_call_id=call.tool_call_id,
                            approval_descriptor=call.metadata,
                        )
                        if call.reviewers == "user"
                        else DataChunk(
                            type="data-awaiting-reviewer",
                            data={
                                "toolCallId": call.tool_call_id,
                                "reviewers": call.reviewers,
                                "expiresAt": call.expires_at,
                            },
                            transient=True,
                        )
                        for call in waiting
                    ],
                ]
            case ApprovalDecided(tool_call_id=tool_call_id):
                self._decided.add(tool_call_id)
                return []
            case ApprovalEscalated(tool_call_id=tool_call_id, reviewers=reviewers, expires_at=expires_at):
                data = {"toolCallId": tool_call_id, "reviewers": reviewers, "expiresAt": expires_at}
                return [DataChunk(type="data-awaiting-reviewer", data=data, transient=True)]
            case GuardrailTripped(guardrail=guardrail, stage=stage):
                data = {"guardrail": guardrail, "stage": stage}
                return [DataChunk(type="data-guardrail-tripped", data=data, transient=True)]
            case AgentChanged(agent=agent, previous=previous):
                changed = {"agent": agent, "previous": previous}
                return [DataChunk(type="data-agent-changed", data=changed, transient=True)]
            case ToolOutcomeUnknown(tool_call_id=tool_call_id, tool_name=tool_name):
                # The call's approval request follows; this says why it is asked again.
                data = {"toolCallId": tool_call_id, "toolName": tool_name}
                return [DataChunk(type="data-tool-outcome-unknown", data=data, transient=True)]
            case RunFinished(status=status, error=error):
                self._status = status
                if status == "failed":
                    return [ErrorChunk(error_text=error or "The run failed.")]
                metadata = output_metadata(event)
                if metadata is None:
                    return []
                self._metadata = metadata
                # The output call's part shows the output, in place of what the model was told.
                call_id = event.output_tool_call_id
                if call_id is None or call_id not in self._tools:
                    return []
                return [ToolOutputAvailableChunk(tool_call_id=call_id, output=event.output)]
            case UserMessage(attachments=attachments):
                # The user's message is the client's own: this tells it where its files are stored.
                if not attachments or self._thread_id is None:
                    return []
                files = [
                    {
                        "fileId": f.file_id,
                        "filename": f.name,
                        "mediaType": f.media_type,
                        "size": f.size,
                        "url": file_url(self._thread_id, f.file_id),
                    }
                    for f in attachments
                ]
                return [DataChunk(type="data-user-files", data={"files": files}, transient=True)]

    def end(self) -> list[BaseChunk]:
        """The chunks that close the response: open parts, the step, `finish` (or `abort`), `[DONE]`."""
        chunks = [*self._close_texts(), *self._end_step()]
        if self._status == "cancelled":
            chunks.append(AbortChunk(reason="cancelled"))
        else:
            chunks.append(
                FinishChunk(finish_reason=_FINISH_REASONS[self._status], message_metadata=self._metadata)
            )
        return [*chunks, DoneChunk()]

    def _surface(self, calls: list[PendingCall]) -> list[BaseChunk]:
        """A delegated agent's calls that wait for the client: in a step of their own, at the top."""
        nested = [c for c in calls if _nested(c) and c.tool_call_id not in self._tools]
        if not nested:
            return []
        chunks = [*self._close_texts(), *self._new_step()]
        for call in nested:
            self._tools.add(call.tool_call_id)
            self._surfaced.add(call.tool_call_id)
            chunks.append(
                ToolInputAvailableChunk(
                    tool_call_id=call.tool_call_id, tool_name=call.tool_name, input=call.args
                )
            )
        return chunks

    def _new_step(self) -> list[BaseChunk]:
        chunks = self._end_step()
        self._in_step, self._after_tools = True, False
        return [*chunks, StartStepChunk()]

    def _end_step(self) -> list[BaseChunk]:
        if not self._in_step:
            return []
        self._in_step = False
        return [FinishStepChunk()]

    def _model_output(self) -> list[BaseChunk]:
        """Before the model's text or call: a new step if it answers tool results."""
        if self._after_tools or not self._in_step:
            return [*self._close_texts(), *self._new_step()]
        return []

    def _close_texts(self) -> list[BaseChunk]:
        chunks: list[BaseChunk] = [TextEndChunk(id=part_id) for part_id in self._open_texts]
        self._open_texts.clear()
        return chunks


def _nested(call: PendingCall) -> bool:
    """Whether a waiting call is a delegated agent's that the client decides (put at the top)."""
    return call.reviewers == "user" and call.path is not None and len(call.path) > 1


def _whole_text(part_id: str, text: str) -> list[BaseChunk]:
    return [TextStartChunk(id=part_id), TextDeltaChunk(id=part_id, delta=text), TextEndChunk(id=part_id)]
