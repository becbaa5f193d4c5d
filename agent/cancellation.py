"""Stopping a thread's run on a user's request: it ends `cancelled` at once, its partial work kept.

Deliberate choices (see `docs/agent.md`, "Cancelling a run"):

- **The database decides, not the driver.** The run may be driven by another process, or by
  none (queued, or its worker died). The cancel ends the run in the database in one unit of work
  (`store.cancel_run`), which fences the driver off: its next write of any kind rolls back
  (`store.LeaseLost`) and it stops, storing nothing more.
- **What is kept is what was stored**: the conversation at the run's last checkpoint, then, from
  the events the run stored since (of its latest attempt), the results of the tools that ran, the
  calls of a step not checkpointed yet that the log shows answered, with their results, and the text
  streamed so far, as pydantic-ai's own `'interrupted'` messages. A cancelled run's message is
  never lost: if the run had not checkpointed yet, its user prompt is stored too.
  Words a driver streamed live but had not stored yet (a fraction of a second's worth) are not
  kept; clients re-read the thread when they see the run cancelled.
- **Optimistic**: everything is read first, then written in one transaction that checks nothing
  moved (the conversation's revision, the thread's newest event); if something did, it reads again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from store import Database, LoggedEvent, NewEvent, NoActiveRun, Run, RunChanged, StoredFile, cancel_run
from stream import (
    RunFinished,
    RunStarted,
    StoredEvent,
    StreamEvent,
    TextDelta,
    TextDone,
    TextWithdrawn,
    ToolCall,
    ToolResult,
    event_data,
)

from .eventlog import Publisher, stored_events
from .files import file_reference

__all__ = ("Cancellation", "cancel", "interrupted_messages")

logger = logging.getLogger(__name__)

ATTEMPTS = 20
"""How often a cancel reads the run again when it moved meanwhile; each read is a few milliseconds."""


@dataclass(frozen=True)
class Cancellation:
    """What cancelling did: the run it ended and its closing `run_finished` event."""

    run_id: str
    event: StoredEvent
    kept_text: str | None
    """The partial reply kept, if the model had written any."""


async def cancel(db: Database, thread_id: str, *, publish: Publisher | None = None) -> Cancellation:
    """End the thread's queued or running run as `cancelled`, keeping what it stored so far.

    Raises:
        store.NoActiveRun: The thread has no run queued or running.
        store.RunChanged: The run kept moving under every attempt (a busy database).
        store.NotFound: No such thread.
    """
    for _ in range(ATTEMPTS):
        cancelled = await _attempt(db, thread_id)
        if cancelled is None:
            continue
        if publish is not None:
            publish(thread_id, [cancelled.event])
        logger.info("run %s of thread %s was cancelled", cancelled.run_id, thread_id)
        return cancelled
    raise RunChanged(f"the run of thread {thread_id!r} kept changing while it was being cancelled; try again")


async def _attempt(db: Database, thread_id: str) -> Cancellation | None:
    """Read the run, then cancel it if nothing moved meanwhile; `None` if something did."""
    run = await db.runs.active(thread_id)
    if run is None:
        raise NoActiveRun(f"thread {thread_id!r} has no run in progress to cancel")
    checkpoint = (await db.threads.get(thread_id)).checkpoint_event_id
    conversation = await db.conversations.load(thread_id)
    if (await db.threads.get(thread_id)).checkpoint_event_id != checkpoint:
        return None  # a checkpoint landed between the two reads
    logged = await db.events.read(thread_id, after=checkpoint)
    seen = logged[-1].event_id if logged else await db.events.newest(thread_id)
    if conversation is None:
        conversation = Conversation(conversation_id=thread_id)
    events = [stored.event for stored in stored_events(logged) if stored.event.run_id == run.run_id]
    files = await _attached(db, run) if run.checkpoints == 0 else []
    messages, kept = interrupted_messages(conversation.messages, run, events, files)
    conversation.messages = messages
    conversation.deferred_tool_requests = None
    closing: list[LoggedEvent] = []

    def event(trace_id: str | None) -> NewEvent:
        finished = RunFinished(run_id=run.run_id, trace_id=trace_id, status="cancelled", output=kept)
        return NewEvent(run.run_id, finished.type, event_data(finished))

    async def also(connection: AsyncConnection) -> None:
        closing.append(await cancel_run(connection, thread_id, run.run_id, seen_event_id=seen, event=event))

    try:
        await db.conversations.save_with(conversation, also=also)
    except (RunChanged, ConversationConflict) as error:
        logger.debug("cancelling run %s: %s; reading it again", run.run_id, error)
        return None
    [stored] = stored_events(closing)
    return Cancellation(run.run_id, stored, kept)


async def _attached(db: Database, run: Run) -> list[StoredFile]:
    """The files attached to the run's message, in order (ones deleted since are left out, as a step does)."""
    if not run.attached:
        return []
    files = {f.file_id: f for f in await db.files.list(run.thread_id)}
    return [files[file_id] for file_id in run.attached if file_id in files]


