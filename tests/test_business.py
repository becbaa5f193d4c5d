"""The demo shop's business data: seeding, lookups, and refunds and cancellations that happen once per
tool call, through the generic ledger (`store.Ledger.once`) as the shop's tools run them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from dirty_equals import IsDatetime
from inline_snapshot import snapshot

from agent import AppContext
from agent.demo import BusinessData, CancelOutcome, RefundOutcome
from agent.demo.app import MIGRATIONS, VERSION_TABLE
from agent.demo.business import cancel_in, refund_in
from agent.demo.tables import accounts as _accounts
from agent.demo.tables import faqs as _faqs
from agent.demo.tables import orders as _orders
from store import Conflict, Ledger, NotFound, SqlConversationStore
from store.schema import metadata

pytestmark = pytest.mark.anyio

_ledger = metadata.tables["tool_executions"]
_threads = metadata.tables["threads"]


async def prepare(database_url: str) -> None:
    """Create the schema, seed the demo data and create the thread `t1` the ledger rows belong to."""
    async with opened(database_url) as business:
        assert await business.seed() is True
    async with await SqlConversationStore.connect(database_url) as store:
        await add_thread(store, "t1")


@asynccontextmanager
async def opened(database_url: str) -> AsyncGenerator[BusinessData]:
    """Business data on a store of its own (its own engine and pool), as another process would have;
    the shop's tables are created (its migrations) on first use."""
    async with await SqlConversationStore.connect(database_url) as store:
        await AppContext(store.engine).migrate(MIGRATIONS, version_table=VERSION_TABLE)
        yield BusinessData(store.engine)


@asynccontextmanager
async def prepared(database_url: str) -> AsyncGenerator[BusinessData]:
    await prepare(database_url)
    async with opened(database_url) as business:
        yield business


async def add_thread(store: SqlConversationStore, thread_id: str) -> None:
    now = datetime.now(UTC)
    async with store.engine.begin() as connection:
        await connection.execute(
            _threads.insert().values(
                thread_id=thread_id,
                user_id="alice",
                title="Help",
                status="idle",
                created_at=now,
                updated_at=now,
                last_event_id=0,
                checkpoint_event_id=0,
            )
        )


async def ledger(database_url: str) -> list[dict[str, object]]:
    async with (
        await SqlConversationStore.connect(database_url, migrate=False) as store,
        store.engine.connect() as connection,
    ):
        rows = await connection.execute(
            sa.select(_ledger).order_by(_ledger.c.thread_id, _ledger.c.tool_call_id)
        )
        return [
            {**row, "result": None if row["result"] is None else json.loads(row["result"])}
            for row in rows.mappings()
        ]


async def refunded_cents(business: BusinessData, order_id: str = "ORD-5678") -> int:
    order = await business.get_order(order_id)
    assert order is not None
    return order.refunded_cents


async def refund(
    business: BusinessData,
    order_id: str,
    amount_cents: int,
    tool_call_id: str = "call-1",
    *,
    thread_id: str = "t1",
) -> RefundOutcome:
    """A refund as `issue_refund` makes it: once per tool call, the stored outcome answered again."""
    done, earlier = await Ledger(business.engine).once(
        thread_id,
        tool_call_id,
        run_id="run-1",
        tool_name="issue_refund",
        effect=lambda connection: refund_in(
            connection, order_id=order_id, amount_cents=amount_cents, tool_call_id=tool_call_id
        ),
        encode=RefundOutcome.as_content,
    )
    if done is not None:
        return done
    assert earlier is not None
    stored = dict(earlier.result)  # pyright: ignore[reportArgumentType, reportCallIssue]
    return RefundOutcome(
        stored["order_id"], round(stored["refunded"] * 100), stored["accepted"], stored["message"]
    )


async def cancel(business: BusinessData, order_id: str, tool_call_id: str = "call-1") -> CancelOutcome:
    """A cancellation as `cancel_order` makes it: once per tool call."""
    done, earlier = await Ledger(business.engine).once(
        "t1",
        tool_call_id,
        run_id="run-1",
        tool_name="cancel_order",
        effect=lambda connection: cancel_in(connection, order_id=order_id, tool_call_id=tool_call_id),
        encode=CancelOutcome.as_content,
    )
    if done is not None:
        return done
    assert earlier is not None
    stored = dict(earlier.result)  # pyright: ignore[reportArgumentType, reportCallIssue]
    return CancelOutcome(stored["order_id"], stored["cancelled"], stored["message"])


# -- seeding and lookups -------------------------------------------------------------------------


