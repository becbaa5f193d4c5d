"""What grew between two of `bench.memory_serve`'s heap snapshots, by allocation site and by type.

    python -m bench.memory_report DIR [--first 1] [--last 2] [--top 15]

Prints the net growth `tracemalloc` saw between the two snapshots, the allocation tracebacks
that grew most (the traceback trimmed to the frames worth reading), the same growth summed by the
package that allocated it and by our innermost frame, and the live objects that grew most by type.
"""

from __future__ import annotations

import argparse
import json
import sys
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ("census_lines", "memory_table", "owner", "package_of", "report", "taken_numbers", "type_growth")

_OURS = ("agent", "bench", "cli", "store", "stream", "web")
_ARENA = 1 << 20
"""Bytes in one of pymalloc's arenas (CPython 3.10 and later on 64-bit Linux)."""
_NOISE = ("<frozen importlib._bootstrap", "<unknown>", "tracemalloc.py")


def package_of(filename: str) -> str:
    """The top-level package (or standard-library module) a file belongs to: `sqlalchemy`, `store`, `asyncio`."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            rest = parts[parts.index(marker) + 1 :]
            return rest[0].removesuffix(".py") if rest else filename
    for package in _OURS:
        if package in parts[:-1]:
            return package
    python = [i for i, part in enumerate(parts) if part.startswith("python3")]
    if python and len(parts) > python[-1] + 1:
        return parts[python[-1] + 1].removesuffix(".py")
    return Path(filename).name


def owner(frames: Sequence[tuple[str, int]]) -> str:
    """Our innermost frame in a traceback (outermost first) as `file:line`, or `-` when none is ours."""
    for filename, line in reversed(frames):
        if package_of(filename) in _OURS:
            return f"{_short(filename)}:{line}"
    return "-"


def type_growth(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[tuple[str, int, int]]:
    """(type, count growth, size growth) for every type whose count or size changed, largest size growth first."""
    rows = [
        (
            name,
            after.get(name, (0, 0))[0] - before.get(name, (0, 0))[0],
            after.get(name, (0, 0))[1] - before.get(name, (0, 0))[1],
        )
        for name in before.keys() | after.keys()
    ]
    return sorted((row for row in rows if row[1] or row[2]), key=lambda row: (-row[2], -row[1], row[0]))


def taken_numbers(directory: Path) -> list[int]:
    """The snapshots `bench.memory_serve` finished in `directory`, in order."""
    return sorted(int(path.name.removeprefix("done-")) for path in directory.glob("done-*"))


def memory_table(
    taken: Sequence[dict[str, Any]], labels: Sequence[str], *, first: str = "snapshot"
) -> list[str]:
    """Each snapshot's memory (a row per label), by who holds it: resident, Python's allocator, glibc's
    malloc (MB), and the conversation stores' bounded caches; what `tracemalloc` traced, if it ran."""
    traced = any(row["traced"] for row in taken)
    lines = [
        f"| {first} | RSS | " + ("traced | " if traced else "") + "gc objects | pymalloc arenas | "
        "pymalloc in use | malloc heap | malloc in use | malloc free | malloc mmapped | history cache charge | "
        "histories | records |",
        "|---:" * (13 if traced else 12) + "|",
    ]
    for label, row in zip(labels, taken, strict=True):
        pymalloc: dict[str, int] = row.get("pymalloc", {})
        malloc: dict[str, int] = row.get("malloc", {})
        cached: dict[str, int] = row.get("caches", {})
        cells = [
            row["rss_kb"] / 1024,
            *([row["traced"] / 2**20] if traced else []),
            row["gc_objects"],
            pymalloc.get("arenas", 0) * _ARENA / 2**20,
            pymalloc.get("in_use", 0) / 2**20,
            *(malloc.get(key, 0) / 2**20 for key in ("heap", "in_use", "free", "mmapped")),
            cached.get("history_charge", 0) / 2**20,
            cached.get("histories", 0),
            cached.get("records", 0),
        ]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{cell:.1f}" if isinstance(cell, float) else str(cell) for cell in cells)
            + " |"
        )
    return lines


def census_lines(directory: Path, labels: Sequence[str], *, top: int = 8) -> list[str]:
    """A soak's censuses for its section: the table a row per census (`labels`: the minute each was
    asked for), and the types that grew most from the end of the warm-up (the second) to the last."""
    numbers = taken_numbers(directory)
    taken = [json.loads((directory / f"taken-{n}.json").read_text()) for n in numbers]
    first, last = numbers[min(1, len(numbers) - 1)], numbers[-1]
    types = [json.loads((directory / f"types-{n}.json").read_text()) for n in (first, last)]
    grown = [row for row in type_growth(types[0], types[1]) if row[1] > 0][:top]
    return [
        "Where the memory is, from a census the server takes when asked (`bench.memory_serve`): after a "
        "full collection, what Python's allocator (pymalloc: its arenas, and the bytes of blocks in use) "
        "and glibc's malloc hold (MB), the objects the collector tracks that were made after start-up "
        "(the server freezes its start-up heap), and the conversation store's bounded caches (the history "
        "cache's charge against its budget, in MB; the conversation records it knows).",
        "",
        *memory_table(taken, labels, first="minute"),
        "",
        f"Tracked objects that grew most from minute {labels[min(1, len(labels) - 1)]} to the end: "
        + (", ".join(f"{name} {count:+d} ({size / 1024:+.0f} kB)" for name, count, size in grown) or "none")
        + ".",
    ]


