"""`bench.step`'s results: the cases measured, the target's verdict, and where ours' extra time goes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from bench.harness.reports import section, table
from bench.harness.stats import median, ratio
from bench.step_timers import CATEGORIES, Sample, Timers, cpu_by_group

__all__ = ("LIMIT", "Case", "Report", "render")

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
    breakdown: Timers | None = None

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
        *section(
            "Step overhead: durability against no persistence",
            "`run_step` (checkpoints, run bookkeeping, event log) against the same agent, deps and demo model driven the "
            'same way with nothing stored (events built and dropped): the 3-node turn "Where is ORD-5678?" (model, '
            "`lookup_order`, model). The lookup touches nothing keyed by its call (no ledger), so its "
            "step is stored by the run's end, one checkpoint in all. Both sides alternate in one process on one database; "
            "the tool's order lookup reads it on both. Ours' run is queued as the server's POST queues it, already claimed "
            "by the worker, its opening events (`run_started`, `user_message`) stored in that transaction (outside the "
            "timed turn; the bare side has no counterpart). A third side, when installed: the same bare turn with "
            "pydantic-ai-harness's `StepPersistence` capability on its `SqliteStepStore`, on one connection with ours' "
            "journal settings (SQLite only; installed with `pip install --no-deps pydantic-ai-harness`, as it pins an "
            "older pydantic-ai; it gets the history from memory as the bare turn does, so its store is written, not read).",
            environment_lines,
        ),
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
    return [*lines, *_breakdown(report.breakdown, target)] if report.breakdown else lines


def _median_ms(samples: Sequence[Sample], kind: Literal["wall", "loop_cpu", "process_cpu"]) -> float:
    return median(getattr(sample, kind) for sample in samples) * 1000


def _breakdown(timers: Timers, target: Case) -> list[str]:
    ours, unlogged, bare = (timers.samples.get(variant, []) for variant in ("ours", "unlogged", "bare"))
    if not ours or not bare:
        return []
    turn_ms = _median_ms(ours, "wall")
    calls = {label: timers.per_turn(label) for label, _ in CATEGORIES}
    names = {
        "checkpoint": "checkpoints (conversation and run bookkeeping, one transaction each)",
        "load": "conversation load",
        "start": "run start (with its block of event ids)",
    }
    path = ", ".join(
        f"{calls[label][0]:.0f} {name} {calls[label][1] * 1000:.1f} ms" for label, name in names.items()
    )
    lines = [
        "",
        f"Where ours' extra {(target.ours - target.bare) * 1000:.1f} ms goes (SQLite, new thread; {len(ours)} further "
        "rounds of ours with its store calls timed, ours without event-log writes and the bare turn, in rotation, then "
        f"{timers.profiled_turns} of ours and the bare turn under cProfile):",
        "",
        f"- Store calls the step waits for, per turn of {turn_ms:.1f} ms: {path}.",
    ]
    if timers.missing:
        lines.append(
            f"- Not timed, the store having no such call now: {', '.join(f'`{m}`' for m in timers.missing)}."
        )
    if unlogged:
        appends, seconds = calls["append"]
        lines.append(
            f"- Event log: {appends:.1f} background stores ({seconds * 1000:.1f} ms) of events no checkpoint took "
            f"first; turns that skip them take {_median_ms(unlogged, 'wall'):.1f} ms, so they cost "
            f"{turn_ms - _median_ms(unlogged, 'wall'):.1f} ms of the turn."
        )
    loop, process = (
        (_median_ms(ours, "loop_cpu"), _median_ms(bare, "loop_cpu")),
        (_median_ms(ours, "process_cpu"), _median_ms(bare, "process_cpu")),
    )
    lines.append(
        f"- CPU per turn (medians; load-independent): the loop thread {loop[0]:.1f} ms for ours against {loop[1]:.1f} ms "
        f"with no persistence ({ratio(*loop):.2f}x); with the driver's thread, {process[0]:.1f} ms against "
        f"{process[1]:.1f} ms ({ratio(*process):.2f}x)."
    )
    if "ours" in timers.profiles and "bare" in timers.profiles:
        turns = max(timers.profiled_turns, 1)
        mine, theirs = cpu_by_group(timers.profiles["ours"]), cpu_by_group(timers.profiles["bare"])
        extra = sorted(
            ((g, (mine.get(g, 0.0) - theirs.get(g, 0.0)) / turns) for g in {*mine, *theirs}),
            key=lambda item: -item[1],
        )
        lines.append(
            f"- The extra loop-thread CPU by package (cProfile, its overhead included: "
            f"{sum(s for _, s in extra) * 1000:.1f} ms a turn): "
            + ", ".join(f"{group} {seconds * 1000:+.1f} ms" for group, seconds in extra)
            + "."
        )
    return lines
