"""Where the server's CPU goes per turn: py-spy on a real server, in issue 14's categories.

    python -m bench.profile [--turns 300] [--users 20] [--protocol native|ai-sdk]
                            [--postgres URL | --no-postgres] [--quick] [--no-write]

A real `durable-chat serve` (SQLite; PostgreSQL in a scratch database too when `--postgres` or
$DURABLE_CHAT_TEST_POSTGRES_URL names a server; not with `--quick`),
pinned to core 1, tracing at its default, takes the demo's 3-node turn "Where is ORD-5678?" from
`--users` users over the native API (POST and the thread's SSE stream; `--protocol ai-sdk`: the AI
SDK's endpoint, one POST a turn resending the conversation, as `bench.cpu` drives it) while `py-spy record
--native` samples every thread of it. The CPU it used in that window comes from /proc: the loop
thread's user time is shared out by its samples' categories (`bench.profile_categories`), its
system time is the kernel's row, and the other threads' CPU (the process's less the loop
thread's) is shared out by theirs. Samples of a thread blocked on a lock or in `epoll` are no
CPU and are left out, and so are those in a system call (a socket write: system time, the kernel's
row). Writes the `profile-sqlite` (and `profile-postgresql`; with `--protocol ai-sdk`,
`profile-ai-sdk-sqlite` and `profile-ai-sdk-postgresql`) section of
`docs/benchmarks.md` (a full run only, unless `--write`). ~1 minute per database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from importlib import metadata
from pathlib import Path

from bench.cpu import pinned, scratch
from bench.cpu_clients import Protocol, run_round
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
from bench.report import environment
from bench.sections import write_section
from bench.web import DOCS, POSTGRES_ENV, SECRET, ours_argv, postgres_version, server_env, snapshot
from bench.web_process import ServerProcess, start_server

_TICKS = os.sysconf("SC_CLK_TCK")
RATE = 200
TURNS, QUICK_TURNS = 300, 40
_TITLES: dict[Protocol, str] = {"native": "", "ai-sdk": ", AI SDK endpoint"}
_APIS: dict[Protocol, str] = {
    "native": "native API",
    "ai-sdk": "AI SDK endpoint (one POST a turn, the conversation resent)",
}


def _times(path: Path) -> tuple[float, float]:
    fields = path.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def cpu_marks(server: ServerProcess, gc_file: Path) -> tuple[float, float, float, float]:
    """The process's CPU seconds (every thread, ended ones too), the loop thread's user and system
    time, and the garbage collector's CPU so far (`bench.profile_serve`'s count)."""
    user, system = _times(Path(f"/proc/{server.pid}/stat"))
    loop_user, loop_system = _times(Path(f"/proc/{server.pid}/task/{server.pid}/stat"))
    try:
        collected = float(json.loads(gc_file.read_text())["seconds"])
    except (OSError, ValueError, KeyError):
        collected = 0.0
    return user + system, loop_user, loop_system, collected


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return found if Path(found).exists() else None


def share(
    samples: list[tuple[str, list[str], int]],
    process: float,
    loop_user: float,
    loop_system: float,
    collected: float = 0.0,
) -> dict[str, float]:
    """CPU seconds per category: the loop thread's user time (less the collector's) and the other
    threads' CPU shared out by their samples; the loop thread's system time is the kernel's."""
    working = [s for s in samples if not is_waiting(s[1]) and not in_system_call(s[1])]
    loop = attribute(s for s in working if "MainThread" in s[0])
    others = attribute(s for s in working if "MainThread" not in s[0])
    for counted in (loop, others):
        counted.pop(UNKNOWN, None)
    seconds: Counter[str] = Counter({KERNEL: loop_system})
    if collected:
        seconds[GC] = collected
    rest = max(loop_user - collected, 0.0)
    for counted, total in ((loop, rest), (others, max(process - loop_user - loop_system, 0.0))):
        samples_in = sum(counted.values())
        for category, count in counted.items():
            seconds[category] += total * count / samples_in if samples_in else 0.0
        if not samples_in and total:
            seconds["other"] += total
    return dict(seconds)


