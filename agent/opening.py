"""How a run starts: queued, and, when the caller drives it, claimed with its opening events in the same trip.

Every shell starts runs here (the server's endpoints, the protocol endpoints, the terminal chat),
then hands the claim and the span to `run_step`. A run not claimed at queueing (the worker is at
its limit) is claimed by `run_step` when driven, and stores the same opening events then.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from opentelemetry import trace

from store import Claim, Claimed, NewRun, Queued, Run, RunKind, StoredFile
from stream import AttachedFile, RunStarted, StoredEvent, StreamEvent, UserMessage, event_from_data

from .eventlog import new_event
from .guardrails import message_window
from .logs import format_trace_id
from .runtime import Runtime
from .tracing import run_attributes

__all__ = (
    "EVENT_BLOCK",
    "Opened",
    "StartKind",
    "opening_events",
    "opening_stored",
    "queue_run",
    "start_run_span",
)

tracer = trace.get_tracer("durable_chat.agent")

EVENT_BLOCK = 128
"""Event ids a run reserves at once; a typical turn uses a few dozen."""

StartKind = Literal["message", "resume", "recover", "regenerate"]


@dataclass(frozen=True)
class Opened:
    """A run as `queue_run` opened it: what the queueing did, and what driving it here starts from."""

    queued: Queued
    events: tuple[StoredEvent, ...] = ()
    """The opening events the queueing stored with the run, with their ids (none unless claimed here)."""
    span: trace.Span | None = None
    """The span of the run's first attempt, started (not current) when claimed here; `run_step` ends it."""

    @property
    def run(self) -> Run:
        return self.queued.run

    @property
    def created(self) -> bool:
        """`False`: the idempotency key named a run queued earlier, returned as it is."""
        return self.queued.created

    @property
    def claimed(self) -> Claimed | None:
        """The claim to hand `run_step(claimed=)`, when the run was created claimed by this worker."""
        return self.queued.claimed


async def queue_run(
    runtime: Runtime,
    thread_id: str,
    kind: RunKind,
    *,
    content: str,
    claim: bool,
    idempotency_key: str | None = None,
    user_id: str | None = None,
    create_unless: str | None = None,
    file_ids: Sequence[str] = (),
) -> Opened:
    """Queue a `message` or `regenerate` run (`store.Runs.queue`); with `claim`, claimed by this worker at once.

    A claimed run's opening events (`opening_events`) are stored with it, in its attempt's trace,
    and published once stored; drive it with `run_step(claimed=opened.claimed, span=opened.span)`.
    With `user_id`, a thread of another user is not found; with `create_unless` too, a missing
    thread is created as theirs, unless `create_unless` names a thread of theirs. `file_ids`: files
    of the thread attached to the message (checked by the caller), given to the model with it.

    Raises:
        NotFound: No such thread.
        RunActive: The thread has a run queued or running.
        ApprovalPending: The thread waits for decisions on tool calls.
    """
    run_id = str(uuid.uuid4())
    span, opening, attached = None, [], []
    if claim:
        # Its attempt's span starts now, so the run's opening events, stored with it, carry its
        # trace id as every later event of the run does. One never ended (a refused run) is
        # never exported.
        span = start_run_span(run_id)
        attached = await _attached(runtime, thread_id, user_id, file_ids)
        opening = opening_events(run_id, kind, content, attached, trace_id=format_trace_id(span))
    new = NewRun(
        thread_id=thread_id,
        kind=kind,
        content=content,
        idempotency_key=idempotency_key,
        run_id=run_id,
        user_id=user_id,
        create_unless=create_unless,
        file_ids=file_ids,
    )
    window = message_window(runtime.guardrails) if kind == "message" else None
    opened = [new_event(event) for event in opening]
    queued = await runtime.db.runs.queue(
        new,
        Claim(events=EVENT_BLOCK, count_window=window, opening=opened, attached=attached) if claim else None,
    )
    claimed = queued.claimed if queued.created else None
    if claimed is None:
        return Opened(queued)
    stored = [StoredEvent(claimed.first_event_id + i, event) for i, event in enumerate(opening)]
    if stored and runtime.publish is not None:
        # Stored, then published, as every event (`agent.EventLogSink`).
        runtime.publish(thread_id, stored)
    return Opened(queued, tuple(stored), span)


def start_run_span(run_id: str) -> trace.Span:
    """The span of a run's attempt, started (not current) for `run_step(span=)`: a run queued and
    claimed at once starts it before the queueing, whose opening events carry its trace id."""
    return tracer.start_span("run", attributes=run_attributes(run_id))


def opening_events(
    run_id: str,
    kind: StartKind,
    content: str | None,
    files: Sequence[StoredFile] = (),
    *,
    trace_id: str | None = None,
    agent: str | None = None,
) -> list[StreamEvent]:
    """The events a run starts with: `run_started`, and the user's message for a `message` run with
    `content`, with the `files` attached to it."""
    events: list[StreamEvent] = [RunStarted(run_id=run_id, kind=kind, trace_id=trace_id, agent=agent)]
    if kind == "message" and content is not None:
        attachments = [
            AttachedFile(file_id=f.file_id, name=f.name, media_type=f.media_type, size=f.size) for f in files
        ]
        events.append(
            UserMessage(
                run_id=run_id,
                content=content,
                attachments=attachments or None,
                trace_id=trace_id,
                agent=agent,
            )
        )
    return events


async def _attached(
    runtime: Runtime, thread_id: str, user_id: str | None, file_ids: Sequence[str]
) -> list[StoredFile]:
    """The files `file_ids` names, in order (read only when there are some: a message without files costs nothing)."""
    if not file_ids:
        return []
    files = {f.file_id: f for f in await runtime.db.files.list(thread_id, user_id=user_id)}
    return [files[file_id] for file_id in file_ids if file_id in files]


def opening_stored(claimed: Claimed) -> list[StoredEvent]:
    """The events the queueing stored with a run it claimed (`Claimed.opening`), with their ids."""
    first = claimed.first_event_id
    return [
        StoredEvent(first + i, event_from_data(new.type, new.data)) for i, new in enumerate(claimed.opening)
    ]
