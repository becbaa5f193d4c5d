"""A soak: one real server under steady chat with approvals and reconnects, watched for leaks.

RSS, open files and database connections every `--sample` seconds, a census of the server's memory
(`bench.soak_serve`) at the start, after the warm-up and every minute, and a verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from bench.harness.databases import connected, scratch_database
from bench.harness.options import parser, publish
from bench.harness.reports import command_line
from bench.harness.servers import (
    SECRET,
    ServerProcess,
    folder,
    ours_argv,
    raise_open_files_limit,
    server_env,
    serving,
    snapshot,
)
from bench.soak_report import WARM_UP_FRACTION, Sample, census_lines, render
from bench.soak_serve import CENSUS_DIR_ENV
from bench.soak_users import Soak, Tally, run_users
from web import issue_token


class Watch:
    """Samples a server: its memory and files from /proc, its database connections, and censuses when due."""

    def __init__(
        self, server: ServerProcess, database_file: Path | None, census: Path, times: list[float]
    ) -> None:
        self.server, self.database_file, self.census, self.times = server, database_file, census, times
        self.started = time.monotonic()
        self.asked: list[float] = []
        """Seconds into the run at which each census was asked for."""

    def open_fds(self) -> list[str]:
        """What each of the server's open file descriptors points at."""
        directory = f"/proc/{self.server.pid}/fd"
        targets: list[str] = []
        for name in os.listdir(directory):
            try:
                targets.append(os.readlink(f"{directory}/{name}"))
            except OSError:
                continue  # closed meanwhile
        return targets

    async def sample(self, tally: Tally, admin: AsyncConnection | None, name: str) -> Sample:
        fds = self.open_fds()
        if self.database_file is not None:  # the database, its -wal and its -shm: every connection holds two
            connections = sum(1 for target in fds if target.startswith(str(self.database_file)))
        else:
            assert admin is not None
            query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name")
            connections = int(await admin.scalar(query, {"name": name}) or 0)
        elapsed = time.monotonic() - self.started
        return Sample(
            elapsed,
            tally.turns,
            self.server.status("VmRSS") or 0,
            len(fds),
            connections,
            self.server.status("Threads") or 0,
        )

    async def census_due(self, *, last: bool = False) -> None:
        """Ask for the next census if its time has come (the last one once the users stopped)."""
        due = (
            len(self.asked) < len(self.times)
            and time.monotonic() - self.started >= self.times[len(self.asked)]
        )
        if not (last or due):
            return
        self.asked.append(time.monotonic() - self.started)
        self.server.process.send_signal(signal.SIGUSR1)
        done = self.census / f"done-{len(self.asked)}"
        for _ in range(600):
            if done.exists():
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"the server wrote no census {len(self.asked)} in two minutes")


def census_times(minutes: float, warm_up_minutes: float | None) -> list[float]:
    """Seconds into the run of every census but the last: the start, the warm-up's end, then every minute."""
    seconds = minutes * 60
    times = [0.0, seconds * WARM_UP_FRACTION if warm_up_minutes is None else warm_up_minutes * 60]
    while times[-1] + 60 < seconds - 10:
        times.append(times[-1] + 60)
    return times


async def soak(
    arguments: argparse.Namespace, logs: Path
) -> tuple[list[Sample], Tally, ServerProcess, list[float]]:
    database = "PostgreSQL" if arguments.postgres else "SQLite"
    census = logs / "census"
    census.mkdir()
    env = server_env({"DURABLE_CHAT_TRACE_FILE": str(logs / "traces.jsonl"), CENSUS_DIR_ENV: str(census)})
    if arguments.history_cache_mb is not None:
        env["DURABLE_CHAT_HISTORY_CACHE_MB"] = str(arguments.history_cache_mb)
    tally, samples = Tally(), list[Sample]()
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(scratch_database(database, logs, "soak", arguments.postgres))
        argv = ours_argv(url, "bench.soak_serve")
        server = await stack.enter_async_context(
            serving("soak", argv, env, logs, cwd=snapshot(logs / "source"))
        )
        admin = await stack.enter_async_context(connected(arguments.postgres)) if arguments.postgres else None
        database_file = None if arguments.postgres else logs / "soak.db"
        watch = Watch(server, database_file, census, census_times(arguments.minutes, arguments.warm_up))
        tokens = [issue_token(SECRET, f"soak-{n}") for n in range(arguments.users)]
        soaked = Soak(users=arguments.users, think_seconds=arguments.think)
        users = asyncio.create_task(
            run_users(server.base_url, tokens, soaked, watch.started + arguments.minutes * 60, tally)
        )
        name = str(make_url(url).database)
        while not users.done():
            await watch.census_due()
            samples.append(last := await watch.sample(tally, admin, name))
            print(
                f"  {last.seconds / 60:5.1f} min  {last.turns:6d} turns  RSS {last.rss_kb / 1024:6.1f} MB  fds "
                f"{last.fds:4d}  db {last.connections:3d}  errors {sum(tally.errors.values())}",
                flush=True,
            )
            await asyncio.wait([users], timeout=arguments.sample)
        await users
        await asyncio.sleep(2)  # the last streams close
        await watch.census_due(last=True)
        samples.append(await watch.sample(tally, admin, name))
    return samples, tally, server, watch.asked


def main() -> int:
    options = parser("bench.soak", __doc__, quick=None, postgres="explicit")
    options.add_argument("--minutes", type=float, default=10.0)
    options.add_argument("--users", type=int, default=16)
    options.add_argument(
        "--think", type=float, default=3.0, help="seconds a user waits between cycles (on average)"
    )
    options.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    options.add_argument(
        "--history-cache-mb",
        type=int,
        help="the server's history cache budget (DURABLE_CHAT_HISTORY_CACHE_MB): a small one is full within the warm-up",
    )
    options.add_argument(
        "--warm-up",
        type=float,
        metavar="MINUTES",
        help="how long the warm-up judged apart lasts (default: the first fifth)",
    )
    arguments = options.parse_args()
    raise_open_files_limit()
    database = "PostgreSQL" if arguments.postgres else "SQLite"
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        f"soak on {database} for {arguments.minutes:g} min, {arguments.users} users, load average {load_before}"
    )
    with folder("soak", keep=arguments.keep_logs) as logs:
        samples, tally, server, asked = asyncio.run(soak(arguments, logs))
        trouble, statuses = server.trouble()
        census = census_lines(logs / "census", [f"{at / 60:.1f}" for at in asked])
    text = render(
        database=database,
        minutes=arguments.minutes,
        command=command_line("bench.soak", sys.argv[1:]),
        when=f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        users=arguments.users,
        think_seconds=arguments.think,
        samples=samples,
        tally=tally,
        trouble=trouble,
        statuses=statuses,
        load=(load_before, " ".join(Path("/proc/loadavg").read_text().split()[:3])),
        history_cache_mb=arguments.history_cache_mb,
        warm_up_minutes=arguments.warm_up,
        census=census,
    )
    section = f"soak-{database.lower()}" + ("" if arguments.history_cache_mb is None else "-small-cache")
    publish(arguments, {section: text}, full=True)
    return 0 if not tally.errors and not trouble else 1


if __name__ == "__main__":
    sys.exit(main())
