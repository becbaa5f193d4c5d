"""Where the server's CPU goes per turn: py-spy on a real server, in issue 14's categories.

The server's CPU from /proc, shared out by its samples' categories (`bench.profile_categories`);
garbage collection timed in the server (`bench.profile_serve`); blocked samples left out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from bench.harness.clients import Load, Protocol, run_load
from bench.harness.databases import Dialect, available, scratch_database
from bench.harness.options import parser, publish
from bench.harness.pinning import CLIENT_CORE, pin_this_process, pinned
from bench.harness.reports import command_line, environment, table
from bench.harness.servers import UNLIMITED, ServerProcess, folder, ours_argv, server_env, serving, snapshot
from bench.profile_categories import (
    CATEGORIES,
    GC,
    KERNEL,
    UNKNOWN,
    attribute,
    categorize,
    in_system_call,
    is_waiting,
    parse_raw,
)
from bench.profile_serve import GC_FILE_ENV

RATE = 200
TURNS, QUICK_TURNS = 300, 40
_APIS: dict[str, str] = {
    "native": "native API",
    "ai-sdk": "AI SDK endpoint (one POST a turn, the conversation resent)",
}
Sample = tuple[str, list[str], int]


def cpu_marks(server: ServerProcess, gc_file: Path) -> tuple[float, float, float, float]:
    """The process's CPU seconds (every thread), the loop thread's user and system time, and the
    garbage collector's CPU so far (`bench.profile_serve`'s count)."""
    try:
        collected = float(json.loads(gc_file.read_text())["seconds"])
    except (OSError, ValueError, KeyError):
        collected = 0.0
    return server.cpu_seconds(), *server.loop_thread_times(), collected


def share(
    samples: Sequence[Sample], process: float, loop_user: float, loop_system: float, collected: float = 0.0
) -> dict[str, float]:
    """CPU seconds per category: the loop thread's user time (less the collector's) and the other
    threads' CPU shared out by their samples; the loop thread's system time is the kernel's."""
    working = [s for s in samples if not is_waiting(s[1]) and not in_system_call(s[1])]
    loop = attribute(s for s in working if "MainThread" in s[0])
    others = attribute(s for s in working if "MainThread" not in s[0])
    seconds: dict[str, float] = {KERNEL: loop_system}
    if collected:
        seconds[GC] = collected
    for counted, total in (
        (loop, max(loop_user - collected, 0.0)),
        (others, max(process - loop_user - loop_system, 0.0)),
    ):
        counted.pop(UNKNOWN, None)
        samples_in = sum(counted.values())
        for category, count in counted.items():
            seconds[category] = seconds.get(category, 0.0) + total * count / samples_in
        if not samples_in and total:
            seconds["other"] = seconds.get("other", 0.0) + total
    return seconds


def _py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return found if Path(found).exists() else None


