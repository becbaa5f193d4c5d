"""Delegation: another agent run as a sub-run of a tool call, as durable as the run around it.

`RunScope.delegate(ctx, agent, prompt)` drives the agent through the machinery of the top run (its
hooks, timeouts, retries, the pause at deferred calls), streams its events tagged with its name and
the parent call, and checkpoints its messages after every node as a conversation of its own, kept
with the thread (`{thread_id}/{parent_tool_call_id}`, scope `store.delegated_scope`). A sub-run that
pauses raises `ApprovalRequired` carrying its pending calls, so its parent pauses too, all the way
up; the decisions resume the innermost agent from storage when the parent call runs again. The
design note is "Several agents" in `docs/agent.md`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.conversation import Conversation
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import (
    ModelMessage,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolResultEvent,
)
from pydantic_core import to_jsonable_python
from pydantic_graph import End
from sqlalchemy.ext.asyncio import AsyncConnection

from store import Database, delegated_scope
from stream import Sink, StreamEvent, TextDelta, TextDone, ToolCall, ToolResult

from .approvals import DELEGATED, call_args, encode_calls, held_calls, stored_decisions
from .arguments import ToolSchemas
from .handoffs import said_by
from .merge import unsaved
from .pauses import PAUSE_AT_DEFERRED_CALLS
from .records import call_id
from .retries import ModelRetries
from .run_hooks import RunHooks
from .tool_failures import ToolFailures

__all__ = ("DELEGATED", "Delegations", "sub_conversation_id")

logger = logging.getLogger(__name__)


def sub_conversation_id(thread_id: str, parent_tool_call_id: str) -> str:
    """The id of the conversation a delegated agent had inside the tool call `parent_tool_call_id`."""
    return f"{thread_id}/{parent_tool_call_id}"


@dataclass
class Delegations:
    """The delegations of one run's attempt: what their sub-runs share with the run, and who runs where."""

    db: Database
    out: Sink
    thread_id: str
    run_id: str
    root: str
    """The name of the agent the run drives."""
    retries: ModelRetries
    failures: ToolFailures
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict[str, "tuple[str, ...]"])
    """The chain of agents of each agent run going on, by its pydantic-ai run id."""
    before: Callable[[], Awaitable[None]] | None = None
    """Awaited before a sub-run starts: the step stores the response calling its tool first (the
    sub-run's conversation and output are keyed by that call)."""

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
        parent = call_id(ctx)
        if self.before is not None:
            await self.before()
        path = (*self.paths.get(ctx.run_id or "", (self.root,)), name or agent.name or "agent")
        done = await self.db.ledger.get(self.thread_id, _output_key(parent))
        if done is not None and done.status == "succeeded":
            logger.info("the sub-run of tool call %s ended before; its stored output is used", parent)
            return _typed(agent, done.result)
        conversation_id = sub_conversation_id(self.thread_id, parent)
        conversation = await self.db.conversations.load(conversation_id)
        if conversation is None:
            conversation = Conversation(conversation_id=conversation_id)
        requests = conversation.deferred_tool_requests
        deferred = None if requests is None else await stored_decisions(self.db, self.thread_id, requests)
        if requests is not None and deferred is not None and _undecided(requests, deferred):
            # Paused before its parent did (the run stopped in between): it still waits, as it was.
            raise ApprovalRequired(metadata={DELEGATED: requests.metadata[_HELD][DELEGATED]})
        sub = _SubRun(self, path, parent, conversation)
        output = await sub.drive(ctx, agent, None if conversation.messages else prompt, deferred, deps)
        await self.db.ledger.once(
            self.thread_id,
            _output_key(parent),
            run_id=self.run_id,
            tool_name=f"delegate:{path[-1]}",
            effect=_returning(to_jsonable_python(output, fallback=str)),
        )
        return output


