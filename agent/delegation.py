"""Delegation: another agent run as a sub-run of a tool call, as durable as the run around it.

`RunScope.delegate(ctx, agent, prompt)` drives the agent through the machinery of the top run (its
hooks, timeouts, retries, the pause at deferred calls, its output guardrails), streams its events
tagged with its name and the parent call (`agent.translation`), and checkpoints its messages as the
top run does (a response before its tools run, a request as it goes out, a step of read-only calls
with the next checkpoint, its end with its output kept) as a conversation of its own, kept
with the thread (`{thread_id}/{parent_tool_call_id}`, then `…~2`, `…~3` for a call delegating again,
scope `store.delegated_scope`); its first checkpoint stores the top run's response calling it first,
in its transaction. The end of a sub-run of the top run's call that answered in text is stored by
the top run's checkpoint that stores the call's result, in its transaction (`RunCheckpoints.fold`).
A sub-run that pauses raises `ApprovalRequired` carrying its pending calls, so its parent pauses
too, all the way up; the decisions resume the innermost agent from storage when the parent call runs
again. The design note is "Several agents" in `docs/agent.md`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.conversation import Conversation
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolResultEvent,
    ToolReturnPart,
)
from pydantic_core import to_jsonable_python
from pydantic_graph import End
from sqlalchemy.ext.asyncio import AsyncConnection

from store import AlsoWrite, Checkpoint, Database, Run, Saving, delegated_scope
from stream import Sink, ToolCall, ToolResult

from .approvals import DELEGATED, encode_calls, held_calls, stored_decisions
from .arguments import ToolSchemas
from .checkpointing import Folded, answers_last_response, calls_only
from .eventlog import EventLogSink, new_events
from .handoffs import said_by
from .merge import unsaved
from .records import call_id
from .retries import ModelRetries
from .run_hooks import RunHooks
from .tool_failures import ToolFailures
from .translation import RunEvents
from .withdrawals import OutputGuard

__all__ = ("DELEGATED", "Delegations", "sub_conversation_id")

logger = logging.getLogger(__name__)


def sub_conversation_id(thread_id: str, parent_tool_call_id: str, ordinal: int = 1) -> str:
    """The id of the conversation a delegated agent had inside the tool call `parent_tool_call_id`:
    the `ordinal`-th the call delegated to (a tool may delegate more than once, in turn)."""
    return f"{thread_id}/{_sub_key(parent_tool_call_id, ordinal)}"


def _sub_key(parent: str, ordinal: int) -> str:
    """What names the `ordinal`-th sub-run of the tool call `parent` within its thread."""
    return parent if ordinal == 1 else f"{parent}~{ordinal}"


@dataclass
class Delegations:
    """The delegations of one run's attempt: what their sub-runs share with the run, and who runs where."""

    db: Database
    out: Sink
    run: Run
    """The run whose attempt this is, as it claimed it: a sub-run's checkpoint is fenced by its lease."""
    thread_id: str
    run_id: str
    root: str
    """The name of the agent the run drives."""
    retries: ModelRetries
    failures: ToolFailures
    guard: OutputGuard
    """The run's output guard: a delegated agent's text passes the same guardrails (`OutputGuard.delegated`)."""
    log: EventLogSink
    """The run's event log: a sub-run's checkpoint stores the events it shows."""
    first_attempt: bool = False
    """The run answers a new message on its first attempt: no call of it ran before, nor kept an output."""
    read_only: Collection[str] = frozenset()
    """The app's read-only tools (`ChatApp.read_only_tools`): a response calling only these is stored with their results."""
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict[str, "tuple[str, ...]"])
    """The chain of agents of each agent run going on, by its pydantic-ai run id."""
    before: Callable[[], Awaitable[None]] | None = None
    """Awaited before a nested sub-run starts: the responses calling its tool and its parents' are
    stored first (the sub-run's conversation and output are keyed by that call)."""
    carry: Callable[[int], AbstractAsyncContextManager[Saving | None]] | None = None
    """The run's response calling a delegating tool, if it waits for its results' checkpoint, as a
    save the sub-run's first checkpoint carries in its transaction (`RunCheckpoints.carried`)."""
    fold: Callable[[Folded], bool] | None = None
    """Takes the end of a sub-run of the run's own call, for the run's next checkpoint to store
    (`RunCheckpoints.fold`); `None`: each sub-run stores its end itself."""
    settle: Callable[[], Awaitable[None]] | None = None
    """Stores a sub-run's end that `fold` took, before another sub-run starts (`RunCheckpoints.settle`)."""
    running: dict[str, _SubRun] = field(default_factory=dict[str, "_SubRun"])
    """The sub-runs going on, by their pydantic-ai run id, outermost first."""
    started: set[str] = field(default_factory=set[str])
    """The sub-runs this attempt started (`_sub_key`): on a first attempt, no other has a
    conversation stored."""
    ordinals: Counter[str] = field(default_factory=Counter[str])
    """How many sub-runs each parent call started in this attempt: a call's tool that delegates again
    has a sub-run of its own each time, found again in the same order when the call runs again."""

    async def before_effect(self) -> None:
        """A tool is about to do something keyed by its call id: the responses of the sub-runs going
        on that wait for their tools' results are stored first, outermost first."""
        for sub in list(self.running.values()):
            await sub.before_effect()

    async def delegate(
        self,
        ctx: RunContext[Any],
        agent: AbstractAgent[Any, Any],
        prompt: str,
        *,
        deps: Any,
        name: str | None,
    ) -> Any:
        """Run `agent` on `prompt` as a sub-run of the tool call `ctx` runs, and return its output."""
        async with self.failures.paused(ctx):  # the sub-run's model calls and tools have their own limits
            return await self._delegate(ctx, agent, prompt, deps=deps, name=name)

    async def _delegate(
        self,
        ctx: RunContext[Any],
        agent: AbstractAgent[Any, Any],
        prompt: str,
        *,
        deps: Any,
        name: str | None,
    ) -> Any:
        parent = call_id(ctx)
        self.ordinals[parent] += 1
        ordinal = self.ordinals[parent]
        key = _sub_key(parent, ordinal)
        nested = ctx.run_id in self.running
        if self.settle is not None:
            await self.settle()  # a sub-run's end before this one's events and saves
        if self.before is not None and (nested or self.carry is None):
            await self.before()
        # The run's own response calling this tool is stored with the sub-run's first checkpoint,
        # in its transaction, as it stood when the sub-run started (its mark).
        mark = None if nested or self.carry is None else self.log.last_id
        path = (*self.paths.get(ctx.run_id or "", (self.root,)), name or agent.name or "agent")
        done = None if self.first_attempt else await self.db.ledger.get(self.thread_id, _output_key(key))
        if done is not None and done.status == "succeeded":
            logger.info("the sub-run %s of tool call %s ended before; its stored output is used", key, parent)
            return _typed(agent, done.result)
        conversation_id = sub_conversation_id(self.thread_id, parent, ordinal)
        # A new message's first attempt made this call now: nothing of its sub-run is stored to load.
        fresh = self.first_attempt and key not in self.started
        self.started.add(key)
        conversations = self.db.conversations
        # `load_at` with no revision: none stored, no trip, and its first save reads no record either.
        conversation = await (
            conversations.load_at(conversation_id, None) if fresh else conversations.load(conversation_id)
        )
        if conversation is None:
            conversation = Conversation(conversation_id=conversation_id)
        requests = conversation.deferred_tool_requests
        deferred = None if requests is None else await stored_decisions(self.db, self.thread_id, requests)
        if requests is not None and deferred is not None and _undecided(requests, deferred):
            # Paused before its parent did (the run stopped in between): it still waits, as it was.
            raise ApprovalRequired(metadata={DELEGATED: requests.metadata[_HELD][DELEGATED]})
        sub = _SubRun(self, path, parent, key, conversation, mark, top=not nested)
        return await sub.drive(ctx, agent, None if conversation.messages else prompt, deferred, deps)

    def keeping(self, key: str, path: tuple[str, ...], output: object) -> AlsoWrite:
        """The write that keeps the output of the sub-run `key` (`_sub_key`), in the transaction of
        its last checkpoint."""
        result = to_jsonable_python(output, fallback=str)

        async def keep(connection: AsyncConnection) -> None:
            await self.db.ledger.keep(
                connection,
                self.thread_id,
                _output_key(key),
                run_id=self.run_id,
                tool_name=f"delegate:{path[-1]}",
                result=result,
            )

        return keep