async def test_seed_inserts_the_demo_data_once(database_url: str) -> None:
    async with opened(database_url) as business:
        assert await business.get_order("ORD-5678") is None
        assert await business.seed() is True
        assert await business.seed() is False
        assert await business.get_order("ORD-5678") is not None


async def test_seed_leaves_changed_data_alone(database_url: str) -> None:
    async with prepared(database_url) as business:
        await refund(business, "ORD-5678", 1000)
        await cancel(business, "ORD-9012", "call-2")
        assert await business.seed() is False
        order = await business.get_order("ORD-9012")
        assert order is not None
        assert order.status == "cancelled"
        assert await refunded_cents(business) == 1000


async def test_concurrent_seeds_insert_once(database_url: str) -> None:
    async with AsyncExitStack() as stack:
        businesses = [await stack.enter_async_context(opened(database_url)) for _ in range(5)]
        results = await asyncio.gather(*(business.seed() for business in businesses))
        assert sorted(results) == [False, False, False, False, True]
        async with businesses[0].engine.connect() as connection:
            counts = [
                (await connection.execute(sa.select(sa.func.count()).select_from(table))).scalar()
                for table in (_orders, _accounts, _faqs)
            ]
        assert counts == [3, 2, 3]


async def test_get_order(database_url: str) -> None:
    async with prepared(database_url) as business:
        orders = [await business.get_order(order_id) for order_id in ("ORD-5678", "ord-9012 ", "ORD-3456")]
        assert [order.as_content() for order in orders if order is not None] == snapshot(
            [
                {
                    "order_id": "ORD-5678",
                    "item": "Widget Pro",
                    "quantity": 2,
                    "total": 99.98,
                    "status": "shipped",
                    "tracking": "TRK-111",
                    "refunded": 0.0,
                },
                {
                    "order_id": "ORD-9012",
                    "item": "Gadget Plus",
                    "quantity": 1,
                    "total": 149.99,
                    "status": "processing",
                    "tracking": None,
                    "refunded": 0.0,
                },
                {
                    "order_id": "ORD-3456",
                    "item": "Cable Kit",
                    "quantity": 5,
                    "total": 24.95,
                    "status": "delivered",
                    "tracking": None,
                    "refunded": 0.0,
                },
            ]
        )
        assert await business.get_order("ORD-0000") is None


async def test_get_account_ignores_case(database_url: str) -> None:
    async with prepared(database_url) as business:
        alice = await business.get_account("Alice@Example.COM")
        assert alice is not None
        assert alice.as_content() == snapshot(
            {"email": "alice@example.com", "name": "Alice Johnson", "plan": "Premium", "member_since": 2022}
        )
        bob = await business.get_account("bob@example.com")
        assert bob is not None
        assert (bob.name, bob.plan, bob.member_since) == ("Bob Smith", "Free", 2024)
        assert await business.get_account("carol@example.com") is None


@pytest.mark.parametrize(
    ("query", "topics"),
    [
        ("How long does shipping take?", ["shipping"]),
        ("when will it SHIP", ["shipping"]),
        ("What is your Returns policy?", ["returns"]),
        ("can this be returned", ["returns"]),
        ("warranties and returns", ["returns", "warranty"]),
        ("hello there", []),
        ("", []),
    ],
)
async def test_search_faq(database_url: str, query: str, topics: list[str]) -> None:
    async with prepared(database_url) as business:
        answers = await business.search_faq(query)
        assert [answer.topic for answer in answers] == topics
        assert all(answer.as_content()["answer"] for answer in answers)


# -- refunds ------------------------------------------------------------------------------------


async def test_refund_changes_the_order_and_writes_the_ledger(database_url: str) -> None:
    async with prepared(database_url) as business:
        outcome = await refund(business, "ORD-5678", 9998)
        assert outcome.as_content() == snapshot(
            {
                "order_id": "ORD-5678",
                "refunded": 99.98,
                "accepted": True,
                "message": "Refunded $99.98 for ORD-5678.",
            }
        )
        assert await refunded_cents(business) == 9998
        assert await ledger(database_url) == [
            {
                "thread_id": "t1",
                "tool_call_id": "call-1",
                "run_id": "run-1",
                "tool_name": "issue_refund",
                "status": "succeeded",
                "result": outcome.as_content(),
                "error": None,
                "attempts": 1,
                "created_at": IsDatetime(),
                "updated_at": IsDatetime(),
            }
        ]