class _SubRun:
    """One delegated agent run: driven node by node, checkpointed as it goes, streamed with its tags."""

    def __init__(
        self, delegations: Delegations, path: tuple[str, ...], parent: str, conversation: Conversation
    ) -> None:
        self.delegations, self.path, self.parent, self.conversation = delegations, path, parent, conversation
        self.schemas = ToolSchemas()
        self.base = len(conversation.messages)
        self.new: Callable[[], list[ModelMessage]] = list
        self.responses = 0

    def messages(self) -> list[ModelMessage]:
        stored = self.conversation.messages
        return [*stored, *unsaved(stored[self.base :], self.new())]

    async def save(
        self, messages: list[ModelMessage], *, deferred: DeferredToolRequests | None = None
    ) -> None:
        conversation = self.conversation
        if len(messages) == len(conversation.messages) and deferred is None:
            return
        conversation.messages = messages
        conversation.deferred_tool_requests = deferred
        await self.delegations.db.conversations.save(
            conversation, scope=delegated_scope(self.delegations.thread_id)
        )
        await self.delegations.out.flush()

    async def drive(
        self,
        ctx: RunContext[Any],
        agent: AbstractAgent[Any, Any],
        prompt: str | None,
        deferred: Any,
        deps: Any,
    ) -> Any:
        delegations = self.delegations
        run_id = f"{ctx.run_id}/{self.parent}"
        delegations.paths[run_id] = self.path
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
                capabilities=[hooks, PAUSE_AT_DEFERRED_CALLS],
            ) as agent_run:
                self.new = agent_run.new_messages
                async for node in agent_run:
                    if agent.is_call_tools_node(node):
                        said_by(node.model_response, self.path[-1])  # before a checkpoint stores it
                    if not isinstance(node, End):
                        await self.save(self.messages())
                    if agent.is_model_request_node(node):
                        self.responses += 1
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                await self._on_model_event(event)
                    elif agent.is_call_tools_node(node):
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                if isinstance(event, ToolResultEvent):
                                    await self._on_tool_result(event)
                    elif isinstance(node, End):
                        break
            result = agent_run.result
            assert result is not None, "the sub-run ended without a result"
            messages = self.messages()
        finally:
            delegations.paths.pop(run_id, None)
        if isinstance(result.output, DeferredToolRequests):
            requests = result.output
            calls = held_calls(requests, self.schemas.schemas, agent=self.path[-1], path=self.path)
            held = {**requests.metadata, _HELD: {DELEGATED: encode_calls(calls)}}
            await self.save(messages, deferred=replace(requests, metadata=held))
            # The parent call pauses in its turn; its run shows the reviewer these calls, not it.
            raise ApprovalRequired(metadata={DELEGATED: encode_calls(calls)})
        await self.save(messages)
        return result.output

    async def _sending(self) -> None:
        await self.save(self.messages())

    async def _emit(self, event: StreamEvent) -> None:
        await self.delegations.out.emit(event)

    def _tags(self) -> dict[str, Any]:
        return {"run_id": self.delegations.run_id, "agent": self.path[-1], "parent_tool_call_id": self.parent}

    def _part_id(self, index: int) -> str:
        return f"{self.parent}.{self.responses}.{index}"

    async def _on_model_event(self, event: object) -> None:
        match event:
            case PartStartEvent(index=index, part=TextPart(content=content)) if content:
                await self._emit(TextDelta(**self._tags(), part_id=self._part_id(index), delta=content))
            case PartDeltaEvent(index=index, delta=TextPartDelta(content_delta=delta)) if delta:
                await self._emit(TextDelta(**self._tags(), part_id=self._part_id(index), delta=delta))
            case PartEndEvent(index=index, part=TextPart(content=content)):
                await self._emit(TextDone(**self._tags(), part_id=self._part_id(index), text=content))
            case PartEndEvent(part=ToolCallPart() as call):
                await self._emit(
                    ToolCall(
                        **self._tags(),
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        args=call_args(call),
                    )
                )
            case _:
                pass

    async def _on_tool_result(self, event: ToolResultEvent) -> None:
        part = event.part
        outcome = (
            "success" if part.outcome == "success" else "denied" if part.outcome == "denied" else "failed"
        )
        await self._emit(
            ToolResult(
                **self._tags(),
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                outcome=outcome,
                content=to_jsonable_python(part.content, fallback=str),
            )
        )


_HELD = "durable_chat_held"
"""The key of a paused sub-run's stored `DeferredToolRequests.metadata` that keeps the calls it held."""


def _undecided(requests: DeferredToolRequests, results: DeferredToolResults) -> bool:
    decided = {*results.approvals, *results.calls}
    return any(call.tool_call_id not in decided for call in [*requests.approvals, *requests.calls])


def _output_key(parent: str) -> str:
    """The ledger key under which a sub-run's output is kept once it ended."""
    return f"{parent}#delegated"


def _returning(value: object) -> Callable[[AsyncConnection], Awaitable[object]]:
    async def effect(connection: AsyncConnection) -> object:
        return value

    return effect


def _typed(agent: AbstractAgent[Any, Any], stored: object) -> Any:
    """A stored output read back as the agent's output type, when that is one plain type."""
    spec = getattr(agent, "output_type", str)
    if not isinstance(spec, type) or spec is str:
        return stored
    try:
        return TypeAdapter(spec).validate_python(stored)
    except ValueError:
        return stored
