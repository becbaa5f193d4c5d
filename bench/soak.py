"""A soak: one real server under steady chat with approvals and reconnects, watched for leaks.

    python -m bench.soak [--minutes 10] [--postgres URL] [--users 16] [--think 3] [--no-write]
                         [--history-cache-mb N] [--no-census] [--tracemalloc DIR [--frames 12]]

Starts `durable-chat serve` (demo model) on a fresh SQLite file, or a scratch PostgreSQL database
with `--postgres` (created and dropped), and runs `bench.soak_load`'s users against it for the
given minutes. Every `--sample` seconds it records the server's resident memory, its open file
descriptors, and its database connections: on SQLite the descriptors open on the database's
files (the database, its WAL and shared memory), on PostgreSQL the sessions `pg_stat_activity`
lists for the scratch database. Prints each sample, then writes the soak section of
`docs/benchmarks.md` (one per database): the samples a minute apart and a verdict on whether
memory, files and connections stay flat after the warm-up (the first fifth of the run).

The server runs under `bench.memory_serve`, untraced, and is asked for a census at the start,
at the end of the warm-up, every minute after and at the end (after the users stop): live objects
by type, what Python's and glibc's allocators hold, the conversation store's bounded caches. The
section shows them, and the types that grew most after the warm-up (`--no-census` runs the bare
CLI). With `--tracemalloc DIR` its heap is traced instead (`--frames` frames a traceback, which
slows it), with snapshots at the end of the warm-up, half way and at the end, and
`bench.memory_report` prints what grew from the first to the last; such a run writes no section.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from bench.memory_report import census_lines, report
from bench.memory_serve import FRAMES_ENV, MEMORY_DIR_ENV
from bench.sections import write_section
from bench.soak_load import Soak, Tally, run_users
from bench.soak_report import WARM_UP_FRACTION, Sample, render
from bench.web import POSTGRES_ENV, ROOT, ours_argv, postgres_database, server_env, snapshot
from bench.web_process import ServerProcess, raise_open_files_limit, start_server
from bench.web_tokens import issue_token

DOCS = ROOT / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Run:
    backend: str
    minutes: float
    soak: Soak
    sample_seconds: float
    load_before: str
    history_cache_mb: int | None = None
    warm_up_minutes: float | None = None
    """How long the warm-up lasts; `None`: the first fifth of the run."""
    """The server's `DURABLE_CHAT_HISTORY_CACHE_MB`; `None` leaves its default."""
    heap: Path | None = None
    """Where `bench.memory_serve` writes its censuses or snapshots; `None` runs the bare CLI."""
    frames: int = 0
    """Frames of each traceback `tracemalloc` keeps; 0 takes censuses only, untraced."""


def open_fds(server: ServerProcess) -> list[str]:
    """What each of the server's open file descriptors points at."""
    directory = f"/proc/{server.pid}/fd"
    targets: list[str] = []
    for name in os.listdir(directory):
        try:
            targets.append(os.readlink(f"{directory}/{name}"))
        except OSError:
            continue  # closed meanwhile
    return targets


@dataclass(frozen=True)
class Watched:
    """Where the server's database connections are counted: its SQLite file, or PostgreSQL's sessions."""

    database_file: Path | None = None
    admin: asyncpg.Connection | None = None
    database_name: str = ""

    async def connections(self, fds: list[str]) -> int:
        if self.database_file is not None:
            # The database, its -wal and its -shm: every connection holds the first two.
            return sum(1 for target in fds if target.startswith(str(self.database_file)))
        assert self.admin is not None
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
        return int(await self.admin.fetchval(query, self.database_name) or 0)


async def sample(server: ServerProcess, started: float, tally: Tally, watched: Watched) -> Sample:
    fds = open_fds(server)
    connections = await watched.connections(fds)
    return Sample(
        seconds=time.monotonic() - started,
        turns=tally.turns,
        rss_kb=server.status("VmRSS") or 0,
        fds=len(fds),
        connections=connections,
        threads=server.status("Threads") or 0,
    )


