"""What durability costs a step: `run_step` against the same agent run with no persistence, turn by turn in
one process, with pydantic-ai-harness's `StepPersistence` as a third side on SQLite when installed."""

from __future__ import annotations

import argparse
import asyncio
import copy
import math
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage

from agent import Runtime
from agent.demo import shop_app
from bench.harness.databases import available
from bench.harness.options import parser, publish
from bench.harness.reports import PACKAGES, Clock, command_line, environment, section, table
from bench.harness.servers import folder
from bench.harness.stats import NAN, median, ms, times
from bench.harness.turns import INSTALL, Harness, Turn, alternate, bare_turn, bench_runtime, queued

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
    harness: float = NAN
    """pydantic-ai-harness's `StepPersistence` on the same turn, `nan` when it was not measured."""

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


def render(report: Report, environment_lines: Sequence[str]) -> list[str]:
    rows = [
        [
            *(title, case.label, ms(case.ours, 2), ms(case.bare, 2), ms(case.harness, 2)),
            *(times(case.ratio), times(case.harness / case.bare), f"at most {LIMIT:g}x"),
            "PASS" if case.ratio <= LIMIT else "FAIL",
            "—" if math.isnan(case.harness) else "yes" if case.ours < case.harness else "no",
        ]
        for title, cases in report.cases.items()
        for case in cases
    ]
    header = (
        "database | turn | ours | no persistence | pydantic-ai-harness | ours / none | harness / none | target "
        "| verdict | ours ahead of the harness"
    )
    lines = [*section(environment_lines), "Median ms of one turn:", "", *table(header, rows), ""]
    if all(row[4] == "—" for row in rows):
        lines += [f"pydantic-ai-harness was not measured: `{INSTALL}`.", ""]
    if (target := report.target) is None:
        return [*lines, "**Verdict: not measured.**"]
    if target.ratio <= LIMIT:
        lines.append(f"**Verdict: PASS**: {target.ratio:.2f}x on SQLite, at most {LIMIT:g}x wanted.")
    else:
        lines.append(
            f"**Verdict: FAIL**: {target.ratio:.2f}x on SQLite, {target.ratio / LIMIT:.2f} times the {LIMIT:g}x "
            f"target; ours takes {(target.ours - LIMIT * target.bare) * 1000:.1f} ms too long."
        )
    if not math.isnan(target.harness):
        lines.append(
            f"pydantic-ai-harness's `StepPersistence` on the same turn: {target.harness / target.bare:.2f}x the bare "
            f"turn; ours is {'ahead of' if target.ours < target.harness else 'behind'} it ({ms(target.ours, 2)} ms "
            f"against {ms(target.harness, 2)} ms)."
        )
    return lines


WARMUP, REPEATS, QUICK_WARMUP, QUICK_REPEATS = 3, 30, 1, 3


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
        thread = await self.runtime.db.threads.create(user_id="bench", title="history")
        for content in EARLIER_TURNS:
            await (await queued(self.runtime, thread.thread_id, content))()
        loaded = await self.runtime.db.conversations.load(thread.thread_id)
        assert loaded is not None
        self.history = loaded.messages

    async def ours(self, long: bool) -> Turn:
        """`PROMPT` on a new thread (holding a copy of `history` if `long`), queued as the server's POST does."""
        db = self.runtime.db
        thread = await db.threads.create(user_id="bench", title="bench")
        if long:
            copied = Conversation(conversation_id=thread.thread_id, messages=copy.deepcopy(self.history))
            await db.conversations.save(copied)
        return await queued(self.runtime, thread.thread_id)

    async def bare(self, long: bool, *, harness: bool = False) -> Turn:
        """The same turn with no persistence (or the harness's), on a copy of the same history in memory."""
        extra = [self.harness.capability()] if harness and self.harness is not None else []
        return bare_turn(self.runtime, copy.deepcopy(self.history) if long else [], extra)


async def measure(bench: Bench, warmup: int, repeats: int, title: str) -> list[Case]:
    """Every side of every case, the order rotating round by round, warm-ups dropped."""
    sides: dict[str, Callable[[], Awaitable[Turn]]] = {}
    for label, long in CASES:
        sides[f"{label}|ours"] = lambda long=long: bench.ours(long)
        sides[f"{label}|bare"] = lambda long=long: bench.bare(long)
        if bench.harness is not None:
            sides[f"{label}|harness"] = lambda long=long: bench.bare(long, harness=True)
    samples = await alternate(sides, warmup, repeats, title)

    def side(label: str, name: str) -> float:
        return median(samples.get(f"{label}|{name}", {}).values())

    return [
        Case(label, side(label, "ours"), side(label, "bare"), repeats, side(label, "harness"))
        for label, _ in CASES
    ]


async def run(arguments: argparse.Namespace, report: Report, notes: list[str], logs: Path) -> str | None:
    databases, version = await available(arguments.postgres, notes)
    for database in databases:
        async with AsyncExitStack() as stack:
            app = shop_app(delay=0)
            bench = Bench(
                await stack.enter_async_context(
                    bench_runtime(app, database, logs, "step", arguments.postgres)
                )
            )
            await bench.play_history()
            # The harness's SQLite store; its PostgreSQL one takes an asyncpg pool of the caller's.
            if database == "SQLite":
                bench.harness, missing = Harness.open(logs)
                if bench.harness is not None:
                    stack.callback(bench.harness.close)
                notes += [missing] if missing else []
            report.cases[database] = await measure(bench, report.warmup, report.repeats, database)
    return version


def main() -> int:
    arguments = parser("bench.step", __doc__, strict=True).parse_args()
    report = Report(*((QUICK_WARMUP, QUICK_REPEATS) if arguments.quick else (WARMUP, REPEATS)))
    clock, notes = Clock(), list[str]()
    with folder("step", keep=arguments.keep_logs) as logs:
        version = asyncio.run(run(arguments, report, notes, logs))
    rounds = (
        f"Settings: {report.warmup} warm-up + {report.repeats} measured rounds; each round runs every side of each "
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
