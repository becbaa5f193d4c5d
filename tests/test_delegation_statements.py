"""The statements and transactions a delegated turn costs, pinned: adding one fails here.

A router whose tool delegates to a sub-agent with one read-only tool (`test_delegation_checkpoints.desk`),
on a new message's first attempt: the run queued and claimed in one transaction; the router's
response calling it, the sub-run's one checkpoint (its end, folded) and the router's results, in
one transaction (on SQLite one unit of work, on PostgreSQL one statement); the router's end. No read.
Counted as `test_turn_statements` counts a turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from inline_snapshot import snapshot

from agent import Runtime, RuntimeOptions, open_runtime, queue_run, run_step
from store import reader
from store.compiled import observing

from .test_delegation_checkpoints import desk
from .test_turn_statements import Tally, _but_flushes, _watch

pytestmark = pytest.mark.anyio

Play = Callable[[], Awaitable[Tally]]


@pytest.fixture
async def delegated_turn(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Runtime, Play]]:
    """A runtime of the booking desk; `await play()` plays one delegated turn on a new thread: its tally."""
    # A tool running past `SLOW_TOOL` has the response calling it stored meanwhile (a loaded machine).
    monkeypatch.setattr("agent.checkpointing.SLOW_TOOL", 3600.0)
    async with open_runtime(
        desk(Counter[str]()), database_url, options=RuntimeOptions(messages_per_minute=None)
    ) as runtime:
        tally = Tally()
        _watch(runtime.db.engine, "write", tally)
        _watch(reader(runtime.db.engine), "read", tally)

        async def play() -> Tally:
            thread = await runtime.db.threads.create(user_id="ada", title="t")
            tally.transactions.clear()
            tally.reads.clear()
            tally.rollbacks = 0
            tally.counting = True
            with observing(tally.ran_compiled, on_commit=tally.committed_compiled):
                opened = await queue_run(runtime, thread.thread_id, "message", content="Book", claim=True)
                status = await run_step(runtime, opened.run.run_id, claimed=opened.claimed, span=opened.span)
            tally.counting = False
            assert status == "completed"
            return tally

        yield runtime, play


async def test_a_delegated_turn_is_three_transactions_and_no_read(
    delegated_turn: tuple[Runtime, Play], database_url: str
) -> None:
    _runtime, play = delegated_turn
    await play()  # the instructions' first claims, and every first statement, before counting
    counted = _but_flushes(await play(), database_url)
    if database_url.startswith("sqlite"):
        assert counted == snapshot(
            {
                "statements (but events)": 12,
                "write transactions (but the writer's)": 3,
                "reads": [],
                "rollbacks outside a transaction": 0,
                "transactions": [
                    ["UPDATE threads", "INSERT runs"],
                    [
                        "INSERT conversation_entries",
                        "INSERT conversation_records",
                        "INSERT conversation_entries",
                        "INSERT conversation_records",
                        "UPDATE runs",
                        "UPDATE threads",
                    ],
                    [
                        "INSERT conversation_entries",
                        "UPDATE conversation_records",
                        "UPDATE runs",
                        "UPDATE threads",
                    ],
                ],
            }
        )
    else:
        assert counted == snapshot(
            {
                "statements (but events)": 3,
                "write transactions (but the writer's)": 3,
                "reads": [],
                "rollbacks outside a transaction": 0,
                "transactions": [
                    ["WITH: UPDATE threads, INSERT runs, INSERT events, SELECT pg_notify"],
                    [
                        "WITH: INSERT conversation_records, INSERT conversation_entries, INSERT conversation_records, INSERT conversation_entries, INSERT events, INSERT records, UPDATE runs, UPDATE threads, SELECT pg_notify"
                    ],
                    [
                        "WITH: UPDATE conversation_records, INSERT conversation_entries, INSERT events, INSERT records, UPDATE runs, UPDATE threads, SELECT pg_notify"
                    ],
                ],
            }
        )


async def test_without_carrying_the_routers_response_is_a_transaction_more(
    delegated_turn: tuple[Runtime, Play], database_url: str
) -> None:
    runtime, play = delegated_turn
    runtime.db.conversations.carrying_pays = False  # read when the run starts
    await play()
    counted = _but_flushes(await play(), database_url)
    assert counted["write transactions (but the writer's)"] == 5
