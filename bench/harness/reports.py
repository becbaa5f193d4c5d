"""The sections of `docs/benchmarks.md`: environment lines, markdown tables, and writing a section."""

from __future__ import annotations

import os
import platform
import shlex
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "benchmarks.md"
PACKAGES = ("pydantic-ai-slim", "pydantic", "sqlalchemy", "aiosqlite", "asyncpg")
SERVER_PACKAGES = ("uvicorn", "starlette", "sse-starlette", "httpx", *PACKAGES)
_HEADER = "# Benchmarks\n\nEach section's results are written by its benchmark; see `bench/README.md`.\n"


def write_section(path: Path, name: str, text: str) -> None:
    """Replace the section `name` of `path` (between `<!-- bench:name -->` markers), or append it.

    The rest of the file is left as it is, so each benchmark rewrites only its own results.
    """
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    document = path.read_text(encoding="utf-8") if path.exists() else _HEADER
    block = f"{begin}\n{text.rstrip()}\n{end}"
    start, stop = document.find(begin), document.find(end)
    if start != -1 and stop > start:
        document = document[:start] + block + document[stop + len(end) :]
    else:
        document = document.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(document, encoding="utf-8")


def section(environment_lines: Sequence[str]) -> list[str]:
    """A section's head: its environment and the heading of its results.

    Its title and how it measures are prose in `docs/benchmarks.md`, just above its markers.
    """
    return ["### Environment", "", *environment_lines, "", "### Results", ""]


def table(header: str | Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """A markdown table; `header` as `"a | b"` or a list; `align` has an `r` for each column aligned right."""
    header = header.split(" | ") if isinstance(header, str) else header
    rule = "|" + "|".join("---:" if align[i : i + 1] == "r" else "---" for i in range(len(header))) + "|"
    return [
        "| " + " | ".join(header) + " |",
        rule,
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


def command_line(module: str, argv: Sequence[str]) -> str:
    """How the benchmark was run, for its section: a URL (it may carry a password) written `URL`."""
    return shlex.join(["python", "-m", module, *("URL" if "://" in arg else arg for arg in argv)])


def machine() -> str:
    """The CPU's model, the number of cores and the platform."""
    model = platform.processor() or platform.machine()
    try:
        names = [
            line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")
        ]
        model = names[0].split(":", 1)[1].strip() if names else model
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores (shared); {platform.platform()}"


def _version(package: str) -> str:
    try:
        return f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        return f"{package} (not installed)"


def environment(
    command: str,
    *,
    postgres: str | None = None,
    packages: Sequence[str] = PACKAGES,
    notes: Iterable[str] = (),
) -> list[str]:
    """The section's environment as list items: date and command, machine, versions, then `notes`."""
    databases = f"SQLite {sqlite3.sqlite_version}" + (f"; PostgreSQL {postgres}" if postgres else "")
    return [
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; command: `{command}`",
        f"- Machine: {machine()}",
        f"- Python {platform.python_version()}; {databases}",
        f"- {', '.join(_version(package) for package in packages)}",
        *(f"- {note}" for note in notes),
    ]


@dataclass
class Clock:
    """A run's wall time and the machine's load average (1 min) at its start and now."""

    started: float = field(default_factory=time.monotonic)
    load_start: float = field(default_factory=lambda: os.getloadavg()[0])

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        return (
            f"Run time: {self.seconds:.0f} s; load average (1 min) {self.load_start:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end"
        )
