"""`purge --dry-run` on PostgreSQL at two sizes: the same stale threads among many more idle-but-recent ones.

The dry run (`Threads.purge(dry_run=True)`, what `durable-chat purge --dry-run` runs) timed, its
statements' plans shown; the method is prose in `docs/benchmarks.md`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta

import sqlalchemy as sa

from bench.harness.databases import connected, explain, postgres_database, statements
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment, table
from bench.harness.stats import median
from store import Database

STALE = 1_000
ROUNDS = 5
OLDER_THAN = timedelta(days=90)

_FILL = """
INSERT INTO threads (thread_id, user_id, title, status, created_at, updated_at, last_event_id,
                     checkpoint_event_id)
SELECT 't' || lpad(n::text, 9, '0'), 'u' || (n % 100000), 'a thread', 'idle',
       now() - make_interval(days => CASE WHEN n <= CAST(:stale AS integer) THEN 365 ELSE n % 80 END),
       now() - make_interval(days => CASE WHEN n <= CAST(:stale AS integer) THEN 365 ELSE n % 80 END),
       4, 4
FROM generate_series(CAST(:start AS integer), CAST(:stop AS integer)) AS n;
"""
_RUNS = """
INSERT INTO runs (run_id, thread_id, kind, status, attempt, checkpoints, created_at)
SELECT 'r' || lpad(n::text, 9, '0'), 't' || lpad(n::text, 9, '0'), 'message', 'completed', 1, 3,
       now() - make_interval(days => CASE WHEN n <= CAST(:stale AS integer) THEN 365 ELSE n % 80 END)
FROM generate_series(CAST(:start AS integer), CAST(:stop AS integer)) AS n;
"""


async def _grow(url: str, start: int, stop: int) -> None:
    async with connected(url) as connection:
        for statement in (_FILL, _RUNS):
            await connection.execute(sa.text(statement), {"stale": STALE, "start": start, "stop": stop})
        await connection.execute(sa.text("VACUUM ANALYZE threads"))
        await connection.execute(sa.text("VACUUM ANALYZE runs"))


async def _measure(url: str) -> tuple[float, int, str]:
    """The dry run's median seconds, how many threads it found, and the plans of what it sent (its first
    batch's statement, then the count of the threads it skips)."""
    async with await Database.connect(url) as db:
        times: list[float] = []
        found = 0
        for _ in range(ROUNDS):
            started = time.perf_counter()
            result = await db.threads.purge(OLDER_THAN, dry_run=True)
            times.append(time.perf_counter() - started)
            found = result.removed
        # Every engine's statements: the dry run reads through the store's reader engine.
        sent = await statements(lambda: db.threads.purge(OLDER_THAN, batch=200, dry_run=True))
        return median(times), found, "\n\n".join([await explain(url, *each) for each in (sent[0], sent[-1])])


async def main(argv: list[str]) -> None:
    options = parser("bench.purge", __doc__, postgres="required")
    options.add_argument(
        "--sizes", default="100000,1000000", help="thread counts, ascending, comma-separated"
    )
    arguments = options.parse_args(argv)
    sizes = [10_000, 100_000] if arguments.quick else [int(size) for size in arguments.sizes.split(",")]
    clock = Clock()
    rows: list[list[str]] = []
    plans: list[str] = []
    async with postgres_database(arguments.postgres) as url:
        await (await Database.connect(url)).aclose()  # the schema
        done = 0
        for size in sizes:
            await _grow(url, done + 1, size)
            done = size
            seconds, found, plan = await _measure(url)
            rows.append([f"{size:,}", f"{found:,}", f"{seconds * 1000:.1f} ms"])
            plans = [f"At {size:,} threads:", "", "```", plan, "```"]
    notes = [f"{STALE:,} threads idle for a year among the rest, idle under 90 days", clock.line()]
    table_lines = table(["threads", "found stale", "`purge --dry-run`, median"], rows, "rrr")
    text = "\n".join(
        [*environment(command_line("bench.purge", argv), notes=notes), "", *table_lines, "", *plans]
    )
    publish(arguments, {"purge": text}, full=not arguments.quick)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