async def profile(database: str, arguments: argparse.Namespace, source: Path) -> list[str]:
    logs = Path(tempfile.mkdtemp(prefix=f"bench-profile-{database.lower()}-"))
    spy = py_spy()
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(scratch(database, arguments.postgres, logs, "ours"))
        env = server_env()
        env["DURABLE_CHAT_MESSAGES_PER_MINUTE"] = "1000000"
        gc_file = logs / "gc.json"
        env[GC_FILE_ENV] = str(gc_file)
        argv = ours_argv(url)
        argv[argv.index("cli")] = "bench.profile_serve"
        server = await start_server(f"ours-{database}", pinned(argv), env, logs, cwd=source)
        stack.push_async_callback(server.stop)
        protocol = arguments.protocol
        await run_round(server.base_url, protocol, users=2, seconds=0, turns=3, secret=SECRET)  # warm-up
        output = logs / "py-spy.txt"
        recorder: asyncio.subprocess.Process | None = None
        if spy is not None:
            argv = [spy, "record", "--pid", str(server.pid), "--nonblocking", "--threads", "--full-filenames"]
            argv += ["--rate", str(RATE), "--format", "raw", "--output", str(output)]
            with (logs / "py-spy.err").open("wb") as errors:
                # On the clients' core, so that it takes nothing from the server's.
                recorder = await asyncio.create_subprocess_exec(
                    *pinned(argv, core=0), stdout=subprocess.DEVNULL, stderr=errors
                )
            await asyncio.sleep(1.0)  # attached, and its first samples of the idle server dropped below
        users = arguments.users
        per_user = max(1, (arguments.turns or (QUICK_TURNS if arguments.quick else TURNS)) // users)
        marks: list[tuple[float, float, float, float]] = []
        result = await run_round(
            server.base_url,
            protocol,
            users=users,
            seconds=0,
            turns=per_user,
            secret=SECRET,
            on_start=lambda: marks.append(cpu_marks(server, gc_file)),
        )
        await asyncio.sleep(1.2)  # the trace exporter's batch
        await asyncio.sleep(0.3)  # the collector's totals written once more
        end = cpu_marks(server, gc_file)
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            await asyncio.wait_for(recorder.wait(), 60)
    process, loop_user, loop_system, collected = (
        after - before for after, before in zip(end, marks[0], strict=True)
    )
    turns = max(result.turns, 1)
    notes = [
        f"{result.turns} turns by {users} users in {result.elapsed:.1f} s; errors: {dict(result.errors) or 'none'}"
    ]
    if recorder is None or not output.exists():
        why = "py-spy is not installed" if spy is None else (logs / "py-spy.err").read_text()[-300:]
        return render(database, arguments, {}, process / turns, 0, [*notes, f"no samples: {why}"])
    samples = parse_raw(output.read_text().splitlines())
    seconds = share(samples, process, loop_user, loop_system, collected)
    blocked = sum(count for _, frames, count in samples if is_waiting(frames))
    syscalls = sum(count for _, frames, count in samples if in_system_call(frames))
    unknown = sum(count for thread, frames, count in samples if categorize(thread, frames) == UNKNOWN)
    per_turn = {category: value / turns for category, value in seconds.items()}
    notes.append(
        f"loop thread {(loop_user + loop_system) / turns * 1000:.1f} ms/turn "
        f"({loop_system / turns * 1000:.1f} of it system time), other threads "
        f"{(process - loop_user - loop_system) / turns * 1000:.1f} ms/turn; of the samples, {blocked} caught a "
        f"thread blocked, {syscalls} one in a system call (the kernel's row) and {unknown} no Python frame: "
        "all left out of the shares"
    )
    return render(database, arguments, per_turn, process / turns, sum(c for _, _, c in samples), notes)


def render(
    database: str,
    arguments: argparse.Namespace,
    per_turn: dict[str, float],
    total: float,
    samples: int,
    notes: list[str],
) -> list[str]:
    try:
        version = metadata.version("py-spy")
    except metadata.PackageNotFoundError:
        version = "not installed"
    lines = [
        f"## Profile: server CPU per turn by category ({database}{_TITLES[arguments.protocol]})",
        "",
        f"`py-spy record --nonblocking --threads --full-filenames --rate {RATE}` (py-spy {version}; Python stacks, the server "
        "never paused) on a real server pinned to one core, during the demo's 3-node turn over the "
        f"{_APIS[arguments.protocol]}; CPU from /proc, shared out by samples as `bench/profile.py` says; garbage collection timed "
        "in the server by `gc.callbacks` (`bench/profile_serve.py`) and taken off the loop thread's share.",
        "",
        *environment(arguments.command, arguments.postgres_version if database == "PostgreSQL" else None, []),
        *(f"- {note}" for note in notes),
        f"- {samples} samples; total server CPU {total * 1000:.1f} ms per turn",
        "",
        "| category | ms per turn | share |",
        "|---|---:|---:|",
    ]
    for category in CATEGORIES:
        if category in per_turn:
            lines.append(
                f"| {category} | {per_turn[category] * 1000:.1f} | {per_turn[category] / total:.0%} |"
            )
    return lines


async def run(arguments: argparse.Namespace) -> list[tuple[str, list[str]]]:
    source = snapshot(Path(tempfile.mkdtemp(prefix="bench-profile-src-")))
    databases = ["SQLite"]
    if arguments.postgres and not arguments.quick:
        arguments.postgres_version = await postgres_version(arguments.postgres)
        databases.append("PostgreSQL")
    sections: list[tuple[str, list[str]]] = []
    for database in databases:
        started = time.monotonic()
        sections.append((database, await profile(database, arguments, source)))
        print(f"{database}: {time.monotonic() - started:.0f} s", flush=True)
    return sections


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--turns", type=int, help=f"turns in all (default {TURNS})")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument(
        "--protocol",
        choices=["native", "ai-sdk"],
        default="native",
        help="the clients' API: the native one (POST + the thread's stream) or the AI SDK's endpoint",
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=os.environ.get(POSTGRES_ENV),
        help=f"also profile on PostgreSQL in a scratch database (default ${POSTGRES_ENV})",
    )
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS} turns, SQLite: a smoke run")
    parser.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--output", type=Path, default=DOCS)
    arguments = parser.parse_args()
    arguments.command = shlex.join(
        ["python", "-m", "bench.profile", *(a for a in sys.argv[1:] if "://" not in a)]
    )
    arguments.postgres_version = None
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {0})
    sections = asyncio.run(run(arguments))
    write = arguments.write if arguments.write is not None else not (arguments.quick or arguments.turns)
    for database, lines in sections:
        print("\n" + "\n".join(lines), flush=True)
        if write:
            prefix = "profile" if arguments.protocol == "native" else "profile-ai-sdk"
            write_section(arguments.output, f"{prefix}-{database.lower()}", "\n".join(lines))
    if write:
        print(f"wrote the profile sections of {arguments.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
