"""The statements and transactions one turn costs the database, pinned: adding one fails here.

A turn as the server serves it: a POST of a user message to the native API, and its run driven by
the runner to its end, three nodes (the model calls a tool, the tool answers, the model replies).
Every statement either engine of the store (the writer's and the reader's) sends is counted
through SQLAlchemy's `before_cursor_execute` (and the statements the store runs on the driver
itself, and their commits, through `store.compiled.observing`), named by its verb and its first
table (a PostgreSQL statement of several CTEs by each of its parts), and grouped by the write
transaction that committed it; every DB-API rollback a read sends is counted too (a trip a read
need not pay). On SQLite a checkpoint's statements and its commit are one trip to the driver's
thread, as is the event log's write.

Where the events go is timing: the queueing stores the run's first two (`run_started`,
`user_message`), then the event log's background writer stores them in a group commit (no
sooner than 50 ms after the previous one, the queueing's included), a checkpoint takes those
still queued into its own transaction. A tool's result is only ever stored by the checkpoint that
stores it in the conversation, before the model is asked again: a turn's checkpoints are the
call's, the result's and the end's. So the writer's transactions are pinned by their shape,
not their number (usually none: the checkpoints take every event), and the statements storing
events inside a checkpoint or the queueing are left out of it (on PostgreSQL the checkpoint's one
statement always holds them, with no events to store or some).

A server's first save of its agent's instructions claims them in a transaction of its own, before
the checkpoint's (`store.instructions`), and not again for an hour: a server's first turn has that
one more transaction, a later turn (the AI SDK chat's second) none.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest
from inline_snapshot import snapshot
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from store import reader
from store.compiled import observing
from web import Settings, create_app, issue_token
from web.services import Services

from .core_app import core_app
from .scripted import Calls, Script

pytestmark = pytest.mark.anyio

SECRET = "turn-statements-secret"


@dataclass
class Tally:
    """What the store sent the database: write transactions, reads, DB-API rollbacks outside a transaction."""

    transactions: list[tuple[str, ...]] = field(default_factory=list[tuple[str, ...]])
    """Each committed write transaction, as its statements in order."""
    reads: list[str] = field(default_factory=list[str])
    rollbacks: int = 0
    counting: bool = False
    _open: dict[int, list[str]] = field(default_factory=dict[int, list[str]])
    _compiled: dict[int, list[str]] = field(default_factory=dict[int, list[str]])
    """Statements the store's hot path ran on the driver (`store.compiled`), by task, not yet committed."""

    def ran_compiled(self, sql: str) -> None:
        """A statement of the hot path: a read on its own, or part of the task's next commit (on the driver or not)."""
        if not self.counting:
            return
        if _named(sql).startswith("SELECT") and id(asyncio.current_task()) not in self._compiled:
            self.reads.append(_named(sql))
        else:
            self._compiled.setdefault(id(asyncio.current_task()), []).append(_named(sql))

    def committed_compiled(self) -> None:
        """A commit on the driver: the task's statements since its last commit."""
        statements = self._compiled.pop(id(asyncio.current_task()), [])
        if self.counting:
            self.transactions.append(tuple(statements))

    def written(self, connection: Connection, sql: str) -> None:
        if self.counting:
            self._open.setdefault(id(connection), []).append(_named(sql))

    def committed(self, connection: Connection) -> None:
        statements = self._compiled.pop(id(asyncio.current_task()), []) + self._open.pop(id(connection), [])
        if self.counting:
            self.transactions.append(tuple(statements))

    def summary(self) -> dict[str, object]:
        """The turn's transactions, but the event log's group commits apart: how many there are is timing."""
        flushes = [t for t in self.transactions if _flush(t)]
        turn = [[s for s in t if s not in _EVENTS] for t in self.transactions if not _flush(t)]
        shapes = sorted(set(flushes))
        return {
            "statements (but events)": sum(map(len, turn)) + len(self.reads),
            "write transactions (but the writer's)": len(turn),
            "reads": sorted(self.reads),
            "rollbacks outside a transaction": self.rollbacks,
            "transactions": turn,
            "event flush": [list(shape) for shape in shapes],
        }


_EVENTS = frozenset({"INSERT events", "SELECT pg_notify"})
"""Storing events (and, on PostgreSQL, notifying other processes of them)."""


def _flush(transaction: tuple[str, ...]) -> bool:
    """A group commit of the event log's writer: events, and nothing else of the turn."""
    parts = [part for statement in transaction for part in _parts(statement)]
    return "INSERT events" in parts and set(parts) <= {"INSERT events", "SELECT runs", "SELECT pg_notify"}


def _named(sql: str) -> str:
    """`VERB table`: what a statement does, and to which table first; `WITH: …` and its parts' names."""
    if sql.lstrip().upper().startswith("WITH"):
        # One statement doing several things (PostgreSQL's compiled writes): each of its CTEs.
        return "WITH: " + ", ".join(_named(body) for body in re.split(r"\bAS\s*\(\s*", sql)[1:])
    if sql.lstrip().upper().startswith("SELECT PG_NOTIFY"):
        return "SELECT pg_notify"
    verb = sql.split()[0].upper()
    match = re.search(r"\b(?:FROM|INTO|UPDATE)\s+\"?(\w+)", sql, flags=re.IGNORECASE)
    return f"{verb} {match.group(1) if match else ''}".strip()