def _snapshot_times(run: Run) -> list[float]:
    """Seconds into the run of every snapshot but the last (taken once the users stop)."""
    seconds = run.minutes * 60
    warm_up = seconds * WARM_UP_FRACTION if run.warm_up_minutes is None else run.warm_up_minutes * 60
    if run.frames:
        return [warm_up, seconds / 2]
    times = [0.0, warm_up]
    while times[-1] + 60 < seconds - 10:
        times.append(times[-1] + 60)
    return times


@dataclass
class Snapshots:
    """Asks a server run by `bench.memory_serve` for snapshots at `times` (seconds into the run)."""

    server: ServerProcess
    directory: Path | None
    started: float
    times: list[float]
    taken: int = 0
    at: list[float] = field(default_factory=list[float])
    """Seconds into the run at which each was asked for."""

    async def due(self) -> None:
        """Take the next snapshot if its time has come (the last one is `take()`'s, after the users stop)."""
        if self.taken < len(self.times) and time.monotonic() - self.started >= self.times[self.taken]:
            await self.take()

    async def take(self) -> None:
        if self.directory is None:
            return
        self.taken += 1
        self.at.append(time.monotonic() - self.started)
        done = self.directory / f"done-{self.taken}"
        self.server.process.send_signal(signal.SIGUSR1)
        for _ in range(3000):  # a snapshot of a few hundred MB of heap takes seconds, not ten minutes
            if done.exists():
                break
            await asyncio.sleep(0.2)
        else:
            raise RuntimeError(f"the server wrote no heap snapshot {self.taken} in ten minutes")
        print(f"  heap snapshot {self.taken} in {self.directory}", flush=True)


async def soak(
    run: Run, url: str, database_file: Path | None, logs: Path, source: Path
) -> tuple[list[Sample], Tally, ServerProcess, list[float]]:
    env = {**server_env(), "DURABLE_CHAT_TRACE_FILE": str(logs / "traces.jsonl")}
    if run.history_cache_mb is not None:
        env["DURABLE_CHAT_HISTORY_CACHE_MB"] = str(run.history_cache_mb)
    argv = ours_argv(url)
    if run.heap is not None:
        run.heap.mkdir(parents=True, exist_ok=True)
        env[MEMORY_DIR_ENV] = str(run.heap)
        env[FRAMES_ENV] = str(run.frames)
        argv[argv.index("cli")] = "bench.memory_serve"
    server = await start_server("soak", argv, env, logs, cwd=source)
    admin: asyncpg.Connection | None = None
    tally = Tally()
    samples: list[Sample] = []
    try:
        watched = Watched(database_file=database_file)
        if database_file is None:
            parsed = make_url(url)
            admin = await asyncpg.connect(
                parsed.set(drivername="postgresql", database="postgres").render_as_string(False)
            )
            watched = Watched(admin=admin, database_name=str(parsed.database))
        tokens = [issue_token(env["DURABLE_CHAT_SECRET"], f"soak-{n}") for n in range(run.soak.users)]
        started = time.monotonic()
        deadline = started + run.minutes * 60
        users = asyncio.create_task(run_users(server.base_url, tokens, run.soak, deadline, tally))
        snapshots = Snapshots(server, run.heap, started, _snapshot_times(run))
        while not users.done():
            await snapshots.due()
            samples.append(await sample(server, started, tally, watched))
            last = samples[-1]
            print(
                f"  {last.seconds / 60:5.1f} min  {last.turns:6d} turns  RSS {last.rss_kb / 1024:6.1f} MB  "
                f"fds {last.fds:4d}  db {last.connections:3d}  errors {sum(tally.errors.values())}",
                flush=True,
            )
            await asyncio.wait([users], timeout=run.sample_seconds)
        await users
        await asyncio.sleep(2)  # the last streams close
        await snapshots.take()
        samples.append(await sample(server, started, tally, watched))
    finally:
        if admin is not None:
            await admin.close()
        await server.stop()
    return samples, tally, server, snapshots.at


