"""The results as markdown tables with verdicts, for the terminal and for `docs/benchmarks.md`."""

from __future__ import annotations

import os
import platform
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Literal

from bench.results import Part, Results, Settings

__all__ = ["Check", "Section", "checks", "environment", "render"]

PACKAGES = (
    "pydantic-ai-slim",
    "pydantic",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
    "openai-agents",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
)
FAIR_FLOOR_LIMIT = 1.5
FLAT_SAVE_LIMIT = 1.3
OPENAI_LIMIT = 5.0
STORAGE_LIMIT = 1.3
Rule = Literal["at most", "at least", "above"]


@dataclass(frozen=True)
class Section:
    """One dialect's results."""

    title: str
    results: Results
    pragmas: dict[str, str] | None = None


@dataclass(frozen=True)
class Check:
    label: str
    ratio: float | None
    limit: float
    rule: Rule

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "n/a"
        match self.rule:
            case "at most":
                passed = self.ratio <= self.limit
            case "at least":
                passed = self.ratio >= self.limit
            case "above":
                passed = self.ratio > self.limit
        return "PASS" if passed else "FAIL"

    @property
    def target(self) -> str:
        return f"{self.rule} {self.limit:g}x"


def checks(section: Section) -> list[Check]:
    """The targets, each as the ratio it is judged by."""
    results, title = section.results, section.title
    sizes = results.sizes()
    found = [
        Check(
            f"{title}: load+save at {size:,} messages, ours / fair floor",
            results.ratio("ours", "fair", size, "total"),
            FAIR_FLOOR_LIMIT,
            "at most",
        )
        for size in sizes
    ]
    if len(sizes) > 1:
        found.append(
            Check(
                f"{title}: save at {sizes[-1]:,} / save at {sizes[0]:,} messages (flat)",
                results.ratio("ours", "ours", sizes[-1], "save", other_size=sizes[0]),
                FLAT_SAVE_LIMIT,
                "at most",
            )
        )
    rivals: tuple[tuple[str, float, Rule], ...] = (
        ("openai", OPENAI_LIMIT, "at least"),
        ("langgraph", 1.0, "above"),
    )
    found += [
        Check(
            f"{title}: turns/s at concurrency 50, ours / {results.names.get(key, key)}",
            results.throughput_ratio("ours", key),
            limit,
            rule,
        )
        for key, limit, rule in rivals
        if key in results.names
    ]
    if title == "SQLite":
        stored = results.storage.get("ours")
        found.append(
            Check(
                f"{title}: bytes on disk / raw JSON bytes",
                stored / results.raw_json_bytes if stored is not None and results.raw_json_bytes else None,
                STORAGE_LIMIT,
                "at most",
            )
        )
    return found


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.3g}"


def _x(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}x"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def _timing_table(results: Results, part: Part) -> list[str]:
    keys = [key for key in results.names if key in results.timings]
    sizes = results.sizes()
    ratios: list[tuple[str, str, str, int | None]]
    if part == "total":
        # Ours against each floor that pays for decoding: the target's, and the async one when measured;
        # then ours with the history cached against the last of them, for reference.
        floors = [key for key in ("fair", "async") if key in keys]
        ratios = [(f"ours / {results.names[key]}", "ours", key, None) for key in floors]
        if "warm" in keys and floors:
            ratios.append((f"history cached / {results.names[floors[-1]]}", "warm", floors[-1], None))
    else:
        first = sizes[0] if sizes else 0
        ratios = [(f"ours / ours at {first:,}", "ours", "ours", first)]
    rows: list[list[str]] = []
    for size in sizes:
        cells = [f"{size:,}", *(_ms(results.median(key, size, part)) for key in keys)]
        for _, mine, other, other_size in ratios:
            cells.append(_x(results.ratio(mine, other, size, part, other_size=other_size)))
        rows.append(cells)
    return _table(["messages", *(results.names[key] for key in keys), *(title for title, *_ in ratios)], rows)


