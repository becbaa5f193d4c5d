"""What durability costs a step: `run_step` against the same agent run with no persistence.

The sides alternate turn by turn in one process on one database, with pydantic-ai-harness's
`StepPersistence` as a third side on SQLite when installed (`bench.harness.bare`).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage

from agent import (
    Opened,
    RunRecords,
    RunScope,
    Runtime,
    RuntimeOptions,
    ToolLedger,
    open_runtime,
    queue_run,
    run_step,
)
from agent.demo import shop_app
from bench.harness.bare import Harness, run_bare
from bench.harness.databases import Dialect, available, scratch_database
from bench.harness.options import parser, publish
from bench.harness.reports import PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import folder
from bench.harness.stats import median, rotated
from store import NewRun

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
CASES = (("1st turn of a new thread", False), (f"{len(EARLIER_TURNS) + 1}th turn of a thread", True))
Turn = Callable[[], Awaitable[None]]
"""One prepared turn: calling it runs the turn and nothing else, so that is what is timed."""


LIMIT = 1.25
"""Ours may take at most this many times as long as the same turn with no persistence (issue 14's target 2)."""
TARGET = ("SQLite", "1st turn of a new thread")
"""The row the verdict is on: a 3-node turn on SQLite. Every row is shown against the same limit."""


@dataclass(frozen=True)
class Case:
    label: str
    ours: float
    bare: float
    rounds: int
    harness: float | None = None
    """pydantic-ai-harness's `StepPersistence` on the same turn, when it was measured."""

    @property
    def ratio(self) -> float:
        return self.ours / self.bare


@dataclass
class Report:
    warmup: int
    repeats: int
    cases: dict[str, list[Case]] = field(default_factory=dict[str, list[Case]])

    @property
    def target(self) -> Case | None:
        title, label = TARGET
        return next((case for case in self.cases.get(title, []) if case.label == label), None)

    @property
    def passed(self) -> bool:
        return self.target is not None and self.target.ratio <= LIMIT


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.2f}"


def render(report: Report, environment_lines: Sequence[str]) -> list[str]:
    rows = [
        [
            title,
            case.label,
            _ms(case.ours),
            _ms(case.bare),
            _ms(case.harness),
            f"{case.ratio:.2f}x",
            "—" if case.harness is None else f"{case.harness / case.bare:.2f}x",
            f"at most {LIMIT:g}x",
            "PASS" if case.ratio <= LIMIT else "FAIL",
            "—" if case.harness is None else "yes" if case.ours < case.harness else "no",
        ]
        for title, cases in report.cases.items()
        for case in cases
    ]
    lines = [
        *section(environment_lines),
        "Median ms of one turn:",
        "",
        *table(
            "database | turn | ours | no persistence | pydantic-ai-harness | ours / none | harness / none | target "
            "| verdict | ours ahead of the harness",
            rows,
        ),
        "",
    ]
    if all(row[4] == "—" for row in rows):
        lines += ["pydantic-ai-harness was not measured: `pip install --no-deps pydantic-ai-harness`.", ""]
    target = report.target
    if target is None:
        return [*lines, "**Verdict: not measured.**"]
    if target.ratio <= LIMIT:
        lines.append(f"**Verdict: PASS**: {target.ratio:.2f}x on SQLite, at most {LIMIT:g}x wanted.")
    else:
        lines.append(
            f"**Verdict: FAIL**: {target.ratio:.2f}x on SQLite, {target.ratio / LIMIT:.2f} times the {LIMIT:g}x "
            f"target; ours takes {(target.ours - LIMIT * target.bare) * 1000:.1f} ms too long."
        )
    if target.harness is not None:
        lines.append(
            f"pydantic-ai-harness's `StepPersistence` on the same turn: {target.harness / target.bare:.2f}x the bare "
            f"turn; ours is {'ahead of' if target.ours < target.harness else 'behind'} it ({_ms(target.ours)} ms "
            f"against {_ms(target.harness)} ms)."
        )
    return lines


@dataclass(frozen=True)
class Settings:
    warmup: int = 3
    repeats: int = 30


FULL, QUICK = Settings(), Settings(warmup=1, repeats=3)