async def main_async(arguments: argparse.Namespace) -> int:
    raise_open_files_limit()
    backend = "postgresql" if arguments.postgres else "sqlite"
    load_before = _load_average()
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        directory = Path(scratch)
        heap = arguments.tracemalloc or (None if arguments.no_census else directory / "census")
        run = Run(
            backend=backend,
            minutes=arguments.minutes,
            soak=Soak(users=arguments.users, think_seconds=arguments.think),
            sample_seconds=arguments.sample,
            load_before=load_before,
            history_cache_mb=arguments.history_cache_mb,
            warm_up_minutes=arguments.warm_up,
            heap=heap,
            frames=arguments.frames if arguments.tracemalloc else 0,
        )
        source = snapshot(directory / "source")
        database_file = None if arguments.postgres else directory / "soak.db"
        database: AbstractAsyncContextManager[str] = (
            postgres_database(arguments.postgres)
            if arguments.postgres
            else nullcontext(f"sqlite+aiosqlite:///{database_file}")
        )
        print(
            f"soak on {backend} for {run.minutes:g} min, {run.soak.users} users, load average {run.load_before}"
        )
        async with database as url:
            samples, tally, server, at = await soak(run, url, database_file, directory, source)
        trouble, statuses = server.trouble()
        census: list[str] = []
        if run.heap is not None and run.frames:
            print(report(run.heap, top=20))
        elif run.heap is not None:
            census = census_lines(run.heap, [f"{seconds / 60:.1f}" for seconds in at])
    load_after = _load_average()
    text = render(
        backend=backend,
        minutes=run.minutes,
        users=run.soak.users,
        think_seconds=run.soak.think_seconds,
        samples=samples,
        tally=tally,
        trouble=trouble,
        statuses=statuses,
        load=(run.load_before, load_after),
        when=datetime.now(UTC),
        history_cache_mb=run.history_cache_mb,
        census=census,
        warm_up_minutes=run.warm_up_minutes,
    )
    print(text)
    if not arguments.no_write and not run.frames:
        section = f"soak-{backend}" if run.history_cache_mb is None else f"soak-{backend}-small-cache"
        write_section(DOCS, section, text)
        print(f"wrote the {section} section of {DOCS.relative_to(ROOT)}")
    return 0 if not tally.errors and not trouble else 1


def _load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (2 cores, shared with other work)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument(
        "--think", type=float, default=3.0, help="seconds a user waits between cycles (on average)"
    )
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=None,
        help=f"a PostgreSQL server for a scratch database (e.g. ${POSTGRES_ENV})",
    )
    parser.add_argument(
        "--history-cache-mb",
        type=int,
        default=None,
        help="the server's history cache budget (DURABLE_CHAT_HISTORY_CACHE_MB): a small one is full "
        "within the warm-up, so what grows after it is not that bounded cache filling",
    )
    parser.add_argument(
        "--warm-up",
        type=float,
        default=None,
        metavar="MINUTES",
        help="how long the warm-up lasts, judged apart (default: the first fifth of the run); with the "
        "default history cache, past the minutes it takes to fill",
    )
    parser.add_argument(
        "--tracemalloc",
        metavar="DIR",
        type=Path,
        default=None,
        help="trace the server's heap (bench.memory_serve) and write snapshots to DIR; print what grew "
        "(the run is slower, so docs/benchmarks.md is left alone)",
    )
    parser.add_argument(
        "--frames", type=int, default=12, help="with --tracemalloc: frames each traceback keeps"
    )
    parser.add_argument(
        "--no-census",
        action="store_true",
        help="run the bare CLI, not bench.memory_serve's censuses (objects by type, allocators, caches)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
