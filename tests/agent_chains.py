"""Chains of agents for the delegation tests: each delegates to the next through `scope.delegate`;
the last charges through the ledger, with or without approval. Call ids are prefixed by agent."""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from sqlalchemy.ext.asyncio import AsyncConnection

from agent import ChatApp, RunScope

from .conformance import Reply, Scripted

NAMES = ("travel", "booking", "payments", "bank")


@dataclass
class Chain:
    """`depth` delegations: `NAMES[0]` delegates to `NAMES[1]`, and so on; the last one charges."""

    depth: int
    approval: bool = False
    parallel: bool = False
    """Every agent also calls `charge` itself, in the same response as its delegation (approval
    at every level, decided one by one)."""
    external: bool = False
    """The charge is an external effect (`ledger.external`) rather than one in the database."""
    ran: Counter[str] = field(default_factory=Counter[str])
    scripts: dict[str, Scripted] = field(default_factory=dict[str, Scripted])

    @property
    def names(self) -> tuple[str, ...]:
        return NAMES[: self.depth + 1]

    def app(self) -> ChatApp[RunScope]:
        agents = [self._agent(index) for index in range(self.depth + 1)]
        for index, built in enumerate(agents[:-1]):
            self._delegating(built, agents[index + 1], self.names[index + 1])
        return ChatApp(agent=agents[0], deps=lambda scope: scope)

    def _agent(self, index: int) -> Agent[RunScope, str]:
        name = self.names[index]
        last = index == self.depth
        calls: list[tuple[str, dict[str, Any]]] = []
        if not last:
            calls.append((f"ask_{self.names[index + 1]}", {"task": f"task of {name}"}))
        if last or self.parallel:
            calls.append(("charge", {"cents": 100 * (index + 1)}))
        replies: list[Reply] = [calls, f"{name} done"]
        script = self.scripts[name] = Scripted(replies, prefix=name)
        built = Agent(script.model(), name=name, deps_type=RunScope)
        ran, external = self.ran, self.external

        @built.tool(requires_approval=self.approval)
        async def charge(ctx: RunContext[RunScope], cents: int) -> str:  # pyright: ignore[reportUnusedFunction]
            """Charge `cents`."""

            async def effect(connection: AsyncConnection) -> str:
                ran[f"charge {name}"] += 1
                return f"{name} charged {cents}"

            async def call(idempotency_key: str) -> str:
                ran[f"charge {name}"] += 1
                return f"{name} charged {cents}"

            if external:
                return await ctx.deps.ledger.external(ctx, call)
            return await ctx.deps.ledger.once(ctx, effect)

        return built

    def _delegating(self, built: Agent[RunScope, str], to: Agent[RunScope, str], name: str) -> None:
        ran = self.ran

        async def ask(ctx: RunContext[RunScope], task: str) -> str:
            ran[f"ask {name}"] += 1
            return await ctx.deps.delegate(ctx, to, task, deps=ctx.deps)

        built.tool(name=f"ask_{name}")(ask)


def by_history(name: str, replies: list[Reply]) -> FunctionModel:
    """A model that answers the n-th reply to a history holding n responses: the same after a restart.

    Call ids are `<name>_<n>_<index>`, as `Scripted`'s are.
    """

    def index(messages: list[ModelMessage]) -> int:
        return sum(isinstance(message, ModelResponse) for message in messages)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        n = index(messages)
        reply = replies[n]
        if isinstance(reply, str):
            yield reply
            return
        for i, (tool, args) in enumerate(reply):
            yield {i: DeltaToolCall(name=tool, json_args=json.dumps(args), tool_call_id=f"{name}_{n}_{i}")}

    return FunctionModel(stream_function=stream, model_name="by-history")


def live_app() -> ChatApp[RunScope]:
    """Travel → booking → payments, the charge needing approval, for a real server (`--app`).

    Each charge appends a line to the file `AGENT_CHAIN_EFFECTS` names, once, through the ledger.
    """
    effects = Path(os.environ["AGENT_CHAIN_EFFECTS"])
    names = NAMES[:3]
    agents = {
        name: Agent(
            by_history(
                name,
                [
                    [
                        (
                            f"ask_{names[i + 1]}" if i < 2 else "charge",
                            {"task": "go"} if i < 2 else {"cents": 300},
                        )
                    ],
                    f"{name} done",
                ],
            ),
            name=name,
            deps_type=RunScope,
        )
        for i, name in enumerate(names)
    }

    async def charge(ctx: RunContext[RunScope], cents: int) -> str:
        """Charge `cents`."""

        async def effect(connection: AsyncConnection) -> str:
            _append(effects, f"charged {cents}\n")
            return f"charged {cents}"

        return await ctx.deps.ledger.once(ctx, effect)

    agents["payments"].tool(requires_approval=True)(charge)
    for outer, inner in itertools.pairwise(names):

        def ask(to: str) -> Callable[[RunContext[RunScope], str], Awaitable[str]]:
            async def delegated(ctx: RunContext[RunScope], task: str) -> str:
                return await ctx.deps.delegate(ctx, agents[to], task, deps=ctx.deps)

            return delegated

        agents[outer].tool(name=f"ask_{inner}")(ask(inner))
    return ChatApp(agent=agents["travel"], deps=lambda scope: scope)


def desk_app() -> ChatApp[RunScope]:
    """A router that hands the thread to billing, whose deposit goes billing → booking → payments,
    the charge needing approval, for a real server (`--app`). Each charge appends to `AGENT_CHAIN_EFFECTS`.

    Replies are by the number of responses in the agent's history (a restart answers the same):
    billing's history holds the router's two replies first.
    """
    effects = Path(os.environ["AGENT_CHAIN_EFFECTS"])
    router = Agent(
        by_history("router", [[("transfer_to_billing", {})], "Billing will help you."]),
        name="router",
        deps_type=RunScope,
    )
    billing = Agent(
        by_history("billing", ["", "", [("ask_booking", {"task": "deposit"})], "Your deposit is paid."]),
        name="billing",
        deps_type=RunScope,
    )
    booking = Agent(
        by_history("booking", [[("ask_payments", {"task": "charge"})], "booking done"]),
        name="booking",
        deps_type=RunScope,
    )
    payments = Agent(
        by_history("payments", [[("charge", {"cents": 300})], "payments charged"]),
        name="payments",
        deps_type=RunScope,
    )

    async def charge(ctx: RunContext[RunScope], cents: int) -> str:
        """Charge `cents`."""

        async def effect(connection: AsyncConnection) -> str:
            _append(effects, f"charged {cents}\n")
            return f"charged {cents}"

        return await ctx.deps.ledger.once(ctx, effect)

    payments.tool(requires_approval=True)(charge)

    async def ask_booking(ctx: RunContext[RunScope], task: str) -> str:
        return await ctx.deps.delegate(ctx, booking, task, deps=ctx.deps)

    async def ask_payments(ctx: RunContext[RunScope], task: str) -> str:
        return await ctx.deps.delegate(ctx, payments, task, deps=ctx.deps)

    billing.tool(ask_booking)
    booking.tool(ask_payments)
    return ChatApp(agent=router, deps=lambda scope: scope, handoffs=[billing])


def _append(path: Path, text: str) -> None:
    with path.open("a") as file:
        file.write(text)
