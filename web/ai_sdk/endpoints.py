"""The AI SDK's chat endpoints (`useChat` with `DefaultChatTransport`): thin shells over the durable thread.

- `POST /api/ai-sdk/chat`: the transport's body. A new user message (the last message) queues a
  run as `POST /api/threads/{id}/messages` does, keyed by the message's id; approval responses
  (`approval-responded` parts of the last message) are decisions as the approve/reject endpoints
  make them; `regenerate-message` queues a `regenerate` run. The answer streams the run. Nothing
  else of the client's copy of the history is read.
- `GET /api/ai-sdk/chat/{id}/stream`: the active turn's stream again, from its start, for
  `useChat({resume: true})` after a reload; `204` when no run is active.
- `GET /api/ai-sdk/chat/{id}`: `{"id", "messages"}`, the thread's history as `UIMessage`s.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from contextlib import aclosing
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool
from pydantic_ai.ui.vercel_ai.request_types import FileUIPart
from pydantic_ai.ui.vercel_ai.response_types import BaseChunk
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agent import Opened, stored_events
from stream import RunFinished, StoredEvent, StreamEvent

from ..access import user_of
from ..attachments import attached_files, file_url
from ..bodies import read_body
from ..chats import chat_thread, check_length, queue_chat_message
from ..decisions import Answer, decide_all
from ..errors import ApiError
from ..following import follow_run, stream_response
from ..inline_files import decode_data_url, inline_body_limit, inline_files_of, save_inline_file
from ..responses import JsonResponse
from ..runs import queue_regenerate, turn_events
from ..services import Services, services
from .encoder import HEADERS, UIMessageStream, encode_chunk
from .history import TURN_KINDS, dump_ui_message, ui_messages

__all__ = ("ai_sdk_routes",)

_PAGE = 1000


def ai_sdk_routes() -> list[BaseRoute]:
    return [
        Route("/api/ai-sdk/chat", post_chat, methods=["POST"]),
        Route("/api/ai-sdk/chat/{chat_id}/stream", resume_stream, methods=["GET"]),
        Route("/api/ai-sdk/chat/{chat_id}", get_chat, methods=["GET"]),
    ]


# -- the transport's body: only what is read, anything else tolerated ---------------------------------


class _Lenient(BaseModel):
    # Newer clients add fields (AI SDK 7 puts `isAutomatic` and `signature` on approvals).
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _Approval(_Lenient):
    id: str = Field(min_length=1, max_length=255)
    approved: StrictBool | None = None
    reason: str | None = Field(default=None, max_length=2000)


class _Part(_Lenient):
    type: str
    text: str | None = None
    state: str | None = None
    approval: _Approval | None = None
    url: str | None = None
    """A `file` part's bytes as a data URL (or a file of the thread, by its endpoint)."""
    media_type: str | None = Field(default=None, alias="mediaType", max_length=255)
    filename: str | None = Field(default=None, max_length=1000)


class _Message(_Lenient):
    id: str = Field(min_length=1, max_length=200)
    role: Literal["system", "user", "assistant"]
    parts: list[_Part]


class ChatBody(_Lenient):
    id: str = Field(min_length=1, max_length=200)
    messages: list[_Message] = Field(min_length=1)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    message_id: str | None = Field(default=None, alias="messageId", max_length=200)


# -- handlers -----------------------------------------------------------------------------------------


async def post_chat(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s, write=True)
    # The answer is a stream: refuse one too many before a run is queued, not after.
    s.streams.check(user_id)
    body = await read_body(request, ChatBody, max_bytes=inline_body_limit(s))
    last = body.messages[-1]
    if body.trigger == "submit-message" and last.role == "user":
        if body.message_id == last.id:  # `sendMessage({messageId})`: an edit of a sent message
            raise ApiError(
                422, "validation_error", "editing a sent message is not supported; send a new message"
            )
        text = "\n".join(part.text for part in last.parts if part.type == "text" and part.text)
        files = [part for part in last.parts if part.type == "file"]
        file_ids = await _attach(s, user_id, body.id, files, text) if files else []
        # The common case: queued on the chat's thread with no read of it first.
        thread_id, queued = await queue_chat_message(
            s, user_id, body.id, text, idempotency_key=last.id, file_ids=file_ids
        )
        run_id = queued.run.run_id
        return _stream(
            s,
            thread_id,
            user_id,
            run_id,
            run_id,
            UIMessageStream(message_id=run_id, thread_id=thread_id),
            opened=queued,
        )
    thread = await chat_thread(s, user_id, body.id, create=True)
    assert thread is not None
    if body.trigger == "regenerate-message":
        key = None if body.message_id is None else f"regenerate:{body.message_id}"
        queued = await queue_regenerate(s, thread, idempotency_key=key)
        run_id = queued.run.run_id
        return _stream(
            s,
            thread.thread_id,
            user_id,
            run_id,
            run_id,
            UIMessageStream(message_id=run_id),
            opened=queued,
        )
    answers = [
        Answer(
            part.approval.id,
            "approved" if part.approval.approved else "rejected",
            reason=part.approval.reason,
        )
        for part in last.parts
        if part.state == "approval-responded"
        and part.approval is not None
        and part.approval.approved is not None
    ]
    if last.role != "assistant" or not answers:
        raise ApiError(
            422,
            "validation_error",
            "the last message must be a new user message, or an assistant message with approval responses",
        )
    resume_run_id = await decide_all(s, user_id, thread, answers)
    if resume_run_id is None:  # other calls still wait: nothing runs yet
        return stream_response(
            s, _frames(UIMessageStream(message_id=None), _nothing()), user_id=user_id, headers=HEADERS
        )
    # The resumed run continues the client's assistant message, whatever id it holds; a delegated
    # agent's decided calls are at its top (see `subagents`), their results go there too.
    approvals = await s.db.approvals.list(thread_id=thread.thread_id)
    encoder = UIMessageStream(
        message_id=None, decided=[a.tool_call_id for a in approvals if a.status != "pending"]
    )
    if any(a.resume_run_id == resume_run_id and a.path is not None and len(a.path) > 1 for a in approvals):
        # The chain of calls the resumed agents run in, so their steps nest in this response too.
        encoder.continuing(await turn_events(s.db, thread, before=resume_run_id))
    return _stream(s, thread.thread_id, user_id, resume_run_id, resume_run_id, encoder)


