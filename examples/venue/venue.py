"""Harbour Hall's events desk: several agents served as one app by durable-chat.

A `desk` agent hands the conversation to a specialist (`intake`, `dates`, `rooms`, `offers`), which
answers the thread's next turns until it hands it on. The `rooms` agent holds a room by delegating
the deposit to a `payments` agent (`scope.delegate`), whose `charge_deposit` needs a person's
approval: the whole run pauses, durably, until someone decides. Every agent runs on an offline
scripted model (`venue_model.py`); pass `--model` to use a provider's for all of them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, RunContext, Tool
from venue_model import venue_model

from agent import ChatApp, RunScope

__all__ = ("ROOMS", "app", "payments")

ROOMS: dict[str, float] = {"Garden Room": 1200.0, "Ballroom": 4000.0, "Loft": 800.0}
"""The rooms and their price for a day."""
BOOKED: frozenset[tuple[str, str]] = frozenset({("Ballroom", "2027-06-12")})
"""Rooms already taken, by room and date."""
DEPOSIT_SHARE = 0.25


class EventBrief(BaseModel):
    """What the intake agent noted about the event."""

    kind: str
    guests: int


def _agent(name: str, instructions: str, tools: list[Tool[RunScope]]) -> Agent[RunScope, str]:
    return Agent(venue_model(name), name=name, deps_type=RunScope, instructions=instructions, tools=tools)


async def charge_deposit(ctx: RunContext[RunScope], amount: float, reference: str) -> dict[str, Any]:
    """Charge the client's deposit of `amount` dollars for the hold `reference`."""

    async def charge(idempotency_key: str) -> dict[str, Any]:
        return _journal_charge(idempotency_key, amount, reference)

    return await ctx.deps.ledger.external(ctx, charge)


payments = _agent(
    "payments",
    "You take deposits for held rooms. Charge exactly the deposit you are asked for.",
    [Tool(charge_deposit, requires_approval=True)],
)


async def record_event(ctx: RunContext[RunScope], kind: str, guests: int) -> dict[str, Any]:
    """Note the kind of event and the number of guests."""
    brief = EventBrief(kind=kind, guests=guests)
    ctx.deps.records.save(ctx, brief)
    return brief.model_dump()


async def check_date(date: str) -> dict[str, Any]:
    """The rooms free on `date` (YYYY-MM-DD)."""
    return {"date": date, "free": [room for room in ROOMS if (room, date) not in BOOKED]}


async def hold_room(ctx: RunContext[RunScope], room: str, date: str) -> dict[str, Any] | str:
    """Hold `room` on `date`; the payments desk takes a deposit first."""
    if room not in ROOMS:
        return f"There is no room called {room!r}: we have {', '.join(ROOMS)}."
    if (room, date) in BOOKED:
        return f"The {room} is taken on {date}."
    deposit = ROOMS[room] * DEPOSIT_SHARE
    # The reference names this call, so two holds of one room never share a payment.
    reference = f"{room.replace(' ', '').upper()}-{date}-{hashlib.sha256(str(ctx.tool_call_id).encode()).hexdigest()[:6]}"
    task = f"Take a deposit of ${deposit:.2f} for {reference}"
    payment = await ctx.deps.delegate(ctx, payments, task, deps=ctx.deps)
    return {"room": room, "date": date, "reference": reference, "payment": payment}


async def quote(guests: int) -> dict[str, Any]:
    """Our packages for `guests` guests, with their prices."""
    return {
        "guests": guests,
        "packages": [
            {"name": "Essentials", "price": 45.0 * guests},
            {"name": "Celebration", "price": 70.0 * guests},
        ],
    }


desk = _agent("desk", "You greet clients of Harbour Hall and pass them to the right desk.", [])
intake = _agent("intake", "You note the client's event: its kind and number of guests.", [Tool(record_event)])
dates = _agent("dates", "You say which rooms are free on a date.", [Tool(check_date)])
rooms = _agent("rooms", "You hold rooms; the payments desk takes the deposit.", [Tool(hold_room)])
offers = _agent("offers", "You quote our packages for the number of guests.", [Tool(quote)])


def venue_deps(scope: RunScope) -> RunScope:
    return scope


app = ChatApp(
    agent=desk,
    handoffs=[intake, dates, rooms, offers],
    deps=venue_deps,
    name="Harbour Hall events desk",
    read_only_tools={"check_date", "quote"},
    starter_prompts=[
        "We're planning a wedding for 80 guests",
        "Is 2027-06-12 free?",
        "Hold the Garden Room on 2027-06-12",
    ],
)


def _journal_charge(idempotency_key: str, amount: float, reference: str) -> dict[str, Any]:
    """The payment provider's stand-in: a journal file that charges once per idempotency key."""
    journal = Path(os.environ.get("VENUE_DEPOSITS", "deposits.jsonl"))
    charged = [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []
    for entry in charged:
        if entry["idempotency_key"] == idempotency_key:
            return entry["receipt"]
    receipt = {"receipt": f"DEP-{len(charged) + 1:04d}", "amount": amount, "reference": reference}
    with journal.open("a") as file:
        file.write(json.dumps({"idempotency_key": idempotency_key, "receipt": receipt}) + "\n")
    return receipt
