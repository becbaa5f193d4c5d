"""The step function: one run of a thread, driven node by node through `Agent.iter`.

It knows no HTTP. It loads the thread's stored conversation, drives the agent, streams every part
to a sink as it happens and checkpoints as it goes: a response before its tools run, a tool step's
results (with the `tool_result` events that show them) before the next request goes out, the end
with the pause or the output. A paused run ends, keeping nothing in memory; a run a crash, a
cancellation or a lost database interrupted continues from its last checkpoint when driven again.
The design note is "A run, node by node" and "Crashes, cancellations, recovery" in `docs/agent.md`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import StatusCode
from pydantic_ai import DeferredToolRequests, DeferredToolResults
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.conversation import Conversation
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolResultEvent,
    UserContent,
    repair_messages,
)
from pydantic_ai.usage import RunUsage, UsageLimits
from pydantic_graph import End

from store import Claimed, DatabaseUnavailable, LeaseLost, Run, RunStatus, StoredFile, now_utc
from stream import (
    AgentChanged,
    GuardrailTripped,
    RunFinished,
    Sink,
    TeeSink,
    TextDelta,
    TextDone,
    ToolOutcomeUnknown,
)

from .app import RunKind, RunScope
from .approvals import approval_required, held_calls, reviewed_calls, stored_decisions
from .arguments import ToolSchemas
from .checkpointing import RunCheckpoints, answers_last_response
from .delegation import Delegations
from .eventlog import EventLogOptions, EventLogSink, SkipLogged, logged_tool_events, new_events
from .files import FileResolver, ThreadFiles, attachments_in, file_reference
from .guardrails import Guardrail, GuardrailContext, blocked_turn, first_tripped
from .handoffs import said_by, speaker, transfer_tools
from .ledger import ToolLedger
from .logs import current_trace_id
from .opening import EVENT_BLOCK, opening_events, opening_stored, start_run_span
from .outputs import OutputCalls
from .records import RunRecords
from .regenerate import last_prompt, without_last_turn
from .retries import is_transient
from .run_hooks import RunHooks
from .runtime import Runtime
from .texts import Texts
from .tracing import run_attributes
from .translation import RunEvents
from .withdrawals import OutputGuard

__all__ = ("run_step",)

logger = logging.getLogger(__name__)


class _Stopped(Exception):
    """The runtime is stopping: the run reached a checkpoint and is put back in the queue."""


async def run_step(
    runtime: Runtime,
    run_id: str,
    *,
    sink: Sink | None = None,
    claimed: Claimed | None = None,
    span: trace.Span | None = None,
) -> RunStatus:
    """Drive the queued run `run_id` to its end (or its pause) and return the status it ended with.

    A run this worker cannot claim (another worker holds it, or it ended) is left alone and its
    current status returned; one taken over by another worker midway (`store.LeaseLost`) stops
    without writing anything more. Cancelling the task stops the run between two awaits; it is put
    back in the queue, to continue from its last checkpoint when driven again.

    Each attempt is traced in a `run` span, the parent of the agent's, the tools' and the store's
    spans; its trace id is kept on the run's row and on every event and approval row of the run.
    `claimed`: the run as queueing it claimed it for this worker (`Runs.queue`): no claim here.
    `span`: this attempt's span, started already (`agent.queue_run`), ended here.
    """
    runtime.running += 1
    try:
        with trace.use_span(span or start_run_span(run_id), end_on_exit=True) as current:
            status = await _run_step(runtime, run_id, sink, claimed)
            current.set_attribute("durable_chat.run.status", status)
            return status
    finally:
        runtime.running -= 1


async def _run_step(runtime: Runtime, run_id: str, sink: Sink | None, claimed: Claimed | None) -> RunStatus:
    trace_id = current_trace_id()
    if claimed is None or claimed.run.run_id != run_id:
        started = await runtime.db.runs.start_reserving(run_id, events=EVENT_BLOCK, trace_id=trace_id)
        if started is None:
            return (await runtime.db.runs.get(run_id)).status
        claimed = Claimed(*started)
    run, first_event_id, opened = claimed.run, claimed.first_event_id, len(claimed.opening)
    trace.get_current_span().set_attributes(run_attributes(run_id, run))
    options = EventLogOptions(
        publish=runtime.publish,
        block=EVENT_BLOCK,
        interval=runtime.event_interval,
        pace=runtime.event_pace,
        hurry=lambda: runtime.publish is not None and runtime.quiet(),
        quiet=runtime.quiet,
    )
    log = EventLogSink(
        runtime.db.events,
        run,
        reserved=(first_event_id + opened, EVENT_BLOCK - opened),
        last_id=first_event_id + opened - 1 if opened else 0,
        options=options,
    )
    if sink is not None:
        for stored in opening_stored(claimed):  # stored already: for the caller's sink only
            await sink.emit(stored.event)
    # Every event is made with its tags (the run, the agent that spoke, the trace): the sinks pass it
    # on as it is, no copy per event.
    out: Sink = log if sink is None else TeeSink(log, sink)
    if run.attempt > 1:
        # A recovery: what an earlier attempt stored of the node it re-runs is not shown twice.
        out = SkipLogged(out, await logged_tool_events(runtime.db.events, run.thread_id, run.run_id))
    step = _Step(runtime, claimed, out, log, trace_id)
    try:
        return await _drive(runtime, run, step, out)
    finally:
        await log.aclose()
        step.close()


async def _drive(runtime: Runtime, run: Run, step: _Step, out: Sink) -> RunStatus:
    try:
        return await step.drive()
    except _Stopped:
        await _requeue(runtime, run, out)
        return "queued"
    except LeaseLost:
        return await _lost(runtime, run)
    except asyncio.CancelledError:
        # A cancelled task: keep the run for a later continuation, whatever happens here.
        await asyncio.shield(_requeue(runtime, run, out))
        raise
    except DatabaseUnavailable:
        # Not the run's fault (a database restart, say): it is not failed but left to be driven
        # again from its last checkpoint, once the database answers. The database being away,
        # putting it back in the queue may well fail here; the caller retries that too.
        logger.warning("run %s of thread %s lost its database; it will continue", run.run_id, run.thread_id)
        with contextlib.suppress(DatabaseUnavailable):
            await _requeue(runtime, run, out)
        raise
    except Exception as error:
        logger.exception("run %s of thread %s failed", run.run_id, run.thread_id)
        # Tool results no checkpoint stored stay unseen: the conversation does not hold them; nor
        # does anyone see the end the run announced if its transaction failed: the run fails instead.
        step.log.drop_held()
        trace.get_current_span().record_exception(error)
        trace.get_current_span().set_status(StatusCode.ERROR, type(error).__name__)
        end = RunFinished(**step.tags, status="failed", error=_user_safe(error, runtime.app.texts))
        try:
            await _fail(runtime, run, step, end, f"{type(error).__name__}: {error}")
        except LeaseLost:
            return await _lost(runtime, run)
        return "failed"


async def _fail(runtime: Runtime, run: Run, step: _Step, end: RunFinished, error: str) -> None:
    """End the run `failed`, in one transaction with its events not stored yet, `end` among them."""
    try:
        await step.out.emit(end)
        events = await step.log.take_pending()
    except (LeaseLost, DatabaseUnavailable):
        raise
    except Exception:
        # The event log itself failed (the run's failure, likely): the run ends all the same, unshown.
        await runtime.db.runs.finish(run.run_id, "failed", error=error, trace_id=step.trace_id)
        return
    try:
        await runtime.db.runs.finish(
            run.run_id, "failed", error=error, trace_id=step.trace_id, events=new_events(events)
        )
    except BaseException:
        step.log.put_back(events)
        raise
    step.log.stored(events)
    await step.out.flush()


async def _lost(runtime: Runtime, run: Run) -> RunStatus:
    # Another worker took the run over (this one stalled past its lease): it continues the run from
    # the last checkpoint; this attempt stops, writing nothing more, not even its unstored events.
    logger.warning("run %s was taken over by another worker; this attempt stops", run.run_id)
    return (await runtime.db.runs.get(run.run_id)).status


async def _requeue(runtime: Runtime, run: Run, out: Sink) -> None:
    if await runtime.db.leases.taken_over([run.run_id]):
        # Another worker took the run over, or a user cancelled it: its events are not this attempt's to store.
        return
    # An end whose storing was cancelled did not happen: its `run_finished` stays unstored (`held`).
    try:
        await out.flush()
    except LeaseLost:
        return  # taken over or cancelled meanwhile: the flush stored nothing, and nothing is to requeue
    finally:
        await runtime.db.runs.requeue(run.run_id)


class _Step:
    def __init__(
        self,
        runtime: Runtime,
        claimed: Claimed,
        out: Sink,
        log: EventLogSink,
        trace_id: str | None,
    ) -> None:
        run, user_id, sent = claimed.run, claimed.user_id, claimed.messages_sent
        self.runtime = runtime
        self.claimed = claimed
        self.run = run
        self.trace_id = trace_id
        self.db = runtime.db
        self.guard_context = GuardrailContext(runtime.db, run.thread_id, run.run_id, user_id, sent)
        self.agent = runtime.app.agent
        """The agent that answers: the app's, or the one a hand-off made the thread's speaker."""
        self.guard = OutputGuard(
            runtime.guardrails.output, self.guard_context, out, log, agent=self.speaker, trace_id=trace_id
        )
        self.tags = self.guard.tags
        """What every event of the run carries besides its own fields, set as it is made."""
        self.events = RunEvents(out, self.guard, self._part_id)
        self.out = out
        self.log = log
        self.records = RunRecords()
        self.delegations = Delegations(
            db=runtime.db,
            out=out,
            run=run,
            thread_id=run.thread_id,
            run_id=run.run_id,
            root=self.speaker,
            retries=runtime.app.model_retries,
            failures=runtime.tool_failures,
            guard=self.guard,
            log=log,
            read_only=runtime.app.read_only_tools,
            first_attempt=run.attempt == 1 and run.kind in ("message", "regenerate"),
            before=self._before_effect,
        )
        self.scope = RunScope(
            thread_id=run.thread_id,
            run_id=run.run_id,
            user_id=user_id,
            attempt=run.attempt,
            records=self.records,
            ledger=ToolLedger(
                runtime.db.ledger,
                run.thread_id,
                run.run_id,
                before=self._before_effect,
                owner=run.lease_owner,
            ),
            engine=runtime.db.engine,
            delegations=self.delegations,
            files=ThreadFiles(runtime.db.files, run.thread_id, user_id),
        )
        self.schemas = ToolSchemas()
        self.checkpoints = RunCheckpoints(
            db=runtime.db,
            run=run,
            log=log,
            out=out,
            guard=self.guard,
            records=self.records,
            stopping=runtime.stopping,
            trace_id=trace_id,
            user_id=user_id,
        )
        self._save = self.checkpoints.save
        if runtime.db.conversations.carrying_pays:
            self.delegations.carry = self.checkpoints.carried
            self.delegations.fold, self.delegations.settle = self.checkpoints.fold, self.checkpoints.settle
        self.response_count = 0
        self.outputs = OutputCalls()
        # Read by the queueing that claimed the run (its opening events name them), else once here.
        self.attached: list[StoredFile] | None = (
            [f for f in claimed.attached if f.thread_id == run.thread_id and f.user_id == user_id]
            if claimed.opening
            else None
        )
        """The files attached to the run's message, once read (`_attached`); the resolver starts from them."""

    @property
    def speaker(self) -> str:
        """The name of the agent that answers, as events and stored replies give it."""
        return _name(self.agent)

    def close(self) -> None:
        """Break the run's reference cycles, so that reference counting frees its objects now rather
        than the garbage collector later: this step and its helpers hold its bound methods, and the
        checkpoints hold the agent run (`started`), whose capabilities hold the checkpoints'."""
        self.checkpoints.close()
        vars(self).clear()

    async def _before_effect(self) -> None:
        await self.checkpoints.before_effect()
        await self.delegations.before_effect()

    @property
    def conversation(self) -> Conversation:
        """The thread's conversation as the run's last checkpoint stored it (or as loaded)."""
        return self.checkpoints.conversation

    @conversation.setter
    def conversation(self, conversation: Conversation) -> None:
        self.checkpoints.conversation = conversation

    async def drive(self) -> RunStatus:
        run = self.run
        continuing = run.checkpoints > 0
        kind: RunKind = run.kind if run.attempt == 1 else "recover"
        if self.runtime.app.handoffs:
            self.agent = self.runtime.app.speaker(await speaker(self.db, run))
            self.tags["agent"] = self.delegations.root = self.speaker
        if not self.claimed.opening:  # else the queueing stored them
            content = run.content if run.attempt == 1 else None
            files = await self._attached() if content is not None and run.kind == "message" else []
            for event in opening_events(
                run.run_id, kind, content, files, trace_id=self.trace_id, agent=self.speaker
            ):
                await self.out.emit(event)
        loaded = await self._load()
        if loaded is not None:
            self.conversation = loaded
        prompt = run.content if run.kind == "message" and not continuing else None
        attached: list[UserContent] = (
            [file_reference(f) for f in await self._attached()] if prompt is not None else []
        )
        if run.kind == "regenerate" and not continuing:
            # Drop the last reply (kept stored as a branch) and ask its user message again.
            asked = self.conversation.messages
            self.conversation, prompt = without_last_turn(self.conversation)
            attached = [
                file_reference(a) for a in attachments_in(asked[len(self.conversation.messages) :][:1])
            ]
        requests = self.conversation.deferred_tool_requests
        deferred = (
            await stored_decisions(self.db, run.thread_id, requests)
            if run.kind == "resume" and not continuing and requests is not None
            else None
        )
        if prompt is not None and _has_open_calls(self.conversation.messages):
            # A failed run can leave calls unanswered; close them so the new turn can start.
            self.conversation.messages = repair_messages(self.conversation.messages)
        if prompt is not None:
            tripped = await first_tripped(self.runtime.guardrails.input, prompt, self.guard_context)
            if tripped is not None:
                return await self._block(prompt, tripped)
        self.scope = replace(self.scope, kind=kind, message=_answered(run, prompt, self.conversation))
        async with self.runtime.app.deps_for(self.scope) as deps:
            return await self._run(
                # Files alone (a photo with no text) ask with no empty text part.
                [*([prompt] if prompt else []), *attached] if attached and prompt is not None else prompt,
                deferred,
                deps,
            )

    async def _attached(self) -> list[StoredFile]:
        """The files attached to the run's message (ones deleted since are left out), read once a run."""
        if self.attached is None:
            wanted = self.run.attached
            found = await self.scope.files.find(wanted) if wanted else {}
            self.attached = [found[file_id] for file_id in wanted if file_id in found]
        return self.attached

    async def _run(
        self, prompt: str | Sequence[UserContent] | None, deferred: DeferredToolResults | None, deps: object
    ) -> RunStatus:
        app, run, agent = self.runtime.app, self.run, self.agent
        try:
            async with agent.iter(
                prompt,
                model=self.runtime.model,
                conversation=self.conversation,
                deferred_tool_results=deferred,
                deps=deps,
                usage_limits=_per_turn(app.usage_limits, self.conversation.usage),
                run_id=f"{run.run_id}.{run.attempt}",
                toolsets=[transfer_tools(app.speakers, self.speaker, self._transfer)]
                if app.handoffs
                else None,
                capabilities=[
                    RunHooks(
                        app.model_retries,
                        self.runtime.tool_failures,
                        self.schemas,
                        self.checkpoints.sending,
                        FileResolver(self.scope.files, known=self.attached or ()),
                        self.checkpoints.tool_running,
                    ),
                    *self.runtime.agent_tracing(),
                ],
            ) as agent_run:
                checkpoints = self.checkpoints
                checkpoints.started(agent_run.new_messages)
                async for node in agent_run:
                    # Output guardrails change a response before the run acts on it or stores it.
                    await self.guard.settle(node, self._part_id)
                    if agent.is_call_tools_node(node):
                        said_by(node.model_response, self.speaker)  # before any checkpoint stores it
                    # The end's checkpoint is the pause's or the completion's, one transaction; a
                    # tool step's results are stored as the next request goes out (`sending`).
                    due = not (isinstance(node, End) or answers_last_response(node) or checkpoints.answering)
                    if due and not checkpoints.can_wait():
                        await self._save(checkpoints.messages())
                    if self.runtime.stopping.is_set() and not isinstance(node, End):
                        await checkpoints.park(node)
                        raise _Stopped
                    if agent.is_model_request_node(node):
                        self.response_count += 1
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                await self.events.model_event(event)
                    elif agent.is_call_tools_node(node):
                        checkpoints.answering = True
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                if isinstance(event, ToolResultEvent):
                                    await self._on_tool_result(event)
                    elif isinstance(node, End):
                        break
            # Read after the block: a run that pauses leaves it from inside its tool step.
            result = agent_run.result
            assert result is not None, "the run ended without a result"
            output = result.output
            messages = self.checkpoints.messages()
            usage = agent_run.usage
        except UsageLimitExceeded as error:
            logger.info("run %s hit its usage limits: %s", run.run_id, error)
            return await self._finish_over_limit()
        self.conversation.usage = usage
        if isinstance(output, DeferredToolRequests):
            return await self._pause(messages, output)
        return await self._complete(messages, output)

    async def _load(self) -> Conversation | None:
        stored = self.claimed.conversation
        if stored is None:
            return await self.db.conversations.load(self.run.thread_id)
        # Read as the run was queued and claimed: no trip when the store remembers that revision.
        return await self.db.conversations.load_at(self.run.thread_id, stored.revision)

    # -- the end of a run -------------------------------------------------------------------------

    async def _pause(self, messages: list[ModelMessage], requests: DeferredToolRequests) -> RunStatus:
        # A single agent's own calls say nothing of agents: there is only one.
        speaker = self.speaker if self.runtime.app.handoffs else None
        calls = held_calls(requests, self.schemas.schemas, agent=speaker, path=speaker and (speaker,))
        if speaker is None and any(call.path is not None for call in calls):
            # Beside a delegated agent's calls, the run's own say whose they are too.
            root = self.delegations.root
            calls = held_calls(requests, self.schemas.schemas, agent=root, path=(root,))
        calls = await reviewed_calls(
            self.runtime.app.review,
            calls,
            thread_id=self.run.thread_id,
            user_id=self.guard_context.user_id,
            engine=self.db.engine,
            now=now_utc(),
        )
        for call in calls:
            if call.outcome == "unknown":
                await self.out.emit(
                    ToolOutcomeUnknown(**self.tags, tool_call_id=call.tool_call_id, tool_name=call.tool_name)
                )
        trace.get_current_span().add_event(
            "approval_required",
            {
                "durable_chat.tool_call_ids": [call.tool_call_id for call in calls],
                "durable_chat.tool_names": [call.tool_name for call in calls],
            },
        )
        await self.out.emit(approval_required(self.tags, calls))
        # Both are published once the pause commits, in the same transaction as the approval rows.
        await self.out.emit(RunFinished(**self.tags, status="awaiting_approval"))
        await self._save(messages, deferred=requests, finish="awaiting_approval", approvals=calls)
        return "awaiting_approval"

    async def _complete(self, messages: list[ModelMessage], output: object) -> RunStatus:
        # Stored with the run's end, in one transaction, and published once it commits.
        spec = getattr(self.agent, "output_type", str)
        await self.out.emit(self.outputs.finished(self.tags, output, spec, self.response_count))
        await self._save(messages, finish="completed")
        return "completed"

    async def _finish_over_limit(self) -> RunStatus:
        # The graceful end of a looping turn: close its open calls and answer in place of the model.
        limit_reply = self.runtime.app.texts.turn_limit
        reply = ModelResponse(parts=[TextPart(limit_reply)], model_name="durable-chat")
        said_by(reply, self.speaker)  # in place of the agent's own reply: stored as its, as streamed
        # The run's own history, not the last checkpoint: results streamed since are kept as they
        # were, and only calls that truly got no result are closed.
        messages = [*repair_messages(self.checkpoints.messages()), reply]
        part_id = self._part_id(0)
        tags = self.tags
        await self.out.emit(TextDelta(**tags, part_id=part_id, delta=limit_reply))
        await self.out.emit(TextDone(**tags, part_id=part_id, text=limit_reply))
        await self.out.emit(RunFinished(**tags, status="completed", output=limit_reply))
        await self._save(messages, finish="completed")
        return "completed"

    async def _block(self, prompt: str, guardrail: Guardrail) -> RunStatus:
        # An input guardrail tripped: answer politely in place of the model, which is never called.
        logger.warning("input guardrail %s blocked run %s", guardrail.name, self.run.run_id)
        run_id, reply, part_id, tags = self.run.run_id, guardrail.reply, self._part_id(0), self.tags
        await self.out.emit(GuardrailTripped(**tags, guardrail=guardrail.name, stage="input"))
        await self.out.emit(TextDelta(**tags, part_id=part_id, delta=reply))
        await self.out.emit(TextDone(**tags, part_id=part_id, text=reply))
        await self.out.emit(RunFinished(**tags, status="blocked", output=reply))
        turn = blocked_turn(prompt, guardrail, run_id=f"{run_id}.{self.run.attempt}")
        # The run row keeps which guardrail blocked it, for operators; the user got the reply.
        blocked_by = f"input guardrail {guardrail.name!r}"
        await self._save([*self.conversation.messages, *turn], finish="blocked", error=blocked_by)
        return "blocked"

    async def _transfer(self, name: str) -> None:
        """A hand-off: `name` answers the thread's next turns."""
        await self.checkpoints.before_effect()  # the transfer's call is stored before it acts
        await self.db.threads.set_agent(self.run.thread_id, name)
        await self.out.emit(
            AgentChanged(run_id=self.run.run_id, agent=name, previous=self.speaker, trace_id=self.trace_id)
        )

    async def _on_tool_result(self, event: ToolResultEvent) -> None:
        """A function tool's result, or an output tool's (which closes the call in every client)."""
        self.outputs.settled(event, self.response_count)
        await self.events.tool_result(event)

    def _part_id(self, index: int) -> str:
        return f"{self.run.run_id[:8]}.{self.run.attempt}.{self.response_count}.{index}"


