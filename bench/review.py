"""Human review: the queue query and the deadline sweep as the approvals table grows, and what a
hanging webhook endpoint and a durable pause cost a turn; the method is prose in `docs/benchmarks.md`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from starlette.applications import Starlette

from agent import ChatApp, Review
from agent.demo import staffed_shop_app
from bench.harness.databases import (
    Dialect,
    connected,
    explain,
    postgres_database,
    postgres_version,
    statements,
)
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment, section, table
from bench.harness.stats import median, ms, paired_ratio, percentile, times
from bench.harness.turns import Turn, alternate, bench_runtime, drain, queued
from store import Database, now_utc
from web import Settings, WebhookSender, create_app, issue_token

SIZES = (1_000, 10_000, 100_000, 1_000_000)
DUE = 50
ROUNDS = 200
BLOCKS, PAIRS = 5, 20
WARMUP, REPEATS = 3, 60
PAUSE_TARGET = 1.3
ROLES = {"support", "managers"}
"""The staffed shop's reviewer: the queue of two roles, merged."""
SECRET = "bench-review-secret"
WEBHOOK_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

_FILL = """
INSERT INTO threads (thread_id, user_id, title, status, created_at, updated_at, last_event_id,
                     checkpoint_event_id)
SELECT 't' || g, 'u' || (g % 1000), 'thread ' || g, 'idle', now(), now(), 0, 0
FROM generate_series(1, :threads) AS g;
INSERT INTO approvals (thread_id, tool_call_id, run_id, tool_name, args, status, created_at, reviewers,
                       expires_at, decided_at, decided_by)
SELECT 't' || (g % :threads + 1), 'c' || g, 'r' || g, 'issue_refund', '\\x7b7d'::bytea,
       CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'approved' END,
       now() - make_interval(secs => :calls - g),
       CASE WHEN g % 20 = 0 OR g % 2 = 1 THEN 'support' ELSE 'managers' END,
       CASE WHEN g % 10 <> 0 THEN NULL
            WHEN g <= :due THEN now() - interval '1 minute'
            ELSE now() + interval '4 hours' END,
       CASE WHEN g % 10 <> 0 THEN now() END,
       CASE WHEN g % 10 <> 0 THEN 'sam' END
FROM generate_series(1, :calls) AS g;
"""


async def _filled(server: str, calls: int, stack: Any) -> tuple[str, Database]:
    url = await stack.enter_async_context(postgres_database(server))
    db = await Database.connect(url)
    stack.push_async_callback(db.aclose)
    started = time.monotonic()
    async with connected(url) as connection:
        for statement in filter(str.strip, _FILL.split(";")):
            await connection.execute(
                sa.text(statement), {"threads": max(calls // 10, 1_000), "calls": calls, "due": DUE * 10}
            )
        await connection.execute(sa.text("ANALYZE"))
    print(f"{calls:>9,} approvals made in {time.monotonic() - started:.1f} s", flush=True)
    return url, db


async def _plans(url: str, db: Database) -> str:
    """PostgreSQL's plans of the statements the store runs for the queue, then the sweep."""

    async def run() -> None:
        await db.reviews.queue(ROLES, status="pending", limit=21)
        await db.reviews.due(now_utc())

    ran = [(sql, args) for sql, args in await statements(run) if sql.lstrip().upper().startswith("SELECT")]
    queue, sweep = [sent for sent in ran if "approvals" in sent[0]][-2:]
    return f"{await explain(url, *queue)}\n\n{await explain(url, *sweep)}"


CALLS: dict[str, Callable[[Database], Awaitable[object]]] = {
    "queue": lambda db: db.reviews.queue({"support"}, status="pending", limit=21),
    "sweep": lambda db: db.reviews.due(now_utc()),
    "both": lambda db: db.reviews.queue(ROLES, status="pending", limit=21),
    "decided": lambda db: db.reviews.queue(ROLES, status="decided", limit=21),
}
"""What each round times on every database, in this order; the table's columns are in `COLUMNS`'."""
COLUMNS = ("queue", "both", "decided", "sweep")


async def queue_and_sweep(server: str, sizes: Sequence[int], rounds: int) -> tuple[list[str], str]:
    async with AsyncExitStack() as stack:
        dbs = [await _filled(server, n, stack) for n in sizes]
        plans = await _plans(*dbs[-1])
        samples: dict[tuple[int, str], dict[int, float]] = {(n, kind): {} for n in sizes for kind in CALLS}
        for number in range(rounds):
            for n, (_, db) in zip(sizes, dbs, strict=True):
                for kind, call in CALLS.items():
                    started = time.perf_counter()
                    await call(db)
                    samples[(n, kind)][number] = time.perf_counter() - started
        due = len(await dbs[-1][1].reviews.due(now_utc()))
    assert due == DUE, f"the sweep found {due} due calls, not {DUE}"
    rows = [
        (
            f"{n:,}",
            f"{n // 10:,}",
            *(
                f"{ms(median(samples[n, kind].values()), 2)}"
                f" ({times(paired_ratio(samples[n, kind], samples[sizes[0], kind]))})"
                for kind in COLUMNS
            ),
        )
        for n in sizes
    ]
    lines = table(
        "approvals | pending | queue page, support: median ms (vs smallest) | queue page, support and managers"
        " | decided page, support and managers | sweep read",
        rows,
        "rrrrrr",
    )
    return lines, plans


class _Endpoint:
    """A local webhook endpoint: one that accepts every connection and never answers (`answer=False`,
    counting connections), or one answering every request 204 (counting them)."""

    def __init__(self, *, answer: bool) -> None:
        self.answer, self.count, self.url = answer, 0, ""
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            if not self.answer:
                self.count += 1
                await reader.read()  # until the sender gives up and closes
            while self.answer and (head := await reader.readuntil(b"\r\n\r\n")):
                lengths = [
                    line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
                ]
                await reader.readexactly(int(lengths[0].split(b":")[1]) if lengths else 0)
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                self.count += 1
        writer.close()

    async def __aenter__(self) -> _Endpoint:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/hooks"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


async def _shop(folder: Path, name: str, webhook: str | None, stack: Any) -> httpx.AsyncClient:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{folder / f'{name}.db'}",
        model="demo",
        secret=SECRET,
        deadline_poll_seconds=3600,
        webhook_urls=(webhook,) if webhook else (),
        webhook_secret=WEBHOOK_SECRET if webhook else None,
    )
    app: Starlette = create_app(settings, staffed_shop_app(delay=0))
    await stack.enter_async_context(app.router.lifespan_context(app))
    transport = httpx.ASGITransport(app=app)
    return await stack.enter_async_context(
        httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60)
    )