def _section(section: Section, settings: Settings) -> list[str]:
    results = section.results
    lines = [f"### {section.title}", ""]
    if section.pragmas:
        pragmas = ", ".join(f"{name}={value}" for name, value in section.pragmas.items())
        lines += [f"Journal settings (ours, and the sqlite3 floors likewise): {pragmas}.", ""]
    lines += [
        f"One turn (load the whole history, append, save), median ms of {settings.repeats} rounds:",
        "",
        *_timing_table(results, "total"),
        "",
        "Save only, from the same turns:",
        "",
        *_timing_table(results, "save"),
        "",
        f"{settings.conversations} conversations x {settings.turns} turns, all at once; "
        f"median of {settings.concurrent_runs} run(s):",
        "",
    ]
    rows = [
        [results.names[key], f"{rate:,.0f}", _x(results.throughput_ratio("ours", key))]
        for key in results.names
        if (rate := results.turns_per_second(key)) is not None
    ]
    lines += [*_table(["system", "turns/s", "ours / system"], rows), ""]
    what = (
        "file + WAL after a checkpoint"
        if section.title == "SQLite"
        else "pg_total_relation_size of its tables"
    )
    rows = [
        [
            results.names[key],
            f"{size:,}",
            _x(size / results.raw_json_bytes if results.raw_json_bytes else None),
        ]
        for key, size in sorted(results.storage.items(), key=lambda item: list(results.names).index(item[0]))
    ]
    lines += [
        f"Storage after that workload ({what}); the raw JSON of its messages is {results.raw_json_bytes:,} bytes:",
        "",
        *_table(["system", "bytes", "/ raw JSON"], rows),
        "",
    ]
    if results.unavailable:
        lines += [f"- {results.names.get(key, key)}: {reason}" for key, reason in results.unavailable.items()]
        lines.append("")
    return lines


METHOD = [
    "- Messages: deterministic pydantic-ai turns (`bench/messages.py`): a ~200-character prompt and a "
    "~600-character reply with usage; every third turn also a tool call (~150 B of args) and a ~1 KB return. "
    "The rivals get the same content as OpenAI Responses items or LangChain messages, converted untimed.",
    "- A turn: load the whole history, append the turn's messages, save. Every conversation is filled first; "
    "then each round takes one turn of every system at every size, in an order that rotates every round.",
    "- Ours is measured twice. *Ours, no history cache* (`history_cache_bytes=0`) reads and decodes the whole "
    "history at every load, as the floors and rivals do: every ratio and target is judged on it. *Ours, history "
    "cached* has every history in its cache (its budget raised to hold them all), as a worker continuing a "
    "conversation it served: shown for reference, not judged, since no floor caches. Until both were set "
    "explicitly, the cache's state depended on the number of rounds: its default 64 MB held all 12 histories "
    "of a `--quick` run and none of the 66 of a full run (22 rounds of 10, 100 and 1,000 messages, ~75 MB "
    "charged, filled in order and evicted least recently used just before each was measured), so quick runs "
    "measured cached loads and full runs cache misses plus the cache's upkeep (each saved message decoded "
    "again to be cached): 1.7 against 2.4 ms at 10 messages, 1.9 against 41 ms at 1,000, in one process.",
    "- Floors, one transaction per turn with ours' journal settings: *raw* stores ready-made JSON and parses "
    "nothing; *fair* also decodes every loaded row with `ModelMessagesTypeAdapter` and encodes the new ones; "
    "*async* is the fair floor through aiosqlite, which any asyncio store on SQLite pays for (a worker-thread "
    "hop per statement). On PostgreSQL the floors use asyncpg.",
    "- Rivals: openai-agents `SQLAlchemySession.get_items()` then `add_items()`; LangGraph "
    "`AsyncSqliteSaver.aget_tuple()` then `aput()` of a checkpoint whose `messages` channel holds the whole "
    "list (no `aput_writes`, which a real graph adds: generous to it).",
    "- Concurrency: one asyncio task per conversation, all at once, each system on a fresh database per run. "
    "Storage is measured after the last run: SQLite file + WAL after `wal_checkpoint(TRUNCATE)` (ours "
    "includes its other, empty tables); PostgreSQL `pg_total_relation_size` (indexes and TOAST included).",
]


def render(sections: list[Section], settings: Settings, env: list[str]) -> list[str]:
    lines = ["### Environment", "", *env, "", "### Method", "", *METHOD, ""]
    for section in sections:
        lines += _section(section, settings)
    every = [check for section in sections for check in checks(section)]
    lines += [
        "### Targets",
        "",
        "Ratios are medians of paired ratios: turns of the same round, runs of the same repetition.",
        "",
        *_table(
            ["measure", "ratio", "target", "verdict"],
            [[check.label, _x(check.ratio), check.target, f"**{check.verdict}**"] for check in every],
        ),
    ]
    return lines


def environment(command: str, postgres_version: str | None, notes: list[str]) -> list[str]:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line
        ]
        cpu = names[0] if names else cpu
    versions: list[str] = []
    for package in PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    lines = [
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; command: `{command}`",
        f"- Machine: {cpu}, {os.cpu_count()} cores (shared); {platform.platform()}",
        f"- Python {platform.python_version()}; SQLite {sqlite3.sqlite_version}"
        + (f"; PostgreSQL {postgres_version}" if postgres_version else ""),
        f"- {', '.join(versions)}",
    ]
    return lines + [f"- {note}" for note in notes]
