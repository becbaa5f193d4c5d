"""Chains of agents for the delegation tests: each delegates to the next through `scope.delegate`;
the last charges through the ledger, with or without approval. Call ids are prefixed by agent."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, RunContext
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
        ran = self.ran

        @built.tool(requires_approval=self.approval)
        async def charge(ctx: RunContext[RunScope], cents: int) -> str:  # pyright: ignore[reportUnusedFunction]
            """Charge `cents`."""

            async def effect(connection: AsyncConnection) -> str:
                ran[f"charge {name}"] += 1
                return f"{name} charged {cents}"

            return await ctx.deps.ledger.once(ctx, effect)

        return built

    def _delegating(self, built: Agent[RunScope, str], to: Agent[RunScope, str], name: str) -> None:
        ran = self.ran

        async def ask(ctx: RunContext[RunScope], task: str) -> str:
            ran[f"ask {name}"] += 1
            return await ctx.deps.delegate(ctx, to, task, deps=ctx.deps)

        built.tool(ask, name=f"ask_{name}")
