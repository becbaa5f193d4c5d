"""A small app of the core tests' own, on a scripted model: not the demo shop, whose wording may change.

Its tools cover every approval policy pydantic-ai has and both ledger patterns:

- `lookup` answers from the deps (the tenant the deps factory set);
- `transfer` needs approval (`requires_approval=True`) and moves money in a table of the app's own,
  in one transaction with its ledger row (`scope.ledger.once`);
- `refund` needs approval only over 100 (`ApprovalRequired` raised in the tool);
- `purge` comes from a toolset wrapped with `approval_required()`;
- `book` calls an external API (`scope.ledger.external`), a fake that counts calls per idempotency
  key and can be made to fail or to hang;
- `note` saves a structured record of the thread (`scope.records.save`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import sqlalchemy as sa
from pydantic import BaseModel, Field
from pydantic_ai import Agent, ApprovalRequired, FunctionToolset, RunContext, Tool
from sqlalchemy.ext.asyncio import AsyncConnection

from agent import AppContext, ChatApp, RunScope

from .scripted import Script

__all__ = ("TRANSFERS", "CoreDeps", "FakeApi", "Note", "balance", "core_app", "core_tables")

core_tables = sa.MetaData()
TRANSFERS = sa.Table(
    "core_test_transfers",
    core_tables,
    sa.Column("tool_call_id", sa.String(255), primary_key=True),
    sa.Column("to", sa.String(64), nullable=False),
    sa.Column("cents", sa.Integer(), nullable=False),
)


class Note(BaseModel):
    title: str
    body: str


@dataclass
class FakeApi:
    """An external API that deduplicates by idempotency key, as Stripe's does."""

    calls: list[str] = field(default_factory=list[str])
    """The idempotency key of every call, repeats included."""
    done: dict[str, dict[str, object]] = field(default_factory=dict[str, dict[str, object]])
    fail: bool = False
    hang: asyncio.Event | None = None
    """While set to an unset event, a call records its booking, then waits for the event."""
    called: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the first call."""

    async def book(self, item: str, key: str) -> dict[str, object]:
        self.calls.append(key)
        self.called.set()
        if self.fail:
            raise ConnectionError("the booking service is down")
        if key not in self.done:
            self.done[key] = {"item": item, "ref": f"R{len(self.done) + 1}"}
        if self.hang is not None:
            await self.hang.wait()
        return self.done[key]


@dataclass(frozen=True)
class CoreDeps:
    scope: RunScope
    tenant: str
    api: FakeApi


async def lookup(ctx: RunContext[CoreDeps], key: str) -> str:
    """Look `key` up."""
    return f"{key} for {ctx.deps.tenant} (user {ctx.deps.scope.user_id})"


async def transfer(
    ctx: RunContext[CoreDeps], to: str, amount: Annotated[float, Field(gt=0, le=10_000)]
) -> dict[str, Any]:
    """Send `amount` to `to`."""

    async def move(connection: AsyncConnection) -> dict[str, Any]:
        cents = round(amount * 100)
        await connection.execute(TRANSFERS.insert().values(tool_call_id=ctx.tool_call_id, to=to, cents=cents))
        return {"sent": amount, "to": to}

    return await ctx.deps.scope.ledger.once(ctx, move)


async def refund(ctx: RunContext[CoreDeps], amount: float) -> dict[str, Any]:
    """Refund `amount`; over 100 a person approves it."""
    if amount > 100 and not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"why": "over 100"})
    return {"refunded": amount}


async def book(ctx: RunContext[CoreDeps], item: str) -> dict[str, Any]:
    """Book `item` with the external service."""
    return await ctx.deps.scope.ledger.external(ctx, lambda key: ctx.deps.api.book(item, key))


async def note(ctx: RunContext[CoreDeps], title: str, body: str) -> str:
    """Keep a note with the thread."""
    ctx.deps.scope.records.save(ctx, Note(title=title, body=body))
    return "noted"


def purge(ctx: RunContext[CoreDeps], what: str) -> str:
    """Purge `what`."""
    return f"purged {what}"


async def _setup(context: AppContext) -> None:
    async with context.engine.begin() as connection:
        await connection.run_sync(core_tables.create_all)  # a test app's table: create_all is for tests


def core_app(
    script: Script,
    *,
    api: FakeApi | None = None,
    tenant: str = "acme",
    output_type: Any = str,
    built: list[RunScope] | None = None,
    **options: Any,
) -> ChatApp[CoreDeps]:
    """The core test app on `script`; `built` collects the scope of every deps the factory built."""
    fake = FakeApi() if api is None else api

    async def deps(scope: RunScope) -> CoreDeps:
        if built is not None:
            built.append(scope)
        return CoreDeps(scope=scope, tenant=tenant, api=fake)

    agent = Agent(
        script.model(),
        deps_type=CoreDeps,
        output_type=output_type,
        instructions="You are a test assistant.",
        tools=[lookup, Tool(transfer, requires_approval=True), refund, book, note],
        toolsets=[FunctionToolset([purge]).approval_required()],
        name="core",
    )
    return ChatApp(agent=agent, deps=deps, setup=_setup, **options)


async def balance(connection_source: Callable[[], Any], to: str) -> int:
    """Cents transferred to `to`."""
    async with connection_source() as connection:
        query = sa.select(sa.func.coalesce(sa.func.sum(TRANSFERS.c.cents), 0)).where(TRANSFERS.c.to == to)
        return int((await connection.execute(query)).scalar_one())