def report(directory: Path, first: int | None = None, last: int | None = None, top: int = 15) -> str:
    """The growth between snapshots `first` and `last` in `directory` (the first and the last taken), as text."""
    numbers = taken_numbers(directory)
    first = numbers[0] if first is None else first
    last = numbers[-1] if last is None else last
    taken = [json.loads((directory / f"taken-{n}.json").read_text()) for n in numbers]
    lines = ["Memory at each snapshot (MB):", "", *memory_table(taken, [str(n) for n in numbers]), ""]
    if (directory / f"snapshot-{first}.tracemalloc").exists():
        lines += _traced_growth(directory, first, last, top)
    types = [json.loads((directory / f"types-{n}.json").read_text()) for n in (first, last)]
    lines += [
        f"Live objects by type, snapshot {first} -> {last} (collector-tracked; count, sys.getsizeof bytes):"
    ]
    lines += [
        f"  {count:+8d}  {size / 1024:+9.1f} kB  {name}"
        for name, count, size in type_growth(types[0], types[1])[:top]
    ]
    return "\n".join(lines) + "\n"


def _traced_growth(directory: Path, first: int, last: int, top: int) -> list[str]:
    old = tracemalloc.Snapshot.load(str(directory / f"snapshot-{first}.tracemalloc"))
    new = tracemalloc.Snapshot.load(str(directory / f"snapshot-{last}.tracemalloc"))
    keep = [
        tracemalloc.Filter(False, pattern)
        for pattern in ("*tracemalloc.py", "<frozen importlib*", "<unknown>")
    ]
    old, new = old.filter_traces(keep), new.filter_traces(keep)
    growth = [stat for stat in new.compare_to(old, "traceback") if stat.size_diff]
    net = sum(stat.size_diff for stat in growth)
    lines = [
        f"Traced growth, snapshot {first} -> {last}: net {_mb(net, signed=True)} MB.",
        "",
        "By package that allocated (innermost frame):",
    ]
    by_package: Counter[str] = Counter()
    by_owner: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for stat in growth:
        by_package[package_of(stat.traceback[-1].filename)] += stat.size_diff
        key = owner([(frame.filename, frame.lineno) for frame in stat.traceback])
        by_owner[key] += stat.size_diff
        counts[key] += stat.count_diff
    lines += [f"  {size / 1024:+9.1f} kB  {name}" for name, size in _largest(by_package, top)]
    lines += ["", "By our innermost frame (blocks):"]
    lines += [
        f"  {size / 1024:+9.1f} kB  {counts[name]:+7d}  {name}" for name, size in _largest(by_owner, top)
    ]
    lines += ["", f"Top {top} tracebacks by growth:"]
    for stat in sorted(growth, key=lambda s: -s.size_diff)[:top]:
        lines.append(f"  {stat.size_diff / 1024:+9.1f} kB in {stat.count_diff:+d} blocks")
        lines += [f"      {_short(frame.filename)}:{frame.lineno}" for frame in _readable(stat.traceback)]
    return [*lines, ""]


def _largest(sizes: Counter[str], top: int) -> list[tuple[str, int]]:
    """The `top` largest changes either way, largest growth first."""
    return sorted(sorted(sizes.items(), key=lambda item: -abs(item[1]))[:top], key=lambda item: -item[1])


def _readable(traceback: tracemalloc.Traceback) -> list[tracemalloc.Frame]:
    """The innermost frames worth reading, outermost first (a `Traceback` iterates oldest first)."""
    return [frame for frame in traceback if not any(noise in frame.filename for noise in _NOISE)][-8:]


def _short(filename: str) -> str:
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    for index, part in enumerate(parts[:-1]):
        if part in _OURS:
            return "/".join(parts[index:])
    return "/".join(parts[-2:])


def _mb(size: float, *, signed: bool = False) -> str:
    return f"{size / 2**20:+.1f}" if signed else f"{size / 2**20:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_report", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("directory", type=Path)
    parser.add_argument("--first", type=int, default=None, help="the first snapshot taken unless given")
    parser.add_argument("--last", type=int, default=None, help="the last snapshot taken unless given")
    parser.add_argument("--top", type=int, default=15)
    arguments = parser.parse_args(argv)
    print(report(arguments.directory, arguments.first, arguments.last, arguments.top), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
