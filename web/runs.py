"""Runs the endpoints queue besides a user message's: a `regenerate` run, for the native API and the AI SDK
alike; and the events of a turn, which the protocol endpoints read when a decision resumes one."""

from __future__ import annotations

from agent import Opened, last_prompt, stored_events
from store import NotFound, Thread
from stream import StreamEvent

from .errors import ApiError
from .services import Services

__all__ = ("queue_regenerate", "turn_events")

_TURN_STARTS = frozenset({"message", "regenerate"})
"""The kinds of run that begin a turn (as `web.ai_sdk.history.TURN_KINDS`); the others continue it."""
_PAGE = 1000


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


async def turn_events(s: Services, thread_id: str, *, before: str) -> list[StreamEvent]:
    """The events of the turn the run `before` continues, up to it (the runs of the turn before it)."""
    runs = await s.db.runs.of_thread(thread_id)
    index = next((i for i, r in enumerate(runs) if r.run_id == before), len(runs))
    starts = [i for i, r in enumerate(runs[:index]) if r.kind in _TURN_STARTS]
    turn = {r.run_id for r in runs[starts[-1] if starts else 0 : index]}
    events: list[StreamEvent] = []
    after = 0
    while True:
        page = await s.db.events.read(thread_id, after=after, limit=_PAGE)
        events += [stored.event for stored in stored_events(page) if stored.event.run_id in turn]
        if len(page) < _PAGE:
            return events
        after = page[-1].event_id
