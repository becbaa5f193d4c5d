"""Time to the first word for one user alone: the code before events were stored before publication, and after.

    python -m bench.first_delta [--rounds N] [--before REV] [--postgres URL] [--quick] [--no-write]

Two real server processes side by side on each database (SQLite, and PostgreSQL in a scratch
database when `--postgres` or $DURABLE_CHAT_TEST_POSTGRES_URL names a server): one runs the source
tree at `--before` (by default the last commit that published streaming events before storing
them), the other the working tree. One simulated user (`bench.web_load`) sends the demo's 3-node
turn "Where is ORD-5678?" to each in turn, alternating which goes first in every round, and
measures from sending the POST to receiving the first `text_delta`, and to `run_finished`.
Writes the first-delta section of `docs/benchmarks.md` (a full run only, unless `--write`).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from agent import EventLogSink
from bench.sections import write_section
from bench.web import (
    DOCS,
    POSTGRES_ENV,
    ROOT,
    SECRET,
    _machine,  # pyright: ignore[reportPrivateUsage] -- one description of the machine for every benchmark
    ours_argv,
    postgres_database,
    postgres_version,
    server_env,
    snapshot,
    sqlite_database,
)
from bench.web_load import Load, LoadResult, run_load
from bench.web_process import ServerProcess, start_server
from store import Database
from stream import TextDelta

BEFORE = "58c257c890f6"
"""The last commit before events were stored before publication (and guardrails held text back)."""
_PACKAGES = ("agent", "cli", "store", "stream", "web")
ROUNDS, QUICK_ROUNDS = 12, 3
TURNS = 5
"""Turns per side in each round."""
COMMIT_SAMPLES = 50


@dataclass
class Side:
    name: str
    source: Path
    first_delta: list[float] = field(default_factory=list[float])
    turn: list[float] = field(default_factory=list[float])
    errors: int = 0


def checkout(revision: str, target: Path) -> Path:
    """The packages the server imports, as they were at `revision`."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision, *_PACKAGES], cwd=ROOT, check=True, capture_output=True
    ).stdout
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


@asynccontextmanager
async def _server(
    side: Side, number: int, database: str, postgres: str | None, logs: Path
) -> AsyncGenerator[ServerProcess]:
    """A server of `side`'s source tree on a scratch database of its own."""
    scratch = (
        postgres_database(postgres)
        if database == "PostgreSQL" and postgres
        else sqlite_database(logs, number)
    )
    async with scratch as url:
        env = server_env()
        env["DURABLE_CHAT_MESSAGES_PER_MINUTE"] = "1000000"  # one user sends every turn
        server = await start_server(f"{side.name}-{database}", ours_argv(url), env, logs, cwd=side.source)
        try:
            yield server
        finally:
            await server.stop()


async def run_database(
    database: str, postgres: str | None, sides: list[Side], rounds: int, logs: Path
) -> None:
    async with AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(_server(side, number, database, postgres, logs))
            for number, side in enumerate(sides)
        ]
        for server in servers:  # warm-up: imports, the first connections, the demo data
            await run_load(server.base_url, Load(users=1, turns=2, secret=SECRET, deadline=60))
        for number in range(rounds):
            order = list(zip(sides, servers, strict=True))
            for side, server in order if number % 2 == 0 else order[::-1]:
                _record(
                    side,
                    await run_load(server.base_url, Load(users=1, turns=TURNS, secret=SECRET, deadline=60)),
                )


async def commit_latency(url: str, samples: int) -> list[float]:
    """Seconds from emitting a text delta to its publication, the run's writer idle: one commit.

    What a model that streams over time (every real provider) pays per first word, in process.
    """
    db = await Database.connect(url)
    try:
        thread = await db.threads.create(user_id="bench", title="commit latency")
        run, _ = await db.runs.create_message_run(thread.thread_id, content="hi")
        started = await db.runs.start_reserving(run.run_id, events=samples)
        assert started is not None
        claimed, _, first_id = started
        published: asyncio.Queue[float] = asyncio.Queue()
        sink = EventLogSink(
            db.events,
            thread.thread_id,
            publish=lambda _thread_id, events: published.put_nowait(time.perf_counter()),
            reserved=(first_id, samples),
            run_id=claimed.run_id,
            worker_id=claimed.lease_owner,
        )
        latencies: list[float] = []
        for n in range(samples):
            await asyncio.sleep(0.1)  # the writer is idle again, as between two model calls
            emitted = time.perf_counter()
            await sink.emit(TextDelta(run_id=claimed.run_id, part_id="p", delta=f"word {n} "))
            latencies.append(await published.get() - emitted)
        await sink.aclose()
        return latencies
    finally:
        await db.aclose()


def _record(side: Side, result: LoadResult) -> None:
    side.first_delta += result.first_delta
    side.turn += result.turn_latency
    side.errors += result.error_count


def _ms(values: list[float], quantile: float) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000:.1f}"