def _name(agent: AbstractAgent[Any, Any]) -> str:
    """The name events and stored replies give `agent`."""
    return agent.name or "assistant"


def _per_turn(limits: UsageLimits, spent: RunUsage) -> UsageLimits:
    """`limits` for this turn alone: pydantic-ai counts a run's usage from the conversation's total."""
    return replace(
        limits,
        request_limit=None if limits.request_limit is None else limits.request_limit + spent.requests,
        tool_calls_limit=None
        if limits.tool_calls_limit is None
        else limits.tool_calls_limit + spent.tool_calls,
    )


def _answered(run: Run, prompt: str | None, conversation: Conversation) -> str | None:
    """The user message a run answers (`RunScope.message`): none for decisions on paused calls."""
    if run.kind == "resume":
        return None
    if prompt is not None:
        return prompt
    if run.kind == "message":
        return run.content
    found = last_prompt(conversation.messages)  # a regenerate run continuing after a crash
    return None if found is None else found[1]


def _has_open_calls(messages: Sequence[ModelMessage]) -> bool:
    return bool(messages) and isinstance(messages[-1], ModelResponse) and bool(messages[-1].tool_calls)


def _user_safe(error: Exception, texts: Texts) -> str:
    return texts.unavailable if is_transient(error) else texts.failed
