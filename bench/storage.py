"""Storage per thread: what a plain app's threads cost on disk, by table, against their conversation's own JSON.

Issue 29's workload served in process, threads of 5 turns; its method is prose in `docs/benchmarks.md`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import sqlalchemy as sa
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ChatApp
from agent.demo.app import INSTRUCTIONS
from bench.harness.databases import connected, postgres_database
from bench.harness.options import parser, publish
from bench.harness.plain_app import answered, deltas
from bench.harness.reports import Clock, command_line, environment, table
from bench.harness.servers import SECRET, folder
from store import Database, now_utc
from web import Settings, create_app, issue_token

TURNS = 5
PROMPT = "What is my balance, and what did I order last week? Please be brief."
ANSWER = (
    "Your balance is 42 euros. Last week you ordered a pair of running shoes and two packs of "
    "socks; both shipped on Thursday and should arrive by Monday. The shoes can be returned within "
    "thirty days if they do not fit. Is there anything else about your account or your orders that "
    "I can help you with today?"
)
SYSTEM_PROMPT = (INSTRUCTIONS + "\n") * 4
"""About 3 KB of instructions, as the issue's app had."""


async def _model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    if answered(messages):
        for delta in deltas(ANSWER):
            yield delta
        return
    call_id = f"call-{uuid.uuid4().hex[:12]}"
    yield {0: DeltaToolCall(name="lookup", json_args='{"key": "balance"}', tool_call_id=call_id)}


def plain_app() -> ChatApp[None]:
    agent = Agent(FunctionModel(stream_function=_model), instructions=SYSTEM_PROMPT, name="plain")

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a value of the user's account up."""
        return json.dumps({"key": key, "value": 42, "currency": "EUR"})

    return ChatApp(agent=agent)


async def _play(url: str, data_dir: Path, threads: int) -> list[str]:
    """`threads` threads of `TURNS` turns each on a server in process; their ids."""
    settings = Settings(database_url=url, secret=SECRET, data_dir=data_dir)
    app = create_app(settings, app=plain_app())
    ids: list[str] = []
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench", timeout=60
        ) as client,
    ):
        for number in range(threads):
            # A user per thread: the default message rate limit is per user.
            headers = {"Authorization": f"Bearer {issue_token(SECRET, f'user-{number}')}"}
            thread_id = (await client.post("/api/threads", json={}, headers=headers)).json()["thread_id"]
            ids.append(thread_id)
            for _ in range(TURNS):
                answer = await client.post(
                    f"/api/threads/{thread_id}/messages", json={"content": PROMPT}, headers=headers
                )
                answer.raise_for_status()
                run_id = answer.json()["run_id"]
                await asyncio.gather(*(t for t in asyncio.all_tasks() if t.get_name() == f"run {run_id}"))
    return ids


_SIZES = {
    "sqlite": "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize) FROM dbstat s "
    "LEFT JOIN sqlite_master m ON m.name = s.name GROUP BY 1",
    "postgresql": "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'",
}


async def _sizes(url: str) -> dict[str, int]:
    """Bytes on disk of each table, its indexes (and TOAST) included."""
    async with await Database.connect(url) as db, db.engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            await connection.execute(sa.text("PRAGMA wal_checkpoint(TRUNCATE)"))
        rows = await connection.execute(sa.text(_SIZES[connection.dialect.name]))
        return {str(name): int(size) for name, size in rows.all()}


@dataclass
class Conversations:
    """What the threads' conversations hold, summed over the threads: their own JSON (as a load returns
    them), of it the instructions of every request (the same text each time), and their logs' events."""

    json: int = 0
    instructions: int = 0
    events: int = 0