async def profile(
    database: Dialect, arguments: argparse.Namespace, source: Path, logs: Path
) -> tuple[list[str], dict[str, float], float, int]:
    """One database's profile: notes, CPU seconds per turn by category, the total per turn, samples."""
    protocol: Protocol = arguments.protocol
    spy, gc_file, output = _py_spy(), logs / f"gc-{database}.json", logs / f"py-spy-{database}.txt"
    env = server_env(UNLIMITED | {GC_FILE_ENV: str(gc_file)})
    async with (
        scratch_database(database, logs, "ours", arguments.postgres) as url,
        serving(
            f"ours-{database}", pinned(ours_argv(url, "bench.profile_serve")), env, logs, cwd=source
        ) as server,
    ):
        await run_load(server.base_url, Load(users=2, turns=3, protocol=protocol))  # warm-up
        recorder: asyncio.subprocess.Process | None = None
        if spy is not None:
            argv = [spy, "record", "--pid", str(server.pid), "--nonblocking", "--threads", "--full-filenames"]
            argv += ["--rate", str(RATE), "--format", "raw", "--output", str(output)]
            with (logs / "py-spy.err").open(
                "wb"
            ) as errors:  # on the clients' core: nothing taken from the server's
                recorder = await asyncio.create_subprocess_exec(
                    *pinned(argv, CLIENT_CORE), stdout=subprocess.DEVNULL, stderr=errors
                )
            await asyncio.sleep(1.0)  # attached, and its first samples of the idle server dropped below
        users = arguments.users
        per_user = max(1, (arguments.turns or (QUICK_TURNS if arguments.quick else TURNS)) // users)
        marks: list[tuple[float, float, float, float]] = []
        load = Load(users=users, turns=per_user, protocol=protocol, deadline=600)
        result = await run_load(
            server.base_url, load, on_start=lambda: marks.append(cpu_marks(server, gc_file))
        )
        await asyncio.sleep(
            1.5
        )  # the trace exporter's 1 s batch, and the collector's totals written once more
        end = cpu_marks(server, gc_file)
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            await asyncio.wait_for(recorder.wait(), 60)
    process, loop_user, loop_system, collected = (
        after - before for after, before in zip(end, marks[0], strict=True)
    )
    turns = max(result.completed_turns, 1)
    notes = [
        f"{result.completed_turns} turns by {users} users in {result.elapsed:.1f} s; errors: {dict(result.errors) or 'none'}"
    ]
    if recorder is None or not output.exists():
        why = "py-spy is not installed" if spy is None else (logs / "py-spy.err").read_text()[-300:]
        return [*notes, f"no samples: {why}"], {}, process / turns, 0
    samples = parse_raw(output.read_text().splitlines())
    seconds = share(samples, process, loop_user, loop_system, collected)
    blocked = sum(count for _, frames, count in samples if is_waiting(frames))
    syscalls = sum(count for _, frames, count in samples if in_system_call(frames))
    unknown = sum(count for thread, frames, count in samples if categorize(thread, frames) == UNKNOWN)
    notes.append(
        f"loop thread {(loop_user + loop_system) / turns * 1000:.1f} ms/turn ({loop_system / turns * 1000:.1f} of it "
        f"system time), other threads {(process - loop_user - loop_system) / turns * 1000:.1f} ms/turn; of the samples, "
        f"{blocked} caught a thread blocked, {syscalls} one in a system call (the kernel's row) and {unknown} no Python "
        "frame: all left out of the shares"
    )
    per_turn = {category: value / turns for category, value in seconds.items()}
    return notes, per_turn, process / turns, sum(count for _, _, count in samples)


def render(
    database: str,
    protocol: str,
    per_turn: dict[str, float],
    total: float,
    samples: int,
    environment_lines: Sequence[str],
) -> list[str]:
    try:
        version = metadata.version("py-spy")
    except metadata.PackageNotFoundError:
        version = "not installed"
    rows = [
        (c, f"{per_turn[c] * 1000:.1f}", f"{per_turn[c] / total:.0%}") for c in CATEGORIES if c in per_turn
    ]
    return [
        *environment_lines,
        f"- py-spy {version} at {RATE} Hz over the {_APIS[protocol]}; {samples} samples; total server CPU "
        f"{total * 1000:.1f} ms per turn",
        "",
        *table("category | ms per turn | share", rows, align="lrr"),
    ]


async def run(arguments: argparse.Namespace, logs: Path) -> list[tuple[str, list[str]]]:
    source = snapshot(logs / "src")
    notes: list[str] = []
    databases, version = await available(arguments.postgres, notes, quick=arguments.quick)
    command = command_line("bench.profile", sys.argv[1:])
    sections: list[tuple[str, list[str]]] = []
    for database in databases:
        started = time.monotonic()
        found, per_turn, total, samples = await profile(database, arguments, source, logs)
        lines = environment(command, postgres=version if database == "PostgreSQL" else None, notes=found)
        sections.append((database, render(database, arguments.protocol, per_turn, total, samples, lines)))
        print(f"{database}: {time.monotonic() - started:.0f} s", flush=True)
    return sections


def main() -> int:
    options = parser("bench.profile", __doc__, quick=f"{QUICK_TURNS} turns, SQLite: a smoke run")
    options.add_argument("--turns", type=int, help=f"turns in all (default {TURNS})")
    options.add_argument("--users", type=int, default=20)
    options.add_argument(
        "--protocol", choices=["native", "ai-sdk"], default="native", help="the clients' API"
    )
    arguments = options.parse_args()
    pin_this_process()
    with folder("profile", keep=arguments.keep_logs) as logs:
        sections = asyncio.run(run(arguments, logs))
    prefix = "profile" if arguments.protocol == "native" else "profile-ai-sdk"
    texts = {f"{prefix}-{database.lower()}": "\n".join(lines) for database, lines in sections}
    publish(arguments, texts, full=not (arguments.quick or arguments.turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