async def _turn(client: httpx.AsyncClient, user: str) -> float:
    # A user of its own per turn: the shop's message-rate guardrail would stop one user's 60 turns.
    headers = {"Authorization": f"Bearer {issue_token(SECRET, user)}"}
    thread = (await client.post("/api/threads", json={}, headers=headers)).json()["thread_id"]
    started = time.perf_counter()
    sent = await client.post(
        f"/api/threads/{thread}/messages", json={"content": "Please refund ORD-9012"}, headers=headers
    )
    assert sent.status_code == 202, sent.text
    # Polled as a client would; the 2 ms step is the same on both sides of the ratio.
    url = f"/api/threads/{thread}"
    async with asyncio.timeout(60):  # a turn that never pauses (a guardrail, a failure) stops the run
        while (await client.get(url, headers=headers)).json()["status"] != "awaiting_approval":  # noqa: ASYNC110
            await asyncio.sleep(0.002)
    return time.perf_counter() - started


async def webhook_cost(blocks: int, pairs: int) -> list[str]:
    with tempfile.TemporaryDirectory() as directory:
        async with AsyncExitStack() as stack:
            hanging = await stack.enter_async_context(_Endpoint(answer=False))
            plain = await _shop(Path(directory), "plain", None, stack)
            hooked = await _shop(Path(directory), "hooked", hanging.url, stack)
            for client in (plain, hooked):
                await _turn(client, "warm-up")
            async with asyncio.timeout(30):  # measure while the sender is stuck on the endpoint
                while hanging.count == 0:  # noqa: ASYNC110 (a counter another task bumps)
                    await asyncio.sleep(0.01)
            took: dict[str, dict[int, float]] = {"hooked": {}, "plain": {}}
            for pair in range(blocks * pairs):  # A/B, then B/A: each side goes first every other pair
                for side in ("plain", "hooked") if pair % 2 else ("hooked", "plain"):
                    took[side][pair] = await _turn(hooked if side == "hooked" else plain, f"u{pair}")
            held = hanging.count
    assert held > 0, "the hanging endpoint was never called"
    mine, theirs = took["hooked"], took["plain"]
    ratios = [mine[n] / theirs[n] for n in mine]
    by_block = [
        paired_ratio({n: mine[n] for n in block}, {n: theirs[n] for n in block})
        for block in (range(b * pairs, (b + 1) * pairs) for b in range(blocks))
    ]
    rows = [
        ("no webhook", ms(median(theirs.values())), times(1.0), "", ""),
        (
            "webhook endpoint that never answers",
            ms(median(mine.values())),
            times(paired_ratio(mine, theirs)),
            f"{times(percentile(ratios, 0.25))} to {times(percentile(ratios, 0.75))}",
            f"{times(min(by_block))} to {times(max(by_block))}",
        ),
    ]
    return [
        *table(
            "the staffed shop | turn to the pause, median ms | ratio (median of pairs) | pairs' middle half"
            f" | {blocks} blocks' medians",
            rows,
            "lrrrr",
        ),
        "",
        f"{blocks * pairs} pairs of turns, interleaved, each side first in every other pair; the hanging"
        f" endpoint held {held} connections meanwhile.",
    ]