async def _conversations(url: str, ids: list[str]) -> Conversations:
    found = Conversations()
    async with await Database.connect(url) as db:
        for thread_id in ids:
            conversation = await db.conversations.load(thread_id)
            assert conversation is not None
            assert len(conversation.messages) == TURNS * 4, len(conversation.messages)
            found.json += len(ModelMessagesTypeAdapter.dump_json(conversation.messages))
            found.instructions += sum(
                len(json.dumps(message.instructions))
                for message in conversation.messages
                if isinstance(message, ModelRequest) and message.instructions is not None
            )
            found.events += len(await db.events.read(thread_id))
    return found


async def _vacuum(url: str) -> None:
    """Rewrite every table, so each holds its rows and no space deletes and updates left behind."""
    async with connected(url) as connection:
        await connection.execute(sa.text("VACUUM FULL" if url.startswith("postgresql") else "VACUUM"))


async def _compact(url: str) -> None:
    """Compact the log as the server does past the replay window: every finished run's text deltas."""
    async with await Database.connect(url) as db:
        while (await db.events.compact(now_utc() + timedelta(seconds=1)))[0]:
            pass


Grown = dict[str, float]
"""Bytes per thread by table."""


async def measure(url: str, data_dir: Path, threads: int) -> tuple[Grown, Grown, Conversations, int]:
    """Per thread: bytes by table over the empty database's, as the turns left them and once the
    event log is compacted; the conversations' own JSON."""
    empty = await _sizes(url)
    ids = await _play(url, data_dir, threads)
    found = await _conversations(url, ids)
    sizes: list[Grown] = []
    for step in ("played", "compacted"):
        if step == "compacted":
            await _compact(url)
        # Twice: the first rewrite can keep row versions a closing connection still saw.
        await _vacuum(url)
        await _vacuum(url)
        after = await _sizes(url)
        grown = {name: (after[name] - empty.get(name, 0)) / threads for name in after}
        sizes.append({name: size for name, size in grown.items() if size > 0})
    return sizes[0], sizes[1], found, threads


def report(backend: str, played: Grown, compacted: Grown, found: Conversations, threads: int) -> list[str]:
    raw = found.json / threads
    instructions = found.instructions / threads

    def cells(size: float) -> list[str]:
        return [f"{size / 1024:.1f} KB", f"{size / raw:.2f}x"]

    rows = [
        [name, *cells(size), *cells(compacted.get(name, 0.0))]
        for name, size in sorted(played.items(), key=lambda item: -item[1])
    ]
    totals = [*cells(sum(played.values())), *cells(sum(compacted.values()))]
    rows.append(["**all tables**", *(f"**{cell}**" for cell in totals)])
    return [
        f"### {backend}: bytes per thread of {TURNS} turns; the conversation's own JSON is {raw / 1024:.1f} KB",
        "",
        *table(
            ["table (with its indexes)", "per thread", "over the JSON", "events compacted", "over the JSON"],
            rows,
            "lrrrr",
        ),
        "",
        f"Of the JSON, {instructions / 1024:.1f} KB ({instructions / raw:.0%}) is the same instructions in each of "
        f"{TURNS * 2} requests; a thread's log holds {found.events / threads:.0f} events.",
    ]


async def main(argv: list[str]) -> None:
    arguments = parser("bench.storage", __doc__, postgres="explicit").parse_args(argv)
    threads = 20 if arguments.quick else 200
    clock = Clock()
    sections: list[str] = []
    with folder("storage", keep=arguments.keep_logs) as logs:
        url = f"sqlite+aiosqlite:///{logs / 'storage.db'}"
        sections += report("SQLite", *await measure(url, logs / "sqlite", threads))
        if arguments.postgres:
            async with postgres_database(arguments.postgres) as pg_url:
                sections += ["", *report("PostgreSQL", *await measure(pg_url, logs / "pg", threads))]
    notes = [f"{threads} threads of {TURNS} turns, a ~3 KB system prompt, one tool call a turn", clock.line()]
    text = "\n".join([*environment(command_line("bench.storage", argv), notes=notes), "", *sections])
    publish(arguments, {"storage": text}, full=not arguments.quick)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