@dataclass
class Bench:
    """One database with the demo shop on it, shared by every side."""

    runtime: Runtime
    history: list[ModelMessage] = field(default_factory=list[ModelMessage])
    """The conversation after `EARLIER_TURNS`, which a long case's thread starts from."""
    harness: Harness | None = None
    """pydantic-ai-harness's `StepPersistence` on SQLite, when installed: a third side."""

    async def play_history(self) -> None:
        """`EARLIER_TURNS` played once through the step itself; every long case starts from a copy."""
        db = self.runtime.db
        thread = await db.threads.create(user_id="bench", title="history")
        for content in EARLIER_TURNS:
            run = (
                await db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=content))
            ).run
            await self.complete(run.run_id)
        loaded = await db.conversations.load(thread.thread_id)
        assert loaded is not None
        self.history = loaded.messages

    async def queue(self, long: bool) -> Opened:
        """A new thread (holding a copy of `history` if `long`) with `PROMPT` queued as its next run,
        claimed by this worker as the server's POST queues it: its opening events stored with it."""
        db = self.runtime.db
        thread = await db.threads.create(user_id="bench", title="bench")
        if long:
            conversation = Conversation(
                conversation_id=thread.thread_id, messages=copy.deepcopy(self.history)
            )
            await db.conversations.save(conversation)
        opened = await queue_run(self.runtime, thread.thread_id, "message", content=PROMPT, claim=True)
        assert opened.claimed is not None
        return opened

    async def ours(self, long: bool) -> Turn:
        opened = await self.queue(long)
        return lambda: self.complete(opened.run.run_id, opened)

    async def bare(self, long: bool, *, harness: bool = False) -> Turn:
        """The same turn with no persistence (or the harness's), on a copy of the same history in memory."""
        conversation = Conversation(messages=copy.deepcopy(self.history) if long else [])
        db = self.runtime.db
        thread_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
        ledger = ToolLedger(db.ledger, thread_id, run_id)
        scope = RunScope(
            thread_id=thread_id,
            run_id=run_id,
            user_id="bench",
            attempt=1,
            records=RunRecords(),
            ledger=ledger,
            engine=db.engine,
        )
        extra = [self.harness.capability()] if harness and self.harness is not None else []

        async def turn() -> None:
            output = await run_bare(self.runtime, scope, PROMPT, conversation, extra)
            if "ORD-5678" not in output:
                raise RuntimeError(f"the turn with no persistence answered {output!r}")

        return turn

    async def complete(self, run_id: str, opened: Opened | None = None) -> None:
        claimed, span = (opened.claimed, opened.span) if opened is not None else (None, None)
        if (status := await run_step(self.runtime, run_id, claimed=claimed, span=span)) != "completed":
            raise RuntimeError(f"run {run_id!r} ended {status!r}, not 'completed'")


async def measure(bench: Bench, settings: Settings, title: str) -> list[Case]:
    """Every side of every case, alternating which goes first, warm-ups dropped."""
    sides: dict[str, Callable[[bool], Awaitable[Turn]]] = {"ours": bench.ours, "bare": bench.bare}
    if bench.harness is not None:
        sides["harness"] = lambda long: bench.bare(long, harness=True)
    samples: dict[tuple[str, str], list[float]] = {}
    rounds = settings.warmup + settings.repeats
    for number in range(rounds):
        for label, long in CASES:
            for side in rotated(list(sides), number):
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
            median(samples[label, "ours"]),
            median(samples[label, "bare"]),
            settings.repeats,
            median(samples[label, "harness"]) if (label, "harness") in samples else None,
        )
        for label, _ in CASES
    ]


async def run_dialect(
    database: Dialect, arguments: argparse.Namespace, report: Report, notes: list[str], logs: Path
) -> None:
    settings = QUICK if arguments.quick else FULL
    started = time.perf_counter()
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(scratch_database(database, logs, "step", arguments.postgres))
        # One user sends every benchmark message: the per-user message rate would block them.
        options = RuntimeOptions(messages_per_minute=None)
        bench = Bench(await stack.enter_async_context(open_runtime(shop_app(delay=0), url, options=options)))
        await bench.play_history()
        if database == "SQLite":  # its SQLite store; its PostgreSQL one takes an asyncpg pool of the caller's
            bench.harness, missing = Harness.open(logs)
            if bench.harness is not None:
                stack.callback(bench.harness.close)
            if missing:
                notes.append(missing)
        report.cases[database] = await measure(bench, settings, database)
    print(f"{database}: {time.perf_counter() - started:.0f}s", flush=True)


async def run(arguments: argparse.Namespace, report: Report, notes: list[str], logs: Path) -> str | None:
    databases, version = await available(arguments.postgres, notes)
    for database in databases:
        await run_dialect(database, arguments, report, notes, logs)
    return version


def main() -> int:
    arguments = parser("bench.step", __doc__, strict=True).parse_args()
    settings = QUICK if arguments.quick else FULL
    clock, report, notes = Clock(), Report(settings.warmup, settings.repeats), list[str]()
    with folder("step", keep=arguments.keep_logs) as logs:
        version = asyncio.run(run(arguments, report, notes, logs))
    rounds = (
        f"Settings: {settings.warmup} warm-up + {settings.repeats} measured rounds; each round runs every side of each "
        "case on a new thread, the order rotating"
    )
    lines = environment(
        command_line("bench.step", sys.argv[1:]),
        postgres=version,
        packages=(*PACKAGES, "pydantic-ai-harness"),
        notes=[rounds, *notes, clock.line()],
    )
    publish(arguments, {"step": "\n".join(render(report, lines))}, full=not arguments.quick)
    return 1 if arguments.strict and not report.passed else 0


if __name__ == "__main__":
    sys.exit(main())
