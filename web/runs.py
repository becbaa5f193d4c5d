"""Runs the endpoints queue besides a user message's: a `regenerate` run, for the native API and the AI SDK
alike; and the events of a turn, which the protocol endpoints read when a decision resumes one."""

from __future__ import annotations

from agent import Opened, last_prompt, stored_events
from store import Database, NotFound, Thread
from stream import RunStarted, StoredEvent, StreamEvent

from .errors import ApiError
from .services import Services

__all__ = ("queue_regenerate", "turn_events")

_TURN_STARTS = frozenset({"message", "regenerate"})
"""The kinds of run that begin a turn (as `web.ai_sdk.history.TURN_KINDS`); the others continue it."""
_FIRST_WINDOW = 256
_LARGEST_WINDOW = 4096
"""Event ids read back at once: a few at first (a turn is often short), more as a long one goes on."""


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


async def turn_events(db: Database, thread: Thread, *, before: str) -> list[StreamEvent]:
    """The events of the turn the run `before` continues, up to it (the runs of the turn before it).

    A paused turn is the thread's last: its events are read from the end of the log back to the run
    that began it (a `run_started` of a `message` or `regenerate` run, and that run's earlier
    events), a window at a time, so the cost is the turn's, not the thread's.
    """
    thread_id = thread.thread_id
    # Newest first: what came since `thread` was read, then windows of ids going back.
    newest = await db.events.read(thread_id, after=thread.last_event_id)
    turn: list[StoredEvent] = []
    first_run: str | None = None
    batch, upper, window = newest[::-1], thread.last_event_id, _FIRST_WINDOW
    while True:
        for stored in stored_events(batch):
            run_id = stored.event.run_id
            if run_id == before:
                continue
            if first_run is not None and run_id != first_run:
                return [e.event for e in reversed(turn)]
            turn.append(stored)
            if isinstance(stored.event, RunStarted) and stored.event.kind in _TURN_STARTS:
                first_run = run_id
        if upper <= 0:
            return [e.event for e in reversed(turn)]
        lower = max(0, upper - window)
        page = await db.events.read(thread_id, after=lower, limit=upper - lower)
        batch = [e for e in reversed(page) if e.event_id <= upper]  # ids left unused leave room past it
        upper, window = lower, min(window * 4, _LARGEST_WINDOW)
