"""`POST /api/ag-ui`: AG-UI 1.0 (`HttpAgent`, CopilotKit) over the durable thread.

The body is a `RunAgentInput`; its `threadId` names a chat of the token's user (`web.chats`).
Only two things are read from it: `resume` answers (each a decision on a pending call, as the
approve/reject endpoints make it, `editedArgs` included), or else the last message, which must be
the user's new message (it queues a run keyed by the message's id). The answer streams the run as
AG-UI events; a run that pauses ends with an interrupt outcome listing each pending call. An input
with neither, sent while a run is active, streams that run (a reconnect).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from contextlib import aclosing

from ag_ui.core import (
    BaseEvent,
    DataSource,
    DocumentPart,
    ImagePart,
    ResumeEntry,
    RunAgentInput,
    TextPart,
    UserMessage,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_ai.exceptions import UserError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agent import Opened
from stream import PendingCall, StreamEvent

from ..access import user_of
from ..attachments import attached_files
from ..bodies import read_body, validation_error
from ..chats import chat_thread, check_length, queue_chat_message
from ..decisions import Answer, decide_all
from ..errors import ApiError
from ..following import follow_run, stream_response
from ..inline_files import decode_data_url, inline_body_limit, inline_files_of, save_inline_file
from ..runs import turn_events
from ..services import Services, services
from .encoder import AGUIStream, encode_event, interrupt_id_to_tool_call_id

__all__ = ("ag_ui_routes",)


def ag_ui_routes() -> list[BaseRoute]:
    return [Route("/api/ag-ui", run_agent, methods=["POST"])]


class ResumePayload(BaseModel):
    """The answer to an approval interrupt, as its `responseSchema` describes it."""

    model_config = ConfigDict(alias_generator=to_camel, extra="ignore")

    approved: StrictBool
    edited_args: dict[str, object] | None = None
    reason: str | None = Field(default=None, max_length=2000)


async def run_agent(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    # The answer is a stream: refuse one too many before a run is queued, not after.
    s.streams.check(user_id)
    body = await read_body(request, RunAgentInput, max_bytes=inline_body_limit(s))
    last = body.messages[-1] if body.messages else None
    if not body.resume and isinstance(last, UserMessage):
        file_ids = await _attach(s, user_id, body.thread_id, last)
        # Queued straight on the chat's thread, made in the same trip if new (no read of it).
        thread_id, queued = await queue_chat_message(
            s, user_id, body.thread_id, _text(last), idempotency_key=last.id, file_ids=file_ids
        )
        encoder = AGUIStream(thread_id=body.thread_id, run_id=body.run_id, files_thread_id=thread_id)
        return _stream(s, thread_id, user_id, queued.run.run_id, encoder, opened=queued)
    thread = await chat_thread(s, user_id, body.thread_id, create=True)
    assert thread is not None
    encoder = AGUIStream(thread_id=body.thread_id, run_id=body.run_id, files_thread_id=thread.thread_id)
    if body.resume:
        resume_run_id = await decide_all(s, user_id, thread, _answers(body.resume))
        if resume_run_id is None:  # other calls still wait: the same interrupt, for them
            pending = await s.db.approvals.list(thread_id=thread.thread_id, status="pending")
            calls = [
                PendingCall(tool_call_id=a.tool_call_id, tool_name=a.tool_name, args=a.args) for a in pending
            ]
            return _response(s, user_id, [*encoder.start(), encoder.interrupted(calls)])
        approvals = await s.db.approvals.list(thread_id=thread.thread_id)
        if any(
            a.resume_run_id == resume_run_id and a.path is not None and len(a.path) > 1 for a in approvals
        ):
            # The chain of invocations the resumed agents run in (`parentSubagentRunId`).
            encoder.continuing(await turn_events(s.db, thread, before=resume_run_id))
        return _stream(s, thread.thread_id, user_id, resume_run_id, encoder)
    active = await s.db.runs.active(thread.thread_id)
    if active is None:
        raise ApiError(
            422, "nothing_to_run", "the last message must be a new user message, or give resume answers"
        )
    return _stream(s, thread.thread_id, user_id, active.run_id, encoder)


def _answers(entries: Sequence[ResumeEntry]) -> list[Answer]:
    answers: list[Answer] = []
    for entry in entries:
        try:
            tool_call_id = interrupt_id_to_tool_call_id(entry.interrupt_id)
        except UserError as error:
            raise ApiError.not_found(f"no interrupt {entry.interrupt_id[:200]!r}") from error
        if entry.status == "cancelled":
            answers.append(Answer(tool_call_id, "rejected"))
            continue
        try:
            payload = ResumePayload.model_validate(entry.payload)
        except ValidationError as error:
            raise validation_error(error) from error
        if payload.approved:
            answers.append(Answer(tool_call_id, "approved", override_args=payload.edited_args))
        else:
            answers.append(Answer(tool_call_id, "rejected", reason=payload.reason or None))
    return answers


async def _attach(s: Services, user_id: str, chat_id: str, message: UserMessage) -> list[str]:
    """The files of a user message's image and document parts, stored as files of the chat's thread."""
    if isinstance(message.content, str):
        return []
    inline: list[tuple[str, str | None, str | None]] = []  # (data URL or endpoint, declared type, name)
    for part in message.content:
        match part:
            case ImagePart(source=source) | DocumentPart(source=source):
                metadata: dict[str, object] = dict(part.metadata or {})
                name = metadata.get("filename")
                if isinstance(source, DataSource):
                    inline.append((f"data:;base64,{source.value}", source.mime_type, _str(name)))
                else:
                    inline.append((source.value, source.mime_type, _str(name)))
            case _:
                pass
    if not inline:
        return []
    check_length(s, _text(message), files=True)  # a message refused anyway stores no files
    thread = await chat_thread(s, user_id, chat_id, create=True)
    assert thread is not None
    file_ids: list[str] = []
    known = await inline_files_of(s, thread.thread_id, user_id)
    for url, declared, name in inline:
        if not url.startswith("data:"):
            # Only a file of the thread, by its endpoint: the server fetches no URL.
            file_ids.append(url.rstrip("/").rpartition("/")[2])
            continue
        _, data = decode_data_url(url)
        stored = await save_inline_file(
            s, thread.thread_id, user_id, data=data, declared=declared, name=name, known=known
        )
        file_ids.append(stored.file_id)
    return await attached_files(s, thread.thread_id, user_id, file_ids)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _text(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(part.text for part in message.content if isinstance(part, TextPart))


def _stream(
    s: Services,
    thread_id: str,
    user_id: str,
    run_id: str,
    encoder: AGUIStream,
    *,
    opened: Opened | None = None,
) -> Response:
    events = follow_run(s, thread_id, start_run_id=run_id, until_run_id=run_id, opened=opened)
    return stream_response(s, _frames(encoder, events), user_id=user_id)


def _response(s: Services, user_id: str, events: list[BaseEvent]) -> Response:
    async def frames() -> AsyncIterator[bytes]:
        for event in events:
            yield encode_event(event)

    return stream_response(s, frames(), user_id=user_id)


async def _frames(encoder: AGUIStream, batches: AsyncGenerator[list[StreamEvent]]) -> AsyncIterator[bytes]:
    """The events of each batch in one write (a write each costs a send through the middleware and a
    system call), the start with the first."""
    head = _encoded(encoder.start())
    async with aclosing(batches):
        async for batch in batches:
            frames = head + _encoded(
                event for stream_event in batch for event in encoder.encode(stream_event)
            )
            head = b""
            if frames:
                yield frames
    yield head + _encoded(encoder.end())


def _encoded(events: Iterable[BaseEvent]) -> bytes:
    return b"".join(encode_event(event) for event in events)