def interrupted_messages(
    stored: Sequence[ModelMessage],
    run: Run,
    events: Sequence[StreamEvent],
    files: Sequence[StoredFile] = (),
) -> tuple[list[ModelMessage], str | None]:
    """The conversation once `run` is cancelled, and the partial reply kept (if any).

    Args:
        stored: The conversation at the run's last checkpoint.
        run: The run being cancelled.
        events: The run's events stored since that checkpoint, in order.
        files: The files attached to the run's message, stored with it as references when the
            run is cancelled before its first checkpoint.
    """
    latest = _latest_attempt(events)
    run_tag = f"{run.run_id}.{run.attempt}"
    messages = list(stored)
    if run.kind == "message" and run.checkpoints == 0 and run.content is not None:
        # Nothing of this run is stored yet: its message is, now, as a new turn would store it.
        if _open_calls(messages):
            messages = repair_messages(messages)
        content = (
            [*([run.content] if run.content else []), *map(file_reference, files)] if files else run.content
        )
        messages.append(ModelRequest(parts=[UserPromptPart(content)], run_id=run_tag))
    results = {event.tool_call_id: event for event in latest if isinstance(event, ToolResult)}
    messages = _closed(messages, _open_calls(messages), results, run_tag)
    # A tool step's calls wait for the checkpoint of their results (`agent/checkpointing.py`), their
    # events with them; a log from before that rule may show calls made since the run's last
    # checkpoint that answered: kept from their events, with their results. A call with no result
    # is not: it was never shown by a checkpoint (a slow tool's is stored while it runs).
    known = {
        call.tool_call_id
        for message in messages
        if isinstance(message, ModelResponse)
        for call in message.tool_calls
    }
    unstored = [
        _call(event)
        for event in latest
        if isinstance(event, ToolCall) and event.tool_call_id not in known and event.tool_call_id in results
    ]
    if unstored:
        messages.append(ModelResponse(parts=unstored, model_name="durable-chat", run_id=run_tag))
        messages = _closed(messages, unstored, results, run_tag)
    texts = _texts(latest)
    # Always a response, even with no words: it closes the turn, so the next prompt starts a
    # request of its own instead of being merged into this one (which would rewrite history).
    messages.append(
        ModelResponse(
            parts=[TextPart(text) for text in texts],
            model_name="durable-chat",
            run_id=run_tag,
            state="interrupted",
        )
    )
    return messages, "\n\n".join(texts) or None


def _closed(
    messages: list[ModelMessage], calls: Sequence[ToolCallPart], results: dict[str, ToolResult], run_tag: str
) -> list[ModelMessage]:
    """`messages` with `calls` answered: by their logged results, the others as `interrupted`."""
    if not calls:
        return messages
    returns = [
        ToolReturnPart(
            call.tool_name,
            results[call.tool_call_id].content,
            tool_call_id=call.tool_call_id,
            outcome=results[call.tool_call_id].outcome,
        )
        for call in calls
        if call.tool_call_id in results
    ]
    # pydantic-ai closes the calls that got no result as `interrupted` when it repairs this.
    return repair_messages([*messages, ModelRequest(parts=returns, run_id=run_tag, state="interrupted")])


def _call(event: ToolCall) -> ToolCallPart:
    raw = event.args.get("_raw") if set(event.args) == {"_raw"} else None
    args = raw if isinstance(raw, str) else dict(event.args)
    return ToolCallPart(event.tool_name, args, tool_call_id=event.tool_call_id)


def _latest_attempt(events: Sequence[StreamEvent]) -> list[StreamEvent]:
    """The events of the run's latest attempt: a recovered run streams again under new part ids."""
    starts = [index for index, event in enumerate(events) if isinstance(event, RunStarted)]
    return list(events[starts[-1] :] if starts else events)


def _texts(events: Sequence[StreamEvent]) -> list[str]:
    parts: dict[str, str] = {}
    for event in events:
        match event:
            case TextDelta(part_id=part_id, delta=delta):
                parts[part_id] = parts.get(part_id, "") + delta
            case TextDone(part_id=part_id, text=text):
                parts[part_id] = text
            case TextWithdrawn(part_id=part_id, replacement=replacement):
                parts[part_id] = replacement
            case _:
                pass
    return [text for text in parts.values() if text]


def _open_calls(messages: Sequence[ModelMessage]) -> list[ToolCallPart]:
    if not messages or not isinstance(messages[-1], ModelResponse):
        return []
    return list(messages[-1].tool_calls)