async def test_the_same_tool_call_again_returns_the_stored_outcome(database_url: str) -> None:
    async with prepared(database_url) as business:
        first = await refund(business, "ORD-5678", 5000)
        # A retry after a crash, or a duplicated decision, even with other arguments: nothing changes.
        again = await refund(business, "ORD-5678", 5000)
        edited = await refund(business, "ORD-9012", 100)
        assert (
            first == again == edited == RefundOutcome("ORD-5678", 5000, True, "Refunded $50.00 for ORD-5678.")
        )
        assert await refunded_cents(business) == 5000
        assert await refunded_cents(business, "ORD-9012") == 0
        assert len(await ledger(database_url)) == 1


async def test_concurrent_identical_refunds_refund_once(database_url: str) -> None:
    async with AsyncExitStack() as stack:
        await prepare(database_url)
        businesses = [await stack.enter_async_context(opened(database_url)) for _ in range(20)]
        outcomes = await asyncio.gather(*(refund(business, "ORD-5678", 2500) for business in businesses))
        assert set(outcomes) == {RefundOutcome("ORD-5678", 2500, True, "Refunded $25.00 for ORD-5678.")}
        assert await refunded_cents(businesses[0]) == 2500
        assert len(await ledger(database_url)) == 1


async def test_concurrent_refunds_of_different_calls_never_exceed_the_total(database_url: str) -> None:
    async with AsyncExitStack() as stack:
        await prepare(database_url)
        businesses = [await stack.enter_async_context(opened(database_url)) for _ in range(5)]
        outcomes = await asyncio.gather(
            *(refund(business, "ORD-5678", 9998, f"call-{i}") for i, business in enumerate(businesses))
        )
        assert sorted(outcome.message for outcome in outcomes) == [
            "ORD-5678 was already refunded in full.",
            "ORD-5678 was already refunded in full.",
            "ORD-5678 was already refunded in full.",
            "ORD-5678 was already refunded in full.",
            "Refunded $99.98 for ORD-5678.",
        ]
        assert await refunded_cents(businesses[0]) == 9998


@pytest.mark.parametrize(
    ("order_id", "amount_cents", "message"),
    [
        ("ORD-0000", 100, "There is no order ORD-0000; nothing was refunded."),
        ("ORD-5678", 0, "A refund must be a positive amount; $0.00 was asked for ORD-5678."),
        ("ORD-5678", -500, "A refund must be a positive amount; -$5.00 was asked for ORD-5678."),
        (
            "ORD-5678",
            9999,
            "$99.99 is more than the $99.98 that remains refundable on ORD-5678 (total $99.98, $0.00 already refunded).",
        ),
    ],
)
async def test_refusals_are_recorded(
    database_url: str, order_id: str, amount_cents: int, message: str
) -> None:
    async with prepared(database_url) as business:
        outcome = await refund(business, order_id, amount_cents)
        assert outcome == RefundOutcome(order_id, 0, False, message)
        assert outcome.as_content()["refunded"] == 0.0
        assert await refunded_cents(business) == 0
        # The retry gets the same refusal, not a second try.
        assert await refund(business, "ORD-5678", 100) == outcome
        assert [row["result"] for row in await ledger(database_url)] == [outcome.as_content()]


async def test_refunds_stop_at_the_total(database_url: str) -> None:
    async with prepared(database_url) as business:
        assert (await refund(business, "ORD-5678", 6000, "call-1")).accepted
        over = await refund(business, "ORD-5678", 4000, "call-2")
        assert over.message == (
            "$40.00 is more than the $39.98 that remains refundable on ORD-5678 (total $99.98, $60.00 already refunded)."
        )
        assert (await refund(business, "ORD-5678", 3998, "call-3")).message == "Refunded $39.98 for ORD-5678."
        full = await refund(business, "ORD-5678", 1, "call-4")
        assert full == RefundOutcome("ORD-5678", 0, False, "ORD-5678 was already refunded in full.")
        assert await refunded_cents(business) == 9998


# -- cancellations ------------------------------------------------------------------------------


async def test_cancel_a_processing_order(database_url: str) -> None:
    async with prepared(database_url) as business:
        outcome = await cancel(business, "ORD-9012")
        assert outcome.as_content() == snapshot(
            {"order_id": "ORD-9012", "cancelled": True, "message": "Cancelled ORD-9012."}
        )
        assert await cancel(business, "ORD-9012") == outcome
        order = await business.get_order("ORD-9012")
        assert order is not None
        assert order.status == "cancelled"
        assert await ledger(database_url) == [
            {
                "thread_id": "t1",
                "tool_call_id": "call-1",
                "run_id": "run-1",
                "tool_name": "cancel_order",
                "status": "succeeded",
                "result": outcome.as_content(),
                "error": None,
                "attempts": 1,
                "created_at": IsDatetime(),
                "updated_at": IsDatetime(),
            }
        ]
        # A cancelled order can still be refunded.
        refunded = await refund(business, "ORD-9012", 14999, "call-2")
        assert refunded.message == "Refunded $149.99 for ORD-9012."


