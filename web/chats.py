"""What the protocol endpoints (`web.ai_sdk`, `web.ag_ui`) share: client-named chats, runs, decisions.

The AI SDK's chat `id` and AG-UI's `threadId` are chosen by the client. A chat id names a thread
of the token's user: the user's own thread of that id (one made with `POST /api/threads`), else
the thread derived from (user, chat id), created on first use. Another user's chat of the same id
derives another thread, so it is never reached. Everything after that is the native machinery:
runs queued in the database and driven by the `Runner`, decisions through `agent.decide`, the
event log followed as `GET /api/threads/{id}/events` follows it.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Literal

from agent import InvalidArguments, decide, opening_stored
from store import AlreadyDecided, ApprovalPending, Conflict, NotFound, Queued, RunActive, Thread
from stream import RunFinished, StoredEvent, StreamEvent

from .bodies import validation_details
from .broker import Subscription
from .errors import ApiError
from .services import Services
from .sse import idle_poll_seconds, thread_batches

__all__ = (
    "MAX_CHAT_ID",
    "Answer",
    "chat_thread",
    "check_length",
    "decide_all",
    "follow_run",
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


def check_length(s: Services, content: str) -> None:
    """A message longer than the native API takes is refused the same way (422)."""
    limit = s.settings.max_message_chars
    if not content.strip():
        raise ApiError(422, "validation_error", "the message has no text")
    if len(content) > limit:
        raise ApiError(
            422,
            "validation_error",
            f"the message is {len(content)} characters long; the limit is {limit}",
            details=[{"loc": "content", "msg": f"at most {limit} characters", "type": "string_too_long"}],
        )


async def _queue_message(s: Services, thread: Thread, content: str, *, idempotency_key: str | None) -> Queued:
    """Queue the run answering a user message, as `POST /api/threads/{id}/messages` does."""
    _check_message(s, content, idempotency_key)
    try:
        queued = await s.runner.queue(
            thread.thread_id, "message", content=content, idempotency_key=idempotency_key
        )
    except (RunActive, ApprovalPending) as error:
        raise ApiError(409, error.code, str(error)) from error
    except NotFound as error:  # deleted meanwhile
        raise ApiError.not_found(f"no thread {thread.thread_id!r}") from error
    return queued


async def queue_chat_message(
    s: Services, user_id: str, chat_id: str, content: str, *, idempotency_key: str | None
) -> tuple[str, Queued]:
    """Queue a user message on the chat's thread; its thread id and the queued run.

    Straight on the chat's derived thread, with no read of it: queueing finds only a thread of
    `user_id`, and makes it when missing unless the chat id names a thread of theirs
    (`store.NewRun.create_unless`): a chat's every message, its first included, is queued in
    one trip. Else (the chat is a thread of the user's own) the thread `chat_thread` finds.
    """
    if _valid_chat_id(chat_id):  # else `chat_thread` refuses it
        _check_message(s, content, idempotency_key)
        derived = _derived_thread_id(user_id, chat_id)
        try:
            queued = await s.runner.queue(
                derived,
                "message",
                content=content,
                idempotency_key=idempotency_key,
                user_id=user_id,
                create_unless=chat_id,
            )
        except (RunActive, ApprovalPending) as error:
            raise ApiError(409, error.code, str(error)) from error
        except NotFound:
            pass  # the chat names a thread of the user's own
        else:
            return derived, queued
    thread = await chat_thread(s, user_id, chat_id, create=True)
    assert thread is not None
    return thread.thread_id, await _queue_message(s, thread, content, idempotency_key=idempotency_key)


def _check_message(s: Services, content: str, idempotency_key: str | None) -> None:
    check_length(s, content)
    if idempotency_key is not None and len(idempotency_key) > MAX_CHAT_ID:
        raise ApiError(422, "validation_error", f"a message id has at most {MAX_CHAT_ID} characters")


@dataclass(frozen=True)
class Answer:
    """A decision a client gave on a pending call."""

    tool_call_id: str
    decision: Literal["approved", "rejected"]
    override_args: dict[str, object] | None = None
    reason: str | None = None


async def decide_all(s: Services, user_id: str, thread: Thread, answers: Sequence[Answer]) -> str | None:
    """Record each answer as the native approve/reject endpoints do; return the resume run, if one started.

    Every call is checked to belong to the thread before any is decided, so a request naming
    another thread's call (or none) changes nothing. An answer that fails (edited arguments that
    do not fit) leaves the ones before it decided, as separate native requests would.

    Raises:
        ApiError: 404 for a call not in the thread, 409 `already_decided`, 422 `invalid_arguments`.
    """
    known = {a.tool_call_id for a in await s.db.approvals.list(thread_id=thread.thread_id)}
    for answer in answers:
        if answer.tool_call_id not in known:
            raise ApiError.not_found(f"no tool call {answer.tool_call_id!r} in thread {thread.thread_id!r}")
    resume_run_id: str | None = None
    for answer in answers:
        try:
            result = await decide(
                s.db,
                thread.thread_id,
                answer.tool_call_id,
                decision=answer.decision,
                decided_by=user_id,
                override_args=answer.override_args,
                reason=answer.reason,
                publish=s.broker.publish,
            )
        except NotFound as error:
            raise ApiError.not_found(
                f"no tool call {answer.tool_call_id!r} in thread {thread.thread_id!r}"
            ) from error
        except AlreadyDecided as error:
            raise ApiError(409, error.code, str(error)) from error
        except InvalidArguments as error:
            raise ApiError(
                422, "invalid_arguments", str(error), details=validation_details(error.errors)
            ) from error
        resume_run_id = result.resume_run_id or resume_run_id
    if resume_run_id is not None:
        s.runner.submit(resume_run_id)
    return resume_run_id


def follow_run(
    s: Services, thread_id: str, *, start_run_id: str, until_run_id: str, queued: Queued | None = None
) -> AsyncGenerator[list[StreamEvent]]:
    """The thread's events from the start of `start_run_id` until `until_run_id` finished (or the thread is gone).

    Live ones as they happen, after a replay of the stored ones: what a client that reconnects
    needs, from any point of the run's life. A batch at a time (what the broker handed over, or a
    replay page), to be written at once. Ending the iteration (a client that went away) stops
    nothing but the reading.

    `queued`: the run `start_run_id` as this request just queued it. When the queueing also
    claimed it here, nothing is read: the events the queueing stored with the run come first, from
    hand (`Claimed.opening`), and the thread is subscribed to now, before the run (a task not
    started: the request has not let the event loop run since it queued) can store and publish any
    other, so every later one comes through the subscription. The subscription ends with the
    iteration, or with the iterator if it is never started.
    """
    if queued is None or not queued.created or queued.claimed is None:
        return _follow(s, thread_id, until_run_id, start_run_id=start_run_id)
    opening = opening_stored(queued.claimed)
    after = opening[-1].event_id if opening else queued.claimed.first_event_id - 1
    subscription = s.broker.open(thread_id, after=after)
    events = _follow(s, thread_id, until_run_id, after=after, subscribed=subscription, opening=opening)
    weakref.finalize(events, s.broker.close, subscription)
    return events


async def _follow(
    s: Services,
    thread_id: str,
    until_run_id: str,
    *,
    start_run_id: str | None = None,
    after: int | None = None,
    subscribed: Subscription | None = None,
    opening: Sequence[StoredEvent] = (),
) -> AsyncGenerator[list[StreamEvent]]:
    try:
        if opening:
            yield [stored.event for stored in opening]
        if after is None:
            assert start_run_id is not None
            after = await s.db.events.before_run(thread_id, start_run_id)
        batches = thread_batches(
            s.db, s.broker, thread_id, after=after, poll_seconds=idle_poll_seconds(s), subscribed=subscribed
        )
        async with aclosing(batches):
            async for batch in batches:
                events: list[StreamEvent] = []
                for stored in batch:
                    events.append(stored.event)
                    if isinstance(stored.event, RunFinished) and stored.event.run_id == until_run_id:
                        yield events
                        return
                yield events
    finally:
        if subscribed is not None:  # closed however the iteration ends (closing twice does nothing)
            s.broker.close(subscribed)