def _parts(name: str) -> list[str]:
    return name.removeprefix("WITH: ").split(", ") if name.startswith("WITH: ") else [name]


def _watch(engine: AsyncEngine, name: str, tally: Tally) -> None:
    if name == "write":

        def on_write(connection: Connection, _cursor: Any, sql: str, *_: Any) -> None:
            tally.written(connection, sql)

        event.listen(engine.sync_engine, "before_cursor_execute", on_write)
        event.listen(engine.sync_engine, "commit", tally.committed)
        return

    def on_read(_connection: Connection, _cursor: Any, sql: str, *_: Any) -> None:
        if tally.counting:
            tally.reads.append(_named(sql))

    def on_rollback(connection: Connection) -> None:
        # The end of a read's autobegun "transaction": a DB-API rollback trip, unless the dialect skips it.
        dialect, dbapi_connection = connection.dialect, connection.connection.dbapi_connection
        assert dbapi_connection is not None
        skipped = dialect.skip_autocommit_rollback and dialect.detect_autocommit_setting(dbapi_connection)
        if tally.counting and not skipped:
            tally.rollbacks += 1

    event.listen(engine.sync_engine, "before_cursor_execute", on_read)
    event.listen(engine.sync_engine, "rollback", on_rollback)


Turn = Callable[[], Awaitable[Tally]]


class ChatTurn(Protocol):
    """An AI SDK chat's turn (`ai_sdk_turn`): its second, or with `first` its first."""

    def __call__(self, *, first: bool = False) -> Awaitable[Tally]: ...


@asynccontextmanager
async def _served(
    database_url: str, tmp_path: Path, script: Script, **app_options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Services, Tally, dict[str, str]]]:
    """`core_app` on `script` (with `app_options`), served in process, its statements tallied (once `tally.counting`)."""
    async with AsyncExitStack() as stack:
        settings = Settings(database_url=database_url, secret=SECRET, data_dir=tmp_path)
        app = create_app(settings, app=core_app(script, **app_options))
        await stack.enter_async_context(app.router.lifespan_context(app))
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=30)
        )
        services: Services = app.state.services
        if services.listener is not None:
            # Connected, it reads every followed thread once (`Relay.catch_up`): not a turn's read.
            await services.listener.wait_connected()
        tally = Tally()
        stack.enter_context(observing(tally.ran_compiled, on_commit=tally.committed_compiled))
        _watch(services.db.engine, "write", tally)
        _watch(reader(services.db.engine), "read", tally)
        yield client, services, tally, {"Authorization": f"Bearer {issue_token(SECRET, 'alice')}"}


async def _runs_ended() -> None:
    """Wait for the runs driven here (the tasks `Runner` names after them)."""
    await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name().startswith("run ")))


_TURN = [Calls([("lookup", {"key": "balance"})]), "The balance is 42."]


@asynccontextmanager
async def _one_turn(
    database_url: str, tmp_path: Path, *, read_only: tuple[str, ...] = ()
) -> AsyncIterator[Turn]:
    """Serves `core_app` in process (its tool declared read-only, or not); `await play()` plays one
    3-node turn and returns its tally."""
    async with _served(database_url, tmp_path, Script(_TURN), read_only_tools=read_only) as (
        client,
        services,
        tally,
        headers,
    ):

        async def play() -> Tally:
            thread = (await client.post("/api/threads", json={}, headers=headers)).json()
            tally.counting = True
            answer = await client.post(
                f"/api/threads/{thread['thread_id']}/messages", json={"content": "Balance?"}, headers=headers
            )
            assert answer.status_code == 202, answer.text
            run_id = answer.json()["run_id"]
            (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"run {run_id}"]
            await task
            tally.counting = False
            run = await services.db.runs.get(run_id)
            # The lookup's call waits for its result's checkpoint, declared read-only or not.
            assert (run.status, run.checkpoints) == ("completed", 2)
            return tally

        yield play


@pytest.fixture
async def one_turn(database_url: str, tmp_path: Path) -> AsyncIterator[Turn]:
    async with _one_turn(database_url, tmp_path) as play:
        yield play


