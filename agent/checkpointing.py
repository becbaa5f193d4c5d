"""A run's checkpoints: what it stores of its conversation, when, and with which events and records.

A run checkpoints after each node, before the next model call, with three exceptions: a final
response waits for the end's checkpoint (`answers_last_response`); a response calling tools waits
for the checkpoint of their results (`calls_only`), unless a tool does something keyed by its call
first (`RunCheckpoints.before_effect`: the ledger, a delegation, a hand-off); and a tool step's
results are stored when the request carrying them goes out (`RunCheckpoints.sending`), as
pydantic-ai finished that request, in the transaction that publishes their `tool_result` events,
with the end of a delegated run that gave one of them (`RunCheckpoints.fold`).
The design note is "A run, node by node" in `docs/agent.md`.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncGenerator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Protocol

from pydantic_ai import CallToolsNode, DeferredToolRequests, ModelRequestNode
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from sqlalchemy.ext.asyncio import AsyncConnection

from store import (
    CallsHeld,
    Checkpoint,
    Database,
    Pause,
    PendingCall,
    Run,
    RunStatus,
    Saving,
    get_approval,
    insert_pending,
)
from stream import ApprovalRequired, RunFinished, Sink, ToolOutcomeUnknown

from .eventlog import EventLogSink, new_events
from .merge import unsaved
from .records import RunRecords
from .withdrawals import OutputGuard

__all__ = (
    "SLOW_TOOL",
    "Folded",
    "ReusedToolCallId",
    "RunCheckpoints",
    "answers_last_response",
    "calls_only",
)

SLOW_TOOL = 0.2
"""Seconds a tool may run before the response calling it is stored without waiting for its result:
a slow tool's call is shown while it runs, and kept by a cancellation that cuts it short."""


class ReusedToolCallId(Exception):
    """The model gave a call the id of an earlier call of the thread."""


def answers_last_response(node: object) -> bool:
    """Whether `node` only ends the run on a final response: its checkpoint can wait for the end's."""
    if not isinstance(node, CallToolsNode):
        return False
    response: ModelResponse = node.model_response  # pyright: ignore[reportUnknownMemberType]
    return not response.tool_calls


def _changed(messages: list[ModelMessage], stored: list[ModelMessage]) -> bool:
    """Whether `messages` differ from `stored` in length or in any message's identity (walked in C)."""
    return len(messages) != len(stored) or not all(map(operator.is_, messages, stored))


def calls_only(unsaved: Sequence[ModelMessage], tools: Collection[str] | None = None) -> bool:
    """Whether `unsaved` holds one response, calling tools, and every call and result in it is of
    `tools` (`None`: of any tool).

    Its checkpoint can wait for the one that stores the tools' results, as long as no tool does
    anything keyed by its call id in between (`RunCheckpoints.before_effect` stores it first then):
    after a crash in between, the model call that asked for them and the tools run again, as a
    crash during a tool runs that tool again anyway.
    """
    responses = [message for message in unsaved if isinstance(message, ModelResponse)]
    if len(responses) != 1 or not responses[0].tool_calls:
        return False
    return tools is None or all(
        part.tool_name in tools
        for message in unsaved
        for part in message.parts
        if isinstance(part, ToolCallPart | ToolReturnPart)
    )


class Folded(Protocol):
    """A delegated run's end, waiting to be stored by its parent run's next checkpoint (`RunCheckpoints.fold`)."""

    def saving(self) -> Saving:
        """The end as a save for that checkpoint's transaction to carry first."""
        ...

    async def settle(self) -> None:
        """Store the end now, in a transaction of its own."""
        ...