class _SubRun:
    """One delegated agent run: driven node by node, checkpointed as it goes, streamed with its tags."""

    def __init__(
        self,
        delegations: Delegations,
        path: tuple[str, ...],
        parent: str,
        key: str,
        conversation: Conversation,
        mark: int | None,
        *,
        top: bool,
    ) -> None:
        self.delegations, self.path, self.parent, self.conversation = delegations, path, parent, conversation
        self.key = key
        """What names it among the sub-runs of the thread (`_sub_key`): its conversation's, its output's."""
        self.mark = mark
        """The run's newest event as the sub-run started, if its first checkpoint may carry the
        run's response (`Delegations.carry`); `None`: that response was stored before it started."""
        self.top = top
        """It runs in a call of the top run's own (not of another sub-run's): its end may be folded
        into the top run's next checkpoint (`Delegations.fold`)."""
        self.end: list[ModelMessage] = []
        """Its messages as it ended, once folded (`saving`, `settle`)."""
        self.schemas = ToolSchemas()
        self.base = len(conversation.messages)
        self.new: Callable[[], list[ModelMessage]] = list
        self.responses = 0
        self.owed = False
        """The response calling tools waits for the save of their results (see `before_effect`)."""
        self._effects = asyncio.Lock()
        self.guard = delegations.guard.delegated(path[-1], parent)
        self.events = RunEvents(delegations.out, self.guard, self._part_id)

    def messages(self) -> list[ModelMessage]:
        stored = self.conversation.messages
        return [*stored, *unsaved(stored[self.base :], self.new())]

    async def save(
        self,
        messages: list[ModelMessage],
        *,
        deferred: DeferredToolRequests | None = None,
        output: AlsoWrite | None = None,
    ) -> None:
        """Store the sub-run's conversation as `messages` (with `output` kept, at its end), and the
        events not stored yet up to the first it does not show (a result it does not hold, a call of
        the parent run's own), in one transaction: a checkpoint of the run that leaves the thread's
        own mark (`Checkpoint.event_id`) as it is."""
        delegations, conversation = self.delegations, self.conversation
        self.owed = False
        unchanged = len(messages) == len(conversation.messages) and deferred is None
        if output is None and (
            unchanged
            or (
                self.base == 0
                and deferred is None
                and not any(isinstance(m, ModelResponse) for m in messages)
            )
        ):
            return  # only its prompt: after a crash the parent call runs it again from the prompt
        self.guard.scrub(messages[self.base :])
        carry, mark = delegations.carry, self.mark
        if carry is None or mark is None:
            await self._save(messages, deferred, output, None)
            return
        async with carry(mark) as first:
            await self._save(messages, deferred, output, first)

    async def _save(
        self,
        messages: list[ModelMessage],
        deferred: DeferredToolRequests | None,
        output: AlsoWrite | None,
        first: Saving | None,
    ) -> None:
        """`save`'s transaction, carrying `first` (the run's response calling the delegating tool)."""
        delegations, conversation = self.delegations, self.conversation
        answered = _answered(messages)
        # Carried, the run's response's calls are stored here: their events too.
        calls = set[str]() if first is None else _calls(first.conversation.messages[-1:])
        log = delegations.log
        events = await log.take_through(
            lambda e: (
                (isinstance(e, ToolResult) and e.tool_call_id in answered)
                or (isinstance(e, ToolCall) and e.parent_tool_call_id is None and e.tool_call_id in calls)
            )
        )
        checkpoint = Checkpoint(run=delegations.run, event_id=None, events=new_events(events))
        conversation.messages = messages
        conversation.deferred_tool_requests = deferred
        guard = self.guard

        async def also(connection: AsyncConnection) -> None:
            # Shown text withdrawn: its deltas stored by this checkpoint are blanked in the same
            # transaction (those still held back with a tool result, by the run's next checkpoint).
            if output is not None:
                await output(connection)
            await guard.blank(connection)

        try:
            await delegations.db.conversations.save_with(
                conversation,
                checkpoint=checkpoint,
                also=also if guard.blanking else output,
                scope=delegated_scope(delegations.thread_id),
                first=first,
            )
        except BaseException:
            log.put_back(events)
            raise
        log.stored(events)

    async def drive(
        self,
        ctx: RunContext[Any],
        agent: AbstractAgent[Any, Any],
        prompt: str | None,
        deferred: Any,
        deps: Any,
    ) -> Any:
        delegations = self.delegations
        run_id = f"{ctx.run_id}/{self.key}"
        delegations.paths[run_id] = self.path
        delegations.running[run_id] = self
        hooks = RunHooks(delegations.retries, delegations.failures, self.schemas, self._sending)
        try:
            async with agent.iter(
                prompt,
                message_history=self.conversation.messages or None,
                conversation_id=self.conversation.conversation_id,
                deferred_tool_results=deferred,
                deps=deps,
                usage=ctx.usage,
                usage_limits=ctx.usage_limits,
                run_id=run_id,
                capabilities=[hooks],
            ) as agent_run:
                self.new = agent_run.new_messages
                async for node in agent_run:
                    # Its output guardrails change a response before the sub-run acts on it or stores it.
                    await self.guard.settle(node, self._part_id)
                    if agent.is_call_tools_node(node):
                        said_by(node.model_response, self.path[-1])  # before a checkpoint stores it
                    # A request is stored as it goes out (`_sending`); a final answer waits for the
                    # end's save, and a response calling tools for their results' save, unless a tool
                    # does something keyed by its call first (`Delegations.before_effect`), as the top
                    # run's do.
                    if agent.is_call_tools_node(node) and not answers_last_response(node):
                        self.owed = not self.guard.blanking and calls_only(self._unsaved())
                        if not self.owed:
                            await self.save(self.messages())
                    if agent.is_model_request_node(node):
                        self.responses += 1
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                await self.events.model_event(event)
                    elif agent.is_call_tools_node(node):
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                if isinstance(event, ToolResultEvent):
                                    await self.events.tool_result(event)
                    elif isinstance(node, End):
                        break
            result = agent_run.result
            assert result is not None, "the sub-run ended without a result"
            messages = self.messages()
        except Exception:
            # A step it left unstored (`_sending`) may have results the parent's checkpoint shows.
            await self.save(self.messages())
            raise
        finally:
            delegations.paths.pop(run_id, None)
            delegations.running.pop(run_id, None)
        if isinstance(result.output, DeferredToolRequests):
            requests = result.output
            calls = held_calls(requests, self.schemas.schemas, agent=self.path[-1], path=self.path)
            held = {**requests.metadata, _HELD: {DELEGATED: encode_calls(calls)}}
            await self.save(messages, deferred=replace(requests, metadata=held))
            await delegations.out.flush()
            # The parent call pauses in its turn; its run shows the reviewer these calls, not it.
            raise ApprovalRequired(metadata={DELEGATED: encode_calls(calls)})
        # Ended on a text answer, it needs no output kept: driven again, pydantic-ai takes the output
        # from that stored response, with no model call. Else (an output tool's, say) it is kept.
        kept = None if _ends_in_text(messages) else delegations.keeping(self.key, self.path, result.output)
        fold = delegations.fold
        ended = len(messages) != len(self.conversation.messages)  # else taken up from its stored end
        if kept is None and ended and self.top and fold is not None and not self.guard.blanking:
            self.end = messages
            if fold(self):  # stored by the run's next checkpoint, the one storing this call's result
                return result.output
        await self.save(messages, output=kept)
        return result.output

    def saving(self) -> Saving:
        """Its end, folded (`Delegations.fold`), as a save for the run's checkpoint to carry first."""
        messages, conversation = self.end, self.conversation
        self.guard.scrub(messages[self.base :])
        conversation.messages, conversation.deferred_tool_requests = messages, None
        checkpoint = Checkpoint(run=self.delegations.run, event_id=None)  # its events go with the run's
        return Saving(conversation, checkpoint, scope=delegated_scope(self.delegations.thread_id))

    async def settle(self) -> None:
        """Its end, folded, stored now in a transaction of its own, as if not folded."""
        await self.save(self.end)

    def _unsaved(self) -> list[ModelMessage]:
        return self.messages()[len(self.conversation.messages) :]

    async def before_effect(self) -> None:
        """A tool of this sub-run (or of one it delegated to) is about to do something keyed by its
        call id: the response calling it is stored first, if it waits for its results' save."""
        async with self._effects:  # parallel calls: one save
            if self.owed:
                await self.save(self.messages())

    async def _sending(self) -> None:
        # A step of read-only calls is stored with the sub-run's next checkpoint, as the top run's
        # are: after a crash in between, that step runs again. Its results' events are published
        # by that checkpoint.
        read_only = self.delegations.read_only
        if read_only and calls_only(self._unsaved(), read_only):
            return
        await self.save(self.messages())

    def _part_id(self, index: int) -> str:
        return f"{self.key}.{self.responses}.{index}"