def _pausing_agent() -> Agent[Any, str]:
    """One agent, one tool needing approval: the model asks for a refund, which pauses the turn."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        yield "Let me refund that order for you. "
        args = json.dumps({"order_id": "ORD-9012", "amount": 149.99})
        yield {0: DeltaToolCall(name="issue_refund", json_args=args, tool_call_id=f"refund_{len(messages)}")}

    agent = Agent(FunctionModel(stream_function=stream, model_name="bench-review"), name="shop")

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount: float) -> str:  # pyright: ignore[reportUnusedFunction]
        """Refund an order."""
        return f"Refunded {amount} on {order_id}"

    return agent


async def pause_cost(database: Dialect, server: str, warmup: int, repeats: int) -> list[str]:
    """A turn that pauses for a reviewer, its webhook sent, against the same turn by pydantic-ai alone."""
    agent = _pausing_agent()
    with tempfile.TemporaryDirectory() as directory:
        async with AsyncExitStack() as stack:
            app = ChatApp(
                agent=agent, review=lambda call: Review(by="support", expires_after=timedelta(hours=4))
            )
            runtime = await stack.enter_async_context(
                bench_runtime(app, database, Path(directory), "pause", server)
            )
            endpoint = await stack.enter_async_context(_Endpoint(answer=True))
            # Polling each second, as served.
            sender = WebhookSender(runtime.db, [endpoint.url], WEBHOOK_SECRET)
            await sender.start()
            stack.push_async_callback(sender.aclose)

            async def ours() -> Turn:  # queued and run within the turn: the pause's whole cost
                return await queued(
                    runtime, None, "Refund ORD-9012", expect="awaiting_approval", queue_in_turn=True
                )

            async def bare() -> None:
                result = await agent.run(
                    "Refund ORD-9012", output_type=[str, DeferredToolRequests], event_stream_handler=drain
                )
                assert isinstance(result.output, DeferredToolRequests), result.output

            async def prepared() -> Turn:
                return bare

            samples = await alternate({"ours": ours, "bare": prepared}, warmup, repeats, database)
            mine, theirs = samples["ours"], samples["bare"]
            async with asyncio.timeout(60):  # every pause's webhook delivered
                while endpoint.count < warmup + repeats:  # noqa: ASYNC110 (a counter another task bumps)
                    await asyncio.sleep(0.01)
    ratios = [mine[n] / theirs[n] for n in mine]
    ratio = paired_ratio(mine, theirs)
    verdict = "meets" if ratio <= PAUSE_TARGET else "misses"
    return [
        database,
        ms(median(mine.values())),
        ms(median(theirs.values())),
        times(ratio),
        f"{times(percentile(ratios, 0.25))} to {times(percentile(ratios, 0.75))}",
        f"{verdict} ≤ {PAUSE_TARGET}x",
    ]


async def main(argv: Sequence[str]) -> int:
    options = parser("bench.review", __doc__, postgres="required")
    options.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    arguments = options.parse_args(argv)
    quick = bool(arguments.quick)
    sizes = [1_000, 10_000] if quick else sorted(arguments.sizes)
    if not arguments.postgres:
        options.error("needs PostgreSQL: --postgres URL or $DURABLE_CHAT_TEST_POSTGRES_URL")
    clock = Clock()
    version = await postgres_version(arguments.postgres)
    queue_lines, plans = await queue_and_sweep(arguments.postgres, sizes, 20 if quick else ROUNDS)
    hook_lines = await webhook_cost(*((1, 4) if quick else (BLOCKS, PAIRS)))
    warmup, repeats = (1, 3) if quick else (WARMUP, REPEATS)
    pauses = [
        await pause_cost(database, arguments.postgres, warmup, repeats)
        for database in ("SQLite", "PostgreSQL")
    ]
    notes = [
        f"{ROUNDS} rounds; the machine is shared and loaded (load average {clock.load_start:.1f} at the start,"
        f" {os.getloadavg()[0]:.1f} at the end): read the ratios, not the times"
    ]
    text = [
        *section(environment(command_line("bench.review", argv), postgres=version, notes=notes)),
        *queue_lines,
        "",
        f"Plans at {sizes[-1]:,} approvals (`EXPLAIN` of the statements the store ran):",
        "",
        "```",
        *plans.splitlines(),
        "```",
        "",
        *hook_lines,
        "",
        *table(
            "database | a turn pausing for support, its webhook sent, median ms | pydantic-ai alone, nothing"
            " stored, median ms | ratio (median of rounds) | rounds' middle half | target",
            pauses,
            "lrrrrl",
        ),
        "",
        f"{repeats} rounds after {warmup} to warm up, each side first in every other round.",
        "",
        f"Run in {clock.seconds:.0f} s.",
    ]
    publish(arguments, {"review": "\n".join(text)}, full=not quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