async def _attach(s: Services, user_id: str, chat_id: str, parts: Sequence[_Part], text: str) -> list[str]:
    """The files of a user message's `file` parts, stored as files of the chat's thread (made if new)."""
    check_length(s, text, files=True)  # a message refused anyway stores no files
    thread = await chat_thread(s, user_id, chat_id, create=True)
    assert thread is not None
    file_ids: list[str] = []
    known = await inline_files_of(s, thread.thread_id, user_id)
    for part in parts:
        url = part.url or ""
        if not url.startswith("data:"):
            # A file of the thread the history answered, sent back by its endpoint.
            file_ids.append(url.rstrip("/").rpartition("/")[2])
            continue
        declared, data = decode_data_url(url)
        stored = await save_inline_file(
            s,
            thread.thread_id,
            user_id,
            data=data,
            declared=part.media_type or declared,
            name=part.filename,
            known=known,
        )
        file_ids.append(stored.file_id)
    return await attached_files(s, thread.thread_id, user_id, file_ids)


async def resume_stream(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s)
    thread = await chat_thread(s, user_id, str(request.path_params["chat_id"]), create=False)
    active = None if thread is None else await s.db.runs.active(thread.thread_id)
    if thread is None or active is None:
        return Response(status_code=204)
    # The whole turn again (from its first run), as the AI SDK replaces the message it resumes.
    runs = await s.db.runs.of_thread(thread.thread_id)
    started = [r for r in runs if r.kind in TURN_KINDS and r.created_at <= active.created_at]
    first = started[-1] if started else active
    decided = [
        a.tool_call_id for a in await s.db.approvals.list(thread_id=thread.thread_id) if a.status != "pending"
    ]
    encoder = UIMessageStream(message_id=first.run_id, decided=decided, thread_id=thread.thread_id)
    return _stream(s, thread.thread_id, thread.user_id, first.run_id, active.run_id, encoder)


async def get_chat(request: Request) -> Response:
    s = services(request)
    user_id = user_of(request, s)
    chat_id = str(request.path_params["chat_id"])
    thread = await chat_thread(s, user_id, chat_id, create=False)
    if thread is None:  # a chat not started yet (or another user's): nothing in it
        return JsonResponse({"id": chat_id, "messages": []})
    runs = await s.db.runs.of_thread(thread.thread_id)
    events = await _all_events(s, thread.thread_id)
    files = await s.db.files.list(thread.thread_id, user_id=user_id) if any(r.file_ids for r in runs) else []
    parts = {
        f.file_id: FileUIPart(
            media_type=f.media_type, filename=f.name, url=file_url(thread.thread_id, f.file_id)
        )
        for f in files
    }
    messages = [dump_ui_message(m) for m in ui_messages(runs, events, files=parts)]
    return JsonResponse({"id": chat_id, "messages": messages})


# -- streaming ----------------------------------------------------------------------------------------


def _stream(
    s: Services,
    thread_id: str,
    user_id: str,
    start_run_id: str,
    until_run_id: str,
    encoder: UIMessageStream,
    *,
    opened: Opened | None = None,
) -> Response:
    events = follow_run(s, thread_id, start_run_id=start_run_id, until_run_id=until_run_id, opened=opened)
    frames = _frames(encoder, events, until_run_id=until_run_id)
    return stream_response(s, frames, user_id=user_id, headers=HEADERS)


async def _frames(
    encoder: UIMessageStream, batches: AsyncGenerator[list[StreamEvent]], *, until_run_id: str | None = None
) -> AsyncIterator[bytes]:
    """The chunks of each batch of events in one write; the start with the first chunks, the end with
    the last (those of the batch that finishes `until_run_id`, where `follow_run` ends).

    A write costs a send through the middleware and a system call: the demo turn's 20 chunks were
    20 writes, now 4 or 5, as the native stream makes.
    """
    head = _encoded(encoder.start())
    async with aclosing(batches):
        async for batch in batches:
            frames = _encoded(chunk for event in batch for chunk in encoder.encode(event))
            last = batch[-1] if batch else None
            if isinstance(last, RunFinished) and last.run_id == until_run_id:
                yield head + frames + _encoded(encoder.end())
                return
            if frames:
                yield head + frames
                head = b""
    yield head + _encoded(encoder.end())


def _encoded(chunks: Iterable[BaseChunk]) -> bytes:
    return b"".join(encode_chunk(chunk) for chunk in chunks)


async def _nothing() -> AsyncGenerator[list[StreamEvent]]:
    return
    yield


async def _all_events(s: Services, thread_id: str) -> list[StoredEvent]:
    events: list[StoredEvent] = []
    while True:
        page = await s.db.events.read(thread_id, after=events[-1].event_id if events else 0, limit=_PAGE)
        events += stored_events(page)
        if len(page) < _PAGE:
            return events