def render(
    results: list[tuple[str, list[Side]]],
    commits: list[tuple[str, list[float]]],
    *,
    command: str,
    before: str,
    notes: list[str],
    rounds: int,
) -> str:
    lines = [
        "## Time to the first word: stored before published",
        "",
        'One user alone on an otherwise idle server: from sending `POST …/messages` ("Where is ORD-5678?", '
        "the demo's 3-node turn: model, `lookup_order`, model) to receiving the first `text_delta` on the "
        "thread's open event stream, and to `run_finished`. Two real server processes side by side, one per "
        f"source tree: **before** (`{before}`: streaming events published at once, stored by the next "
        "checkpoint or 250 ms later) and **after** (every event stored before it is published, by one "
        "background writer per run committing what queued, at once after a pause and then at most every "
        "50 ms, unless a checkpoint takes it first; output guardrails scanning text as it streams). "
        "Rounds alternate which side goes first; each round is "
        f"{TURNS} turns per side.",
        "",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}; command: `{command}`; {rounds} rounds",
        f"- Machine: {_machine()}; Python {platform.python_version()}; "
        f"load average {os.getloadavg()[0]:.1f} at the end (other work on the machine adds noise to both sides alike)",
        *(f"- {note}" for note in notes),
        "",
        "| database | side | turns | first delta p50 (ms) | p90 | mean | `run_finished` p50 (ms) | p90 | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for database, sides in results:
        for side in sides:
            mean = f"{statistics.fmean(side.first_delta) * 1000:.1f}" if side.first_delta else "n/a"
            lines.append(
                f"| {database} | {side.name} | {len(side.first_delta)} | {_ms(side.first_delta, 0.5)} | "
                f"{_ms(side.first_delta, 0.9)} | {mean} | {_ms(side.turn, 0.5)} | {_ms(side.turn, 0.9)} | "
                f"{side.errors} |"
            )
    lines.append("")
    for database, sides in results:
        before_side, after_side = sides
        if before_side.first_delta and after_side.first_delta:
            cost = (
                statistics.median(after_side.first_delta) - statistics.median(before_side.first_delta)
            ) * 1000
            lines.append(
                f"- {database}: the first delta comes {cost:+.1f} ms later at the median (after minus before)."
            )
    lines += [
        "",
        "The demo model writes its whole reply at once, so its first delta is stored, and published, by the "
        "turn's closing checkpoint: the cost above is that transaction. A model that streams over time (any "
        "real provider) has its first delta stored by the run's idle writer at once, in a transaction of its "
        "own; in process, from `emit` to publication, the writer idle (the cost per first word, and per "
        f"pause in a stream), {COMMIT_SAMPLES} samples:",
        "",
        "| database | emit to publication p50 (ms) | p90 | max |",
        "|---|---:|---:|---:|",
    ]
    for database, latencies in commits:
        lines.append(
            f"| {database} | {_ms(latencies, 0.5)} | {_ms(latencies, 0.9)} | {_ms(latencies, 1.0)} |"
        )
    return "\n".join(lines)


async def run(
    arguments: argparse.Namespace,
) -> tuple[list[tuple[str, list[Side]]], list[tuple[str, list[float]]], list[str]]:
    logs = Path(tempfile.mkdtemp(prefix="bench-first-delta-"))
    notes: list[str] = []
    databases = ["SQLite"]
    if arguments.postgres:
        try:
            notes.append(f"PostgreSQL: {await postgres_version(arguments.postgres)}")
            databases.append("PostgreSQL")
        except (OSError, SQLAlchemyError) as error:
            where = make_url(arguments.postgres).render_as_string(hide_password=True)
            print(f"PostgreSQL skipped: {where!r}: {error!r}", flush=True)
            notes.append(f"PostgreSQL not measured: {error!r}")
    else:
        notes.append(f"PostgreSQL not measured: pass --postgres URL or set {POSTGRES_ENV}")
    results: list[tuple[str, list[Side]]] = []
    commits: list[tuple[str, list[float]]] = []
    rounds = arguments.rounds or (QUICK_ROUNDS if arguments.quick else ROUNDS)
    before_tree = checkout(arguments.before, logs / "before")
    after_tree = snapshot(logs / "after")
    for database in databases:
        sides = [Side("before", before_tree), Side("after", after_tree)]
        started = time.monotonic()
        await run_database(database, arguments.postgres, sides, rounds, logs)
        scratch = (
            postgres_database(arguments.postgres) if database == "PostgreSQL" else sqlite_database(logs, 9)
        )
        async with scratch as url:
            commits.append((database, await commit_latency(url, COMMIT_SAMPLES)))
        for side in sides:
            print(
                f"{database:<10} {side.name:<6} first delta p50 {_ms(side.first_delta, 0.5)} ms "
                f"p90 {_ms(side.first_delta, 0.9)} ms, run_finished p50 {_ms(side.turn, 0.5)} ms "
                f"({len(side.first_delta)} turns, {side.errors} errors)",
                flush=True,
            )
        print(f"{database}: {time.monotonic() - started:.0f} s", flush=True)
        results.append((database, sides))
    return results, commits, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, help=f"rounds of {TURNS} turns per side (default {ROUNDS})")
    parser.add_argument("--before", default=BEFORE, help=f"the revision to compare with (default {BEFORE})")
    parser.add_argument("--postgres", default=os.environ.get(POSTGRES_ENV), help="also on PostgreSQL")
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds; writes nothing unless --write"
    )
    parser.add_argument(
        "--write", action="store_true", help="write the docs section even for --quick/--rounds"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write the docs section")
    arguments = parser.parse_args()
    results, commits, notes = asyncio.run(run(arguments))
    command = shlex.join(["python", "-m", "bench.first_delta", *sys.argv[1:]])
    rounds = arguments.rounds or (QUICK_ROUNDS if arguments.quick else ROUNDS)
    section = render(results, commits, command=command, before=arguments.before, notes=notes, rounds=rounds)
    print()
    print(section)
    full = not arguments.quick and not arguments.rounds
    if (full or arguments.write) and not arguments.no_write:
        write_section(DOCS, "first-delta", section)
        print(f"wrote the first-delta section of {DOCS}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
