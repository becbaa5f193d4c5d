"""What the protocol endpoints (`web.ai_sdk`, `web.ag_ui`) share: client-named chats and their messages.

The AI SDK's chat `id` and AG-UI's `threadId` are chosen by the client. A chat id names a thread
of the token's user: the user's own thread of that id (one made with `POST /api/threads`), else
the thread derived from (user, chat id), created on first use. Another user's chat of the same id
derives another thread, so it is never reached. Everything after that is the native machinery:
runs queued in the database and driven by the `Runner`, decisions through `agent.decide`, the
event log followed as `GET /api/threads/{id}/events` follows it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from agent import Opened
from store import Conflict, NotFound, Thread

from .errors import ApiError
from .services import Services

__all__ = (
    "EMPTY_DETAIL",
    "EMPTY_MESSAGE",
    "MAX_CHAT_ID",
    "chat_thread",
    "check_length",
    "queue_chat_message",
)

MAX_CHAT_ID = 200
"""The longest chat id a client may choose."""


async def chat_thread(s: Services, user_id: str, chat_id: str, *, create: bool) -> Thread | None:
    """The thread the chat `chat_id` of `user_id` names; created when `create`, else `None` if there is none."""
    if not _valid_chat_id(chat_id):
        if create:
            raise ApiError(422, "validation_error", f"a chat id has 1 to {MAX_CHAT_ID} characters and no NUL")
        return None
    # The derived thread first: a client-made chat id (the AI SDK's `useChat`) is the common case,
    # found in one read. Both threads cannot exist: a thread's own id is the server's choice, and a
    # derived id exists only once that chat was used, which finds it first.
    for thread_id in (_derived_thread_id(user_id, chat_id), chat_id):
        try:
            return await s.db.threads.get(thread_id, user_id=user_id)
        except NotFound:
            continue
    if not create:
        return None
    thread_id = _derived_thread_id(user_id, chat_id)
    try:
        return await s.db.threads.create(user_id=user_id, thread_id=thread_id)
    except Conflict:  # a concurrent first request of the same chat made it
        return await s.db.threads.get(thread_id, user_id=user_id)


def _valid_chat_id(chat_id: str) -> bool:
    return bool(chat_id) and len(chat_id) <= MAX_CHAT_ID and "\x00" not in chat_id


def _derived_thread_id(user_id: str, chat_id: str) -> str:
    # Hashing both keeps ids of different users apart and fits any chat id in the column.
    digest = hashlib.sha256(f"{user_id}\x00{chat_id}".encode()).hexdigest()
    return f"chat-{digest[:40]}"


EMPTY_MESSAGE = "the message has no text and no files"
EMPTY_DETAIL: dict[str, object] = {"loc": "content", "msg": "text or files required", "type": "missing"}


def check_length(s: Services, content: str, *, files: bool = False) -> None:
    """A message longer than the native API takes is refused the same way (422); so is one with
    neither text nor (`files`) attachments."""
    limit = s.settings.max_message_chars
    if not content.strip() and not files:
        raise ApiError(422, "validation_error", EMPTY_MESSAGE, details=[EMPTY_DETAIL])
    if len(content) > limit:
        raise ApiError(
            422,
            "validation_error",
            f"the message is {len(content)} characters long; the limit is {limit}",
            details=[{"loc": "content", "msg": f"at most {limit} characters", "type": "string_too_long"}],
        )


async def _queue_message(
    s: Services, thread: Thread, content: str, *, idempotency_key: str | None, file_ids: Sequence[str] = ()
) -> Opened:
    """Queue the run answering a user message, as `POST /api/threads/{id}/messages` does."""
    _check_message(s, content, idempotency_key, files=bool(file_ids))
    try:
        queued = await s.runner.queue(
            thread.thread_id, "message", content=content, idempotency_key=idempotency_key, file_ids=file_ids
        )
    except NotFound as error:  # deleted meanwhile
        raise ApiError.not_found(f"no thread {thread.thread_id!r}") from error
    return queued


async def queue_chat_message(
    s: Services,
    user_id: str,
    chat_id: str,
    content: str,
    *,
    idempotency_key: str | None,
    file_ids: Sequence[str] = (),
) -> tuple[str, Opened]:
    """Queue a user message on the chat's thread; its thread id and the queued run.

    Straight on the chat's derived thread, with no read of it: queueing finds only a thread of
    `user_id`, and makes it when missing unless the chat id names a thread of theirs
    (`store.NewRun.create_unless`): a chat's every message, its first included, is queued in
    one trip. Else (the chat is a thread of the user's own) the thread `chat_thread` finds.
    """
    if _valid_chat_id(chat_id):  # else `chat_thread` refuses it
        _check_message(s, content, idempotency_key, files=bool(file_ids))
        derived = _derived_thread_id(user_id, chat_id)
        try:
            queued = await s.runner.queue(
                derived,
                "message",
                content=content,
                idempotency_key=idempotency_key,
                user_id=user_id,
                create_unless=chat_id,
                file_ids=file_ids,
            )
        except NotFound:
            pass  # the chat names a thread of the user's own
        else:
            return derived, queued
    thread = await chat_thread(s, user_id, chat_id, create=True)
    assert thread is not None
    return thread.thread_id, await _queue_message(
        s, thread, content, idempotency_key=idempotency_key, file_ids=file_ids
    )


def _check_message(s: Services, content: str, idempotency_key: str | None, *, files: bool = False) -> None:
    check_length(s, content, files=files)
    if idempotency_key is not None and len(idempotency_key) > MAX_CHAT_ID:
        raise ApiError(422, "validation_error", f"a message id has at most {MAX_CHAT_ID} characters")
