"""The exactly-once ledger for any tool: an effect in this database commits with its ledger row; an
effect elsewhere is recorded started, then succeeded or failed, and one found started after a crash
goes to a person instead of running again. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
import sqlalchemy as sa
from inline_snapshot import snapshot
from sqlalchemy.ext.asyncio import AsyncConnection

from agent import InvalidArguments, Runtime, decide, open_runtime, run_step
from store import Conflict, LeaseLost, Ledger, NewRun, NotFound, Thread, idempotency_key
from stream import CollectingSink

from .core_app import TRANSFERS, FakeApi, balance, core_app
from .scripted import Calls, Script, lines

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as opened:
        yield opened


async def booking_app(stack: AsyncExitStack, url: str, api: FakeApi) -> tuple[Runtime, Thread]:
    script = Script([Calls([("book", {"item": "TP-101"})]), "Booked."])
    runtime = await stack.enter_async_context(open_runtime(core_app(script, api=api), url))
    thread = await runtime.db.threads.create(user_id="ada", title="t")
    return runtime, thread


async def run(runtime: Runtime, run_id: str | None) -> list[str]:
    assert run_id is not None
    sink = CollectingSink()
    await run_step(runtime, run_id, sink=sink)
    return lines(sink.events)


# -- the store's ledger ------------------------------------------------------------------------------


async def test_an_effect_that_fails_leaves_neither_its_writes_nor_a_ledger_row(
    database_url: str, stack: AsyncExitStack
) -> None:
    runtime, thread = await booking_app(stack, database_url, FakeApi())
    ledger = Ledger(runtime.db.engine)

    async def half_done(connection: AsyncConnection) -> None:
        await connection.execute(TRANSFERS.insert().values(tool_call_id="c1", to="bob", cents=100))
        raise RuntimeError("the effect broke after its first write")

    with pytest.raises(RuntimeError):
        await ledger.once(thread.thread_id, "c1", run_id="r", tool_name="transfer", effect=half_done)

    assert await ledger.get(thread.thread_id, "c1") is None
    assert await balance(runtime.db.engine.connect, "bob") == 0


async def test_concurrent_calls_of_one_effect_run_it_once(database_url: str, stack: AsyncExitStack) -> None:
    runtime, thread = await booking_app(stack, database_url, FakeApi())
    ledgers = [Ledger(runtime.db.engine)] + [
        Ledger((await stack.enter_async_context(open_runtime(core_app(Script([])), database_url))).db.engine)
        for _ in range(4)
    ]

    async def send(connection: AsyncConnection) -> dict[str, object]:
        await connection.execute(TRANSFERS.insert().values(tool_call_id="c1", to="bob", cents=500))
        return {"sent": 5}

    results = await asyncio.gather(
        *(
            ledger.once(thread.thread_id, "c1", run_id="r", tool_name="transfer", effect=send)
            for ledger in ledgers
        )
    )

    assert sorted(done is not None for done, _ in results) == [False, False, False, False, True]
    assert {str(earlier.result) for _, earlier in results if earlier is not None} == {"{'sent': 5}"}
    assert await balance(runtime.db.engine.connect, "bob") == 500


async def test_a_call_recorded_for_another_tool_or_an_unknown_thread_is_refused(
    database_url: str, stack: AsyncExitStack
) -> None:
    runtime, thread = await booking_app(stack, database_url, FakeApi())
    ledger = Ledger(runtime.db.engine)

    async def nothing(connection: AsyncConnection) -> int:
        return 1

    await ledger.once(thread.thread_id, "c1", run_id="r", tool_name="transfer", effect=nothing)
    with pytest.raises(Conflict, match=r"'c1' of thread .* was recorded for 'transfer', not 'book'"):
        await ledger.start(thread.thread_id, "c1", run_id="r", tool_name="book")
    with pytest.raises(NotFound, match="no thread 'nope'"):
        await ledger.start("nope", "c1", run_id="r", tool_name="book")


async def test_a_claim_for_a_run_its_worker_no_longer_holds_is_refused_before_anything_runs(
    database_url: str, stack: AsyncExitStack
) -> None:
    runtime, thread = await booking_app(stack, database_url, FakeApi())
    queued = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hi"))
    ).run
    started = await runtime.db.runs.start_reserving(queued.run_id, events=1)
    assert started is not None
    run_id, owner = queued.run_id, started[0].lease_owner
    assert owner is not None
    ledger = Ledger(runtime.db.engine)
    made: list[str] = []

    async def send(connection: AsyncConnection) -> dict[str, object]:
        made.append("sent")
        return {"sent": 5}

    stale = "a worker whose run was taken over"
    with pytest.raises(LeaseLost, match=f"no longer held by worker {stale!r}"):
        await ledger.once(
            thread.thread_id, "c1", run_id=run_id, tool_name="transfer", effect=send, owner=stale
        )
    with pytest.raises(LeaseLost):
        await ledger.start(thread.thread_id, "c2", run_id=run_id, tool_name="book", owner=stale)
    assert made == []
    assert await ledger.get(thread.thread_id, "c1") is None
    assert await ledger.get(thread.thread_id, "c2") is None
    # The run's owner goes ahead; a call it made, asked again by the stale worker, is refused too.
    assert await ledger.once(
        thread.thread_id, "c1", run_id=run_id, tool_name="transfer", effect=send, owner=owner
    ) == ({"sent": 5}, None)
    assert (await ledger.start(thread.thread_id, "c2", run_id=run_id, tool_name="book", owner=owner))[0]
    with pytest.raises(LeaseLost):
        await ledger.once(
            thread.thread_id, "c1", run_id=run_id, tool_name="transfer", effect=send, owner=stale
        )
    with pytest.raises(LeaseLost):
        await ledger.start(thread.thread_id, "c2", run_id=run_id, tool_name="book", owner=stale)
    assert made == ["sent"]


def test_the_idempotency_key_is_stable_per_call_and_differs_between_calls() -> None:
    assert idempotency_key("t1", "c1") == idempotency_key("t1", "c1")
    assert len({idempotency_key("t1", "c1"), idempotency_key("t1", "c2"), idempotency_key("t2", "c1")}) == 3


# -- an external effect, through a tool --------------------------------------------------------------


async def test_an_external_effect_is_recorded_and_answered_again_without_a_second_call(
    database_url: str, stack: AsyncExitStack
) -> None:
    api = FakeApi()
    runtime, thread = await booking_app(stack, database_url, api)
    first = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book TP-101"))
    ).run

    transcript = await run(runtime, first.run_id)

    assert transcript[3] == "core: tool_result book success {'item': 'TP-101', 'ref': 'R1'}"
    [call_id] = await executed(runtime, thread)
    execution = await runtime.db.ledger.get(thread.thread_id, call_id)
    assert execution is not None
    assert (execution.status, execution.result, execution.attempts) == (
        "succeeded",
        {"item": "TP-101", "ref": "R1"},
        1,
    )
    assert api.calls == [idempotency_key(thread.thread_id, execution.tool_call_id)]


async def test_an_external_effect_that_raises_is_recorded_failed(
    database_url: str, stack: AsyncExitStack
) -> None:
    api = FakeApi(fail=True)
    runtime, thread = await booking_app(stack, database_url, api)
    first = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book TP-101"))
    ).run

    transcript = await run(runtime, first.run_id)

    assert transcript[3].startswith("core: tool_result book failed 'The tool book failed unexpectedly.")
    [call_id] = await executed(runtime, thread)
    execution = await runtime.db.ledger.get(thread.thread_id, call_id)
    assert execution is not None
    assert (execution.status, execution.error) == ("failed", "ConnectionError: the booking service is down")


async def test_an_effect_whose_process_died_midway_goes_to_a_person_not_again_to_the_api(
    database_url: str, stack: AsyncExitStack
) -> None:
    api = FakeApi(hang=asyncio.Event())
    runtime, thread = await booking_app(stack, database_url, api)
    first = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book TP-101"))
    ).run

    # The API booked, and the run stops before its answer comes back (a crash, for the ledger).
    attempt = asyncio.create_task(run_step(runtime, first.run_id))
    async with asyncio.timeout(30):
        await api.called.wait()
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    api.hang = None

    transcript = await run(runtime, first.run_id)  # the run continues, as after a restart

    assert transcript == snapshot(
        [
            "core: run_started recover",
            "core: tool_outcome_unknown book call_1_0_book",
            "core: approval_required [book {'item': 'TP-101'} outcome=unknown]",
            "core: run_finished awaiting_approval",
        ]
    )
    assert len(api.calls) == 1  # not called again
    [approval] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
    assert (approval.tool_name, approval.outcome) == ("book", "unknown")
    with pytest.raises(
        InvalidArguments, match="a call whose outcome is unknown runs again as it was, or not at all"
    ):
        await decide(
            runtime.db,
            thread.thread_id,
            approval.tool_call_id,
            decision="approved",
            decided_by="ada",
            override_args={"item": "TP-205"},
        )

    decision = await decide(
        runtime.db, thread.thread_id, approval.tool_call_id, decision="approved", decided_by="ada"
    )
    resumed = await run(runtime, decision.resume_run_id)

    assert resumed[1] == "core: tool_result book success {'item': 'TP-101', 'ref': 'R1'}"
    assert api.calls == [api.calls[0]] * 2  # retried once, under the same key: the API kept one booking
    assert len(api.done) == 1
    execution = await runtime.db.ledger.get(thread.thread_id, approval.tool_call_id)
    assert execution is not None
    assert (execution.status, execution.attempts) == ("succeeded", 2)


async def test_rejecting_an_unknown_outcome_tells_the_model_and_keeps_the_first_decision(
    database_url: str, stack: AsyncExitStack
) -> None:
    api = FakeApi(hang=asyncio.Event())
    script = Script([Calls([("book", {"item": "TP-101"})]), "Understood."])
    runtime = await stack.enter_async_context(open_runtime(core_app(script, api=api), database_url))
    thread = await runtime.db.threads.create(user_id="ada", title="t")
    await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book TP-101"))
    [queued] = [r for r in [await runtime.db.runs.active(thread.thread_id)] if r is not None]
    attempt = asyncio.create_task(run_step(runtime, queued.run_id))
    async with asyncio.timeout(30):
        await api.called.wait()
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    await run(runtime, queued.run_id)
    [approval] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")

    decision = await decide(
        runtime.db,
        thread.thread_id,
        approval.tool_call_id,
        decision="rejected",
        decided_by="ada",
        reason="the airline confirmed the booking by phone",
    )
    resumed = await run(runtime, decision.resume_run_id)

    assert resumed[1] == snapshot(
        "core: tool_result book denied 'This call was started earlier and its outcome is unknown (the process running it stopped before it finished). The reviewer decided not to run it again: the airline confirmed the booking by phone'"
    )
    assert len(api.calls) == 1
    [decided] = await runtime.db.approvals.list(thread_id=thread.thread_id)
    assert (decided.status, decided.outcome, decided.reason) == (
        "rejected",
        "unknown",
        "the airline confirmed the booking by phone",
    )


async def executed(runtime: Runtime, thread: Thread) -> list[str]:
    """The tool call ids the ledger has rows for in `thread`."""
    query = sa.text(
        "SELECT tool_call_id FROM tool_executions WHERE thread_id = :thread_id ORDER BY tool_call_id"
    )
    async with runtime.db.engine.connect() as connection:
        return list((await connection.execute(query, {"thread_id": thread.thread_id})).scalars())


async def test_the_ledger_rows_go_with_their_thread(database_url: str, stack: AsyncExitStack) -> None:
    runtime, thread = await booking_app(stack, database_url, FakeApi())
    first = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Book TP-101"))
    ).run
    await run(runtime, first.run_id)

    await runtime.db.delete_thread(thread.thread_id)

    async with runtime.db.engine.connect() as connection:
        left = (await connection.execute(sa.text("SELECT count(*) FROM tool_executions"))).scalar_one()
    assert left == 0
