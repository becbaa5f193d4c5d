"""What durability costs a step: `run_step` against the same agent run with no persistence.

    python -m bench.step [--quick] [--postgres URL] [--no-write] [--profile]

Both sides run the demo model's 3-node turn ("Where is ORD-5678?": model, `lookup_order`, model),
streamed and turned into the same stream events; only ours loads and checkpoints the conversation,
keeps the run's row and appends its events to the log. They alternate turn by turn in one process
on one database (the tool's order lookup reads it on both sides), and the medians are compared.
Prints the results and writes the step section of `docs/benchmarks.md` (a full run only, unless
`--write`).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import os
import pstats
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from agent import (
    EVENT_BLOCK,
    RunRecords,
    RunScope,
    Runtime,
    RuntimeOptions,
    ToolLedger,
    new_event,
    open_runtime,
    opening_events,
    run_step,
)
from agent.demo import shop_app
from bench.sections import write_section
from bench.step_baseline import run_bare
from bench.step_harness import Harness
from bench.step_report import Case, Report, render
from bench.step_timers import Timers, Variant
from store import Claimed, Database

POSTGRES_ENV = "DURABLE_CHAT_TEST_POSTGRES_URL"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
PROMPT = "Where is ORD-5678?"
EARLIER_TURNS = (
    "Hello there",
    "Where is ORD-9012?",
    "What plan is alice@example.com on?",
    "How long does shipping take?",
    "Where is ORD-3456?",
    "What is your warranty?",
    "Can I make returns?",
    "Where is ORD-5678?",
    "Thanks, that helps",
)
"""The nine turns before the measured one in the long-conversation case; none pauses for approval."""


Turn = Callable[[], Awaitable[None]]
"""One prepared turn: calling it runs the turn and nothing else, so that is what is timed."""


@dataclass(frozen=True)
class Settings:
    warmup: int = 3
    repeats: int = 30
    breakdown_turns: int = 12


FULL = Settings()
QUICK = Settings(warmup=1, repeats=3, breakdown_turns=2)


@dataclass
class Bench:
    """One database with the demo shop on it, shared by both sides."""

    runtime: Runtime
    closing: AsyncExitStack
    history: list[ModelMessage]
    """The conversation after `EARLIER_TURNS`, which a long case's thread starts from."""
    harness: Harness | None = None
    """pydantic-ai-harness's `StepPersistence` on SQLite, when installed: a third side."""

    @property
    def db(self) -> Database:
        return self.runtime.db

    @classmethod
    async def open(cls, url: str) -> Bench:
        closing = AsyncExitStack()
        # One user sends every benchmark message: the per-user message rate would block them.
        options = RuntimeOptions(messages_per_minute=None)
        runtime = await closing.enter_async_context(open_runtime(shop_app(delay=0), url, options=options))
        bench = cls(runtime, closing, [])
        db = runtime.db
        # Played once through the step itself; every long case then starts from a copy of it.
        thread = await db.threads.create(user_id="bench", title="history")
        for content in EARLIER_TURNS:
            run, _ = await db.runs.create_message_run(thread.thread_id, content=content)
            await bench.complete(run.run_id)
        loaded = await db.conversations.load(thread.thread_id)
        assert loaded is not None
        bench.history = loaded.messages
        return bench

    async def queue(self, long: bool) -> Claimed:
        """A new thread (holding a copy of `history` if `long`) with `PROMPT` queued as its next run,
        claimed by this worker as the server's POST queues it (`web.Runner.queue`): with the run's
        opening events (`run_started`, `user_message`) stored in the same transaction."""
        thread = await self.db.threads.create(user_id="bench", title="bench")
        if long:
            await self.db.conversations.save(
                Conversation(conversation_id=thread.thread_id, messages=copy.deepcopy(self.history))
            )
        run_id = str(uuid.uuid4())
        queued = await self.db.runs.queue(
            thread.thread_id,
            "message",
            content=PROMPT,
            claim_events=EVENT_BLOCK,
            run_id=run_id,
            opening=[new_event(event) for event in opening_events(run_id, "message", PROMPT)],
        )
        assert queued.claimed is not None
        return queued.claimed

    async def ours(self, long: bool) -> Turn:
        """Ours, ready to run: a run queued on a new thread, claimed as the POST that queued it."""
        claimed = await self.queue(long)
        return lambda: self.complete(claimed.run.run_id, claimed)

    async def bare(self, long: bool, *, harness: bool = False) -> Turn:
        """The same turn with no persistence (or the harness's), ready to run on a copy of the same history.

        The harness's side gets the history from memory too, as the bare turn does: its store is
        written, not read (generous to it; loading it back is what ours' turn pays for).
        """
        conversation = Conversation(messages=copy.deepcopy(self.history) if long else [])
        runtime = self.runtime
        thread_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
        scope = RunScope(
            thread_id=thread_id,
            run_id=run_id,
            user_id="bench",
            attempt=1,
            records=RunRecords(),
            ledger=ToolLedger(runtime.db.ledger, thread_id, run_id),
            engine=runtime.db.engine,
        )

        async def turn() -> None:
            extra = [self.harness.capability()] if harness and self.harness is not None else []
            output = await run_bare(runtime, scope, PROMPT, conversation, extra)
            if "ORD-5678" not in output:
                raise RuntimeError(f"the turn with no persistence answered {output!r}")

        return turn

    async def complete(self, run_id: str, claimed: Claimed | None = None) -> None:
        status = await run_step(self.runtime, run_id, claimed=claimed)
        if status != "completed":
            raise RuntimeError(f"run {run_id!r} ended {status!r}, not 'completed'")

    async def aclose(self) -> None:
        await self.closing.aclose()


