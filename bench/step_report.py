"""The step benchmark's results as markdown, for the terminal and the step section of the docs."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Literal

from bench.step_timers import CATEGORIES, Sample, Timers, cpu_by_group

__all__ = ("LIMIT", "Case", "Report", "render")

LIMIT = 1.25
"""Ours may take at most this many times as long as the same turn with no persistence (issue 14's target 2)."""
TARGET = ("SQLite", "1st turn of a new thread")
"""The row the verdict is on: a 3-node turn on SQLite. Every row is shown against the same limit."""
PACKAGES = ("pydantic-ai-slim", "pydantic", "sqlalchemy", "aiosqlite", "asyncpg")


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

    @property
    def harness_ratio(self) -> float | None:
        return None if self.harness is None else self.harness / self.bare

    @property
    def ahead_of_harness(self) -> bool | None:
        return None if self.harness is None else self.ours < self.harness


@dataclass
class Report:
    command: str
    warmup: int
    repeats: int
    cases: dict[str, list[Case]] = field(default_factory=dict[str, list[Case]])
    breakdown: Timers | None = None
    postgres_version: str | None = None
    harness_version: str | None = None
    notes: list[str] = field(default_factory=list[str])
    seconds: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0

    @property
    def target(self) -> Case | None:
        title, label = TARGET
        return next((case for case in self.cases.get(title, []) if case.label == label), None)

    @property
    def passed(self) -> bool:
        target = self.target
        return target is not None and target.ratio <= LIMIT


def render(report: Report) -> list[str]:
    target = report.target
    lines = ["## Step overhead: durability against no persistence", ""]
    lines += [
        "`run_step` (checkpoints, run bookkeeping, event log) against the same agent, deps and "
        "demo model driven the same way with nothing stored (events built and dropped): the 3-node turn "
        '"Where is ORD-5678?" (model, `lookup_order`, model). The shop declares its lookups read-only '
        "(`ChatApp.read_only_tools`), so the lookup's step is stored by the run's end, one checkpoint in "
        "all. Both sides alternate in one process on one "
        "database; the tool's order lookup reads it on both. Ours' run is queued as the server's POST queues "
        "it, already claimed by the worker, its opening events (`run_started`, `user_message`) stored in "
        "that transaction (outside the timed turn; the bare side has no counterpart). A third side, when "
        "installed: the same bare turn "
        "with pydantic-ai-harness's `StepPersistence` capability on its `SqliteStepStore`, on one connection with "
        "ours' journal settings (SQLite only; "
        "installed with `pip install --no-deps pydantic-ai-harness`, as it pins an older pydantic-ai; it "
        "gets the history from memory as the bare turn does, so its store is written, not read).",
        "",
        "### Environment",
        "",
        *_environment(report),
        "",
        "### Results",
        "",
        "Median ms of one turn:",
        "",
        "| database | turn | ours | no persistence | pydantic-ai-harness | ours / none | harness / none "
        "| target | verdict | ours ahead of the harness |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for title, cases in report.cases.items():
        lines += [
            f"| {title} | {case.label} | {case.ours * 1000:.2f} | {case.bare * 1000:.2f} | "
            f"{'—' if case.harness is None else f'{case.harness * 1000:.2f}'} | {case.ratio:.2f}x | "
            f"{'—' if case.harness_ratio is None else f'{case.harness_ratio:.2f}x'} "
            f"| at most {LIMIT:g}x | {'PASS' if case.ratio <= LIMIT else 'FAIL'} | "
            f"{'—' if case.ahead_of_harness is None else 'yes' if case.ahead_of_harness else 'no'} |"
            for case in cases
        ]
    lines.append("")
    if not any(case.harness is not None for cases in report.cases.values() for case in cases):
        lines += ["pydantic-ai-harness was not measured: `pip install --no-deps pydantic-ai-harness`.", ""]
    if target is None:
        lines.append("**Verdict: not measured.**")
    elif target.ratio <= LIMIT:
        lines.append(f"**Verdict: PASS**: {target.ratio:.2f}x on SQLite, at most {LIMIT:g}x wanted.")
    else:
        lines.append(
            f"**Verdict: FAIL**: {target.ratio:.2f}x on SQLite, {target.ratio / LIMIT:.2f} times the {LIMIT:g}x "
            f"target; ours takes {(target.ours - LIMIT * target.bare) * 1000:.1f} ms too long."
        )
    if target is not None and target.harness is not None:
        lines.append(
            f"pydantic-ai-harness's `StepPersistence` on the same turn: {target.harness_ratio:.2f}x the bare turn; "
            f"ours is {'ahead of' if target.ahead_of_harness else 'behind'} it "
            f"({target.ours * 1000:.2f} ms against {target.harness * 1000:.2f} ms)."
        )
    if report.breakdown is not None and target is not None:
        lines += ["", *_breakdown(report.breakdown, target)]
    return lines


def _environment(report: Report) -> list[str]:
    versions = ", ".join(f"{name} {_version(name)}" for name in PACKAGES)
    if report.harness_version is not None:
        versions += f", pydantic-ai-harness {report.harness_version} (installed with --no-deps)"
    databases = f"SQLite {sqlite3.sqlite_version}"
    if report.postgres_version is not None:
        databases += f"; PostgreSQL {report.postgres_version}"
    return [
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; command: `{report.command}`",
        f"- Machine: {_cpu()}, {_cores()} cores; {platform.platform()}",
        f"- Python {platform.python_version()}; {databases}",
        f"- {versions}",
        f"- Settings: {report.warmup} warm-up + {report.repeats} measured rounds; each round runs both sides "
        "of each case on a new thread, alternating which goes first",
        *(f"- {note}" for note in report.notes),
        f"- Run time: {report.seconds:.0f}s; load average (1 min) {report.load_before:.1f} at the start, "
        f"{report.load_after:.1f} at the end",
    ]


def _breakdown(timers: Timers, target: Case) -> list[str]:
    ours, unlogged, bare = (timers.samples.get(variant, []) for variant in ("ours", "unlogged", "bare"))
    if not ours or not bare:
        return []
    turn_ms = _median_ms(ours, "wall")
    calls = {label: timers.per_turn(label) for label, _ in CATEGORIES}
    path = ", ".join(
        f"{calls[label][0]:.0f} {name} {calls[label][1] * 1000:.1f} ms"
        for label, name in (
            ("checkpoint", "checkpoints (conversation and run bookkeeping, one transaction each)"),
            ("load", "conversation load"),
            ("start", "run start (with its block of event ids)"),
        )
    )
    lines = [
        f"Where ours' extra {(target.ours - target.bare) * 1000:.1f} ms goes (SQLite, new thread; {len(ours)} "
        "further rounds of ours with its store calls timed, ours without event-log writes and the bare turn, "
        f"in rotation, then {timers.profiled_turns} of ours and the bare turn under cProfile):",
        "",
        f"- Store calls the step waits for, per turn of {turn_ms:.1f} ms: {path}.",
    ]
    if unlogged:
        appends, append_seconds = calls["append"]
        lines.append(
            f"- Event log: {appends:.1f} background stores ({append_seconds * 1000:.1f} ms) of events no "
            f"checkpoint took first; turns that skip them take {_median_ms(unlogged, 'wall'):.1f} "
            f"ms, so they cost {turn_ms - _median_ms(unlogged, 'wall'):.1f} ms of the turn."
        )
    lines.append(
        f"- CPU per turn (medians; load-independent): the loop thread {_median_ms(ours, 'loop_cpu'):.1f} ms for "
        f"ours against {_median_ms(bare, 'loop_cpu'):.1f} ms with no persistence "
        f"({_median_ms(ours, 'loop_cpu') / max(_median_ms(bare, 'loop_cpu'), 1e-9):.2f}x); with the driver's "
        f"thread, {_median_ms(ours, 'process_cpu'):.1f} ms against {_median_ms(bare, 'process_cpu'):.1f} ms "
        f"({_median_ms(ours, 'process_cpu') / max(_median_ms(bare, 'process_cpu'), 1e-9):.2f}x)."
    )
    if "ours" in timers.profiles and "bare" in timers.profiles:
        turns = max(timers.profiled_turns, 1)
        mine, theirs = cpu_by_group(timers.profiles["ours"]), cpu_by_group(timers.profiles["bare"])
        extra = sorted(
            ((group, (mine.get(group, 0.0) - theirs.get(group, 0.0)) / turns) for group in {*mine, *theirs}),
            key=lambda item: -item[1],
        )
        total = sum(seconds for _, seconds in extra)
        lines.append(
            f"- The extra loop-thread CPU by package (cProfile, its overhead included: {total * 1000:.1f} ms a "
            "turn): " + ", ".join(f"{group} {seconds * 1000:+.1f} ms" for group, seconds in extra) + "."
        )
    return lines


def _median_ms(samples: list[Sample], attribute: Literal["wall", "loop_cpu", "process_cpu"]) -> float:
    return statistics.median(getattr(sample, attribute) for sample in samples) * 1000


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cores() -> int:
    return os.cpu_count() or 1


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"