@pytest.fixture
async def ai_sdk_turn(database_url: str, tmp_path: Path) -> AsyncIterator[ChatTurn]:
    """`await ai_sdk_turn()` plays the second 3-node turn of an AI SDK chat (one request, its stream
    read to the end); `await ai_sdk_turn(first=True)` its first, which makes the chat's thread."""
    async with _served(database_url, tmp_path, Script(_TURN * 2)) as (client, _services, tally, headers):

        async def play(*, first: bool = False) -> Tally:
            chat_id = str(uuid.uuid4())

            async def turn(message_id: str) -> None:
                message = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "Balance?"}]}
                body = {"id": chat_id, "messages": [message], "trigger": "submit-message"}
                async with client.stream("POST", "/api/ai-sdk/chat", json=body, headers=headers) as answer:
                    assert answer.status_code == 200
                    streamed = (await answer.aread()).decode()
                assert '"type":"text-delta"' in streamed
                assert '"type":"finish","finishReason":"stop"' in streamed
                await _runs_ended()

            tally.counting = first
            await turn("first")  # the chat's thread is made here
            tally.counting = not first
            if not first:
                await turn("second")
            tally.counting = False
            return tally

        yield play


def _but_flushes(tally: Tally, database_url: str) -> dict[str, object]:
    """The tally's summary without the event writer's transactions, checked to hold events and the
    run's fence only: whether there are any is timing."""
    counted = tally.summary()
    flushes = counted.pop("event flush")
    if database_url.startswith("sqlite"):
        assert flushes in ([], [["INSERT events", "SELECT runs"]])
    else:
        assert flushes in ([], [["WITH: INSERT events, SELECT runs, SELECT pg_notify"]])
    return counted


async def test_a_turn_costs_these_statements(one_turn: Turn, database_url: str) -> None:
    counted = _but_flushes(await one_turn(), database_url)
    if database_url.startswith("sqlite"):
        assert counted == snapshot(
            {
                "statements (but events)": 11,
                "write transactions (but the writer's)": 4,
                "reads": [],
                "rollbacks outside a transaction": 0,
                "transactions": [
                    ["UPDATE threads", "INSERT runs"],
                    ["INSERT conversation_instructions"],
                    [
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
                "statements (but events)": 4,
                "write transactions (but the writer's)": 4,
                "reads": [],
                "rollbacks outside a transaction": 0,
                "transactions": [
                    ["WITH: UPDATE threads, INSERT runs, INSERT events, SELECT pg_notify"],
                    ["INSERT conversation_instructions"],
                    [
                        "WITH: INSERT conversation_records, INSERT conversation_entries, INSERT events, INSERT records, UPDATE runs, UPDATE threads, SELECT pg_notify"
                    ],
                    [
                        "WITH: UPDATE conversation_records, INSERT conversation_entries, INSERT events, INSERT records, UPDATE runs, UPDATE threads, SELECT pg_notify"
                    ],
                ],
            }
        )


async def test_declaring_the_tool_read_only_changes_no_statement(
    one_turn: Turn, database_url: str, tmp_path: Path
) -> None:
    # A step's call waits for its result's checkpoint whether or not the app promises the tool is
    # read-only (`ChatApp.read_only_tools`): the promise no longer buys a transaction.
    undeclared = _but_flushes(await one_turn(), database_url)
    (tmp_path / "declared").mkdir()
    async with _one_turn(database_url, tmp_path / "declared", read_only=("lookup",)) as play:
        declared = _but_flushes(await play(), database_url)
    assert declared == undeclared
    assert declared["write transactions (but the writer's)"] == 4  # with the instructions' claim


async def test_an_ai_sdk_turn_reads_nothing(ai_sdk_turn: ChatTurn, database_url: str) -> None:
    # The run queued straight on the chat's derived thread (no read of it first); its stream started
    # from the run's reserved ids, subscribed before the run could publish (no replay read); and no
    # load of the history: queueing read the conversation's revision, which this worker saved last.
    counted = (await ai_sdk_turn()).summary()
    assert counted["reads"] == []
    assert counted["write transactions (but the writer's)"] == 3
    assert counted["rollbacks outside a transaction"] == 0


async def test_a_new_chats_first_turn_reads_nothing_either(ai_sdk_turn: ChatTurn) -> None:
    # Its queueing makes the chat's thread in the same trip (`NewRun.create_unless`).
    counted = (await ai_sdk_turn(first=True)).summary()
    assert counted["reads"] == []
    assert counted["write transactions (but the writer's)"] == 4  # with the instructions' claim
    assert counted["rollbacks outside a transaction"] == 0


async def test_an_ag_ui_chats_first_turn_reads_nothing(database_url: str, tmp_path: Path) -> None:
    # Queued straight on the chat's thread, made in the same trip, as the AI SDK's.
    async with _served(database_url, tmp_path, Script(_TURN)) as (client, _services, tally, headers):
        body = {
            "threadId": str(uuid.uuid4()),
            "runId": "r1",
            "messages": [{"id": "u1", "role": "user", "content": "Balance?"}],
        }
        tally.counting = True
        async with client.stream("POST", "/api/ag-ui", json=body, headers=headers) as answer:
            assert answer.status_code == 200
            streamed = (await answer.aread()).decode()
        await _runs_ended()
        tally.counting = False
    assert '"type":"RUN_FINISHED"' in streamed
    counted = tally.summary()
    assert counted["reads"] == []
    assert counted["write transactions (but the writer's)"] == 4  # with the instructions' claim