CASES: tuple[tuple[str, bool], ...] = (
    ("1st turn of a new thread", False),
    (f"{len(EARLIER_TURNS) + 1}th turn of a thread", True),
)


async def measure(bench: Bench, settings: Settings, title: str) -> list[Case]:
    """Both sides of every case, alternating which goes first, warm-ups dropped."""
    sides: dict[str, Callable[[bool], Awaitable[Turn]]] = {"ours": bench.ours, "bare": bench.bare}
    if bench.harness is not None:
        sides["harness"] = lambda long: bench.bare(long, harness=True)
    names = list(sides)
    samples: dict[tuple[str, str], list[float]] = {}
    rounds = settings.warmup + settings.repeats
    for number in range(rounds):
        for label, long in CASES:
            for side in names[number % len(names) :] + names[: number % len(names)]:
                turn = await sides[side](long)
                gc.collect()
                started = time.perf_counter()
                await turn()
                if number >= settings.warmup:
                    samples.setdefault((label, side), []).append(time.perf_counter() - started)
        print(f"\r{title}: round {number + 1}/{rounds}", end="", flush=True)
    print(flush=True)
    return [
        Case(
            label,
            ours=statistics.median(samples[label, "ours"]),
            bare=statistics.median(samples[label, "bare"]),
            rounds=settings.repeats,
            harness=statistics.median(samples[label, "harness"]) if (label, "harness") in samples else None,
        )
        for label, _ in CASES
    ]


async def breakdown(bench: Bench, turns: int) -> Timers:
    """Where ours spends its time on a new thread's turn, against the same turn with no persistence.

    Rounds of three turns in a rotating order: ours with its store calls timed, ours with the event
    log's appends skipped, and the turn with no persistence. Then, apart so the profiler's cost
    skews no wall time, ours and the bare turn alternately under cProfile.
    """
    timers = Timers.around(bench.db)
    variants: tuple[Variant, ...] = ("ours", "unlogged", "bare")
    for number in range(turns):
        for variant in variants[number % 3 :] + variants[: number % 3]:
            turn = await (bench.bare(False) if variant == "bare" else bench.ours(False))
            gc.collect()
            await timers.sample(variant, turn)
    for _ in range(turns):
        for variant in ("ours", "bare"):
            turn = await (bench.bare(False) if variant == "bare" else bench.ours(False))
            profiler = timers.profiler(variant)
            profiler.enable()
            await turn()
            profiler.disable()
        timers.profiled_turns += 1
    return timers


@asynccontextmanager
async def sqlite_database(directory: str | None) -> AsyncGenerator[str]:
    folder = Path(tempfile.mkdtemp(prefix="bench-step-", dir=directory))
    try:
        yield f"sqlite+aiosqlite:///{folder / 'bench.db'}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@asynccontextmanager