class RunCheckpoints:
    """The checkpoints of one run's attempt: its conversation as stored, and what it adds to it."""

    def __init__(
        self,
        *,
        db: Database,
        run: Run,
        log: EventLogSink,
        out: Sink,
        guard: OutputGuard,
        records: RunRecords,
        stopping: asyncio.Event,
        trace_id: str | None,
        user_id: str,
    ) -> None:
        self.db, self.run, self.log, self.out, self.guard = db, run, log, out, guard
        self.records, self.stopping, self.trace_id, self.user_id = records, stopping, trace_id, user_id
        self.conversation = Conversation(conversation_id=run.thread_id)
        self.base = 0
        """How many messages of `conversation` the run started from; its checkpoints stored the rest."""
        self.new: Callable[[], list[ModelMessage]] = list
        """The run's new messages, as pydantic-ai counts them (`AgentRun.new_messages`)."""
        self.answering = False
        """A tool step ran whose results no checkpoint stored yet: the next request's checkpoint does."""
        self.owed = False
        """A response calling tools waits for the checkpoint of their results (`can_wait`), unless
        a tool asks for it sooner (`before_effect`)."""
        self.folded: Folded | None = None
        """A delegated run's end that the next checkpoint stores first, in its transaction (`fold`)."""
        self._effects = asyncio.Lock()

    def started(self, new: Callable[[], list[ModelMessage]]) -> None:
        """The agent run begins from `conversation` as it is; `new` gives its new messages."""
        self.base, self.new = len(self.conversation.messages), new

    def close(self) -> None:
        """The run ended: let go of the agent run (`started`) and of a delegated run's end not stored
        (`fold`), which hold these checkpoints back through their hooks."""
        self.new, self.folded = list, None

    def messages(self) -> list[ModelMessage]:
        """The conversation as the run left it so far: what is stored, then what the run added since."""
        stored = self.conversation.messages
        return [*stored, *unsaved(stored[self.base :], self.new())]

    def can_wait(self) -> bool:
        """Whether the checkpoint due now can wait for the run's next one: all it would add is a
        response calling tools. A stopping runtime, or a withdrawn part to blank, checkpoints at once."""
        if self.stopping.is_set() or self.guard.blanking:
            return False
        stored = self.conversation.messages
        self.owed = calls_only(unsaved(stored[self.base :], self.new()))
        return self.owed

    @asynccontextmanager
    async def tool_running(self) -> AsyncGenerator[None]:
        """Around a tool's execution: if it runs past `SLOW_TOOL` while the response calling it waits
        for its results' checkpoint, that response is stored (and its calls shown) meanwhile."""
        if not self.owed:
            yield
            return
        saving: list[asyncio.Task[None]] = []
        handle = asyncio.get_running_loop().call_later(
            SLOW_TOOL, lambda: saving.append(asyncio.create_task(self.before_effect()))
        )
        try:
            yield
        finally:
            handle.cancel()
            for task in saving:
                await asyncio.shield(task)

    async def before_effect(self) -> None:
        """A tool is about to do something keyed by its call id (a ledger row, a delegated run, a
        hand-off): the response calling it is stored first, if it waits (`can_wait`), so that a
        crash after it continues with the same call, whose effect the ledger then answers."""
        async with self._effects:  # parallel calls: one checkpoint
            if self.owed:
                await self.save(self.messages(), results=False)

    def fold(self, end: Folded) -> bool:
        """Take the end of a delegated run of one of this run's calls, to be stored by this run's next
        checkpoint, in its transaction: the one that stores the delegating call's result, as the
        request carrying it goes out (`sending`). Whether it took it: one at a time, none while the
        runtime stops.

        A delegated run's end is its last step's results and its answer; like a tool step's
        results, it is stored with the request that sends them on, and a crash in between runs the
        sub-run's unstored steps again (a tool acting through the ledger had them stored first). Its
        events wait with it: a `tool_result` of its, and all after it, are held until a checkpoint
        stores them (`EventLogSink`). Any checkpoint of the run carries it, whichever comes first;
        a pause, or another delegated run starting, stores it alone before (`settle`).
        """
        if self.folded is not None or self.stopping.is_set():
            return False
        self.folded = end
        return True

    async def settle(self) -> None:
        """Store the delegated run's end that waits for the next checkpoint (`fold`) now, alone:
        before another delegated run of the run stores anything."""
        folded, self.folded = self.folded, None
        if folded is not None:
            await folded.settle()

    @asynccontextmanager
    async def carried(self, mark: int) -> AsyncGenerator[Saving | None]:
        """The response waiting for its results' checkpoint (`can_wait`), as a save for a delegated
        run's checkpoint to carry first in its transaction (`None`: none waits); stored once the
        block ends without an error. Its calls' events are the carrier's to take; `mark` is the
        newest event when the delegated run started, which the stored messages reflect."""
        await self.settle()  # outside the lock: that save may carry the response itself
        async with self._effects:  # no other checkpoint of it meanwhile
            if self.owed and self.guard.blanking:
                await self.save(self.messages(), results=False)  # its withdrawn text blanked with it
            if not self.owed:
                yield None
                return
            conversation = self.conversation
            stored, deferred = conversation.messages, conversation.deferred_tool_requests
            messages = self.messages()
            self.guard.scrub(messages[len(stored) :])
            conversation.messages, conversation.deferred_tool_requests = messages, None
            try:
                yield Saving(conversation, Checkpoint(run=self.run, event_id=mark, trace_id=self.trace_id))
            except BaseException:
                conversation.messages, conversation.deferred_tool_requests = stored, deferred
                raise
            self.owed = False

    async def sending(self) -> None:
        """A request is about to go to the model, as pydantic-ai finished it (stamped with its time,
        run and instructions): when it carries a tool step's results, they are stored now, with the
        `tool_result` events that show them, before any client sees one."""
        if self.answering:
            self.answering = False
            await self.save(self.messages())

    async def park(self, node: object) -> None:
        """Before the run goes back to the queue for a stopping runtime: a tool step's results are
        stored as the request not sent yet, which the next process sends as it is (pydantic-ai
        sends a history's trailing request)."""
        if self.answering and isinstance(node, ModelRequestNode):
            self.answering = False
            request: ModelRequest = node.request  # pyright: ignore[reportUnknownMemberType]
            await self.save([*self.messages(), request])

    async def save(
        self,
        messages: list[ModelMessage],
        *,
        deferred: DeferredToolRequests | None = None,
        finish: RunStatus | None = None,
        approvals: Sequence[PendingCall] = (),
        error: str | None = None,
        results: bool = True,
    ) -> None:
        """Store `messages` (the stored conversation, then what the run added), the records tools
        made and the events not stored yet, in one transaction, with the run's progress. Without
        `results` (a response stored while its tools run), no tool result event: those wait for
        the checkpoint that stores the results. A delegated run's end waiting for it (`fold`) is
        stored first, in its transaction (a pause's trip carries nothing: before it, alone)."""
        folded, self.folded = self.folded, None
        if folded is not None and approvals:
            await folded.settle()  # carrying the response calling it, if that still waits
            folded = None
        self.owed = False
        stored = self.conversation.messages
        self.guard.scrub(messages[len(stored) :])
        records = self.records.drain() if results else []  # a record is stored with its call's result
        if folded is None and not records and finish is None and not _changed(messages, stored):
            return
        run, conversation = self.run, self.conversation
        # Events not stored yet go out in the checkpoint's own transaction.
        events = await self.log.take_pending(results=results)
        # A pause holds its calls in the checkpoint's own trip (`store.Pause`); calls held before
        # (an unknown outcome held again) and a withdrawn reply to blank go through SQLAlchemy.
        fresh = not self.guard.blanking and all(call.outcome is None for call in approvals)
        checkpoint = Checkpoint(
            run=run,
            event_id=self.log.last_id,
            records=records,
            events=new_events(events),
            finish=finish,
            error=error,
            trace_id=self.trace_id,
            pause=Pause(approvals, self.user_id) if approvals and fresh else None,
        )

        async def also(connection: AsyncConnection) -> None:
            # Rare (a call held again, a withdrawn reply): in a transaction around the trip.
            await _refuse_reused_ids(connection, run, approvals)
            await insert_pending(connection, run.thread_id, run.run_id, approvals, trace_id=self.trace_id)
            await self.guard.blank(connection)

        conversation.messages = messages
        conversation.deferred_tool_requests = deferred
        try:
            try:
                await self.db.conversations.save_with(
                    conversation,
                    checkpoint=checkpoint,
                    also=None if fresh else also,
                    first=None if folded is None else folded.saving(),
                )
            except CallsHeld:
                # A call's id is taken in the thread (nothing was stored): held the general way,
                # which keeps a call this run holds already and refuses another run's.
                await self.db.conversations.save_with(
                    conversation, checkpoint=replace(checkpoint, pause=None), also=also
                )
        except ReusedToolCallId:
            # The pause's own events never show: the run fails instead (`run_step`).
            self.log.put_back([e for e in events if not isinstance(e.event, _PAUSE_EVENTS)])
            raise
        except BaseException:
            self.log.put_back(events)
            raise
        self.log.stored(events)
        await self.out.flush()


_PAUSE_EVENTS = (ApprovalRequired, RunFinished, ToolOutcomeUnknown)


async def _refuse_reused_ids(connection: AsyncConnection, run: Run, calls: Sequence[PendingCall]) -> None:
    """Fail, rather than wait for nobody, when a call reuses the id of an earlier run's call.

    Approvals, the ledger and records key a call by its id within the thread; providers mint
    unique ids, and a model that repeats one (say on a regenerated turn) would find the earlier
    call's decision instead of waiting for its own.
    """
    reused: list[str] = []
    for call in calls:
        if call.outcome is None:
            held = await get_approval(connection, run.thread_id, call.tool_call_id)
            if held is not None and held.run_id != run.run_id:
                reused.append(call.tool_call_id)
    if reused:
        raise ReusedToolCallId(
            f"the model reused tool call ids {sorted(reused)!r} of earlier calls in thread {run.thread_id!r}; "
            "durable-chat needs them unique within a thread"
        )
