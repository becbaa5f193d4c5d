"""The demo business data (orders, accounts, FAQ answers) and its exactly-once side effects.

`BusinessData.refund` and `BusinessData.cancel` change an order at most once per tool call, whatever
crashes, retries or duplicated decisions occur. The key is `(thread_id, tool_call_id)`, the primary
key of the `tool_executions` ledger, and one transaction holds both the change and its ledger row:

1. Insert the ledger row first (`ON CONFLICT DO NOTHING`). On PostgreSQL a concurrent call with
   the same key blocks on the unique index until the first transaction ends; on SQLite the
   insert takes the database's write lock, so everything after it is serialized. The write must
   come first: in SQLite's default mode a read before it would run outside the transaction.
2. If the row already existed, return the outcome stored in it; the order is not touched.
3. Otherwise lock the order (`FOR UPDATE`; SQLite holds the write lock already), apply the
   business rules, change the order, and store the outcome in the ledger row. A refusal is
   stored too, so a retry gets the same answer even once the order has changed.

A crash before the commit leaves neither the change nor the row; after it, both.

Side effects outside the database (a payment provider, a shipping API) cannot share the
transaction. The pattern for those tools:

1. Read the ledger; if the call has a row, return its stored outcome.
2. Call the external API with an idempotency key derived from the call, such as
   `sha256(f"{thread_id}:{tool_call_id}")`, so the API itself deduplicates retries (Stripe's
   `Idempotency-Key` header, for instance, returns the first answer to a repeated key).
3. Write the ledger row with the API's answer once it has answered (`ON CONFLICT DO NOTHING`,
   then read back what is stored, in case a concurrent retry wrote it first).

A crash between 2 and 3 leaves no row; the retry calls the API again with the same key and gets
the original answer, so the effect still happens once. The API's key retention bounds how late a
retry may come.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, TypeVar

import sqlalchemy as sa
from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from typing_extensions import TypedDict  # pydantic needs this one below Python 3.12

from .engine import insert_new, reader, translate_errors
from .errors import Conflict, CorruptData, NotFound
from .schema import AccountRow, FaqRow, OrderRow, ToolExecutionRow, metadata

__all__ = ("Account", "BusinessData", "CancelOutcome", "FaqAnswer", "Order", "RefundOutcome")

logger = logging.getLogger(__name__)

_orders = metadata.tables[OrderRow.__tablename__]
_accounts = metadata.tables[AccountRow.__tablename__]
_faqs = metadata.tables[FaqRow.__tablename__]
_ledger = metadata.tables[ToolExecutionRow.__tablename__]

ToolName = Literal["issue_refund", "cancel_order"]


def _dollars(cents: int) -> float:
    return round(cents / 100, 2)


def _money(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}${abs(cents) // 100:,}.{abs(cents) % 100:02d}"


@dataclass(frozen=True)
class Order:
    """An order as a tool shows it. Money is integer cents here and dollars in `as_content`."""

    order_id: str
    item: str
    quantity: int
    total_cents: int
    status: str
    """`processing`, `shipped`, `delivered` or `cancelled`."""
    tracking: str | None
    refunded_cents: int

    @property
    def refundable_cents(self) -> int:
        """What a refund may still return: the total less what was refunded."""
        return self.total_cents - self.refunded_cents

    def as_content(self) -> dict[str, object]:
        return {
            "order_id": self.order_id,
            "item": self.item,
            "quantity": self.quantity,
            "total": _dollars(self.total_cents),
            "status": self.status,
            "tracking": self.tracking,
            "refunded": _dollars(self.refunded_cents),
        }


@dataclass(frozen=True)
class Account:
    email: str
    name: str
    plan: str
    member_since: int
    """The year the customer joined."""

    def as_content(self) -> dict[str, object]:
        return {"email": self.email, "name": self.name, "plan": self.plan, "member_since": self.member_since}


@dataclass(frozen=True)
class FaqAnswer:
    topic: str
    answer: str

    def as_content(self) -> dict[str, object]:
        return {"topic": self.topic, "answer": self.answer}


@dataclass(frozen=True)
class RefundOutcome:
    """What `issue_refund` did: the amount refunded, or why it refused (`accepted` false)."""

    order_id: str
    refunded_cents: int
    accepted: bool
    message: str

    def as_content(self) -> dict[str, object]:
        return {
            "order_id": self.order_id,
            "refunded": _dollars(self.refunded_cents),
            "accepted": self.accepted,
            "message": self.message,
        }


@dataclass(frozen=True)
class CancelOutcome:
    """What `cancel_order` did, or why it refused."""

    order_id: str
    cancelled: bool
    message: str

    def as_content(self) -> dict[str, object]:
        return {"order_id": self.order_id, "cancelled": self.cancelled, "message": self.message}


@with_config(ConfigDict(strict=True))
class _RefundContent(TypedDict):
    order_id: str
    refunded: float
    accepted: bool
    message: str


@with_config(ConfigDict(strict=True))
class _CancelContent(TypedDict):
    order_id: str
    cancelled: bool
    message: str


_REFUND_CONTENT = TypeAdapter(_RefundContent)
_CANCEL_CONTENT = TypeAdapter(_CancelContent)
_ANY_CONTENT = TypeAdapter(dict[str, object])
_Outcome = TypeVar("_Outcome", RefundOutcome, CancelOutcome)

_SEED_ORDERS = (
    ("ORD-5678", "Widget Pro", 2, 9998, "shipped", "TRK-111"),
    ("ORD-9012", "Gadget Plus", 1, 14999, "processing", None),
    ("ORD-3456", "Cable Kit", 5, 2495, "delivered", None),
)
_SEED_ACCOUNTS = (
    ("alice@example.com", "Alice Johnson", "Premium", 2022),
    ("bob@example.com", "Bob Smith", "Free", 2024),
)
_SEED_FAQS = {
    "shipping": "Standard shipping takes 3-5 business days and is free on orders over $50. "
    "Express shipping arrives in 1-2 business days for $9.99, and every shipped order gets a "
    "tracking number by e-mail.",
    "returns": "You can return any item within 30 days of delivery for a full refund, as long as it "
    "is unused and in its original packaging. Start a return from your account page; the return "
    "label is free.",
    "warranty": "Every product carries a one-year warranty against manufacturing defects. Premium "
    "members get two years. To make a claim, contact support with your order id and a photo of "
    "the fault.",
}


class BusinessData:
    """The demo shop's orders, accounts and FAQ answers, on the engine of the conversation store."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reader = reader(engine)

    async def seed(self) -> bool:
        """Insert the demo data into each of its tables that is empty; whether anything was inserted.

        Safe to run on every start and from several processes at once: duplicates are skipped.
        """
        now = datetime.now(UTC)
        rows: dict[sa.Table, list[dict[str, object]]] = {
            _orders: [
                {
                    "order_id": order_id,
                    "item": item,
                    "quantity": quantity,
                    "total_cents": total_cents,
                    "status": status,
                    "tracking": tracking,
                    "refunded_cents": 0,
                    "updated_at": now,
                }
                for order_id, item, quantity, total_cents, status, tracking in _SEED_ORDERS
            ],
            _accounts: [
                {"email": email, "name": name, "plan": plan, "member_since": since}
                for email, name, plan, since in _SEED_ACCOUNTS
            ],
            _faqs: [{"topic": topic, "answer": answer} for topic, answer in _SEED_FAQS.items()],
        }
        with translate_errors("seeding the demo business data"):
            async with self._reader.connect() as connection:
                filled = (
                    await connection.execute(sa.select(*(sa.exists().select_from(table) for table in rows)))
                ).one()
            empty = [table for table, has_rows in zip(rows, filled, strict=True) if not has_rows]
            if not empty:
                return False
            inserted = 0
            # Only writes in this transaction, so on SQLite the first statement takes the write lock.
            async with self._engine.begin() as connection:
                for table in empty:
                    key = table.primary_key.columns.values()[0]
                    statement = (
                        insert_new(self._engine.dialect.name, table).values(rows[table]).returning(key)
                    )
                    inserted += len((await connection.execute(statement)).all())
        if inserted:
            logger.info("seeded %d rows of demo business data", inserted)
        return inserted > 0

    async def get_order(self, order_id: str) -> Order | None:
        with translate_errors(f"reading order {order_id!r}"):
            async with self._reader.connect() as connection:
                return await _read_order(connection, _canonical_order_id(order_id))

    async def get_account(self, email: str) -> Account | None:
        """The account with this e-mail address, compared case-insensitively."""
        query = sa.select(_accounts).where(sa.func.lower(_accounts.c.email) == email.strip().lower())
        with translate_errors("reading an account"):
            async with self._reader.connect() as connection:
                row = (await connection.execute(query)).first()
        return None if row is None else Account(row.email, row.name, row.plan, row.member_since)

    async def search_faq(self, query: str) -> list[FaqAnswer]:
        """The answers whose topic a word of `query` names ("ship", "Returned", "warranties"), by topic.

        The FAQ is a handful of rows: they are matched here rather than with a text index.
        """
        words = {_singular(word) for word in re.findall(r"[a-z]+", query.lower())}
        with translate_errors("searching the FAQ"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(sa.select(_faqs).order_by(_faqs.c.topic))).all()
        return [FaqAnswer(row.topic, row.answer) for row in rows if _names_topic(words, row.topic)]

    async def refund(
        self, *, thread_id: str, run_id: str, tool_call_id: str, order_id: str, amount_cents: int, reason: str
    ) -> RefundOutcome:
        """Refund `amount_cents` of an order, once per tool call; a refused refund is an outcome too.

        `reason` is neither stored nor logged: the approval row keeps the call's arguments.

        Raises:
            NotFound: The thread does not exist.
            Conflict: The tool call was recorded for another tool.
        """
        order_id = _canonical_order_id(order_id)

        async def decide(connection: AsyncConnection) -> RefundOutcome:
            order = await _read_order(connection, order_id, lock=True)
            if order is None:
                return RefundOutcome(
                    order_id, 0, False, f"There is no order {order_id}; nothing was refunded."
                )
            if amount_cents <= 0:
                return RefundOutcome(
                    order_id,
                    0,
                    False,
                    f"A refund must be a positive amount; {_money(amount_cents)} was asked for {order_id}.",
                )
            if order.refundable_cents <= 0:
                return RefundOutcome(order_id, 0, False, f"{order_id} was already refunded in full.")
            if amount_cents > order.refundable_cents:
                return RefundOutcome(
                    order_id,
                    0,
                    False,
                    f"{_money(amount_cents)} is more than the {_money(order.refundable_cents)} that remains "
                    f"refundable on {order_id} (total {_money(order.total_cents)}, "
                    f"{_money(order.refunded_cents)} already refunded).",
                )
            await connection.execute(
                _orders.update()
                .where(_orders.c.order_id == order_id)
                .values(refunded_cents=_orders.c.refunded_cents + amount_cents, updated_at=datetime.now(UTC))
            )
            logger.info("refunded %d cents of %s for tool call %s", amount_cents, order_id, tool_call_id)
            return RefundOutcome(
                order_id, amount_cents, True, f"Refunded {_money(amount_cents)} for {order_id}."
            )

        return await self._once(thread_id, run_id, tool_call_id, "issue_refund", decide, _decode_refund)

    async def cancel(
        self, *, thread_id: str, run_id: str, tool_call_id: str, order_id: str, reason: str
    ) -> CancelOutcome:
        """Cancel an order that has not shipped, once per tool call; a refusal is an outcome too.

        Raises:
            NotFound: The thread does not exist.
            Conflict: The tool call was recorded for another tool.
        """
        order_id = _canonical_order_id(order_id)

        async def decide(connection: AsyncConnection) -> CancelOutcome:
            order = await _read_order(connection, order_id, lock=True)
            if order is None:
                return CancelOutcome(order_id, False, f"There is no order {order_id}; nothing was cancelled.")
            match order.status:
                case "delivered":
                    refusal = (
                        f"{order_id} was delivered and can no longer be cancelled; a return is possible."
                    )
                case "shipped":
                    refusal = (
                        f"{order_id} has shipped and can no longer be cancelled; "
                        "a return is possible once it arrives."
                    )
                case "cancelled":
                    refusal = f"{order_id} is already cancelled."
                case _:
                    await connection.execute(
                        _orders.update()
                        .where(_orders.c.order_id == order_id)
                        .values(status="cancelled", updated_at=datetime.now(UTC))
                    )
                    logger.info("cancelled %s for tool call %s", order_id, tool_call_id)
                    return CancelOutcome(order_id, True, f"Cancelled {order_id}.")
            return CancelOutcome(order_id, False, refusal)

        return await self._once(thread_id, run_id, tool_call_id, "cancel_order", decide, _decode_cancel)

    async def _once(
        self,
        thread_id: str,
        run_id: str,
        tool_call_id: str,
        tool_name: ToolName,
        decide: Callable[[AsyncConnection], Awaitable[_Outcome]],
        decode: Callable[[bytes], _Outcome],
    ) -> _Outcome:
        """Run `decide` and record its outcome in one transaction, unless the call has a recorded outcome."""
        key = (_ledger.c.thread_id == thread_id) & (_ledger.c.tool_call_id == tool_call_id)
        claim = (
            insert_new(self._engine.dialect.name, _ledger)
            .values(
                thread_id=thread_id,
                tool_call_id=tool_call_id,
                run_id=run_id,
                tool_name=tool_name,
                result=b"",  # replaced by the outcome before the commit; never visible to others
                created_at=datetime.now(UTC),
            )
            .returning(_ledger.c.tool_call_id)
        )
        with translate_errors(f"{tool_name} for tool call {tool_call_id!r} of thread {thread_id!r}"):
            try:
                async with self._engine.begin() as connection:
                    if (await connection.execute(claim)).first() is None:
                        # Committed by an earlier or concurrent call (this insert waited for it).
                        stored = (
                            await connection.execute(
                                sa.select(_ledger.c.tool_name, _ledger.c.result).where(key)
                            )
                        ).first()
                        if stored is None:
                            raise NotFound(
                                f"thread {thread_id!r} was deleted during tool call {tool_call_id!r}"
                            )
                        if stored.tool_name != tool_name:
                            raise Conflict(
                                f"tool call {tool_call_id!r} of thread {thread_id!r} was recorded for "
                                f"{stored.tool_name!r}, not {tool_name!r}"
                            )
                        return decode(stored.result)
                    outcome = await decide(connection)
                    result = _ANY_CONTENT.dump_json(outcome.as_content())
                    await connection.execute(_ledger.update().where(key).values(result=result))
                    return outcome
            except exc.IntegrityError as error:
                # The ledger's only constraint left to fail is its foreign key to the thread.
                raise NotFound(f"no thread {thread_id!r} to record tool call {tool_call_id!r} in") from error


