"""A travel desk served by durable-chat: a pydantic-ai agent of its own, its tools, its deps.

    python airline.py --port 9100 &            # the airline's booking API (a stand-in)
    durable-chat serve --app travel:app        # from this folder

- `search_flights` asks the airline; `book_flight` needs a person's approval, and books through the
  exactly-once ledger's external pattern: `started` is stored before the airline is called with an
  idempotency key, `succeeded` after, so a crash in between is reported, never silently repeated.
- `issue_voucher` needs approval only over $100 (`ApprovalRequired` raised in the tool); the
  voucher is made once per tool call by the ledger's same-database pattern.
- `save_itinerary` keeps a structured record of the thread.
- The deps factory gives every run the airline's address and the travel agency's account
  (`TRAVEL_AIRLINE_URL`, `TRAVEL_TENANT`) and who the traveller is.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import httpx2
from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, RunContext, Tool
from sqlalchemy.ext.asyncio import AsyncConnection
from travel_model import travel_model

from agent import ChatApp, RunScope


@dataclass(frozen=True)
class TravelDeps:
    airline_url: str
    tenant: str
    traveller: str
    scope: RunScope


class Itinerary(BaseModel):
    traveller: str
    flights: list[str]
    notes: str


async def search_flights(ctx: RunContext[TravelDeps], destination: str) -> dict[str, Any]:
    """Flights from Paris to `destination`, with their departure times and prices."""
    async with httpx2.AsyncClient(base_url=ctx.deps.airline_url) as airline:
        response = await airline.get("/flights", params={"destination": destination})
    response.raise_for_status()
    return response.json()


async def book_flight(ctx: RunContext[TravelDeps], flight_id: str, passenger: str) -> dict[str, Any]:
    """Book a seat on `flight_id` for `passenger`. A person approves every booking."""

    async def book(idempotency_key: str) -> dict[str, Any]:
        async with httpx2.AsyncClient(base_url=ctx.deps.airline_url, timeout=30) as airline:
            response = await airline.post(
                "/bookings",
                json={"flight_id": flight_id, "passenger": passenger},
                headers={"Idempotency-Key": idempotency_key, "X-Tenant": ctx.deps.tenant},
            )
        response.raise_for_status()
        return response.json()

    return await ctx.deps.scope.ledger.external(ctx, book)


async def issue_voucher(ctx: RunContext[TravelDeps], amount: float, reason: str) -> dict[str, Any]:
    """Give the traveller a travel voucher worth `amount` dollars. Over $100 a person approves it."""
    if amount > 100 and not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"why": "vouchers over $100 need a supervisor"})

    async def issue(connection: AsyncConnection) -> dict[str, Any]:
        # A real desk would insert the voucher into its own table on `connection`, in the same
        # transaction as the ledger row; here the ledger row is the voucher's only record.
        code = hashlib.sha256(ctx.deps.scope.ledger.idempotency_key(ctx).encode()).hexdigest()[:8].upper()
        return {"code": f"V-{code}", "amount": amount, "traveller": ctx.deps.traveller}

    return await ctx.deps.scope.ledger.once(ctx, issue)


async def save_itinerary(ctx: RunContext[TravelDeps], flights: list[str], notes: str) -> dict[str, Any]:
    """Save the traveller's itinerary with the thread."""
    ctx.deps.scope.records.save(ctx, Itinerary(traveller=ctx.deps.traveller, flights=flights, notes=notes))
    return {"saved": True, "flights": flights}


travel_agent = Agent(
    travel_model(),
    deps_type=TravelDeps,
    instructions="You are a travel desk. Search before you book; never invent a flight or a price.",
    tools=[search_flights, Tool(book_flight, requires_approval=True), issue_voucher, save_itinerary],
    name="travel-desk",
)


def travel_deps(scope: RunScope) -> TravelDeps:
    return TravelDeps(
        airline_url=os.environ.get("TRAVEL_AIRLINE_URL", "http://127.0.0.1:9100"),
        tenant=os.environ.get("TRAVEL_TENANT", "acme-travel"),
        traveller=scope.user_id,
        scope=scope,
    )


app = ChatApp(
    agent=travel_agent,
    deps=travel_deps,
    name="Travel desk",
    read_only_tools={"search_flights"},  # a search changes nothing: its call is stored with its results
    starter_prompts=["Flights to Lisbon?", "Book TP-101 for Ada Lovelace", "A $150 voucher for the delay"],
)