_HELD = "durable_chat_held"
"""The key of a paused sub-run's stored `DeferredToolRequests.metadata` that keeps the calls it held."""


def _undecided(requests: DeferredToolRequests, results: DeferredToolResults) -> bool:
    decided = {*results.approvals, *results.calls}
    return any(call.tool_call_id not in decided for call in [*requests.approvals, *requests.calls])


def _answered(messages: Sequence[ModelMessage]) -> set[str]:
    """The ids of the calls whose results `messages` hold."""
    return {
        part.tool_call_id
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


def _calls(messages: Sequence[ModelMessage]) -> set[str]:
    """The ids of the calls the responses in `messages` make."""
    return {call.tool_call_id for m in messages if isinstance(m, ModelResponse) for call in m.tool_calls}


def _ends_in_text(messages: Sequence[ModelMessage]) -> bool:
    """Whether `messages` end with a response calling no tool: the run's output comes from it alone."""
    return bool(messages) and isinstance(messages[-1], ModelResponse) and not messages[-1].tool_calls


def _output_key(key: str) -> str:
    """The ledger key under which the output of the sub-run `key` (`_sub_key`) is kept once it ended."""
    return f"{key}#delegated"


def _typed(agent: AbstractAgent[Any, Any], stored: object) -> Any:
    """A stored output read back as the agent's output type, when that is one plain type."""
    spec = getattr(agent, "output_type", str)
    if not isinstance(spec, type) or spec is str:
        return stored
    try:
        return TypeAdapter(spec).validate_python(stored)
    except ValueError:
        return stored
