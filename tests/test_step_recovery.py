"""The step function when a run dies, is cancelled or is stopped: it continues from its checkpoint.

On the core tests' own app: a turn looks a balance up, then asks to transfer money (which needs
approval); the transfer is exactly-once by the ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from inline_snapshot import snapshot
from pydantic_ai import Agent, RunContext, Tool
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from agent import ChatApp, RunScope, RuntimeOptions, cancel, decide, open_runtime, run_step
from agent.opening import EVENT_BLOCK
from store import Claimed, Database, DatabaseUnavailable, NewRun, Run, Thread, Worker
from stream import CollectingSink, StreamEvent

from .agent_chains import by_history
from .core_app import TRANSFERS, CoreDeps, CoreFactory, moved
from .scripted import Calls, Script, Step
from .step_app import App, CrashingSink, crash_then_recover, shapes
from .test_delegation import returns
from .waiting import eventually

pytestmark = pytest.mark.anyio

ASK = "Send bob 25.50"


def paying() -> Script:
    """Looks the balance up, asks to send bob 25.50, and answers once it is decided."""
    return Script(
        [
            Calls([("lookup", {"key": "balance"})]),
            Calls([("transfer", {"to": "bob", "amount": 25.5})]),
            "Sent.",
        ]
    )


@pytest.mark.parametrize("at_flush", [1])
async def test_a_run_killed_between_nodes_continues_from_its_checkpoint(
    core_factory: CoreFactory, at_flush: int
) -> None:
    # The lookup's call and result are stored by one checkpoint, before the model is asked again
    # (the run's second and last before its pause): the crash lands right after it.
    reference = await core_factory(paying())
    clean = await reference.thread()
    await reference.send(clean, ASK)
    script = paying()
    app = await core_factory(script)
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=ASK))).run
    sink = CrashingSink(at_flush=at_flush)
    recovered = await crash_then_recover(lambda: core_factory(script), run.run_id, sink)
    # No message lost, none repeated: the same history as a run that never crashed, and the model
    # asked each of its two questions once.
    assert shapes(await recovered.messages(thread)) == shapes(await reference.messages(clean))
    assert len(script.requests) == 2
    assert len(await recovered.pending(thread)) == 1
    kinds = [e.type for e in await recovered.log(thread)]
    assert kinds.count("approval_required") == 1
    assert kinds.count("run_started") == 2


async def test_a_resume_killed_after_the_transfer_does_not_transfer_twice(core_factory: CoreFactory) -> None:
    script = paying()
    app = await core_factory(script)
    thread = await app.thread()
    await app.send(thread, ASK)
    [call_id] = await app.pending(thread)
    decision = await decide(app.db, thread.thread_id, call_id, decision="approved", decided_by="bob")
    assert decision.resume_run_id is not None
    # Dies right after the transfer committed, before any checkpoint recorded it in the conversation.
    sink = CrashingSink(on=lambda e: e.type == "tool_result")
    recovered = await crash_then_recover(lambda: core_factory(script), decision.resume_run_id, sink)
    assert await moved(recovered) == [("bob", 2550)]
    assert shapes(await recovered.messages(thread))[-2:] == [
        "request: tool-return(transfer)",
        "response: text",
    ]
    async with recovered.db.engine.connect() as connection:
        ledger = (await connection.execute(sa.text("SELECT count(*) FROM tool_executions"))).scalar_one()
    assert ledger == 1


async def test_a_cancelled_run_is_requeued_and_continues(core_factory: CoreFactory) -> None:
    app = await core_factory(paying())
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=ASK))).run
    tool_called = asyncio.Event()

    class SignallingSink(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "tool_result":
                tool_called.set()

    task = asyncio.create_task(run_step(app.runtime, run.run_id, sink=SignallingSink()))
    await tool_called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await app.db.runs.get(run.run_id)).status == "queued"
    assert (await app.db.runs.get(run.run_id)).checkpoints == 0
    assert await run_step(app.runtime, run.run_id) == "awaiting_approval"
    # Cancelled before the lookup's step was stored (its call waits for its result's checkpoint,
    # the lookup touching nothing keyed by its call): the model is asked again, and the script's
    # next answer is the transfer.
    assert shapes(await app.messages(thread)) == snapshot(
        [
            "request: user-prompt",
            "response: tool-call(transfer)",
        ]
    )


async def test_a_stopping_runtime_parks_runs_at_their_next_checkpoint(core_factory: CoreFactory) -> None:
    reference = await core_factory(paying())
    clean = await reference.thread()
    await reference.send(clean, ASK)
    script = paying()
    app = await core_factory(script)
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=ASK))).run

    class StopOnToolResult(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "tool_result":
                app.runtime.stopping.set()  # shutdown begins while the lookup's result comes in

    assert await run_step(app.runtime, run.run_id, sink=StopOnToolResult()) == "queued"
    parked = await app.db.runs.get(run.run_id)
    # The lookup's call with its result, stored as the request the next process sends, in one checkpoint.
    assert (parked.status, parked.checkpoints) == ("queued", 1)
    assert shapes(await app.messages(thread))[-1] == "request: tool-return(lookup)"
    # The next process continues it from that checkpoint: it sends that request, runs no lookup.
    restarted = await core_factory(script)
    assert await run_step(restarted.runtime, run.run_id) == "awaiting_approval"
    assert shapes(await restarted.messages(thread)) == shapes(await reference.messages(clean))
    assert len(script.requests) == 2


# -- taken over while a tool runs --------------------------------------------------------------------

LAPSING = RuntimeOptions(worker=Worker(lease=timedelta(milliseconds=1)))
"""A worker whose lease lapses at once (nothing renews it here): any other worker may take its run over."""


async def _take_over(heir: Database, run_id: str) -> Claimed:
    """`heir` claims `run_id` as a worker's sweep does, once its owner's lease lapsed."""
    started = await eventually(lambda: heir.runs.start_reserving(run_id, events=EVENT_BLOCK))
    return Claimed(*started)


def _stopped_quietly(caplog: pytest.LogCaptureFixture, run_id: str) -> None:
    """The stale attempt stopped as one taken over does, and logged nothing else worth a look."""
    noted = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert noted == [("agent.step", f"run {run_id} was taken over by another worker; this attempt stops")]


async def test_a_run_taken_over_while_its_tool_runs_stops_there_and_its_heir_continues(
    core_factory: CoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # The stale worker's `settle` finds its run taken over as it touches the ledger: its response
    # calling `settle` waited for the tool's result, so the ledger stores it first, and that
    # checkpoint is fenced off. It is no tool failure: the attempt stops there.
    script = Script([Calls([("settle", {"order_id": "ORD-5678"})])] * 2 + ["Settled."])
    taken: list[Claimed] = []

    async def settle(ctx: RunContext[CoreDeps], order_id: str) -> dict[str, str]:
        """Settle the order."""
        if not taken:
            taken.append(await _take_over(heir.db, ctx.deps.scope.run_id))

        async def effect(connection: AsyncConnection) -> dict[str, str]:
            return {"settled": order_id}

        return await ctx.deps.scope.ledger.once(ctx, effect)

    stale = await core_factory(script, tools=[Tool(settle)], options=LAPSING)
    heir = await core_factory(script, tools=[Tool(settle)])
    thread = await stale.thread()
    run = (
        await stale.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Settle it"))
    ).run
    seen = CollectingSink()
    assert await run_step(stale.runtime, run.run_id, sink=seen) == "running"  # the heir's now
    # Its client saw the call, and no result: nothing a worker that lost the run would make up.
    assert [e.type for e in seen.events] == ["run_started", "user_message", "tool_call"]
    assert len(script.requests) == 1
    _stopped_quietly(caplog, run.run_id)
    assert await stale.messages(thread) == []
    [claimed] = taken
    assert await run_step(heir.runtime, run.run_id, claimed=claimed) == "completed"
    assert shapes(await heir.messages(thread)) == [
        "request: user-prompt",
        "response: tool-call(settle)",
        "request: tool-return(settle)",
        "response: text",
    ]
    assert returns(await heir.messages(thread)) == [("settle", {"settled": "ORD-5678"})]
    assert [(e.type, e.outcome) for e in await heir.log(thread) if e.type == "tool_result"] == [
        ("tool_result", "success")
    ]


async def test_a_run_taken_over_inside_a_delegated_run_stops_there_and_its_heir_continues(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The inner agent's tool runs while the run is taken over; the sub-run's checkpoint as its next
    # request goes out is fenced off. Neither the sub-run nor its parent call fails: the attempt stops.
    heirs: list[Database] = []
    taken: list[Claimed] = []

    def app() -> ChatApp[RunScope]:
        inner = Agent(by_history("inner", [[("look", {})], "inner done"]), name="inner", deps_type=RunScope)
        outer = Agent(
            by_history("outer", [[("ask", {"task": "go"})], "outer done"]), name="outer", deps_type=RunScope
        )

        @inner.tool
        async def look(ctx: RunContext[RunScope]) -> str:  # pyright: ignore[reportUnusedFunction]
            """Look around."""
            if not taken:
                taken.append(await _take_over(heirs[0], ctx.deps.run_id))
            return "looked"

        @outer.tool
        async def ask(ctx: RunContext[RunScope], task: str) -> Any:  # pyright: ignore[reportUnusedFunction]
            """Ask the inner agent."""
            return await ctx.deps.delegate(ctx, inner, task, deps=ctx.deps)

        return ChatApp(agent=outer, deps=lambda scope: scope)

    async with (
        open_runtime(app(), database_url, options=LAPSING) as stale,
        open_runtime(app(), database_url) as heir,
    ):
        heirs.append(heir.db)
        thread = await stale.db.threads.create(user_id="ada", title="t")
        run = (
            await stale.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Go"))
        ).run
        seen = CollectingSink()
        assert await run_step(stale, run.run_id, sink=seen) == "running"
        shown = [
            (e.type, e.agent) for e in seen.events if e.type in ("tool_call", "tool_result", "run_finished")
        ]
        # The inner result is shown or not, as the event log's writer found the run taken before it
        # or after; the parent call's is not, nor any end.
        assert shown[:2] == [("tool_call", "outer"), ("tool_call", "inner")]
        assert shown[2:] in ([], [("tool_result", "inner")])
        _stopped_quietly(caplog, run.run_id)
        [claimed] = taken
        assert await run_step(heir, run.run_id, claimed=claimed) == "completed"
        conversation = await heir.db.conversations.load(thread.thread_id)
    assert conversation is not None
    assert returns(conversation.messages) == [("ask", "inner done")]


@pytest.mark.parametrize("lost_to", ["an heir", "a cancel"])
async def test_a_run_lost_before_its_next_effect_leaves_that_effect_to_its_owner(
    core_factory: CoreFactory, caplog: pytest.LogCaptureFixture, lost_to: str
) -> None:
    # Two calls of `settle`, one after the other: the first stores the response calling both (the
    # ledger's checkpoint) and acts; then the run is taken over, or cancelled. The second call has
    # no checkpoint left to store, so only the ledger's claim, fenced by the run's lease as
    # checkpoints are, stops the stale worker before it acts on a run that is no longer its own.
    script = Script(
        [Calls([("settle", {"order_id": "ORD-1"}), ("settle", {"order_id": "ORD-2"})]), "Settled."]
    )
    made: list[tuple[int, str]] = []  # the attempt and the order of every effect made
    taken: list[Claimed] = []
    lost: list[bool] = []

    async def settle(ctx: RunContext[CoreDeps], order_id: str) -> dict[str, str]:
        """Settle the order."""
        scope = ctx.deps.scope

        async def effect(connection: AsyncConnection) -> dict[str, str]:
            made.append((scope.attempt, order_id))
            return {"settled": order_id}

        settled = await scope.ledger.once(ctx, effect)
        if scope.attempt == 1 and not lost:
            lost.append(True)
            if lost_to == "an heir":
                taken.append(await _take_over(heir.db, scope.run_id))
            else:
                await cancel(heir.db, scope.thread_id)
        return settled

    stale = await core_factory(script, tools=[Tool(settle, sequential=True)], options=LAPSING)
    heir = await core_factory(script, tools=[Tool(settle, sequential=True)])
    thread = await stale.thread()
    run = (
        await stale.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Settle both"))
    ).run
    ended = await run_step(stale.runtime, run.run_id)
    assert made == [(1, "ORD-1")]  # not ORD-2: the stale worker got `LeaseLost` before acting
    _stopped_quietly(caplog, run.run_id)
    if lost_to == "a cancel":
        assert ended == "cancelled"
        return
    assert ended == "running"  # the heir's now
    [claimed] = taken
    assert await run_step(heir.runtime, run.run_id, claimed=claimed) == "completed"
    assert made == [(1, "ORD-1"), (2, "ORD-2")]  # each once, the second by the run's owner
    assert returns(await heir.messages(thread)) == [
        ("settle", {"settled": "ORD-1"}),
        ("settle", {"settled": "ORD-2"}),
    ]
    assert len(script.requests) == 2


# -- the database lost while a tool runs ------------------------------------------------------------


async def _end_backend(url: str, connection: AsyncConnection) -> None:
    """PostgreSQL ends the server process of `connection`, as a restart ends every connection."""
    pid = (await connection.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
    admin = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)  # waits until it is gone
    finally:
        await admin.close()


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
async def test_a_database_lost_inside_a_tool_leaves_the_run_to_continue_from_its_checkpoint(
    core_factory: CoreFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The connection of the ledger's transaction ends while the effect runs (SQLite has no server to
    # lose it to): `store.DatabaseUnavailable` inside the tool. That is no tool failure for the model
    # to hear of: the run goes back to the queue at its last checkpoint (the response calling
    # `settle`, stored by the ledger first), and its next attempt makes the effect, once.
    script = Script([Calls([("settle", {"order_id": "ORD-5678"})]), "Settled."])
    cut: list[bool] = []

    async def settle(ctx: RunContext[CoreDeps], order_id: str) -> dict[str, str]:
        """Settle the order."""

        async def effect(connection: AsyncConnection) -> dict[str, str]:
            if not cut:
                cut.append(True)
                await _end_backend(database_url, connection)
            await connection.execute(
                TRANSFERS.insert().values(tool_call_id=ctx.tool_call_id, to=order_id, cents=1)
            )
            return {"settled": order_id}

        return await ctx.deps.scope.ledger.once(ctx, effect)

    app = await core_factory(script, tools=[Tool(settle)])
    thread = await app.thread()
    run = (
        await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="Settle it"))
    ).run
    seen = CollectingSink()
    with pytest.raises(DatabaseUnavailable):
        await run_step(app.runtime, run.run_id, sink=seen)
    # The model was not asked again with a failed result, and no client saw one.
    assert len(script.requests) == 1
    assert [e.type for e in seen.events] == ["run_started", "user_message", "tool_call"]
    noted = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert noted == [
        ("agent.step", f"run {run.run_id} of thread {thread.thread_id} lost its database; it will continue")
    ]
    assert (await app.db.runs.get(run.run_id)).status == "queued"
    assert shapes(await app.messages(thread)) == ["request: user-prompt", "response: tool-call(settle)"]
    assert await moved(app) == []
    # Driven again (as the worker does once the database answers), it continues from there.
    assert await run_step(app.runtime, run.run_id) == "completed"
    assert len(script.requests) == 2
    assert returns(await app.messages(thread)) == [("settle", {"settled": "ORD-5678"})]
    assert await moved(app) == [("ORD-5678", 1)]
    logged = await app.log(thread)
    assert [e.type for e in logged].count("tool_call") == 1  # shown once, by the first attempt
    assert [(e.type, e.outcome) for e in logged if e.type == "tool_result"] == [("tool_result", "success")]


# -- cancelled while its end is stored ---------------------------------------------------------------


async def _waiting_on_a_lock(db: Database, table: str) -> bool | None:
    """Whether a statement writing `table` waits for a row lock on PostgreSQL (`None`: not yet)."""
    async with db.engine.connect() as connection:
        waiting = (
            await connection.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query LIKE :table"
                ),
                {"table": f"%{table}%"},
            )
        ).scalar_one()
    return True if waiting else None


async def _gone(waiting: Awaitable[bool | None]) -> bool | None:
    return None if await waiting else True


ENDS: dict[str, Step] = {
    "completed": "Your balance is fine.",
    "awaiting_approval": Calls([("transfer", {"to": "bob", "amount": 25.5})]),
}


# PostgreSQL only: on SQLite a lock held from another connection stalls the writes that run on the
# event loop's thread, the test's own included.
@pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
@pytest.mark.parametrize("end", ["completed", "awaiting_approval"])
async def test_a_run_cancelled_while_its_end_is_stored_is_ended_or_continues_exactly(
    core_factory: CoreFactory, caplog: pytest.LogCaptureFixture, end: str
) -> None:
    # A client leaving (or a shutdown) cancels the step while the end's statement waits in the
    # database (held here by a lock on the thread's row, which the end touches): a completion's one
    # statement, a pause's transaction (its approvals beside the checkpoint).
    reference, clean, app, thread, run = await _asked(core_factory, end)
    async with app.db.engine.connect() as blocker:

        class HoldTheEnd(CollectingSink):
            async def emit(self, event: StreamEvent) -> None:
                await super().emit(event)
                if event.type == "run_finished":  # emitted just before the end is stored
                    await blocker.execute(
                        sa.text("SELECT 1 FROM threads WHERE thread_id = :t FOR UPDATE"),
                        {"t": thread.thread_id},
                    )

        task = asyncio.create_task(run_step(app.runtime, run.run_id, sink=HoldTheEnd()))
        await eventually(lambda: _waiting_on_a_lock(app.db, "conversation_records"))
        task.cancel()
        # The cancel reaches the database: the statement stops waiting before the lock is let go.
        await eventually(lambda: _gone(_waiting_on_a_lock(app.db, "conversation_records")))
        await blocker.rollback()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Not stored: the run went back to the queue at its last checkpoint, and continues exactly.
    assert (await app.db.runs.get(run.run_id)).status == "queued"
    await _continues_as_if_never_cancelled(app, reference, run.run_id, thread, clean, end, caplog)


@pytest.mark.parametrize("end", ["completed", "awaiting_approval"])
async def test_a_run_cancelled_as_its_end_is_being_stored_is_ended_or_continues_exactly(
    core_factory: CoreFactory, caplog: pytest.LogCaptureFixture, end: str
) -> None:
    # The cancel comes as the end's storing begins (the sink has the end's event, stored with it):
    # it lands at the storing's first await, on SQLite as on PostgreSQL.
    reference, clean, app, thread, run = await _asked(core_factory, end)

    class CancelTheEnd(CollectingSink):
        async def emit(self, event: StreamEvent) -> None:
            await super().emit(event)
            if event.type == "run_finished":
                task.cancel()

    task = asyncio.create_task(run_step(app.runtime, run.run_id, sink=CancelTheEnd()))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await app.db.runs.get(run.run_id)).status in ("queued", end)
    await _continues_as_if_never_cancelled(app, reference, run.run_id, thread, clean, end, caplog)


async def _asked(core_factory: CoreFactory, end: str) -> tuple[App, Thread, App, Thread, Run]:
    """A reference run that ended `end` undisturbed, and the same question queued on a fresh app."""

    def script() -> Script:
        return Script([Calls([("lookup", {"key": "balance"})]), ENDS[end]], then=ENDS[end])

    reference = await core_factory(script())
    clean = await reference.thread()
    await reference.send(clean, "How is my balance?")
    app = await core_factory(script())
    thread = await app.thread()
    new = NewRun(thread_id=thread.thread_id, kind="message", content="How is my balance?")
    return reference, clean, app, thread, (await app.db.runs.queue(new)).run


async def _continues_as_if_never_cancelled(
    app: App,
    reference: App,
    run_id: str,
    thread: Thread,
    clean: Thread,
    end: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Driven again if queued, the run ends as `reference`'s did, its conversation and events alike,
    with nothing logged at WARNING or above."""
    if (await app.db.runs.get(run_id)).status == "queued":
        assert await run_step(app.runtime, run_id) == end
    assert (await app.db.runs.get(run_id)).status == end
    assert shapes(await app.messages(thread)) == shapes(await reference.messages(clean))
    # One end, the last event, and the lookup's result shown once (text streamed before the cancel
    # stays shown, and the answer the model gives again follows it in parts of its own).
    kinds = [e.type for e in await app.log(thread)]
    assert (kinds.count("run_finished"), kinds[-1], kinds.count("tool_result")) == (1, "run_finished", 1)
    assert [
        (r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info
    ] == []
