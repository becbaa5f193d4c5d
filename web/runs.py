"""Runs the endpoints queue besides a user message's: a `regenerate` run, for the native API and the AI SDK alike."""

from __future__ import annotations

from agent import Opened, last_prompt
from store import NotFound, Thread

from .errors import ApiError
from .services import Services

__all__ = ("queue_regenerate",)


async def queue_regenerate(s: Services, thread: Thread, *, idempotency_key: str | None = None) -> Opened:
    """Queue the run that answers the thread's last user message again, dropping the last reply.

    Raises:
        ApiError: 409 `nothing_to_regenerate`, 404 for a thread deleted meanwhile.
        RunActive, ApprovalPending: The thread is busy (409, `web.app`).
    """
    conversation = await s.db.conversations.load(thread.thread_id)
    found = None if conversation is None else last_prompt(conversation.messages)
    if found is None:
        raise ApiError(
            409, "nothing_to_regenerate", f"thread {thread.thread_id!r} has no message to answer again"
        )
    try:
        # Queued as a message is: claimed by this worker in the same transaction when it has room.
        queued = await s.runner.queue(
            thread.thread_id, "regenerate", content=found[1], idempotency_key=idempotency_key
        )
    except NotFound as error:
        raise ApiError.not_found(f"no thread {thread.thread_id!r}") from error
    return queued