async def postgres_database(url: str) -> AsyncGenerator[tuple[str, str]]:
    """A scratch database on the server at `url`, dropped afterwards: its URL and the server's version."""
    name = f"bench_step_{os.getpid()}"
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with admin.connect() as connection:
            version = str((await connection.execute(sa.text("SHOW server_version"))).scalar_one())
            await connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            await connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(url).set(database=name).render_as_string(hide_password=False), version
        finally:
            async with admin.connect() as connection:
                await connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


async def run_dialect(
    title: str, url: str, settings: Settings, report: Report, directory: str | None
) -> None:
    started = time.perf_counter()
    bench = await Bench.open(url)
    folder = Path(tempfile.mkdtemp(prefix="bench-step-harness-", dir=directory))
    if title == "SQLite":  # its SQLite store; its PostgreSQL one takes an asyncpg pool of the caller's
        bench.harness, missing = Harness.open(folder)
        report.harness_version = bench.harness.version if bench.harness is not None else None
        if missing:
            report.notes.append(missing)
            print(missing, flush=True)
    try:
        report.cases[title] = await measure(bench, settings, title)
        if title == "SQLite":
            print(f"{title}: where the time goes, {settings.breakdown_turns} rounds", flush=True)
            report.breakdown = await breakdown(bench, settings.breakdown_turns)
    finally:
        await bench.aclose()
        if bench.harness is not None:
            bench.harness.close()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{title}: {time.perf_counter() - started:.0f}s", flush=True)


async def main(arguments: argparse.Namespace) -> int:
    settings = QUICK if arguments.quick else FULL
    # The URL may carry a password: the command is written down without it.
    command = shlex.join(["python", "-m", "bench.step", *(arg for arg in sys.argv[1:] if "://" not in arg)])
    report = Report(command=command, warmup=settings.warmup, repeats=settings.repeats)
    report.load_before = os.getloadavg()[0]
    started = time.perf_counter()
    async with sqlite_database(arguments.dir) as url:
        await run_dialect("SQLite", url, settings, report, arguments.dir)
    if arguments.postgres:
        try:
            async with postgres_database(arguments.postgres) as (url, version):
                report.postgres_version = version
                await run_dialect("PostgreSQL", url, settings, report, arguments.dir)
        except (OSError, SQLAlchemyError) as error:
            where = make_url(arguments.postgres).render_as_string(hide_password=True)
            print(f"PostgreSQL skipped: {where!r}: {error!r}", flush=True)
            report.notes.append(f"PostgreSQL not measured: {error!r}")
    else:
        report.notes.append(f"PostgreSQL not measured: pass --postgres URL or set {POSTGRES_ENV}")
    report.seconds = time.perf_counter() - started
    report.load_after = os.getloadavg()[0]
    lines = render(report)
    print("\n" + "\n".join(lines), flush=True)
    if arguments.profile and report.breakdown is not None and "ours" in report.breakdown.profiles:
        print(
            "\nOurs on SQLite under cProfile (the loop thread's CPU; cumulative times are unreliable "
            "across SQLAlchemy's greenlet switches):"
        )
        stats = pstats.Stats(report.breakdown.profiles["ours"], stream=sys.stdout)
        stats.strip_dirs().sort_stats("tottime").print_stats(30)
    write = arguments.write if arguments.write is not None else not arguments.quick
    if write:
        write_section(arguments.output, "step", "\n".join(lines))
        print(f"\nWrote the step section of {arguments.output}")
    return 1 if arguments.strict and not report.passed else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step", description="What durability costs a step, against no persistence."
    )
    parser.add_argument("--quick", action="store_true", help="a short run, to check the benchmark works")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=os.environ.get(POSTGRES_ENV),
        help=f"also run on PostgreSQL (postgresql+asyncpg://…) in a scratch database created and dropped "
        f"(default: ${POSTGRES_ENV})",
    )
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the results to --output (default: on for a full run, off for --quick)",
    )
    parser.add_argument("--output", type=Path, default=DOCS)
    parser.add_argument("--dir", help="where to put the SQLite file (default: the system's temp directory)")
    parser.add_argument("--profile", action="store_true", help="also print the cProfile of ours' turns")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
