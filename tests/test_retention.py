"""Retention: deleting a thread erases every row of it, and a purge erases only the threads idle too long.

On the core tests' own app: its records, ledger rows and approvals are the thread's; the money its
transfers moved (a table of the app's own) is not.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelRequest, UserPromptPart
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agent import decide, run_step
from store import NewRun, NotFound, Thread, record_checkpoint
from store.schema import ThreadRow, metadata, now_utc
from stream import CollectingSink, StreamEvent

from .core_app import TRANSFERS, CoreFactory, moved
from .scripted import Calls, Script
from .step_app import App

pytestmark = pytest.mark.anyio

_threads = metadata.tables[ThreadRow.__tablename__]

Rows = dict[str, Counter[tuple[object, ...]]]

APPS_OWN = frozenset({TRANSFERS.name})
"""The app's own data, which its transfers change and a thread's deletion leaves alone."""
LOOKUP = Calls([("lookup", {"key": "plan"})])


async def every_row(engine: AsyncEngine, *, but: frozenset[str] = frozenset()) -> Rows:
    """Every row of every table the database holds (reflected, so tables added later count too)."""

    def tables(connection: sa.Connection) -> list[sa.Table]:
        found = sa.MetaData()
        found.reflect(connection)
        return [table for name, table in found.tables.items() if name not in but]

    async with engine.connect() as connection:
        rows: Rows = {}
        for table in await connection.run_sync(tables):
            result = await connection.execute(sa.select(table))
            rows[table.name] = Counter(tuple(row) for row in result)
    return rows


async def transfer_approved(app: App, thread: Thread) -> None:
    await app.send(thread, "Send bob 25.50")
    [call_id] = await app.pending(thread)
    decision = await decide(app.db, thread.thread_id, call_id, decision="approved", decided_by="bob")
    assert decision.resume_run_id is not None
    assert await run_step(app.runtime, decision.resume_run_id) == "completed"


async def count_of(app: App, table: str, thread_id: str) -> int:
    column = "conversation_id" if table == "conversation_records" else "thread_id"
    t = sa.table(table, sa.column(column))
    async with app.db.engine.connect() as connection:
        result = await connection.execute(
            sa.select(sa.func.count()).select_from(t).where(t.c[column] == thread_id)
        )
        return result.scalar_one()


async def backdate(app: App, *threads: Thread, days: int) -> None:
    async with app.db.engine.begin() as connection:
        await connection.execute(
            _threads.update()
            .where(_threads.c.thread_id.in_([t.thread_id for t in threads]))
            .values(updated_at=now_utc() - timedelta(days=days))
        )


# -- delete ---------------------------------------------------------------------------------------


async def test_deleting_a_thread_erases_every_row_of_it_and_nothing_else(core_factory: CoreFactory) -> None:
    note = Calls([("note", {"title": "Feedback", "body": "the parcel was late"})])
    transfer = Calls([("transfer", {"to": "bob", "amount": 25.5})])
    two = Calls([("transfer", {"to": "carol", "amount": 1}), ("transfer", {"to": "dave", "amount": 2})])
    app = await core_factory(Script([note, "Noted.", transfer, note, "Noted.", transfer, "Sent.", two]))
    # Another user's thread with the same kinds of data, paused on a transfer: it must stay as it is.
    other = await app.thread("bob")
    await app.send(other, "Some feedback: the parcel was late")
    await app.send(other, "Send bob 25.50")
    before = await every_row(app.db.engine, but=APPS_OWN)

    thread = await app.thread("alice")
    await app.send(thread, "Some feedback: support was great")  # a record
    await transfer_approved(app, thread)  # a ledger row and a decided approval
    await app.send(thread, "Send carol 1 and dave 2")  # two pending approvals
    first, _ = await app.pending(thread)
    early = await decide(app.db, thread.thread_id, first, decision="rejected", decided_by="bob", reason="no")
    assert early.resume_run_id is None  # one decided, one still pending
    # A branch the conversation left: entries only its record's `branches` still reach.
    loaded = await app.db.conversations.load(thread.thread_id)
    assert loaded is not None
    branched = await app.db.conversations.branch(thread.thread_id, at=2, expected_revision=loaded.revision)
    branched.messages.append(ModelRequest(parts=[UserPromptPart("an edited question")]))
    await app.db.conversations.save(branched)
    record = await app.db.conversations.read_record(thread.thread_id)
    assert record is not None
    assert record.branches != []
    for table in ("runs", "events", "approvals", "records", "tool_executions", "conversation_records"):
        assert await count_of(app, table, thread.thread_id) > 0, table
    assert {a.status for a in await app.db.approvals.list(thread_id=thread.thread_id)} == {
        "approved",
        "rejected",
        "pending",
    }

    await app.db.delete_thread(thread.thread_id)

    # Exactly the rows from before the thread existed: no entry, event, approval, record, ledger
    # row, run or conversation record of it is left, and the other thread's rows are all there.
    assert await every_row(app.db.engine, but=APPS_OWN) == before
    with pytest.raises(NotFound):
        await app.db.threads.get(thread.thread_id)
    assert await app.db.conversations.load(thread.thread_id) is None
    # The transfer was made and stays made: the app's own data is not the thread's.
    assert await moved(app) == [("bob", 2550)]
    assert await app.pending(other) != []


async def test_deleting_a_thread_twice_or_one_that_never_existed_is_harmless(
    core_factory: CoreFactory,
) -> None:
    app = await core_factory(Script([]))
    thread = await app.thread()
    assert await app.db.threads.delete(thread.thread_id) is True
    assert await app.db.threads.delete(thread.thread_id) is False
    assert await app.db.threads.delete("no-such-thread") is False


async def test_a_fork_of_a_deleted_thread_keeps_the_history_it_shares(core_factory: CoreFactory) -> None:
    app = await core_factory(Script(["Hello!", LOOKUP, "Found it."]))
    thread = await app.thread()
    await app.send(thread, "hello")
    fork = await app.db.conversations.fork(thread.thread_id, new_conversation_id="kept-fork")
    await app.send(thread, "Which plan am I on?")  # entries only the thread has

    await app.db.delete_thread(thread.thread_id)

    loaded = await app.db.conversations.load("kept-fork")
    assert loaded is not None
    assert loaded.messages == fork.messages
    rows = await every_row(app.db.engine)
    # The fork's own history is all that is left of the conversation's entries.
    assert sum(rows["conversation_entries"].values()) == len(fork.messages)
    assert [row[0] for row in rows["conversation_records"]] == ["kept-fork"]


async def test_a_checkpoint_after_the_thread_was_deleted_stores_nothing(core_factory: CoreFactory) -> None:
    app = await core_factory(Script([]))
    thread = await app.thread()
    run = (await app.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content="hello"))).run
    await app.db.delete_thread(thread.thread_id)

    async def checkpoint(connection: AsyncConnection) -> None:
        await record_checkpoint(connection, run, event_id=0)

    # What a run still going on when its thread was deleted would save first.
    conversation = Conversation(
        conversation_id=thread.thread_id, messages=[ModelRequest(parts=[UserPromptPart("hello")])]
    )
    with pytest.raises(NotFound):
        await app.db.conversations.save_with(conversation, also=checkpoint)

    assert await app.db.conversations.load(thread.thread_id) is None
    rows = await every_row(app.db.engine)
    assert sum(rows["conversation_entries"].values()) == 0


class DeletingSink(CollectingSink):
    """Deletes the thread when the run calls a tool: a user deleting it while its run goes on."""

    def __init__(self, app: App, thread: Thread) -> None:
        super().__init__()
        self.app, self.thread = app, thread

    async def emit(self, event: StreamEvent) -> None:
        await super().emit(event)
        if event.type == "tool_call":
            await self.app.db.delete_thread(self.thread.thread_id)


async def test_a_thread_deleted_while_its_run_goes_on_leaves_nothing_behind(
    core_factory: CoreFactory,
) -> None:
    app = await core_factory(Script([LOOKUP, "Found it."]))
    before = await every_row(app.db.engine)
    thread = await app.thread()

    with pytest.raises(NotFound):
        await app.send(thread, "Which plan am I on?", sink=DeletingSink(app, thread))

    after = await every_row(app.db.engine)
    # The agent's instructions are the app's, stored once for every thread: a purge releases them
    # once no message names them (`test_a_purge_releases_the_instructions_no_message_names`).
    instructions = after.pop("conversation_instructions")
    assert after == {name: rows for name, rows in before.items() if name != "conversation_instructions"}
    assert [row[1] for row in instructions] == [b'"You are a test assistant."']


# -- purge ----------------------------------------------------------------------------------------


async def test_purge_erases_only_the_threads_idle_long_enough(core_factory: CoreFactory) -> None:
    app = await core_factory(Script([], then="Hello!"))
    old = [await app.thread() for _ in range(3)]
    for thread in old:
        await app.send(thread, "hello")
    busy = await app.thread()
    await app.db.runs.queue(NewRun(thread_id=busy.thread_id, kind="message", content="queued, never driven"))
    recent = await app.thread()
    await app.send(recent, "hello")
    await backdate(app, *old, busy, days=91)
    await backdate(app, recent, days=89)
    everything = await every_row(app.db.engine)

    dry: list[list[str]] = []
    found = await app.db.threads.purge(
        timedelta(days=90), batch=2, dry_run=True, on_batch=lambda ts: dry.append([t.thread_id for t in ts])
    )
    assert (found.removed, found.skipped_active, found.dry_run) == (3, 1, True)
    assert await every_row(app.db.engine) == everything

    batches: list[list[str]] = []
    purged = await app.db.threads.purge(
        timedelta(days=90), batch=2, on_batch=lambda ts: batches.append([t.thread_id for t in ts])
    )
    assert (purged.removed, purged.skipped_active, purged.dry_run) == (3, 1, False)
    assert purged.instructions_released == 0  # the recent thread still names the agent's instructions
    assert batches == dry
    assert [len(b) for b in batches] == [2, 1]
    assert sorted(i for b in batches for i in b) == sorted(t.thread_id for t in old)
    for thread in old:
        assert await app.db.conversations.load(thread.thread_id) is None
        for table in ("threads", "runs", "events", "conversation_records"):
            assert await count_of(app, table, thread.thread_id) == 0, table
    left = {t.thread_id for t in await app.db.threads.list(user_id="alice", limit=10)}
    assert left == {busy.thread_id, recent.thread_id}
    assert await app.db.conversations.load(recent.thread_id) is not None

    again = await app.db.threads.purge(timedelta(days=90))
    assert (again.removed, again.skipped_active) == (0, 1)


async def test_a_thread_that_took_a_message_is_no_longer_idle(core_factory: CoreFactory) -> None:
    app = await core_factory(Script(["Hello!"]))
    thread = await app.thread()
    await backdate(app, thread, days=100)
    await app.send(thread, "hello")  # activity now

    purged = await app.db.threads.purge(timedelta(days=90))

    assert purged.removed == 0
    assert (await app.db.threads.get(thread.thread_id)).status == "idle"


@pytest.mark.parametrize(
    ("older_than", "batch"), [(timedelta(0), 10), (timedelta(days=-1), 10), (timedelta(1), 0)]
)
async def test_purge_refuses_a_non_positive_age_or_batch(
    core_factory: CoreFactory, older_than: timedelta, batch: int
) -> None:
    app = await core_factory(Script([]))
    thread = await app.thread()
    with pytest.raises(ValueError, match="purge needs a positive age and batch"):
        await app.db.threads.purge(older_than, batch=batch)
    assert (await app.db.threads.get(thread.thread_id)).thread_id == thread.thread_id