@pytest.mark.parametrize(
    ("order_id", "message"),
    [
        ("ORD-3456", "ORD-3456 was delivered and can no longer be cancelled; a return is possible."),
        (
            "ORD-5678",
            "ORD-5678 has shipped and can no longer be cancelled; a return is possible once it arrives.",
        ),
        ("ORD-0000", "There is no order ORD-0000; nothing was cancelled."),
    ],
)
async def test_cancel_refusals(database_url: str, order_id: str, message: str) -> None:
    async with prepared(database_url) as business:
        outcome = await cancel(business, order_id)
        assert outcome == CancelOutcome(order_id, False, message)
        assert await cancel(business, order_id) == outcome
        assert [row["result"] for row in await ledger(database_url)] == [outcome.as_content()]


async def test_cancel_an_order_already_cancelled(database_url: str) -> None:
    async with prepared(database_url) as business:
        assert (await cancel(business, "ORD-9012", "call-1")).cancelled
        again = await cancel(business, "ORD-9012", "call-2")
        assert again == CancelOutcome("ORD-9012", False, "ORD-9012 is already cancelled.")


async def test_concurrent_identical_cancels_cancel_once(database_url: str) -> None:
    async with AsyncExitStack() as stack:
        await prepare(database_url)
        businesses = [await stack.enter_async_context(opened(database_url)) for _ in range(10)]
        outcomes = await asyncio.gather(*(cancel(business, "ORD-9012") for business in businesses))
        assert set(outcomes) == {CancelOutcome("ORD-9012", True, "Cancelled ORD-9012.")}
        assert len(await ledger(database_url)) == 1


# -- the ledger's key ---------------------------------------------------------------------------


async def test_tool_call_ids_are_scoped_by_thread(database_url: str) -> None:
    async with prepared(database_url) as business:
        async with await SqlConversationStore.connect(database_url) as store:
            await add_thread(store, "t2")
        await refund(business, "ORD-5678", 1000)
        other = await refund(business, "ORD-5678", 1000, thread_id="t2")
        assert other.accepted
        assert await refunded_cents(business) == 2000


async def test_a_tool_call_recorded_for_another_tool_is_a_conflict(database_url: str) -> None:
    async with prepared(database_url) as business:
        await refund(business, "ORD-9012", 1000)
        with pytest.raises(Conflict, match="'call-1' of thread 't1' was recorded for 'issue_refund'"):
            await cancel(business, "ORD-9012")
        order = await business.get_order("ORD-9012")
        assert order is not None
        assert order.status == "processing"


async def test_an_unknown_thread_is_not_found(database_url: str) -> None:
    async with prepared(database_url) as business:
        with pytest.raises(NotFound, match="no thread 'nope'"):
            await refund(business, "ORD-5678", 100, "c", thread_id="nope")
        assert await refunded_cents(business) == 0
        assert await ledger(database_url) == []


async def test_deleting_the_thread_deletes_its_ledger_rows(database_url: str) -> None:
    async with prepared(database_url) as business:
        await refund(business, "ORD-5678", 1000)
        await cancel(business, "ORD-9012", "call-2")
        assert len(await ledger(database_url)) == 2
        async with (
            await SqlConversationStore.connect(database_url) as store,
            store.engine.begin() as connection,
        ):
            await connection.execute(_threads.delete().where(_threads.c.thread_id == "t1"))
        assert await ledger(database_url) == []
        # The business changes stay: the ledger only remembers which calls made them.
        assert await refunded_cents(business) == 1000


def test_outcomes_are_json() -> None:
    outcomes = [
        RefundOutcome("ORD-5678", 9998, True, "Refunded $99.98 for ORD-5678."),
        CancelOutcome("ORD-9012", False, "no"),
    ]
    assert [json.loads(json.dumps(outcome.as_content())) for outcome in outcomes] == [
        {
            "order_id": "ORD-5678",
            "refunded": 99.98,
            "accepted": True,
            "message": "Refunded $99.98 for ORD-5678.",
        },
        {"order_id": "ORD-9012", "cancelled": False, "message": "no"},
    ]
