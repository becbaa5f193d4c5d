"""Print the query plans of the store's hot queries on SQLite and PostgreSQL, for docs/store.md.

    python -m bench.query_plans [--postgres URL]

It fills a scratch database with one conversation of 1,000 messages and 50,000 conversation
records spread over 2,000 users, then asks each database how it runs: reading a history, listing
a user's conversations newest first, and the next page of that list (keyset pagination).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from sqlalchemy.engine import make_url

from store import SqlConversationStore
from store.conversations import _HISTORY, _NEWEST_FIRST, _RECORD_COLUMNS, _records  # pyright: ignore[reportPrivateUsage]


async def plans(url: str) -> str:
    store = await SqlConversationStore.connect(url)
    conversation = Conversation(conversation_id="long")
    for _ in range(500):
        conversation.messages += [
            ModelRequest(parts=[UserPromptPart("hello " * 30)]),
            ModelResponse(parts=[TextPart("x" * 500)]),
        ]
    await store.save(conversation, scope="user3")
    record = await store.read_record("long")
    assert record is not None
    rng = random.Random(1)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {
            "conversation_id": f"bulk{i}",
            "scope": f"user{rng.randrange(2000)}",
            "family_id": f"bulk{i}",
            "head_id": None,
            "revision": "r",
            "updated_at": base + timedelta(seconds=rng.randrange(10**7)),
            "usage": b"{}",
            "deferred_tool_requests": None,
            "forked_from": None,
            "forked_at": None,
            "branches": b"[]",
            "format_version": 1,
        }
        for i in range(50_000)
    ]
    out: list[str] = []
    async with store.engine.begin() as connection:
        await connection.execute(_records.insert(), rows)
    async with store.engine.connect() as connection:
        dialect = connection.dialect.name
        if dialect == "postgresql":
            await connection.execute(sa.text("ANALYZE"))
        first_page = (
            sa.select(*_RECORD_COLUMNS).where(_records.c.scope == "user3").order_by(*_NEWEST_FIRST).limit(20)
        )
        last = (await connection.execute(first_page)).mappings().all()[-1]
        next_page = first_page.where(
            sa.tuple_(_records.c.updated_at, _records.c.conversation_id)
            < sa.tuple_(sa.literal(last["updated_at"], _records.c.updated_at.type), last["conversation_id"])
        )
        queries = [
            ("read a history of 1,000 messages", _HISTORY, {"head_id": record.head_id, "limit": 2**62}),
            ("list a user's conversations, newest first", first_page, {}),
            ("the next page (keyset)", next_page, {}),
        ]
        for title, query, params in queries:
            compiled = query.compile(dialect=connection.dialect)
            bound = compiled.construct_params(params)
            processors = compiled._bind_processors  # pyright: ignore[reportPrivateUsage]
            assert compiled.positiontup is not None
            values = tuple(
                processors[key](bound[key]) if key in processors else bound[key]
                for key in compiled.positiontup
            )
            prefix = (
                "EXPLAIN QUERY PLAN "
                if dialect == "sqlite"
                else "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
            )
            result = (await connection.exec_driver_sql(prefix + str(compiled), values)).all()
            lines = [str(row[-1] if dialect == "sqlite" else row[0]) for row in result]
            out.append(f"#### {dialect}: {title}\n\n```\n" + "\n".join(lines) + "\n```\n")
    await store.aclose()
    return "\n".join(out)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", default=os.environ.get("DURABLE_CHAT_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print(await plans(f"sqlite+aiosqlite:///{Path(folder) / 'plans.db'}"))
    if args.postgres:
        server = make_url(args.postgres)
        name = f"dc_plans_{uuid.uuid4().hex[:8]}"
        admin = await asyncpg.connect(
            server.set(drivername="postgresql").render_as_string(hide_password=False)
        )
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            print(await plans(server.set(database=name).render_as_string(hide_password=False)))
        finally:
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
