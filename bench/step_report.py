"""`bench.step`'s results: the cases measured and the target's verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.harness.reports import section, table

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