async def _read_order(connection: AsyncConnection, order_id: str, *, lock: bool = False) -> Order | None:
    query = sa.select(_orders).where(_orders.c.order_id == order_id)
    row = (await connection.execute(query.with_for_update() if lock else query)).first()
    if row is None:
        return None
    return Order(
        row.order_id, row.item, row.quantity, row.total_cents, row.status, row.tracking, row.refunded_cents
    )


def _canonical_order_id(order_id: str) -> str:
    return order_id.strip().upper()


def _singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word.removesuffix("s")


def _names_topic(words: set[str], topic: str) -> bool:
    stem = _singular(topic)
    # "ship" names "shipping", "returned" names "returns"; short words are too ambiguous to prefix.
    return any(
        word == stem or (len(word) >= 4 and (stem.startswith(word) or word.startswith(stem)))
        for word in words
    )


def _decode_refund(result: bytes) -> RefundOutcome:
    try:
        content = _REFUND_CONTENT.validate_json(result)
    except ValidationError as error:
        raise CorruptData(f"a stored issue_refund outcome is unreadable: {error}") from error
    return RefundOutcome(
        content["order_id"], round(content["refunded"] * 100), content["accepted"], content["message"]
    )


def _decode_cancel(result: bytes) -> CancelOutcome:
    try:
        content = _CANCEL_CONTENT.validate_json(result)
    except ValidationError as error:
        raise CorruptData(f"a stored cancel_order outcome is unreadable: {error}") from error
    return CancelOutcome(content["order_id"], content["cancelled"], content["message"])
